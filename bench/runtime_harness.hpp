// bench/runtime_harness.hpp: what the designs of bench_runtime share (its file comment, in
// bench_runtime.cpp, says how they are measured): the requests, the producers that push them, the
// plans, the stopwatch, the counters and the results the summary reads.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "creditloop/runtime.hpp"
#include "internal/spin.hpp"

namespace creditloop::bench {

using creditloop::Nanos;
using creditloop::RequestHook;

inline constexpr std::size_t kRequests = 200'000;   // per iteration
inline constexpr std::size_t kOutstanding = 1'024;  // in the system at once, over all producers
inline constexpr std::uint32_t kSlots = 256;
inline constexpr double kSmallCost = 0.25;
inline constexpr double kMeteredRefill = 400'000;  // credits per second, over all participants

using creditloop::detail::cpu_relax;

// One line each: producers write their own requests while workers write the ones just taken.
struct alignas(64) Request : RequestHook {
  Nanos submitted = 0;
  Nanos delay = 0;
  std::atomic<std::uint32_t> done{1};  // 1: free to submit again
  std::uint32_t participant = 0;       // index into the design's participant table
  std::uint32_t producer = 0;
  std::uint32_t seq = 0;
};

// A producer's window: how many of its requests have been run, and from what count on it wants to
// be woken.
struct alignas(64) Gate {
  std::atomic<std::uint32_t> finished{0};
  std::atomic<std::uint32_t> wake_at{std::numeric_limits<std::uint32_t>::max()};
};

// What every design runs when a request starts: the delay stamp and the producer's bookkeeping.
// The request is marked done here, before the handler returns: nothing reads it after that (the
// runtime's worker and the baselines keep only the ticket), so its producer may reuse it.
inline double request_cost(const Request& r) noexcept {
  return (r.seq & 1U) != 0 ? kSmallCost : 0.0;
}

inline double start_request(Request& r, Gate* gates) noexcept {
  r.delay = creditloop::detail::monotonic_now() - r.submitted;
  const double cost = request_cost(r);
  Gate& gate = gates[r.producer];  // read before `done`: from then on the producer may reuse r
  r.done.store(1, std::memory_order_release);
  // seq_cst, here and in wait_finished(): a store-then-load pair on `finished` and `wake_at`.
  const std::uint32_t finished = gate.finished.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (finished == gate.wake_at.load(std::memory_order_seq_cst)) gate.finished.notify_one();
  return cost;
}

inline void wait_finished(Gate& gate, std::uint32_t target) {
  if (gate.finished.load(std::memory_order_seq_cst) >= target) return;
  gate.wake_at.store(target, std::memory_order_seq_cst);
  for (;;) {
    const std::uint32_t seen = gate.finished.load(std::memory_order_seq_cst);
    if (seen >= target) break;
    gate.finished.wait(seen, std::memory_order_seq_cst);
  }
  gate.wake_at.store(std::numeric_limits<std::uint32_t>::max(), std::memory_order_relaxed);
}

struct Producer {
  explicit Producer(std::size_t window) : pool(window) {}
  std::vector<Request> pool;
  std::vector<Nanos> delays;
  std::uint32_t issued = 0;  // over the whole run
};

// One producer's share of an iteration: `count` requests round robin from participant `first`.
template <class Submit>
inline void produce(Producer& self, Gate& gate, std::uint32_t index, std::size_t count,
                    std::size_t first, std::size_t participants, Submit& submit) {
  const std::size_t window = self.pool.size();
  const std::uint32_t base = self.issued;
  for (std::size_t i = 0; i < count; ++i) {
    Request& r = self.pool[i % window];
    if (r.done.load(std::memory_order_acquire) == 0) {
      // Hysteresis: sleep until a quarter of the window beyond this request has been run.
      wait_finished(gate, static_cast<std::uint32_t>(base + i - window + window / 4 + 1));
      while (r.done.load(std::memory_order_acquire) == 0) std::this_thread::yield();
    }
    if (i >= window) self.delays.push_back(r.delay);
    r.done.store(0, std::memory_order_relaxed);
    r.producer = index;
    r.participant = static_cast<std::uint32_t>((first + i) % participants);
    r.seq = static_cast<std::uint32_t>(i);
    r.submitted = creditloop::detail::monotonic_now();
    submit(r);
  }
  self.issued = static_cast<std::uint32_t>(base + count);
  wait_finished(gate, self.issued);
  for (std::size_t i = count > window ? count - window : 0; i < count; ++i) {
    self.delays.push_back(self.pool[i % window].delay);
  }
}

// The producers of one benchmark run and the samples they gathered.
class Producers {
 public:
  Producers(unsigned count, std::size_t participants)
      : gates_(new Gate[count]), participants_(participants) {
    for (unsigned p = 0; p < count; ++p) {
      producers_.push_back(std::make_unique<Producer>(kOutstanding / count));
      producers_.back()->delays.reserve(8 * kRequests / count);
    }
  }

  Gate* gates() { return gates_.get(); }

  /// Runs one iteration on fresh threads and returns when every request has been run.
  template <class Submit>
  void iterate(Submit& submit) {
    const auto count = static_cast<unsigned>(producers_.size());
    std::vector<std::thread> threads;
    threads.reserve(count);
    for (unsigned p = 0; p < count; ++p) {
      threads.emplace_back([&, p] {
        produce(*producers_[p], gates_[p], p, kRequests / count, p * participants_ / count,
                participants_, submit);
      });
    }
    for (std::thread& t : threads) t.join();
  }

  /// Delay percentiles in microseconds over every request of the run.
  void report(benchmark::State& state) {
    std::vector<Nanos> all;
    for (const auto& p : producers_) all.insert(all.end(), p->delays.begin(), p->delays.end());
    if (all.empty()) return;
    const auto at = [&](double q) {
      const auto k = static_cast<std::size_t>(q * static_cast<double>(all.size() - 1));
      std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end());
      return static_cast<double>(all[k]) / 1e3;
    };
    state.counters["p50_us"] = at(0.50);
    state.counters["p99_us"] = at(0.99);
    state.counters["p999_us"] = at(0.999);
  }

 private:
  std::unique_ptr<Gate[]> gates_;
  std::vector<std::unique_ptr<Producer>> producers_;
  std::size_t participants_;
};

// reference_config()'s plans with rates scaled to the participant count (see the file comment).
inline creditloop::Config metered_config(std::size_t participants) {
  const double p2 =
      std::min(creditloop::kMaxRate, kMeteredRefill / (1.2 * static_cast<double>(participants)));
  const double p1 = 0.4 * p2;  // the reference's 2 : 5
  const auto terms = [](double rate) {
    return creditloop::ClassTerms{rate, std::clamp(rate / 100, 1.0, creditloop::kMaxBurst)};
  };
  creditloop::Config config = creditloop::reference_config();
  for (creditloop::Plan& plan : config.plans) {
    if (plan.terms[0]) plan.terms[0] = terms(p1);
    if (plan.terms[1]) plan.terms[1] = terms(p2);
  }
  return config;
}

inline const char* plan_of(std::size_t i) { return i % 2 == 0 ? "pro" : "lite"; }

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// CPU seconds of every thread of the process.
inline double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Wall and CPU time of the timed loop.
class Stopwatch {
 public:
  void start() {
    wall_start_ = std::chrono::steady_clock::now();
    cpu_start_ = process_cpu_seconds();
  }
  void stop() {
    wall_ += seconds_since(wall_start_);
    cpu_ += process_cpu_seconds() - cpu_start_;
  }
  [[nodiscard]] double wall() const { return wall_; }
  [[nodiscard]] double cpus_used() const { return wall_ > 0 ? cpu_ / wall_ : 0.0; }

 private:
  std::chrono::steady_clock::time_point wall_start_;
  double cpu_start_ = 0;
  double wall_ = 0;
  double cpu_ = 0;
};

// Median ns per request of each case over its repetitions, for the summary.
inline std::map<std::tuple<std::string, int, int, int>, std::vector<double>>& results() {
  static std::map<std::tuple<std::string, int, int, int>, std::vector<double>> r;
  return r;
}

inline void finish(benchmark::State& state, const std::string& design, const Stopwatch& watch,
                   unsigned threads) {
  const double seconds = watch.wall();
  state.counters["cpus_used"] = watch.cpus_used();
  const auto requests = static_cast<double>(state.iterations()) * static_cast<double>(kRequests);
  state.counters["requests_per_s"] = benchmark::Counter(requests, benchmark::Counter::kIsRate);
  state.counters["ns_per_request"] =
      benchmark::Counter(requests, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["threads"] = static_cast<double>(threads);
  results()[{design, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
             static_cast<int>(state.range(2))}]
      .push_back(seconds * 1e9 / requests);
}

inline void class_mix(benchmark::State& state, const std::uint64_t* per_class, int classes) {
  std::uint64_t total = 0;
  for (int c = 0; c <= classes; ++c) total += per_class[c];
  for (int c = 0; c <= classes; ++c) {
    state.counters[creditloop::class_name(static_cast<creditloop::ClassId>(c))] =
        total == 0 ? 0.0 : static_cast<double>(per_class[c]) / static_cast<double>(total);
  }
}

// The baselines, each in a file of its own; the runtime's cases are in bench_runtime.cpp.
void BM_Mutex(benchmark::State& state);
void BM_Raw(benchmark::State& state);

}  // namespace creditloop::bench
