// tools/sim/simulator.hpp: runs a scenario through the real dispatcher core on a virtual clock.
// The simulator owns the clock, the server (a slot model, with an optional backend FIFO) and the
// requests; every scheduling decision is the core's (creditloop::Core::run).
//
//  - Events at one instant go in the order docs/contract.md §6 fixes: completions, arrivals,
//    withdrawals, then the loop.
//  - An event costs O(log entries + log slots + log requests) plus the core's work and the trace
//    line; a `pass` line is O(W) in the W participants waiting, skipped without a trace or an
//    observer. Nothing allocates per request.
// Why: docs/contract.md#what-a-run-costs
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/room_controller.hpp"
#include "scenario.hpp"

namespace creditloop::sim {

/// What the summary and the table report about one participant when the run stopped.
struct ParticipantReport {
  std::string name;
  std::string plan;
  std::uint32_t shares = 1;
  /// By ClassId: 0..k-1 metered, k unmetered.
  std::array<std::uint64_t, creditloop::kMaxClasses + 1> dispatched{};
  std::uint64_t completed = 0;
  std::uint64_t withdrawn = 0;  // left the queue undispatched
  std::uint64_t waiting = 0;
  std::optional<creditloop::Nanos> wait_max;
  /// Balance of each metered class at the stop, in nano-credits; empty where the plan holds none.
  std::array<std::optional<creditloop::Balance>, creditloop::kMaxClasses> balances{};
};

struct RunReport {
  int classes = 2;
  std::uint64_t slots = 1;  // with `room_auto`, the room at the stop
  std::optional<creditloop::RoomBounds> room_auto;
  creditloop::Nanos stopped_at = 0;  // `until` if given, else the last instant handled
  std::uint64_t arrived = 0;
  bool withdraws = false;  // the scenario gives `withdraw_after`: the summary counts withdrawals
  std::vector<ParticipantReport> participants;  // ring order
};

/// A buffered sink for JSON Lines. Writes nothing until the first flush, which the simulator only
/// reaches once the scenario has been accepted.
class LineWriter {
 public:
  explicit LineWriter(std::FILE* out) : out_(out) { buf_.reserve(kFlushAt + 4096); }
  LineWriter(const LineWriter&) = delete;
  LineWriter& operator=(const LineWriter&) = delete;
  /// Best effort: a run that failed has already said so, and a destructor must not throw.
  ~LineWriter() {
    try {
      flush();
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
  }

  std::string& buffer() noexcept { return buf_; }
  /// Ends a line; flushes when the buffer is large.
  void end_line() {
    buf_ += '\n';
    if (buf_.size() >= kFlushAt) flush();
  }
  /// Writes out the buffer. Throws std::runtime_error when the output cannot take it.
  void flush();

 private:
  static constexpr std::size_t kFlushAt = 1 << 16;
  std::FILE* out_;
  std::string buf_;
};

/// Balances of one participant right after an event, by metered ClassId; empty where its plan
/// holds no bucket. Nano-credits.
using Balances = std::array<std::optional<creditloop::Balance>, creditloop::kMaxClasses>;

/// One waiting participant at a pass: whether it qualified for the pass's class and, if not, why.
struct PassEntry {
  std::uint32_t participant = 0;  // index in the scenario's participants (= ring order)
  bool eligible = false;
  /// For an ignored participant: whether it holds a bucket of the class; if so, its balance and
  /// the instant its next credit lands (nothing when that lies beyond the clock's range).
  bool holds = false;
  creditloop::Balance balance = 0;
  std::optional<creditloop::Nanos> next_credit;
};

/// A second reader of the run beside the trace (the pictures): told each event as the trace
/// line for it is written, with the same values, so that what it shows cannot drift from the
/// trace. Participants are indices in the scenario's order.
class RunObserver {
 public:
  virtual void arrived(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req) = 0;
  /// `waiting` lists every participant with queued work, in ring order from the first.
  virtual void passed(creditloop::Nanos t, creditloop::ClassId c,
                      std::span<const PassEntry> waiting) = 0;
  virtual void dispatched(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                          creditloop::ClassId c, const Balances& balances) = 0;
  /// `cost_nano`: the cost charged back, in nano-credits.
  virtual void completed(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req,
                         std::int64_t cost_nano, const Balances& balances) = 0;
  /// The request left its queue undispatched (the scenario's `withdraw_after`).
  virtual void withdrawn(creditloop::Nanos t, std::uint32_t participant, std::uint64_t req) = 0;
  /// A learned room (`"slots": "auto"`) has `slots` from `t` on; told once at 0 with the room it
  /// starts with.
  virtual void room(creditloop::Nanos /*t*/, std::uint32_t /*slots*/) {}

 protected:
  RunObserver() = default;
  RunObserver(const RunObserver&) = default;
  RunObserver& operator=(const RunObserver&) = default;
  ~RunObserver() = default;
};

class Simulator {
 public:
  /// Builds the core from the scenario and registers the participants at time 0, in order. A
  /// refusal by the core comes back as a Refusal naming the field ("participants[1].plan:
  /// ..."); nothing is written.
  static Parsed<std::unique_ptr<Simulator>> create(Scenario scenario);

  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  /// Runs to the end (or to `until`), writing the trace's event lines to `trace` if given, and
  /// reports the final state. Call once. Throws std::runtime_error if the core refuses a call the
  /// simulator makes correctly, or its counters disagree with what it dispatched: a core bug.
  RunReport run(LineWriter* trace);

  /// Each pass line also says why each ignored participant was passed over (`--reasons`): an
  /// extension of docs/contract.md §6's trace, off by default so that the trace stays as defined.
  void explain_passes(bool on) noexcept { explain_passes_ = on; }

  /// Tells `observer` every event of the coming run, with or without a trace. It must outlive
  /// run().
  void observe(RunObserver* observer) noexcept { observer_ = observer; }

 private:
  struct Request;
  struct Participant;
  struct Loop;

  explicit Simulator(Scenario scenario);

  void arrive(std::uint32_t entry);
  void complete_due(creditloop::Nanos now);
  void withdraw_due(creditloop::Nanos now);
  void drop_moot_withdrawals();
  void on_turn(creditloop::ClassId c);
  void on_dispatch(const creditloop::Decision& d);
  void start_in_backend(std::uint32_t req);
  void start_waiting_in_backend();
  void step_backend();
  void follow_room();
  Balances balances_of(const Participant& p);
  void write_balances(const Balances& balances);
  RunReport report(creditloop::Nanos stopped_at);

  Scenario scenario_;
  creditloop::Core core_;
  std::vector<Participant> participants_;  // scenario order (= ring order: nobody is removed)
  std::vector<std::uint32_t> by_place_;    // ring place -> index in participants_
  std::vector<Request> pool_;              // req number -> request; sized before the run
  std::vector<creditloop::ParticipantId> scratch_ids_;
  std::vector<PassEntry> scratch_;
  std::vector<std::string> class_json_;  // "\"P1\"" ... "\"P{k+1}\""

  struct NextArrival {
    creditloop::Nanos t;
    std::uint32_t entry;
    std::uint64_t index;
  };
  struct Due {
    creditloop::Nanos t;
    std::uint64_t seq;  // dispatch order: completions due together go in this order
    std::uint32_t req;
  };
  std::vector<NextArrival> arrivals_;  // min-heap on (t, entry)
  std::vector<Due> completions_;       // min-heap on (t, seq)
  std::vector<Due> withdrawals_;       // min-heap on (t, seq = req)

  LineWriter* trace_ = nullptr;
  RunObserver* observer_ = nullptr;
  bool explain_passes_ = false;
  creditloop::Nanos now_ = 0;
  std::uint64_t room_ = 0;  // the room now: scenario_.slots, or the controller's
  std::uint64_t in_flight_ = 0;
  std::optional<creditloop::RoomController> controller_;
  // The backend (scenario_.backend): the step in force, the requests it serves now, and its
  // FIFO of the dispatched ones beyond its capacity, a ring of at most the largest room.
  std::size_t step_ = 0;
  std::uint64_t capacity_ = std::numeric_limits<std::uint64_t>::max();
  std::int64_t slowdown_milli_ = 1000;
  std::uint64_t serving_ = 0;
  std::vector<std::uint32_t> backend_fifo_;
  std::size_t fifo_head_ = 0;
  std::size_t fifo_size_ = 0;
  std::uint64_t next_req_ = 0;
  std::uint64_t dispatch_seq_ = 0;
};

/// The summary line (docs/contract.md §6), without the trailing newline.
void append_summary(std::string& out, const RunReport& report);

/// A readable, aligned table of the report: one row per participant, then totals.
[[nodiscard]] std::string format_table(const RunReport& report);

/// `nano` units of 1e-9 (nanoseconds or nano-credits) as a decimal rounded half away from zero to
/// 6 places, shortest form with at least one decimal digit: 3.0, 3.2, -0.8, 0.000001.
void append_micro(std::string& out, creditloop::Balance nano);

}  // namespace creditloop::sim
