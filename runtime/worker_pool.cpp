// The built-in worker pool: the one file that includes moodycamel's queue.
//
// moodycamel rather than oneTBB tasks, fed once per batch: bench_queues' BM_Pool measured one
// enqueue_bulk per 64 jobs at 1.3 to 1.5 times oneTBB's task_group and task_arena with a
// dispatcher-like gap between jobs, and 3 to 4.6 times without; one enqueue per job lost to
// oneTBB (each signals the semaphore, and idle workers wake one job at a time). Enqueueing reuses
// the queue's blocks instead of allocating a task. A worker takes one job per dequeue and publishes
// its completion when it ends: taking a bulk held the rest of it behind one slow job while other
// workers were idle, and another tenant waited for a slow job it was not behind.
#include <concurrentqueue/blockingconcurrentqueue.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <thread>

#include "creditloop/detail/hand_back.hpp"
#include "creditloop/runtime.hpp"
#include "internal/runtime_impl.hpp"

namespace creditloop {

namespace {

// The queue's blocks come from operator new (nothrow: a failure is a null, as from malloc, and
// enqueue_bulk() then reports it), not from malloc: the same heap, and a replaced operator new
// sees them, so tests/alloc/allocation_test.cpp counts the pool's allocations too.
struct JobQueueTraits : moodycamel::ConcurrentQueueDefaultTraits {
  static void* malloc(std::size_t size) noexcept { return ::operator new(size, std::nothrow); }
  static void free(void* p) noexcept { ::operator delete(p); }
};

}  // namespace

struct Runtime::Impl::JobQueue {
  moodycamel::BlockingConcurrentQueue<Job, JobQueueTraits> queue;
  std::unique_ptr<moodycamel::ProducerToken> token;  // the dispatcher's
};

void Runtime::Impl::JobQueueDeleter::operator()(JobQueue* queue) const noexcept { delete queue; }

void Runtime::Impl::start_pool() {
  if (options_.workers == 0) return;
  jobs_.reset(new JobQueue);
  // Every worker's blocks exist before the first worker starts: the vector must not grow while
  // a worker reads it. Nor may the threads' vectors grow between a thread's start and its record.
  workers_.reserve(options_.workers);
  worker_ids_.reserve(options_.workers);
  for (unsigned i = 0; i < options_.workers; ++i) {
    worker_blocks_.push_back(std::make_unique<std::array<detail::PoolBlock, kBlocksPerWorker>>());
  }
  // A worker reads worker_ids_ only in a handler, which needs a submit, which needs the
  // constructor to have returned: the ids are all recorded by then.
  for (std::size_t i = 0; i < options_.workers; ++i) {
    CREDITLOOP_TEST_HOOK(thread_starting, i);
    workers_.emplace_back([this, i] { worker_main(i); });
    worker_ids_.push_back(workers_.back().get_id());
  }
}

void Runtime::Impl::open_pool_to_dispatcher() {
  jobs_->token = std::make_unique<moodycamel::ProducerToken>(jobs_->queue);
}

// GCC 12 reports moodycamel's enqueue_bulk, once inlined here, as an 8-byte write into a region of
// size 0 (-Wstringop-overflow) on a path the block index rules out: a false positive (as in
// bench/bench_queues.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
bool Runtime::Impl::hand_batch_to_pool() {
  // enqueue_bulk() takes all of the jobs or, when it cannot allocate a block, none.
  const bool taken =
      CREDITLOOP_TEST_HOOK_OR(pool_accepts, true) &&
      jobs_->queue.enqueue_bulk(*jobs_->token, batch_jobs_.begin(), batch_jobs_.size());
  if (taken) batch_jobs_.clear();
  return taken;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void Runtime::Impl::stop_pool() noexcept {
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    // A stop that cannot be queued (no memory for a block) is tried again: a worker that never
    // gets one would never be joined.
    while (!jobs_->queue.enqueue(Job{})) std::this_thread::yield();
  }
  for (std::thread& w : workers_) w.join();
}

void Runtime::Impl::worker_main(std::size_t index) {
  moodycamel::ConsumerToken token(jobs_->queue);
  std::array<detail::PoolBlock, kBlocksPerWorker>& blocks = *worker_blocks_[index];
  std::size_t last_lent = kBlocksPerWorker;  // none yet
  for (;;) {
    // One job at a time: a job dequeued with others would wait behind them on this worker while
    // another worker may be idle, so one slow job would hold a whole bulk of other tenants' jobs.
    Job job;
    jobs_->queue.wait_dequeue(token, job);
    if (job.request == nullptr) return;  // a stop: one is queued for each worker
    // The request is the handler's from here on (runtime.hpp): the pool keeps only its ticket,
    // and the dispatcher never touches it again (retire_nano()).
    detail::hand_back(job.request->held);
    double cost = 0;
    bool ok = true;
    try {
      cost = options_.handler(job);
    } catch (...) {
      ok = false;
      report(CallbackKind::handler, std::current_exception(), job.request, job.ticket,
             job.participant);
    }
    const std::optional<std::int64_t> nano = ok ? to_nano_credits(cost, kMaxCost) : std::nullopt;
    if (!nano) handler_errors_.fetch_add(1, std::memory_order_relaxed);  // a statistic
    CREDITLOOP_PROBE3(complete, job.ticket.index, job.ticket.generation, nano.value_or(0));
    // Published as the job ends, so that its room returns at once: in the block this worker lent
    // last if the dispatcher has not closed it yet, in another of its blocks, or, when the
    // dispatcher holds every one of them, through the ticket's record.
    const auto fill = [&](detail::PoolCompletion& entry) {
      entry = {job.ticket.index, static_cast<std::uint32_t>(job.ticket.generation),
               nano.value_or(0)};
    };
    if (lend(blocks, last_lent, fill)) continue;
    // The ticket was issued claimed for this pool (hand_out()): the record is this worker's.
    TicketRecord* const record = tickets_.find(job.ticket.index);
    record->cost = nano.value_or(0);
    publish(*record, *record);
  }
}

}  // namespace creditloop
