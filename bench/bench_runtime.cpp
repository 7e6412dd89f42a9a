// End to end: requests per second and queueing delay through creditloop::Runtime, against the
// same contract behind one mutex and against a bare moodycamel hand-off, in one binary and run.
//
//  - BM_Runtime/producers:P/participants:N/workers:W: the runtime with its worker pool.
//  - BM_RuntimeInlineSink/...: no pool; the handler runs on the dispatcher thread.
//  - BM_RuntimeCapture/...: BM_Runtime with 2 workers and a CaptureObserver writing a file.
//  - BM_Mutex/...: the reference model behind one std::mutex, a dispatcher and W workers.
//  - BM_RuntimeScaling/...: P producers and P workers, P from 1 to the machine's cores.
//  - BM_Raw/moodycamel: a pointer from one thread to another; the floor.
// The summary's targets: runtime / raw at most 2, mutex / runtime at least 10, dispatcher CPU per
// request / raw at most 1.5.
//
// Run: cmake --build build/release --target bench_runtime
//      build/release/bench/bench_runtime --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
// How it measures, and why: docs/performance.md#how-bench_runtime-measures
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/capture.hpp"
#include "creditloop/runtime.hpp"
#include "runtime_harness.hpp"

namespace creditloop::bench {

namespace {

// ---- the runtime --------------------------------------------------------------------------------

// The options of a runtime case: a pool of `workers` that runs the handler, or with kInlineSink a
// sink that runs it on the dispatcher thread and completes through `self`.
template <bool kInlineSink>
creditloop::RuntimeOptions runtime_options(std::size_t participants,
                                           [[maybe_unused]] unsigned workers, Gate* gates,
                                           creditloop::Runtime*& self) {
  creditloop::RuntimeOptions options;
  options.config = metered_config(participants);
  options.slots = kSlots;
  if constexpr (kInlineSink) {
    options.sink = [gates, &self](const creditloop::Decision& d) {
      auto& r = static_cast<Request&>(*d.request);
      // Completed before it is marked done: until its completion the request is the runtime's,
      // and its producer's next submit of it would be refused.
      if (!self->complete(d.ticket, request_cost(r))) std::abort();  // the ticket was issued once
      (void)start_request(r, gates);
    };
  } else {
    options.workers = workers;
    options.handler = [gates](const creditloop::Decision& d) {
      return start_request(static_cast<Request&>(*d.request), gates);
    };
  }
  options.thread_name = "bench-dispatch";
  options.expected_participants = participants;
  options.expected_in_flight = kSlots;
  return options;
}

// A CaptureObserver that records every request to a file in a fresh scratch directory (set in
// `capture_dir`), made `options`' observer. It must outlive the runtime.
std::unique_ptr<creditloop::CaptureObserver> start_capture(creditloop::RuntimeOptions& options,
                                                           std::size_t participants,
                                                           std::filesystem::path& capture_dir) {
  std::string dir = (std::filesystem::temp_directory_path() / "bench-capture-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) std::abort();
  capture_dir = dir;
  creditloop::CaptureOptions c;
  c.files = creditloop::CaptureFiles{(capture_dir / "capture.jsonl").string(), 64 << 20, 2};
  c.setup = creditloop::capture_setup(options);
  c.expected_in_flight = kSlots;
  c.expected_participants = participants;
  auto capture = std::make_unique<creditloop::CaptureObserver>(std::move(c));
  options.observer = capture.get();
  return capture;
}

// The runtime's own counters at the end of a case: the class mix, parks, and the dispatcher
// thread's CPU time per request since `before`, which it returns.
double runtime_counters(benchmark::State& state, const creditloop::RuntimeSnapshot& before,
                        const creditloop::RuntimeSnapshot& snapshot) {
  std::uint64_t per_class[creditloop::kMaxClasses + 1] = {};
  for (int c = 0; c <= snapshot.classes; ++c) {
    per_class[c] = snapshot.per_class[static_cast<std::size_t>(c)].dispatched;
  }
  class_mix(state, per_class, snapshot.classes);
  state.counters["parks_per_kreq"] =
      static_cast<double>(snapshot.parks) * 1e3 / static_cast<double>(snapshot.dispatched);
  const double dispatcher_ns =
      static_cast<double>(snapshot.dispatcher_cpu - before.dispatcher_cpu) /
      static_cast<double>(snapshot.dispatched - before.dispatched);
  state.counters["dispatcher_ns_per_req"] = dispatcher_ns;
  return dispatcher_ns;
}

// Closes the capture once the runtime has shut down, counts what it dropped, and removes its
// scratch directory.
void finish_capture(benchmark::State& state, creditloop::CaptureObserver& capture,
                    std::uint64_t dispatched, const std::filesystem::path& capture_dir) {
  capture.close();
  const creditloop::CaptureStats cs = capture.stats();
  if (cs.errors != 0) state.SkipWithError(cs.last_error.c_str());
  // Records the writer thread could not keep up with: a capture that drops costs less.
  state.counters["capture_dropped_per_kreq"] =
      static_cast<double>(cs.dropped) * 1e3 / static_cast<double>(dispatched);
  std::filesystem::remove_all(capture_dir);
}

// kInlineSink: no pool; the sink runs the handler on the dispatcher thread (see the file comment).
// kCapture: a CaptureObserver records every request to a file in a scratch directory.
template <bool kInlineSink, bool kCapture = false>
void BM_Runtime(benchmark::State& state) {
  const auto producer_count = static_cast<unsigned>(state.range(0));
  const auto participants = static_cast<std::size_t>(state.range(1));
  const auto workers = static_cast<unsigned>(state.range(2));
  Producers producers(producer_count, participants);

  creditloop::Runtime* self = nullptr;  // the sink's way back to complete()
  creditloop::RuntimeOptions options =
      runtime_options<kInlineSink>(participants, workers, producers.gates(), self);
  std::unique_ptr<creditloop::CaptureObserver> capture;  // outlives the runtime
  std::filesystem::path capture_dir;
  if constexpr (kCapture) capture = start_capture(options, participants, capture_dir);
  creditloop::Runtime runtime(std::move(options));
  self = &runtime;
  std::vector<creditloop::ParticipantId> ids;
  ids.reserve(participants);
  for (std::size_t i = 0; i < participants; ++i) {
    ids.push_back(*runtime.add("p" + std::to_string(i), plan_of(i), 1));
  }
  std::atomic<bool> refused{false};
  auto submit = [&](Request& r) {
    if (!runtime.submit(ids[r.participant], r)) refused.store(true, std::memory_order_relaxed);
  };

  const creditloop::RuntimeSnapshot before = runtime.snapshot();
  std::uint64_t target = before.completed;
  Stopwatch watch;
  for (auto _ : state) {
    watch.start();
    producers.iterate(submit);
    // Every handler has started; wait for the completions to be applied too.
    target += kRequests;
    while (runtime.snapshot().completed < target) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    watch.stop();
  }
  // Relaxed: the producers that set it were joined by iterate().
  if (refused.load(std::memory_order_relaxed)) state.SkipWithError("a submission was refused");
  if (runtime.handler_errors() != 0) state.SkipWithError("a handler's completion was refused");

  const creditloop::RuntimeSnapshot snapshot = runtime.snapshot();
  const double dispatcher_ns = runtime_counters(state, before, snapshot);
  if constexpr (!kInlineSink) {
    results()[{kCapture ? "dispatcher_capture" : "dispatcher", static_cast<int>(state.range(0)),
               static_cast<int>(state.range(1)), static_cast<int>(state.range(2))}]
        .push_back(dispatcher_ns);
  }
  runtime.shutdown();
  if constexpr (kCapture) finish_capture(state, *capture, snapshot.dispatched, capture_dir);
  producers.report(state);
  finish(state,
         kInlineSink ? "inline"
         : kCapture  ? "capture"
                     : "runtime",
         watch, producer_count + 1 + workers);
}

void Cases(benchmark::internal::Benchmark* b) {
  b->ArgNames({"producers", "participants", "workers"});
  for (const int workers : {1, 2}) {
    for (const int participants : {10, 10'000}) {
      for (const int producers : {1, 2, 4}) b->Args({producers, participants, workers});
    }
  }
  b->Iterations(4)->UseRealTime()->Unit(benchmark::kMillisecond);
}

void InlineCases(benchmark::internal::Benchmark* b) {
  b->ArgNames({"producers", "participants", "workers"});
  for (const int participants : {10, 10'000}) {
    for (const int producers : {1, 2, 4}) b->Args({producers, participants, 0});
  }
  b->Iterations(10)->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Raw)
    ->Name("BM_Raw/moodycamel")
    ->ArgNames({"producers", "participants", "workers"})
    ->Args({1, 10, 0})
    ->Iterations(20)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Runtime<false>)->Name("BM_Runtime")->Apply(Cases);
BENCHMARK(BM_Mutex)->Apply(Cases);
BENCHMARK(BM_Runtime<true>)->Name("BM_RuntimeInlineSink")->Apply(InlineCases);
// The runtime with a capture, for the cases of BM_Runtime with 2 workers.
void CaptureCases(benchmark::internal::Benchmark* b) {
  b->ArgNames({"producers", "participants", "workers"});
  for (const int participants : {10, 10'000}) {
    for (const int producers : {1, 2}) b->Args({producers, participants, 2});
  }
  b->Iterations(4)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Runtime<false, true>)->Name("BM_RuntimeCapture")->Apply(CaptureCases);
// Toward many cores: as many producers as workers (the completers), from 1 to the machine's
// cores, a row per count, 10,000 participants. requests_per_s and dispatcher_ns_per_req per row
// show where adding threads stops adding throughput; docs/performance.md ("Toward many cores")
// has the model of which shared line saturates first.
void ScalingCases(benchmark::internal::Benchmark* b) {
  b->ArgNames({"producers", "participants", "workers"});
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int threads = 1; threads <= cores; ++threads) b->Args({threads, 10'000, threads});
  b->Iterations(4)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Runtime<false>)->Name("BM_RuntimeScaling")->Apply(ScalingCases);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void print_summary() {
  const auto& r = results();
  const auto find = [&](const std::string& design, int p, int n, int w) -> double {
    const auto it = r.find({design, p, n, w});
    return it == r.end() || it->second.empty() ? 0.0 : median(it->second);
  };
  const double raw = find("raw", 1, 10, 0);
  std::printf("\nSummary (%u hardware threads; medians of ns per request over repetitions)\n",
              std::thread::hardware_concurrency());
  if (raw > 0) std::printf("raw moodycamel hand-off, 1 producer -> 1 consumer: %.1f ns\n", raw);
  std::printf("%-9s %-12s %-7s %12s %12s %16s %17s %13s %19s\n", "producers", "participants",
              "workers", "runtime ns", "mutex ns", "runtime/raw<=2", "mutex/runtime>=10",
              "dispatcher ns", "dispatcher/raw<=1.5");
  for (const auto& [key, values] : r) {
    const auto& [design, p, n, w] = key;
    if (design != "runtime") continue;
    const double runtime = median(values);
    const double mutex = find("mutex", p, n, w);
    const double dispatcher = find("dispatcher", p, n, w);
    const auto verdict = [](bool met) { return met ? "met" : "missed"; };
    std::printf("%-9d %-12d %-7d %12.1f %12.1f", p, n, w, runtime, mutex);
    if (raw > 0) {
      std::printf(" %9.2f %-6s", runtime / raw, verdict(runtime / raw <= 2));
    } else {
      std::printf(" %16s", "-");
    }
    if (mutex > 0) {
      std::printf(" %10.2f %-6s", mutex / runtime, verdict(mutex / runtime >= 10));
    } else {
      std::printf(" %17s", "-");
    }
    std::printf(" %13.1f", dispatcher);
    if (raw > 0) {
      std::printf(" %12.2f %-6s", dispatcher / raw, verdict(dispatcher / raw <= 1.5));
    } else {
      std::printf(" %19s", "-");
    }
    std::printf("\n");
  }
  std::printf("%-9s %-12s %-7s %12s %16s\n", "producers", "participants", "workers", "inline ns",
              "inline/raw");
  for (const auto& [key, values] : r) {
    const auto& [design, p, n, w] = key;
    if (design != "inline") continue;
    const double inline_ns = median(values);
    std::printf("%-9d %-12d %-7s %12.1f %9.2f\n", p, n, "sink", inline_ns,
                raw > 0 ? inline_ns / raw : 0.0);
  }
  bool header = false;
  for (const auto& [key, values] : r) {
    const auto& [design, p, n, w] = key;
    if (design != "capture") continue;
    const double without = find("runtime", p, n, w);
    const double dispatcher = find("dispatcher", p, n, w);
    const double dispatcher_capture = find("dispatcher_capture", p, n, w);
    if (without <= 0 || dispatcher <= 0) continue;
    if (!header) {
      std::printf("%-9s %-12s %-7s %12s %12s %8s %15s %15s %8s\n", "producers", "participants",
                  "workers", "runtime ns", "captured ns", "ratio", "dispatcher ns", "with capture",
                  "ratio");
      header = true;
    }
    const double captured = median(values);
    std::printf("%-9d %-12d %-7d %12.1f %12.1f %8.3f %15.1f %15.1f %8.3f\n", p, n, w, without,
                captured, captured / without, dispatcher, dispatcher_capture,
                dispatcher_capture / dispatcher);
  }
}

}  // namespace

}  // namespace creditloop::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  creditloop::bench::print_summary();
  return 0;
}
