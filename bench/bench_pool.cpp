// The measured choice of the runtime's worker-pool hand-off: one thread hands jobs to 2 workers,
// with gap_ns of busy work before each job (0 or 200, as a dispatcher decides between hand-offs).
//
//  - moodycamel_bulk32: the runtime's pool (BlockingConcurrentQueue, workers take up to 32).
//  - moodycamel_bulk32_enqueue64: the same, the producer enqueuing 64 jobs at a time.
//  - tbb_arena_enqueue / tbb_task_group: oneTBB's task_arena::enqueue and task_group::run.
//
// Run: cmake --build build/release --target bench_pool
//      build/release/bench/bench_pool --benchmark_repetitions=5
// How it measures: docs/performance.md#how-bench_pool-measures
#include <benchmark/benchmark.h>
#include <concurrentqueue/blockingconcurrentqueue.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "creditloop/participant.hpp"
#include "creditloop/request.hpp"
#include "creditloop/runtime.hpp"
#include "creditloop/ticket.hpp"
#include "internal/spin.hpp"

namespace {

using creditloop::RequestHook;
using creditloop::detail::cpu_relax;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kJobs = 200'000;

// The runtime's worker job: the dispatch itself (a null request: the worker stops).
using Job = creditloop::Decision;
static_assert(sizeof(Job) == 48);

struct alignas(64) RunCount {
  std::atomic<std::uint64_t> jobs{0};
};

using Handler = std::function<double(const Job&)>;

struct PoolFixture {
  static constexpr std::size_t kRequests = 4096;
  std::vector<RequestHook> requests = std::vector<RequestHook>(kRequests);
  std::array<RunCount, 4> counts{};
  Handler handler = [](const Job& j) {
    benchmark::DoNotOptimize(j.request);
    return 0.0;
  };

  [[nodiscard]] Job job(std::size_t i) {
    return Job{&requests[i % kRequests], creditloop::Ticket{static_cast<std::uint32_t>(i), 1, 1},
               creditloop::ParticipantId{static_cast<std::uint32_t>(i % kRequests), 1, 1}};
  }
  [[nodiscard]] std::uint64_t ran() const {
    std::uint64_t total = 0;
    for (const RunCount& c : counts) total += c.jobs.load(std::memory_order_acquire);
    return total;
  }
  // Polled rather than signalled, so that no design pays for a wake-up per job or per batch.
  void wait_for(std::uint64_t target) const {
    while (ran() < target) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  void run(const Job& job) {
    (void)handler(job);
    const auto place = static_cast<std::size_t>(tbb::this_task_arena::current_thread_index());
    counts[place & 3].jobs.fetch_add(1, std::memory_order_release);
  }
};

// The dispatcher's own work between two hand-offs (a decision is some 40 to 200 ns):
// with a gap, workers drain faster than jobs arrive, which is how the runtime's pool runs.
void work_for(std::int64_t gap_ns) {
  if (gap_ns <= 0) return;
  const auto until = Clock::now() + std::chrono::nanoseconds(gap_ns);
  while (Clock::now() < until) cpu_relax();
}

// GCC 12 reports moodycamel's enqueue_bulk, once inlined here, as an 8-byte write into a region of
// size 0 (-Wstringop-overflow) on a path the block index rules out: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
// kEnqueueBatch 1: one enqueue per job, as the runtime's hand_out(). Above 1: the producer
// gathers that many jobs (or fewer at the end) and hands them over with one enqueue_bulk.
template <std::size_t kEnqueueBatch>
void BM_PoolMoodycamel(benchmark::State& state) {
  constexpr std::size_t kWorkerBulk = 32;  // the runtime's worker_main() took 32 before it took one
  const std::int64_t gap_ns = state.range(0);
  PoolFixture fixture;
  moodycamel::BlockingConcurrentQueue<Job> jobs;
  moodycamel::ProducerToken producer(jobs);
  std::vector<std::thread> workers;
  for (std::size_t w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      moodycamel::ConsumerToken token(jobs);
      std::array<Job, kWorkerBulk> batch;
      for (;;) {
        const std::size_t n = jobs.wait_dequeue_bulk(token, batch.begin(), batch.size());
        std::uint64_t ran = 0;
        std::size_t stops = 0;
        for (std::size_t i = 0; i < n; ++i) {
          if (batch[i].request == nullptr) {
            ++stops;
            continue;
          }
          (void)fixture.handler(batch[i]);
          ++ran;
        }
        fixture.counts[w].jobs.fetch_add(ran, std::memory_order_release);
        if (stops > 0) {
          // One bulk may take every worker's stop: pass on the ones that are not this worker's.
          for (std::size_t i = 1; i < stops; ++i) jobs.enqueue(Job{});
          return;
        }
      }
    });
  }
  std::array<Job, kEnqueueBatch> pending;
  std::uint64_t target = 0;
  for (auto _ : state) {
    std::size_t held = 0;
    for (std::size_t i = 0; i < kJobs; ++i) {
      work_for(gap_ns);
      if constexpr (kEnqueueBatch == 1) {
        jobs.enqueue(producer, fixture.job(i));
      } else {
        pending[held++] = fixture.job(i);
        if (held == kEnqueueBatch || i + 1 == kJobs) {
          jobs.enqueue_bulk(producer, pending.begin(), held);
          held = 0;
        }
      }
    }
    target += kJobs;
    fixture.wait_for(target);
  }
  for (std::size_t w = 0; w < workers.size(); ++w) jobs.enqueue(producer, Job{});
  for (std::thread& t : workers) t.join();
  state.SetItemsProcessed(static_cast<std::int64_t>(target));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// oneTBB sizes its worker pool from max_allowed_parallelism - 1; 3 allows the 2 workers asked for.
void BM_PoolTbbArenaEnqueue(benchmark::State& state) {
  const std::int64_t gap_ns = state.range(0);
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism, 3);
  PoolFixture fixture;
  tbb::task_arena arena(2, 0);
  arena.initialize();
  std::uint64_t target = 0;
  for (auto _ : state) {
    for (std::size_t i = 0; i < kJobs; ++i) {
      work_for(gap_ns);
      arena.enqueue([&fixture, job = fixture.job(i)] { fixture.run(job); });
    }
    target += kJobs;
    fixture.wait_for(target);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(target));
}

void BM_PoolTbbTaskGroup(benchmark::State& state) {
  const std::int64_t gap_ns = state.range(0);
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism, 3);
  PoolFixture fixture;
  tbb::task_arena arena(3, 1);
  arena.initialize();
  tbb::task_group group;
  std::uint64_t target = 0;
  for (auto _ : state) {
    arena.execute([&] {
      for (std::size_t i = 0; i < kJobs; ++i) {
        work_for(gap_ns);
        group.run([&fixture, job = fixture.job(i)] { fixture.run(job); });
      }
      group.wait();
    });
    target += kJobs;
    fixture.wait_for(target);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(target));
}

void PoolArgs(benchmark::internal::Benchmark* b) {
  b->ArgName("gap_ns")->Arg(0)->Arg(200)->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_PoolMoodycamel<1>)->Name("BM_Pool/moodycamel_bulk32")->Apply(PoolArgs);
BENCHMARK(BM_PoolMoodycamel<64>)->Name("BM_Pool/moodycamel_bulk32_enqueue64")->Apply(PoolArgs);
BENCHMARK(BM_PoolTbbArenaEnqueue)->Name("BM_Pool/tbb_arena_enqueue")->Apply(PoolArgs);
BENCHMARK(BM_PoolTbbTaskGroup)->Name("BM_Pool/tbb_task_group")->Apply(PoolArgs);

}  // namespace

BENCHMARK_MAIN();
