// End to end: requests per second and queueing delay through creditloop::Runtime, against the
// same contract behind one mutex and against a bare moodycamel hand-off, in one binary and run.
//
// Every benchmark iteration pushes kRequests requests through and waits until each has been
// handled and its completion applied. Producers run on threads of their own, each submitting its
// share round robin over the participants (starting at different ones). Each producer keeps at
// most kOutstanding / P of its requests in the system (a closed loop): without a bound, the
// queueing delay would only measure how far ahead producers run. By Little's law the delay at
// saturation is then about kOutstanding / throughput; its tail shows what the threads' scheduling
// adds. A producer stamps the submit time into its request; whoever runs the request (the handler,
// or the raw consumer) stamps the delay to the moment it starts, marks the request done and counts
// it for its producer, which sleeps (atomic wait) when its window is full and is woken once a
// quarter of it has drained, so nobody pays a wake-up per request. Handlers are empty and return a
// cost of 0 or 0.25 credits, alternately.
//
// Designs:
//  - BM_Runtime/producers:P/participants:N/workers:W: creditloop::Runtime with its worker pool (W
//    workers), slots = kSlots.
//  - BM_RuntimeInlineSink/...: the same runtime with no pool: a sink callback runs the handler on
//    the dispatcher thread and completes the request there. Not a deployment (a real handler would
//    stall the dispatcher); it separates the dispatcher's own cost from the pool's hand-off.
//  - BM_RuntimeCapture/...: BM_Runtime's cases with 2 workers, with a CaptureObserver recording
//    every request to a file in a scratch directory (docs/capture.md). Its counter
//    capture_dropped_per_kreq says how many records the writer thread could not keep up with.
//  - BM_Mutex/...: the reference model (tests/model, creditloop::model::Model) behind one
//    std::mutex and a condition variable: producers lock, submit, unlock and notify; one dispatcher
//    thread locks, runs begin_turn/visit for up to 64 dispatches while slots are free, and hands
//    them to W workers through a std::deque under a second mutex and condition variable; workers
//    run the handler and complete through the model's lock. The model is a plain reading of the
//    spec that scans participants (O(N) per turn): that is part of what a straightforward
//    implementation costs.
//  - BM_RuntimeScaling/...: BM_Runtime with P producers and P workers, P from 1 to the machine's
//    cores: a row per count (docs/performance.md, "Toward many cores").
//  - BM_Raw/moodycamel: one producer thread enqueues request pointers into a
//    moodycamel::ConcurrentQueue with a producer token; one consumer thread dequeues in bulk of 32
//    with a consumer token and runs the same bookkeeping as a handler. No scheduling at all: the
//    floor a dispatcher is measured against.
// Plans: reference_config()'s shape (pro: P1 and P2, lite: P2) with participants alternating pro
// and lite with 1 share, but rates raised so that the refill summed over participants is about
// kMeteredRefill credits/s (capped at the per-share maximum, 10,000/s): a share of dispatches is
// metered. Counters P1, P2, P3 give the split of dispatches by class they went out under.
// Counters: requests_per_s, ns_per_request (the end-to-end cost: wall time / requests), p50_us,
// p99_us, p999_us (queueing delay over every request of the run), threads (busy threads: producers
// + dispatcher + workers, or producer + consumer; the machine has std::thread::hardware_concurrency
// cores, printed in the summary), cpus_used (the process's CPU time over wall time in the timed
// loop: below the core count when threads wait on each other or the machine is busy), and for the
// runtime parks_per_kreq (dispatcher sleeps per 1,000 dispatches) and dispatcher_ns_per_req (the
// dispatcher thread's CPU time per request: the serial part, which bounds throughput however many
// cores producers and workers have).
// Iteration counts are fixed, so that every run of a case is a repetition. After the benchmarks, a
// summary prints the median ns_per_request of each case over the repetitions and the two target
// ratios: runtime / raw hand-off (target at most 2) and mutex / runtime (target at least 10); then
// the median dispatcher_ns_per_req of each runtime case against the raw hand-off's ns per request
// (target at most 1.5: the dispatcher's serial work per request next to what moving a pointer
// between two threads costs); then the inline-sink runtime against the raw hand-off; then, for
// the cases run with and without a capture, both ns per request and dispatcher_ns_per_req side by
// side, with their ratios (run them interleaved: docs/capture.md).
//
// Run: cmake --build build/release --target bench_runtime
//      build/release/bench/bench_runtime --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
// Nothing is pinned. On 2 cores, producers + dispatcher + workers oversubscribe the CPU from 3
// busy threads on (the threads counter).
#include <benchmark/benchmark.h>
#include <concurrentqueue/concurrentqueue.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "creditloop/capture.hpp"
#include "creditloop/runtime.hpp"
#include "internal/spin.hpp"
#include "model/model.hpp"

namespace {

using creditloop::Nanos;
using creditloop::RequestHook;

constexpr std::size_t kRequests = 200'000;   // per iteration
constexpr std::size_t kOutstanding = 1'024;  // in the system at once, over all producers
constexpr std::uint32_t kSlots = 256;
constexpr double kSmallCost = 0.25;
constexpr double kMeteredRefill = 400'000;  // credits per second, over all participants
constexpr std::size_t kMutexBatch = 64;     // dispatches per lock hold, as RuntimeOptions::batch

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
double request_cost(const Request& r) noexcept { return (r.seq & 1U) != 0 ? kSmallCost : 0.0; }

double start_request(Request& r, Gate* gates) noexcept {
  r.delay = creditloop::detail::monotonic_now() - r.submitted;
  const double cost = request_cost(r);
  Gate& gate = gates[r.producer];  // read before `done`: from then on the producer may reuse r
  r.done.store(1, std::memory_order_release);
  // seq_cst, here and in wait_finished(): a store-then-load pair on `finished` and `wake_at`.
  const std::uint32_t finished = gate.finished.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (finished == gate.wake_at.load(std::memory_order_seq_cst)) gate.finished.notify_one();
  return cost;
}

void wait_finished(Gate& gate, std::uint32_t target) {
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
void produce(Producer& self, Gate& gate, std::uint32_t index, std::size_t count, std::size_t first,
             std::size_t participants, Submit& submit) {
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
creditloop::Config metered_config(std::size_t participants) {
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

const char* plan_of(std::size_t i) { return i % 2 == 0 ? "pro" : "lite"; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// CPU seconds of every thread of the process.
double process_cpu_seconds() {
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
std::map<std::tuple<std::string, int, int, int>, std::vector<double>>& results() {
  static std::map<std::tuple<std::string, int, int, int>, std::vector<double>> r;
  return r;
}

void finish(benchmark::State& state, const std::string& design, const Stopwatch& watch,
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

void class_mix(benchmark::State& state, const std::uint64_t* per_class, int classes) {
  std::uint64_t total = 0;
  for (int c = 0; c <= classes; ++c) total += per_class[c];
  for (int c = 0; c <= classes; ++c) {
    state.counters[creditloop::class_name(static_cast<creditloop::ClassId>(c))] =
        total == 0 ? 0.0 : static_cast<double>(per_class[c]) / static_cast<double>(total);
  }
}

// ---- the runtime --------------------------------------------------------------------------------

// kInlineSink: no pool; the sink runs the handler on the dispatcher thread (see the file comment).
// kCapture: a CaptureObserver records every request to a file in a scratch directory.
template <bool kInlineSink, bool kCapture = false>
void BM_Runtime(benchmark::State& state) {
  const auto producer_count = static_cast<unsigned>(state.range(0));
  const auto participants = static_cast<std::size_t>(state.range(1));
  const auto workers = static_cast<unsigned>(state.range(2));
  Producers producers(producer_count, participants);
  Gate* const gates = producers.gates();

  creditloop::RuntimeOptions options;
  options.config = metered_config(participants);
  options.slots = kSlots;
  creditloop::Runtime* self = nullptr;  // the sink's way back to complete()
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
  std::unique_ptr<creditloop::CaptureObserver> capture;  // outlives the runtime
  std::filesystem::path capture_dir;
  if constexpr (kCapture) {
    std::string dir = (std::filesystem::temp_directory_path() / "bench-capture-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) std::abort();
    capture_dir = dir;
    creditloop::CaptureOptions c;
    c.files = creditloop::CaptureFiles{(capture_dir / "capture.jsonl").string(), 64 << 20, 2};
    c.setup = creditloop::capture_setup(options);
    c.expected_in_flight = kSlots;
    c.expected_participants = participants;
    capture = std::make_unique<creditloop::CaptureObserver>(std::move(c));
    options.observer = capture.get();
  }
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
  if constexpr (!kInlineSink) {
    results()[{kCapture ? "dispatcher_capture" : "dispatcher", static_cast<int>(state.range(0)),
               static_cast<int>(state.range(1)), static_cast<int>(state.range(2))}]
        .push_back(dispatcher_ns);
  }
  runtime.shutdown();
  if constexpr (kCapture) {
    capture->close();
    const creditloop::CaptureStats cs = capture->stats();
    if (cs.errors != 0) state.SkipWithError(cs.last_error.c_str());
    // Records the writer thread could not keep up with: a capture that drops costs less.
    state.counters["capture_dropped_per_kreq"] =
        static_cast<double>(cs.dropped) * 1e3 / static_cast<double>(snapshot.dispatched);
    std::filesystem::remove_all(capture_dir);
  }
  producers.report(state);
  finish(state,
         kInlineSink ? "inline"
         : kCapture  ? "capture"
                     : "runtime",
         watch, producer_count + 1 + workers);
}

// ---- the mutex baseline -------------------------------------------------------------------------

class MutexBaseline {
 public:
  MutexBaseline(const creditloop::Config& config, std::size_t participants, unsigned workers,
                Gate* gates)
      : model_(config), gates_(gates) {
    pids_.reserve(participants);
    for (std::size_t i = 0; i < participants; ++i) {
      pids_.push_back(
          *model_.add("p" + std::to_string(i), plan_of(i), 1, creditloop::detail::monotonic_now()));
    }
    dispatcher_ = std::thread([this] { dispatch(); });
    for (unsigned w = 0; w < workers; ++w) workers_.emplace_back([this] { work(); });
  }
  MutexBaseline(const MutexBaseline&) = delete;
  MutexBaseline& operator=(const MutexBaseline&) = delete;
  ~MutexBaseline() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_one();
    dispatcher_.join();
    {
      std::lock_guard lock(jobs_mutex_);
      jobs_stopping_ = true;
    }
    jobs_cv_.notify_all();
    for (std::thread& w : workers_) w.join();
  }

  void submit(Request& r) {
    {
      std::lock_guard lock(mutex_);
      const creditloop::Status queued =
          model_.submit(pids_[r.participant], reinterpret_cast<std::uintptr_t>(&r),
                        creditloop::detail::monotonic_now());
      if (!queued) refused_ = true;
      ++queued_;
    }
    work_cv_.notify_one();
  }

  std::uint64_t completed() {
    std::lock_guard lock(mutex_);
    return completed_;
  }
  bool refused() {
    std::lock_guard lock(mutex_);
    return refused_;
  }
  std::array<std::uint64_t, creditloop::kMaxClasses + 1> per_class() {
    std::lock_guard lock(mutex_);
    return per_class_;
  }
  int classes() const { return model_.classes(); }

 private:
  struct Job {
    Request* request = nullptr;
    creditloop::model::TicketId ticket = 0;
  };

  void dispatch() {
    std::vector<Job> batch;
    batch.reserve(kMutexBatch);
    std::unique_lock lock(mutex_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stopping_ || (queued_ > 0 && in_flight_ < kSlots); });
      if (stopping_) return;
      const Nanos t = creditloop::detail::monotonic_now();
      for (std::size_t step = 0; batch.size() < kMutexBatch && in_flight_ < kSlots && queued_ > 0 &&
                                 step < 2 * kMutexBatch + 2;
           ++step) {
        if (!model_.in_turn() && !model_.begin_turn(t)) break;
        const std::optional<creditloop::model::Decision> d = model_.visit(t);
        if (!d) continue;
        batch.push_back(Job{reinterpret_cast<Request*>(d->request), d->ticket});
        --queued_;
        ++in_flight_;
        ++per_class_[d->out];
      }
      lock.unlock();
      {
        std::lock_guard jobs_lock(jobs_mutex_);
        jobs_.insert(jobs_.end(), batch.begin(), batch.end());
      }
      if (batch.size() == 1) {
        jobs_cv_.notify_one();
      } else if (!batch.empty()) {
        jobs_cv_.notify_all();
      }
      batch.clear();
      lock.lock();
    }
  }

  void work() {
    for (;;) {
      Job job;
      {
        std::unique_lock jobs_lock(jobs_mutex_);
        jobs_cv_.wait(jobs_lock, [&] { return !jobs_.empty() || jobs_stopping_; });
        if (jobs_.empty()) return;
        job = jobs_.front();
        jobs_.pop_front();
      }
      const double cost = start_request(*job.request, gates_);
      {
        std::lock_guard lock(mutex_);
        if (!model_.complete(job.ticket, cost, creditloop::detail::monotonic_now()))
          refused_ = true;
        --in_flight_;
        ++completed_;
      }
      work_cv_.notify_one();
    }
  }

  creditloop::model::Model model_;
  Gate* gates_;
  std::vector<creditloop::model::Pid> pids_;

  std::mutex mutex_;  // the model and the counters below
  std::condition_variable work_cv_;
  std::uint64_t queued_ = 0;
  std::uint64_t in_flight_ = 0;
  std::uint64_t completed_ = 0;
  std::array<std::uint64_t, creditloop::kMaxClasses + 1> per_class_{};
  bool refused_ = false;
  bool stopping_ = false;

  std::mutex jobs_mutex_;
  std::condition_variable jobs_cv_;
  std::deque<Job> jobs_;
  bool jobs_stopping_ = false;

  std::thread dispatcher_;
  std::vector<std::thread> workers_;
};

void BM_Mutex(benchmark::State& state) {
  const auto producer_count = static_cast<unsigned>(state.range(0));
  const auto participants = static_cast<std::size_t>(state.range(1));
  const auto workers = static_cast<unsigned>(state.range(2));
  Producers producers(producer_count, participants);
  MutexBaseline baseline(metered_config(participants), participants, workers, producers.gates());
  auto submit = [&](Request& r) { baseline.submit(r); };

  std::uint64_t target = 0;
  Stopwatch watch;
  for (auto _ : state) {
    watch.start();
    producers.iterate(submit);
    target += kRequests;
    while (baseline.completed() < target) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    watch.stop();
  }
  if (baseline.refused()) state.SkipWithError("the model refused a submission or completion");
  class_mix(state, baseline.per_class().data(), baseline.classes());
  producers.report(state);
  finish(state, "mutex", watch, producer_count + 1 + workers);
}

// ---- the raw hand-off ---------------------------------------------------------------------------

void BM_Raw(benchmark::State& state) {
  constexpr std::size_t kBulk = 32;
  const auto participants = static_cast<std::size_t>(state.range(1));
  Producers producers(1, participants);
  Gate* const gates = producers.gates();
  moodycamel::ConcurrentQueue<Request*> queue;
  moodycamel::ProducerToken producer_token(queue);
  moodycamel::ConsumerToken consumer_token(queue);
  auto submit = [&](Request& r) { queue.enqueue(producer_token, &r); };

  Stopwatch watch;
  for (auto _ : state) {
    watch.start();
    std::thread consumer([&] {
      std::array<Request*, kBulk> batch;
      unsigned idle = 0;
      for (std::size_t taken = 0; taken < kRequests;) {
        const std::size_t n = queue.try_dequeue_bulk(consumer_token, batch.begin(), kBulk);
        for (std::size_t i = 0; i < n; ++i) (void)start_request(*batch[i], gates);
        taken += n;
        if (n > 0) {
          idle = 0;
        } else if (++idle < 64) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    });
    producers.iterate(submit);
    consumer.join();
    watch.stop();
  }
  producers.report(state);
  finish(state, "raw", watch, 2);
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

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  return 0;
}
