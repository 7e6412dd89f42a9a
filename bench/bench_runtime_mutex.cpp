// bench_runtime's mutex baseline (BM_Mutex): the reference model behind one std::mutex.
#include <condition_variable>
#include <deque>
#include <mutex>

#include "model/model.hpp"
#include "runtime_harness.hpp"

namespace creditloop::bench {

namespace {

constexpr std::size_t kMutexBatch = 64;  // dispatches per lock hold, as RuntimeOptions::batch

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

}  // namespace

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

}  // namespace creditloop::bench
