// What the dispatcher spends while producers are preempted inside a push: many more producer
// threads than CPUs, each submitting its next request as soon as the last one came back (the sink
// completes each at once), so that the scheduler often stops a producer inside submit(), its push
// onto the activation list (lock_free_bag.hpp) included. Nothing queues up: there is never
// anything to dispatch but the few requests in hand-off.
//
//   build/release/bench/preempted_push [SECONDS=5] [PRODUCERS=8 per CPU] [WORK_NS=20000]
//
// Each producer does WORK_NS of its own work (a busy loop) between two submissions, so that it
// is runnable all the time and the scheduler preempts it anywhere, a push included.
//
// Prints the dispatcher's CPU seconds per wall second, its CPU per dispatch, and how often it
// slept. A dispatcher that waited for a preempted producer by polling at full speed would show
// near one CPU second per second here however little it dispatches.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/runtime.hpp"

int main(int argc, char** argv) {
  const long seconds = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 5;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const long cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 2;
  const long producers = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 8 * cpus;
  const long work_ns = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 20'000;
  if (seconds <= 0 || producers <= 0) {
    std::fprintf(stderr, "usage: preempted_push [SECONDS>0] [PRODUCERS>0]\n");
    return 2;
  }
  creditloop::RuntimeOptions options;
  options.config = creditloop::reference_config();
  options.slots = 1'000'000;
  std::atomic<creditloop::Runtime*> self{nullptr};
  options.sink = [&self](const creditloop::Decision& d) {
    // relaxed: the runtime was published to this thread by the submit that led here.
    (void)self.load(std::memory_order_relaxed)->complete(d.ticket, 0);
  };
  creditloop::Runtime runtime(std::move(options));
  self.store(&runtime, std::memory_order_relaxed);  // published by the first submit
  std::vector<creditloop::ParticipantId> ids;
  for (long i = 0; i < producers; ++i) {
    ids.push_back(*runtime.add("p" + std::to_string(i), i % 2 == 0 ? "pro" : "lite", 1));
  }
  std::atomic<bool> stop{false};
  // Two requests per producer, alive until the runtime has shut down.
  std::deque<creditloop::RequestHook> requests(static_cast<std::size_t>(2 * producers));
  std::vector<std::thread> threads;
  for (long i = 0; i < producers; ++i) {
    threads.emplace_back([&, i] {
      const auto me = static_cast<std::size_t>(i);
      // relaxed: a stop flag; nothing is read after it.
      std::size_t next = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        (void)runtime.submit(ids[me], requests[2 * me + next]);
        next ^= 1;
        const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(work_ns);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
    });
  }
  const creditloop::RuntimeSnapshot before = runtime.snapshot();
  const auto wall_before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));  // the measured interval itself
  const creditloop::RuntimeSnapshot after = runtime.snapshot();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
  stop.store(true, std::memory_order_relaxed);
  for (std::thread& t : threads) t.join();
  const double cpu = static_cast<double>(after.dispatcher_cpu - before.dispatcher_cpu) * 1e-9;
  const auto dispatched = static_cast<double>(after.dispatched - before.dispatched);
  std::printf(
      "%ld producers on %ld CPUs, %.2f s: dispatcher %.3f CPU s per wall s, %.0f dispatches/s, "
      "%.0f ns of dispatcher CPU per dispatch, %llu sleeps, %llu of them timed for a retry\n",
      producers, cpus, wall, cpu / wall, dispatched / wall, cpu * 1e9 / std::max(dispatched, 1.0),
      static_cast<unsigned long long>(after.parks - before.parks),
      static_cast<unsigned long long>(after.retry_waits - before.retry_waits));
  (void)runtime.shutdown(creditloop::ShutdownMode::drain);
  return 0;
}
