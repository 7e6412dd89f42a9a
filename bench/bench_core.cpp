// The core's cost per decision at 1, 1,000 and 1,000,000 registered participants, with 1 % and
// 100 % of them waiting, and the cost of registration.
//
// The workloads are in workloads.hpp, shared with bench_instructions. Each BM_Decision iteration
// times a batch of kBatch decisions with credit scarce: roughly a third to a half of decisions go
// out metered (the counters `p1`, `p2`, `p3` report the split); the upkeep between batches is
// untimed. Nothing allocates in the timed part: capacity is reserved up front.
//
// Run: taskset -c 1 build/release/bench/bench_core --benchmark_repetitions=7
//        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// (the build machines' speed drifts by tens of percent within minutes; interleaving spreads a
// slow spell over every case, and BM_ClockCalibration reports the speed they ran at).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "creditloop/core.hpp"
#include "workloads.hpp"

namespace {

using creditloop::ClassId;
using creditloop::Core;
using creditloop::Nanos;
using creditloop::ParticipantId;
using creditloop::bench::Api;
using creditloop::bench::Credit;
using creditloop::bench::DecisionLoop;
using creditloop::bench::Fleet;
using creditloop::bench::FreshCores;
using creditloop::bench::kBatch;
using creditloop::bench::ShallowLoop;

// A decision_sizes case's waiting participants: its percentage of the registered, at least one.
std::size_t waiting_of(const benchmark::State& state) {
  const auto registered = static_cast<std::size_t>(state.range(0));
  const auto percent = static_cast<std::size_t>(state.range(1));
  return std::max<std::size_t>(registered * percent / 100, 1);
}

template <Api api>
void BM_Decision(benchmark::State& state) {
  const auto registered = static_cast<std::size_t>(state.range(0));
  const std::size_t waiting_count = waiting_of(state);
  Fleet fleet(registered, waiting_count, Credit::scarce);
  DecisionLoop<api> loop(fleet);

  // Buckets start full (one credit: the scarce plans' burst), so the first round (every waiting
  // participant visited about once) goes out metered and files no timer. Three untimed rounds
  // bring every size to its steady state.
  const std::size_t round = std::max<std::size_t>(waiting_count, 16 * kBatch);
  std::uint64_t warm_classes[creditloop::kMaxClasses + 1] = {};
  for (std::size_t made = 0; made < 3 * round;) {
    const int n = loop.decide();
    loop.upkeep(n, warm_classes);
    made += static_cast<std::size_t>(n);
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

// The dispatcher's whole core work per request when queues are one deep (ShallowLoop), all of it
// timed; the counter is per request. About a fifth of the dispatches are metered.
void BM_ShallowQueues(benchmark::State& state) {
  ShallowLoop loop(static_cast<std::size_t>(state.range(0)), Credit::scarce);
  std::uint64_t handled = 0;
  for (auto _ : state) handled += loop.round();
  state.SetItemsProcessed(static_cast<std::int64_t>(handled));
  const auto total = static_cast<double>(handled);
  state.counters["metered"] =
      static_cast<double>(handled - loop.dispatched(loop.core().unmetered())) / total;
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
      if (ahead < stops.size()) records.prefetch(records.header(stops[ahead]));
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
// most one add per cycle, so this is the clock times the share of it the virtual machine got, and
// every figure above moves with it (though not in proportion: memory does not slow down with the
// CPU's share). It tells runs on different days apart; within one run, compare the cases side by
// side.
void BM_ClockCalibration(benchmark::State& state) {
  constexpr int kAdds = 1 << 20;
  std::uint64_t chain = 0;
  for (auto _ : state) {
#if defined(__x86_64__)
    // The whole loop in one block aligned to 64 bytes, eight adds per turn: a loop the compiler
    // placed across a 64-byte boundary ran at half the rate on the build machines (AMD EPYC), so
    // the same source read 1.0 to 1.6 GHz in one binary and 2.6 to 3.4 in another, in turn.
    std::uint64_t turns = kAdds / 8;
    asm volatile(
        ".p2align 6\n"
        "1:\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "sub $1, %1\n\t"
        "jnz 1b"
        : "+r"(chain), "+r"(turns));
#else
    for (int i = 0; i < kAdds; ++i) {
#if defined(__aarch64__)
      asm volatile("add %0, %0, #1" : "+r"(chain));
#else
      benchmark::DoNotOptimize(++chain);  // a store and a load too: an upper bound only
#endif
    }
#endif
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

// Registration into a core on which nothing was reserved: the first add sizes the per-place
// tables (`per_core` 1), and a longer run of adds shows what growing them costs per add. Each
// iteration times, by the steady clock, the adds into `cores` fresh cores made and destroyed
// untimed: one core at a time meets memory the allocator has just had back; sixteen at a time
// need more than it keeps, so their first adds also pay the kernel for fresh pages.
void BM_AddsIntoFreshCore(benchmark::State& state) {
  const auto cores = static_cast<std::size_t>(state.range(0));
  const auto per_core = static_cast<std::size_t>(state.range(1));
  std::size_t added = 0;
  double seconds = 0;
  for (auto _ : state) {
    FreshCores fresh(cores, per_core);
    const auto start = std::chrono::steady_clock::now();
    added += fresh.add_all();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(took.count());
    seconds += took.count();
  }
  // By the manual time: a rate counter would divide by the CPU time, setup included.
  state.counters["ns_per_add"] = seconds * 1e9 / static_cast<double>(added);
}
BENCHMARK(BM_AddsIntoFreshCore)
    ->ArgNames({"cores", "per_core"})
    ->Args({1, 1})
    ->Args({16, 1})
    ->Args({16, 10000})
    ->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
