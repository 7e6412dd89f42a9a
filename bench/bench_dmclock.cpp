// creditloop against ceph's dmclock (github.com/ceph/dmclock), side by side in one process, in
// instructions per decision counted by callgrind. Built only when CMake is given a dmclock tree:
//
//   tools/fetch-dmclock     (clones dmclock at the pinned commit into build/dmclock)
//   cmake --preset release -DCREDITLOOP_DMCLOCK_DIR=$PWD/build/dmclock
//   cmake --build build/release --target bench_dmclock
//   tools/versus-dmclock    (every case under callgrind, one table)
//
//   bench_dmclock --list                   the fleet sizes, one per line (1024, 65536)
//   bench_dmclock PARTICIPANTS [REPS]      counts both cases at one size (under callgrind, as
//                                          tools/versus-dmclock runs it); 3 repetitions
//   bench_dmclock --time PARTICIPANTS [REPS]   the same work timed natively; 9 repetitions
//
// A decision is Core::begin_turn and Core::visit against PullPriorityQueue::pull_request; a cycle
// adds Core::complete and Core::submit against add_request, still counted per decision.
// What both sides get, and why a completion's cost goes with the next add_request:
// docs/performance.md#how-bench_dmclock-counts
#include <valgrind/callgrind.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dmclock_server.h"
#include "workloads.hpp"

namespace {

using creditloop::Nanos;
using creditloop::bench::Api;
using creditloop::bench::Credit;
using creditloop::bench::DecisionLoop;
using creditloop::bench::Fleet;
using creditloop::bench::kBatch;

enum class Kind { decision, cycle };

// A case is a fleet size; each run measures decisions, then cycles, on the same fleets: building
// dmclock's queue is the longest part of a run at 65,536 participants (see DmclockSide).
constexpr std::size_t kSizes[] = {1024, 65'536};

constexpr double kCosts[3] = {0.0, 0.5, 2.0};   // DecisionLoop's, in the same order
constexpr std::size_t kMeasured = 16 * kBatch;  // decisions counted per repetition and side

// One measured stretch: callgrind counts only inside it (--collect-atstart=no), and the native
// clock, read outside the counted part, adds its length to `elapsed`.
class Counted {
 public:
  explicit Counted(std::chrono::nanoseconds& elapsed)
      : elapsed_(elapsed), start_(std::chrono::steady_clock::now()) {
    CALLGRIND_TOGGLE_COLLECT;
  }
  ~Counted() {
    CALLGRIND_TOGGLE_COLLECT;
    elapsed_ += std::chrono::steady_clock::now() - start_;
  }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;

 private:
  std::chrono::nanoseconds& elapsed_;
  std::chrono::steady_clock::time_point start_;
};

// creditloop's side: workloads.hpp's fleet and loop, plentiful credit, one visit per call.
class CreditloopSide {
 public:
  explicit CreditloopSide(std::size_t participants)
      : fleet_(participants, participants, Credit::plentiful), loop_(fleet_) {}

  int decide() { return loop_.decide(); }
  void upkeep(int n) { loop_.upkeep(n, per_class_); }
  [[nodiscard]] Nanos step() const noexcept { return fleet_.step; }
  [[nodiscard]] std::size_t depth() const noexcept {
    return fleet_.requests.size() / fleet_.waiting.size();
  }

 private:
  Fleet fleet_;
  DecisionLoop<Api::single> loop_;
  std::uint64_t per_class_[creditloop::kMaxClasses + 1] = {};
};

// dmclock's side, the same loop: kBatch pulls on a clock advancing `step` per decision, then the
// requests pulled one batch earlier are added again with their completion's cost. Building it is
// quadratic: a client's first request (it starts idle) scans every client already known for the
// lowest proportion tag, about 3 minutes at 65,536 clients natively. In the measured loop no
// client ever goes idle (the queues stay deep and the cleaning never runs), so none scans again.
template <bool DelayedTags, bool InfoPerTag>
class DmclockSide {
 public:
  struct Job {
    std::uint32_t client;
  };
  using Queue = crimson::dmclock::PullPriorityQueue<std::uint32_t, Job, DelayedTags, InfoPerTag, 2>;

  DmclockSide(std::size_t participants, std::size_t depth, Nanos step)
      : step_(step),
        queue_([this](const std::uint32_t& id) { return &infos_[id]; }, std::chrono::hours(2),
               std::chrono::hours(3), std::chrono::hours(1), crimson::dmclock::AtLimit::Wait) {
    infos_.reserve(participants);
    for (std::size_t i = 0; i < participants; ++i) {
      // creditloop's shares in Fleet: 1 + i % 3.
      infos_.emplace_back(0.0, static_cast<double>(1 + i % 3), 0.0);
    }
    const crimson::dmclock::ReqParams none;
    for (std::size_t i = 0; i < participants; ++i) {
      for (std::size_t d = 0; d < depth; ++d) {
        const auto id = static_cast<std::uint32_t>(i);
        (void)queue_.add_request(std::make_unique<Job>(Job{id}), id, none, 0.0, 1u);
      }
    }
    batch_.reserve(kBatch);
    previous_.reserve(kBatch);
  }

  int decide() {
    int n = 0;
    while (n < kBatch) {
      auto pulled = queue_.pull_request(seconds());
      if (!pulled.is_retn()) break;
      batch_.push_back(std::move(pulled.get_retn().request));
      ++n;
      now_ += step_;
    }
    return n;
  }

  void upkeep(int n) {
    const crimson::dmclock::ReqParams none;  // one server: no replies from others to report
    for (auto& job : previous_) {
      const double cost = kCosts[cost_index_++ % 3];
      const auto charged = static_cast<crimson::dmclock::Cost>(1 + std::ceil(cost));
      const std::uint32_t client = job->client;
      (void)queue_.add_request(std::move(job), client, none, seconds(), charged);
    }
    previous_.clear();
    for (int i = 0; i < n; ++i) previous_.push_back(std::move(batch_[static_cast<std::size_t>(i)]));
    batch_.clear();
  }

 private:
  [[nodiscard]] double seconds() const noexcept { return static_cast<double>(now_) * 1e-9; }

  Nanos step_;
  Nanos now_ = 0;
  std::vector<crimson::dmclock::ClientInfo> infos_;  // reserved up front: the queue keeps pointers
  Queue queue_;
  std::vector<typename Queue::RequestRef> batch_;
  std::vector<typename Queue::RequestRef> previous_;
  std::size_t cost_index_ = 0;
};

using DmclockDefaults = DmclockSide<false, false>;
using DmclockOsd = DmclockSide<true, true>;  // ceph's mClockScheduler: mclock_queue_t

// Two rounds of every participant, at least 8 batches: creditloop's buckets start full and
// dmclock's tags at zero, and both reach their steady state within a round.
template <class Side>
void warm_up(Side& side, std::size_t participants) {
  const std::size_t warm = std::max<std::size_t>(2 * participants, 8 * kBatch);
  for (std::size_t made = 0; made < warm;) {
    const int n = side.decide();
    if (n == 0) std::abort();
    side.upkeep(n);
    made += static_cast<std::size_t>(n);
  }
}

template <class Side>
std::uint64_t measure(Side& side, Kind kind, std::chrono::nanoseconds& elapsed) {
  std::uint64_t ops = 0;
  while (ops < kMeasured) {
    int n = 0;
    if (kind == Kind::cycle) {
      const Counted counted(elapsed);
      n = side.decide();
      side.upkeep(n);
    } else {
      {
        const Counted counted(elapsed);
        n = side.decide();
      }
      side.upkeep(n);
    }
    if (n == 0) std::abort();  // every queue stays deep: a pull that finds nothing is a bug here
    ops += static_cast<std::uint64_t>(n);
  }
  return ops;
}

// Per side: the operations counted, and each repetition's native time per operation (the median
// is reported: on a shared machine one preempted repetition would swamp a mean).
struct Tally {
  explicit Tally(std::string side) : name(std::move(side)) {}

  std::string name;
  std::uint64_t ops = 0;
  std::vector<double> ns_per_op;

  [[nodiscard]] double median() {
    std::sort(ns_per_op.begin(), ns_per_op.end());
    return ns_per_op[ns_per_op.size() / 2];
  }
};

template <class Side>
void repetition(Side& side, Kind kind, Tally& tally) {
  std::chrono::nanoseconds elapsed{0};
  const std::uint64_t ops = measure(side, kind, elapsed);
  CALLGRIND_DUMP_STATS_AT(tally.name.c_str());
  tally.ops += ops;
  tally.ns_per_op.push_back(static_cast<double>(elapsed.count()) / static_cast<double>(ops));
}

int run(std::size_t participants, int reps, bool timed) {
  CreditloopSide creditloop(participants);
  DmclockDefaults dmclock(participants, creditloop.depth(), creditloop.step());
  DmclockOsd dmclock_osd(participants, creditloop.depth(), creditloop.step());
  warm_up(creditloop, participants);
  warm_up(dmclock, participants);
  warm_up(dmclock_osd, participants);
  CALLGRIND_START_INSTRUMENTATION;
  for (const Kind kind : {Kind::decision, Kind::cycle}) {
    const std::string prefix =
        (kind == Kind::decision ? "decision/" : "cycle/") + std::to_string(participants) + " ";
    Tally tallies[3] = {Tally(prefix + "creditloop"), Tally(prefix + "dmclock"),
                        Tally(prefix + "dmclock-osd")};
    for (int r = 0; r < reps; ++r) {
      repetition(creditloop, kind, tallies[0]);
      repetition(dmclock, kind, tallies[1]);
      repetition(dmclock_osd, kind, tallies[2]);
    }
    for (const Tally& t : tallies) {
      std::printf("ops %s %llu\n", t.name.c_str(), static_cast<unsigned long long>(t.ops));
    }
    if (timed) {
      for (Tally& t : tallies) std::printf("ns/op %s %.1f\n", t.name.c_str(), t.median());
      std::printf("ratio %sdmclock/creditloop %.1f, dmclock-osd/creditloop %.1f\n", prefix.c_str(),
                  tallies[1].median() / tallies[0].median(),
                  tallies[2].median() / tallies[0].median());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const std::size_t n : kSizes) std::printf("%zu\n", n);
    return 0;
  }
  int arg = 1;
  const bool timed = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  if (timed) ++arg;
  if (argc - arg < 1 || argc - arg > 2) {
    std::fprintf(stderr, "usage: bench_dmclock --list | [--time] PARTICIPANTS [REPS]\n");
    return 2;
  }
  const int reps = argc - arg == 2 ? std::atoi(argv[arg + 1]) : (timed ? 9 : 3);
  for (const std::size_t n : kSizes) {
    if (std::to_string(n) == argv[arg]) return run(n, reps, timed);
  }
  std::fprintf(stderr, "bench_dmclock: no case of %s participants (see --list)\n", argv[arg]);
  return 2;
}
