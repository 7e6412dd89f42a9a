// The core's cost per decision at 1, 1,000 and 1,000,000 registered participants, with 1 % and
// 100 % of them waiting, and the cost of registration.
//
// A decision is what the dispatcher does per request: class selection when a turn begins, one
// visit, the debit. Each benchmark iteration times a batch of kBatch decisions on a virtual clock
// that advances between decisions, so buckets refill and classes change: the clock step is set
// from the number of waiting participants so that roughly a third to a half of decisions go out
// metered (the counters `p1`, `p2`, `p3` report the split). Between batches, untimed, the
// dispatched requests are submitted again (queues stay at their depth) and the requests
// dispatched two batches ago complete with costs 0, 0.5 and 2 credits, charged back to their
// admitting buckets. Nothing allocates in the timed part: capacity is reserved up front.
//
// Run: taskset -c 1 build/release/bench/bench_core --benchmark_repetitions=7
//        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// (the build machines' speed drifts by tens of percent within minutes; interleaving spreads a
// slow spell over every case, and BM_ClockCalibration reports the speed they ran at).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "creditloop/core.hpp"

namespace {

using creditloop::ClassId;
using creditloop::Core;
using creditloop::Dispatch;
using creditloop::Nanos;
using creditloop::ParticipantId;
using creditloop::RequestHook;

constexpr int kBatch = 1024;
constexpr std::size_t kPerCall = 8;

struct Request : RequestHook {
  ParticipantId owner;
};

// Registers participant i of a fleet: plans alternate and shares vary, so buckets differ in rate
// and capacity.
ParticipantId add_participant(Core& core, std::size_t i) {
  const auto shares = static_cast<std::uint32_t>(1 + i % 3);
  return *core.add("p" + std::to_string(i), i % 2 == 0 ? "pro" : "lite", shares, 0);
}

struct Fleet {
  Core core{creditloop::reference_config()};
  std::vector<ParticipantId> waiting;
  std::vector<Request> requests;
  Nanos now = 0;
  Nanos step = 0;

  Fleet(std::size_t registered, std::size_t waiting_count) {
    const std::size_t depth = waiting_count * 4 >= 4 * kBatch ? 4 : (4 * kBatch) / waiting_count;
    core.reserve(registered, 4 * kBatch);
    const std::size_t spacing = registered / waiting_count;
    requests.resize(waiting_count * depth);
    std::size_t next_request = 0;
    for (std::size_t i = 0; i < registered; ++i) {
      const ParticipantId id = add_participant(core, i);
      if (i % spacing == 0 && waiting.size() < waiting_count) {
        waiting.push_back(id);
        for (std::size_t d = 0; d < depth; ++d) {
          Request& r = requests[next_request++];
          r.owner = id;
          (void)core.submit(id, r, 0);
        }
      }
    }
    // Mean refill across plans and shares is about 12 credits/s per participant; a third to a
    // half of decisions then find a credit, the rest go out unmetered.
    step = static_cast<Nanos>(4e7 / static_cast<double>(waiting_count));
    if (step < 1) step = 1;
  }
};

// A decision_sizes case's waiting participants: its percentage of the registered, at least one.
std::size_t waiting_of(const benchmark::State& state) {
  const auto registered = static_cast<std::size_t>(state.range(0));
  const auto percent = static_cast<std::size_t>(state.range(1));
  return std::max<std::size_t>(registered * percent / 100, 1);
}

// How the dispatcher asks for decisions: a batch at a time (Core::dispatch, the runtime's way),
// or one visit per call (begin_turn and visit).
enum class Api { batch, single };

// Each batch: kBatch decisions (timed by the caller), then the untimed upkeep: the requests
// dispatched two batches ago complete, and those just dispatched are submitted again.
template <Api api>
class DecisionLoop {
 public:
  explicit DecisionLoop(Fleet& fleet) : fleet_(fleet), batch_(kBatch) { previous_.reserve(kBatch); }

  // kBatch decisions; returns how many were made.
  int decide() {
    Core& core = fleet_.core;
    Nanos now = fleet_.now;
    int n = 0;
    if constexpr (api == Api::batch) {
      // The clock advances between decisions: a batch of one decision at a time would not
      // batch, so each call covers the decisions of one clock step's worth of arrivals (8), as
      // a dispatcher that reads the clock once per batch would see them.
      while (n < kBatch) {
        const std::size_t got = core.dispatch(
            now, std::span<Dispatch>(batch_).subspan(static_cast<std::size_t>(n), kPerCall));
        if (got == 0) break;
        n += static_cast<int>(got);
        now += fleet_.step * static_cast<Nanos>(got);
      }
    } else {
      while (n < kBatch) {
        if (!core.in_turn() && !core.begin_turn(now)) break;
        if (auto d = core.visit(now)) {
          batch_[static_cast<std::size_t>(n++)] = *d;
          now += fleet_.step;
        }
      }
    }
    fleet_.now = now;
    return n;
  }

  // The upkeep after decide() returned n; counts the batch's dispatches per class into `per_class`.
  void upkeep(int n, std::uint64_t* per_class) {
    Core& core = fleet_.core;
    // A request goes back into its queue once completed: before, it is still the core's.
    for (const Dispatch& d : previous_) {
      (void)core.complete(d.ticket, kCosts[cost_index_++ % 3], fleet_.now);
      auto* r = static_cast<Request*>(d.request);
      (void)core.submit(r->owner, *r, fleet_.now);
    }
    previous_.clear();
    for (int i = 0; i < n; ++i) {
      const Dispatch& d = batch_[static_cast<std::size_t>(i)];
      ++per_class[d.out];
      previous_.push_back(d);
    }
  }

 private:
  static constexpr double kCosts[3] = {0.0, 0.5, 2.0};
  Fleet& fleet_;
  std::vector<Dispatch> batch_;
  std::vector<Dispatch> previous_;
  std::size_t cost_index_ = 0;
};

template <Api api>
void BM_Decision(benchmark::State& state) {
  const auto registered = static_cast<std::size_t>(state.range(0));
  const std::size_t waiting_count = waiting_of(state);
  Fleet fleet(registered, waiting_count);
  DecisionLoop<api> loop(fleet);
  const ClassId unmetered = fleet.core.unmetered();

  // Buckets start full, so the first rounds (a round: every waiting participant visited about
  // once) all go out metered, and file no timer: at a million participants all waiting that
  // lasted 18 rounds, longer than a short benchmark run, and those decisions cost less than later
  // ones. Untimed rounds run until one has less than 90 % metered, then 20 more, so that every
  // size is measured in its steady state. (Having started full together, the participants stay
  // roughly in step: at a million all waiting, a round's metered share then swings between
  // about 15 and 50 %; a benchmark run covers several rounds.)
  const std::size_t round = std::max<std::size_t>(waiting_count, 16 * kBatch);
  int after_burst = -1;
  for (int rounds = 0; rounds < 300 && after_burst < 20; ++rounds) {
    std::uint64_t round_classes[creditloop::kMaxClasses + 1] = {};
    std::size_t made = 0;
    while (made < round) {
      const int n = loop.decide();
      loop.upkeep(n, round_classes);
      made += static_cast<std::size_t>(n);
    }
    const double unmetered_share =
        static_cast<double>(round_classes[unmetered]) / static_cast<double>(made);
    if (after_burst >= 0 || unmetered_share > 0.1) ++after_burst;
  }

  std::uint64_t per_class[creditloop::kMaxClasses + 1] = {};
  std::uint64_t decisions = 0;
  for (auto _ : state) {
    const int n = loop.decide();
    state.PauseTiming();
    loop.upkeep(n, per_class);
    decisions += static_cast<std::uint64_t>(n);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(decisions));
  const auto total = static_cast<double>(decisions);
  state.counters["p1"] = static_cast<double>(per_class[0]) / total;
  state.counters["p2"] = static_cast<double>(per_class[1]) / total;
  state.counters["p3"] = static_cast<double>(per_class[2]) / total;
  state.counters["ns_per_decision"] =
      benchmark::Counter(total, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
void decision_sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"registered", "waiting_pct"})
      ->Args({1, 100})
      ->Args({1000, 1})
      ->Args({1000, 100})
      ->Args({1000000, 1})
      ->Args({1000000, 100})
      ->Unit(benchmark::kNanosecond);
}
BENCHMARK(BM_Decision<Api::batch>)->Name("BM_Decision")->Apply(decision_sizes);
BENCHMARK(BM_Decision<Api::single>)->Name("BM_DecisionOneVisitPerCall")->Apply(decision_sizes);

// The dispatcher's whole core work per request when queues are one deep, the common case of many
// participants with a request now and then (and the runtime's, whose dispatcher moves each
// submission into the core): per round, kRound requests are submitted to the next kRound
// participants round robin (each queue goes from empty to one), kRound decisions dispatch them
// (each queue goes back to empty), and the requests of the previous round complete with costs 0,
// 0.5 and 2 credits. All of it is timed; the counter is per request. The clock steps so that
// about a fifth of the dispatches are metered.
void BM_ShallowQueues(benchmark::State& state) {
  constexpr std::size_t kRound = 64;
  const auto registered = static_cast<std::size_t>(state.range(0));
  Core core{creditloop::reference_config()};
  core.reserve(registered, 2 * kRound);
  std::vector<ParticipantId> ids;
  ids.reserve(registered);
  for (std::size_t i = 0; i < registered; ++i) ids.push_back(add_participant(core, i));
  std::vector<Request> requests(2 * kRound);
  std::vector<Dispatch> previous;
  std::vector<Dispatch> current;
  previous.reserve(kRound);
  current.reserve(kRound);
  const double costs[3] = {0.0, 0.5, 2.0};
  std::size_t cost_index = 0;
  std::size_t next = 0;
  std::size_t half = 0;
  std::uint64_t per_class[creditloop::kMaxClasses + 1] = {};
  std::uint64_t handled = 0;
  // A participant is back every registered / kRound rounds; at about 12 credits/s each and one
  // step per request, this step gives it a credit about one time in five.
  const Nanos step =
      std::max<Nanos>(1, static_cast<Nanos>(1.7e7 / static_cast<double>(registered)));
  Nanos now = 0;
  for (auto _ : state) {
    for (std::size_t i = 0; i < kRound; ++i) {
      Request& r = requests[half * kRound + i];
      r.owner = ids[next];
      next = next + 1 == registered ? 0 : next + 1;
      (void)core.submit(r.owner, r, now);
      now += step;
    }
    while (current.size() < kRound) {
      if (!core.in_turn() && !core.begin_turn(now)) break;
      if (auto d = core.visit(now)) current.push_back(*d);
    }
    for (const Dispatch& d : previous) {
      (void)core.complete(d.ticket, costs[cost_index++ % 3], now);
    }
    for (const Dispatch& d : current) ++per_class[d.out];
    handled += current.size();
    previous.swap(current);
    current.clear();
    half ^= 1;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(handled));
  const auto total = static_cast<double>(handled);
  state.counters["metered"] = static_cast<double>(handled - per_class[core.unmetered()]) / total;
  state.counters["ns_per_request"] =
      benchmark::Counter(total, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ShallowQueues)
    ->ArgName("registered")
    ->Arg(64)
    ->Arg(10000)
    ->Arg(1000000)
    ->Unit(benchmark::kNanosecond);

// The floor a decision's memory traffic sets, for comparing with BM_Decision at the same sizes:
// the same walk over records of the core's layout (a 64-byte header and two 64-byte buckets, as
// k = 2 gives, in the same huge-page slabs), visiting the waiting places in ring order with the
// same look-ahead of eight stops, but doing nothing at a stop except read and write one word of
// each of its lines. No decision can cost less at a size where the records do not fit in cache.
void BM_MemoryFloor(benchmark::State& state) {
  struct alignas(64) Line {
    std::uint64_t word = 0;
  };
  constexpr std::size_t kAhead = 8;
  const auto registered = static_cast<std::size_t>(state.range(0));
  const std::size_t waiting_count = waiting_of(state);
  const std::size_t spacing = registered / waiting_count;
  creditloop::detail::PlaceStore<Line, Line> records(2);
  records.grow_to(registered);
  std::vector<std::uint32_t> stops;
  stops.reserve(waiting_count);
  for (std::size_t i = 0; i < waiting_count; ++i) {
    stops.push_back(static_cast<std::uint32_t>(i * spacing));
  }
  std::size_t at = 0;
  std::uint64_t visits = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      const std::size_t ahead =
          at + kAhead < stops.size() ? at + kAhead : at + kAhead - stops.size();
      if (ahead < stops.size()) records.prefetch(stops[ahead]);
      const std::uint32_t place = stops[at];
      Line& header = records.header(place);
      header.word += 1;
      records.bucket(place, 0).word += header.word;
      records.bucket(place, 1).word += header.word;
      at = at + 1 == stops.size() ? 0 : at + 1;
    }
    visits += kBatch;
  }
  benchmark::DoNotOptimize(records.header(0).word);
  state.SetItemsProcessed(static_cast<std::int64_t>(visits));
  state.counters["ns_per_visit"] = benchmark::Counter(
      static_cast<double>(visits), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_MemoryFloor)->Apply(decision_sizes);

// How fast the CPU ran, in cycles per nanosecond: a chain of dependent one-cycle adds retires at
// most one add per cycle, so this is the clock times the share of it the virtual machine got. On
// the build machines it has measured from 1.3 to 3.05 within one day, and every figure above moves
// with it (though not in proportion: memory does not slow down with the CPU's share). It tells
// runs on different days apart; within one run, compare the cases side by side.
void BM_ClockCalibration(benchmark::State& state) {
  constexpr int kAdds = 1 << 20;
  std::uint64_t chain = 0;
  for (auto _ : state) {
    for (int i = 0; i < kAdds; ++i) {
#if defined(__x86_64__)
      asm volatile("add $1, %0" : "+r"(chain));
#elif defined(__aarch64__)
      asm volatile("add %0, %0, #1" : "+r"(chain));
#else
      benchmark::DoNotOptimize(++chain);  // a store and a load too: an upper bound only
#endif
    }
  }
  benchmark::DoNotOptimize(chain);
  state.counters["ghz"] = benchmark::Counter(static_cast<double>(state.iterations()) * kAdds * 1e-9,
                                             benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ClockCalibration)->Unit(benchmark::kMillisecond);

// Registering a million participants: a name each, both plans, buckets full.
void BM_RegisterMillion(benchmark::State& state) {
  std::vector<std::string> names;
  names.reserve(1000000);
  for (int i = 0; i < 1000000; ++i) names.push_back("tenant-" + std::to_string(i));
  for (auto _ : state) {
    auto core = std::make_unique<Core>(creditloop::reference_config());
    for (int i = 0; i < 1000000; ++i) {
      benchmark::DoNotOptimize(
          core->add(names[static_cast<std::size_t>(i)], i % 2 == 0 ? "pro" : "lite", 1, 0));
    }
    state.PauseTiming();  // the teardown of a million participants is not registration
    core.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 1000000);
}
BENCHMARK(BM_RegisterMillion)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
