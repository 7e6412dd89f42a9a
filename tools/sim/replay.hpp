// tools/sim/replay.hpp: what a replay reports, and the run observers it is made from.
//
// A replay compares two runs of the same participants and arrivals: per participant, the waits
// (arrival to dispatch: p50, p99, max, mean; exact nanoseconds) and the class mix (the share of
// its dispatched requests per class the request went out under), with the counts. One run is
// read from a capture or recorded from a simulation (WaitRecorder); docs/replay.md describes the
// table and the JSON.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "capture_file.hpp"
#include "creditloop/capture.hpp"
#include "simulator.hpp"

namespace creditloop::sim {

/// One run's account, by participant in scenario (= ring) order.
struct RunAccount {
  struct Row {
    std::string name;
    std::string plan;
    std::uint32_t shares = 1;
    std::uint64_t requests = 0;            // arrived (captured: recorded)
    std::vector<creditloop::Nanos> waits;  // of the dispatched ones
    std::array<std::uint64_t, creditloop::kMaxClasses + 1> by_class{};
  };
  std::vector<Row> rows;
};

/// The captured run, as recorded.
[[nodiscard]] RunAccount account_of(const Capture& capture);

/// Records a simulated run's account as it goes.
class WaitRecorder final : public RunObserver {
 public:
  explicit WaitRecorder(const Scenario& scenario);
  void arrived(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req) override;
  void passed(creditloop::Nanos, creditloop::ClassId, std::span<const PassEntry>) override {}
  void dispatched(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                  creditloop::ClassId c, const Balances& balances) override;
  void completed(creditloop::Nanos, std::uint32_t, std::uint64_t, std::int64_t,
                 const Balances&) override {}
  /// A withdrawn request arrived and had no wait: it was never dispatched.
  void withdrawn(creditloop::Nanos, std::uint32_t, std::uint64_t) override {}
  [[nodiscard]] const RunAccount& account() const { return account_; }

 private:
  RunAccount account_;
  std::vector<creditloop::Nanos> arrived_;  // by req
};

/// Writes the capture of a simulated run with the runtime's capture writer (creditloop/
/// capture.hpp, format version 1): the header at the virtual clock's 0, a `plan` line per
/// participant at 0 in scenario order, then one `request` line per completion, in completion
/// order. One file: it never rotates.
class CaptureRecorder final : public RunObserver {
 public:
  /// Starts the file at `path`. An I/O error is kept for finish(), not thrown.
  CaptureRecorder(const Scenario& scenario, const std::string& path);
  ~CaptureRecorder();
  CaptureRecorder(const CaptureRecorder&) = delete;
  CaptureRecorder& operator=(const CaptureRecorder&) = delete;
  void arrived(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req) override;
  void passed(creditloop::Nanos, creditloop::ClassId, std::span<const PassEntry>) override {}
  void dispatched(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                  creditloop::ClassId c, const Balances& balances) override;
  void completed(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                 std::int64_t cost_nano, const Balances& balances) override;
  /// A capture records completed requests; a withdrawn one never completes.
  void withdrawn(creditloop::Nanos, std::uint32_t, std::uint64_t) override {}
  /// The first I/O error so far, one line naming the file; empty if none.
  [[nodiscard]] const std::string& error() const { return error_; }
  /// Writes what is buffered. Call once the run is over; then error() is final.
  void finish();

 private:
  struct Pending {
    creditloop::Nanos arrived = 0;
    creditloop::Nanos dispatched = 0;
    creditloop::ClassId cls = 0;
  };
  std::string error_;
  std::unique_ptr<creditloop::CaptureWriter> writer_;
  std::vector<std::string> names_;
  std::vector<Pending> pending_;  // by req
};

/// Several observers told the same events, in order.
class ObserverFan final : public RunObserver {
 public:
  void add(RunObserver* o) { observers_.push_back(o); }
  [[nodiscard]] bool empty() const { return observers_.empty(); }
  void arrived(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req) override;
  void passed(creditloop::Nanos t, creditloop::ClassId c,
              std::span<const PassEntry> waiting) override;
  void dispatched(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                  creditloop::ClassId c, const Balances& balances) override;
  void completed(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                 std::int64_t cost_nano, const Balances& balances) override;
  void withdrawn(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req) override;
  void room(creditloop::Nanos t, std::uint32_t slots) override;

 private:
  std::vector<RunObserver*> observers_;
};

/// Tells `observer` the captured run's events: arrivals in the order of Capture::requests (their
/// req numbers), dispatches and completions with empty balances (a capture has none).
void play_capture(const Capture& capture, RunObserver& observer);

/// Two runs side by side and what they were.
struct Comparison {
  std::string what;                 // the first line's description
  std::array<std::string, 2> keys;  // the runs' names: "captured", "replayed"
  int classes = 2;
  std::uint64_t slots = 1;
  std::uint64_t dropped = 0;
  std::array<RunAccount, 2> runs;
};

/// Readable, aligned: two rows per participant (one per run), then the notes.
[[nodiscard]] std::string format_comparison(const Comparison& c);
/// One JSON object on one line (docs/replay.md lists its keys), without the newline.
[[nodiscard]] std::string comparison_json(const Comparison& c);

/// Nearest-rank percentile `p` (1..100) of sorted `waits`; they must not be empty.
[[nodiscard]] creditloop::Nanos percentile(const std::vector<creditloop::Nanos>& sorted, int p);

}  // namespace creditloop::sim
