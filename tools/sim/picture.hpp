// tools/sim/picture.hpp: a picture of one run, as a self-contained HTML page or a static SVG.
//
//  - The recorder is a RunObserver: every value it draws is one the trace would print for the
//    same event, rounded as the trace rounds it. About 60 bytes a request.
//  - The page embeds the record as columnar JSON in a template compiled in from tools/sim/page/.
//  - The SVG is drawn here; crowded lanes become aggregates over 500 time bins, so its size does
//    not grow with the number of requests.
// Why: docs/pictures.md#the-record
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "scenario.hpp"
#include "simulator.hpp"

namespace creditloop::sim {

class Picture final : public RunObserver {
 public:
  /// Most requests a run may have for a picture: the record lives in memory until the run ends.
  static constexpr std::uint64_t kMaxRequests = 5'000'000;

  /// `scenario` must outlive the picture; `title` names the run in the header (the file name).
  Picture(const Scenario& scenario, std::string title);

  void arrived(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req) override;
  void passed(creditloop::Nanos t, creditloop::ClassId c,
              std::span<const PassEntry> waiting) override;
  void dispatched(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                  creditloop::ClassId c, const Balances& balances) override;
  void completed(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                 std::int64_t cost_nano, const Balances& balances) override;
  void withdrawn(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req) override;
  void room(creditloop::Nanos t, std::uint32_t slots) override;

  /// The interactive page for the finished run.
  [[nodiscard]] std::string html(const RunReport& report) const;

  /// For a run whose balances were not recorded (a capture): the lanes draw none, and the page
  /// says why. Call before the first event.
  void without_balances();

  /// One page with two runs of the same participants, one above the other on one time axis:
  /// `first` on top. Each label says which run it is.
  struct Run {
    const Picture* picture;
    const RunReport* report;
    std::string label;
  };
  [[nodiscard]] static std::string pair_html(const std::string& title, const Run& first,
                                             const Run& second);
  /// The static picture for the finished run.
  [[nodiscard]] std::string svg(const RunReport& report) const;

 private:
  struct Request {
    std::int64_t arrived = 0;      // microseconds, as the trace rounds them
    std::int64_t dispatched = -1;  // -1: still queued when the run stopped
    std::int64_t completed = -1;   // -1: not completed when the run stopped
    std::int64_t withdrawn = -1;   // -1: not withdrawn
    std::uint32_t participant = 0;
    std::uint32_t pass = 0;  // the pass its dispatch followed
    std::uint32_t passes_before_completion = 0;
    std::int8_t cls = -1;
  };
  struct Samples {
    std::vector<std::int64_t> t;                   // microseconds
    std::vector<std::uint32_t> key;                // passes before the event that gave the sample
    std::vector<std::vector<std::int64_t>> value;  // by held class: micro-credits
  };
  struct Lane {
    std::vector<int> held;     // metered classes the plan holds, ascending
    std::vector<double> rate;  // credits per second (plan rate times shares), by held class
    std::vector<double> cap;   // credits (plan burst times shares), by held class
    std::vector<std::uint32_t> requests;  // req numbers, in arrival order
    Samples samples;
  };
  struct Passes {
    std::vector<std::int64_t> t;
    std::vector<std::uint8_t> cls;
    std::vector<std::uint32_t> eligible_count;
    std::vector<std::uint32_t> eligible;  // participants, flat
    std::vector<std::uint32_t> ignored_count;
    std::vector<std::uint32_t> ignored;     // participants, flat
    std::vector<std::uint8_t> why;          // per ignored: 0 no bucket, 1 below one credit
    std::vector<std::int64_t> balance;      // per below_one_credit: micro-credits
    std::vector<std::int64_t> next_credit;  // per below_one_credit: microseconds, -1 never
  };

  /// Where `r`'s wait ends: its dispatch, its withdrawal, or the picture's end.
  static std::int64_t waited_until(const Request& r, std::int64_t end) noexcept;
  void sample(std::int64_t t, std::uint32_t key, std::uint32_t participant,
              const Balances& balances);
  [[nodiscard]] std::string data_json(const RunReport& report) const;
  // Its parts, in the order the page reads them (docs/pictures.md).
  struct LaneColumns;
  [[nodiscard]] LaneColumns lane_columns(const Lane& lane) const;
  void append_plans(std::string& out) const;
  void append_lane(std::string& out, std::size_t index, const RunReport& report) const;
  void append_passes(std::string& out) const;
  [[nodiscard]] std::int64_t end_micro(const RunReport& report) const;

  // The static picture, a layer at a time, top to bottom (picture_svg.cpp).
  struct Svg;  // the layout, the time scale, and what is drawn so far
  void svg_header(Svg& svg) const;
  void svg_legend(Svg& svg) const;
  void svg_axis(Svg& svg) const;
  void svg_passes(Svg& svg) const;
  void svg_room(Svg& svg) const;
  void svg_lane(Svg& svg, std::size_t index) const;
  void svg_requests(Svg& svg, const Lane& lane) const;
  void svg_requests_aggregated(Svg& svg, const Lane& lane) const;
  void svg_balances(Svg& svg, const Lane& lane) const;
  void svg_balance_line(Svg& svg, const Lane& lane, std::size_t held, double top, double height,
                        double lo, double hi) const;

  const Scenario& scenario_;
  std::string title_;
  bool balances_ = true;
  bool withdrawals_ = false;  // some request was withdrawn: the legend says how it is drawn
  int classes_ = 0;           // k metered; k itself is the unmetered class
  std::vector<Request> requests_;
  std::vector<Lane> lanes_;  // scenario order
  Passes passes_;
  /// A learned room's slots from each instant on (microseconds, slots).
  std::vector<std::pair<std::int64_t, std::uint32_t>> room_;
};

}  // namespace creditloop::sim
