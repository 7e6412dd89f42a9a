// The runtime: the threaded shell around the deterministic core (see runtime.hpp for the contract
// and docs/design.md for the argument).
//
// Who touches what:
//  - The core, the per-place Local records, the free ticket list and every counter not marked
//    atomic belong to the dispatcher thread alone. Other threads reach them only through commands
//    (a mutex-protected list the dispatcher runs between decisions) or, after the dispatcher has
//    exited, under that same mutex.
//  - Mailboxes (one per ring place) are shared with producers; ticket records with completers.
//    Both live in ChunkedTables whose elements never move, so other threads may index them while
//    the dispatcher grows them.
#include "creditloop/runtime.hpp"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <concurrentqueue/blockingconcurrentqueue.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <stdexcept>
#include <thread>
#include <utility>

#include "creditloop/detail/chunked_table.hpp"
#include "internal/completion_block.hpp"
#include "internal/futex.hpp"
#include "internal/mailbox.hpp"
#include "internal/parker.hpp"
#include "internal/probes.hpp"
#include "internal/queue_link.hpp"
#include "internal/spin.hpp"
#include "internal/ticket_cell.hpp"
#include "internal/wait_free_bag.hpp"

namespace creditloop {
namespace detail {

// A ticket's record: the cell completers claim, and what the dispatcher needs to apply the
// completion. One cache line, so completers of neighbouring tickets do not share one.
struct alignas(64) TicketRecord {
  TicketCell<std::atomic> cell;
  std::atomic<TicketRecord*> next_completed{nullptr};  // the completion list's link
  std::int64_t cost = 0;  // written by the completer that claimed the cell, before publishing it
  Ticket core;            // dispatcher only: the core's ticket for this dispatch
  std::uint32_t index = 0;
  std::uint64_t generation = 0;  // dispatcher only: the cell's current use
  // Written by the dispatcher before issue(), whose release publishes it to the completer that
  // claims the cell: that completer gives the request back to its caller (request.hpp).
  RequestHook* request = nullptr;
};
static_assert(sizeof(TicketRecord) == 64 && alignof(TicketRecord) == 64,
              "completers of neighbouring tickets never share a line");

// Appends a claimed record to a chain that one publish() hands to the dispatcher, whose release
// makes the links visible: until then only this thread reads them.
inline void chain(TicketRecord*& first, TicketRecord*& last, TicketRecord& record) noexcept {
  if (first == nullptr) {
    first = &record;
  } else {
    last->next_completed.store(&record, std::memory_order_relaxed);  // published by publish()
  }
  last = &record;
}

// One completion of a pool worker, as its block carries it (completion_block.hpp).
struct PoolCompletion {
  std::uint32_t index = 0;  // the ticket record's
  // The ticket's low 32 bits, checked by the dispatcher in debug builds: a pool ticket cannot be
  // stale (its worker owns it from issue), so the check needs no more.
  std::uint32_t generation = 0;
  std::int64_t cost = 0;  // nano-credits
};
// Up to one dequeued bulk of jobs per block.
inline constexpr std::size_t kWorkerBulk = 32;
using PoolBlock = CompletionBlock<std::atomic, PoolCompletion, kWorkerBulk>;
static_assert(sizeof(PoolCompletion) == 16, "four completions to a cache line");

}  // namespace detail

namespace {

using detail::TicketRecord;
using Mailbox = detail::Mailbox<RequestHook, std::atomic,
                                detail::MemberLink<RequestHook, &RequestHook::next_in_queue>>;
static_assert(sizeof(Mailbox) == 64 && alignof(Mailbox) == 64,
              "a participant's producers share one line, and only it");

constexpr std::size_t kCacheLine = 64;

// A member that must not share a cache line with its neighbours: it starts a line and its size is
// a whole number of lines.
template <class T>
struct alignas(kCacheLine) OwnLine : T {
  using T::T;
};

static_assert(detail::ChunkedTable<TicketRecord>::kMax >= kMaxInFlight);

// Gives each record of a new chunk of the ticket table its index, which completers return.
void number_tickets(TicketRecord* chunk, std::size_t first) noexcept {
  for (std::size_t i = 0; i < detail::ChunkedTable<TicketRecord>::kChunk; ++i) {
    chunk[i].index = static_cast<std::uint32_t>(first + i);
  }
}

// Counters with one writer, the dispatcher, and readers on any thread, under a sequence count: the
// dispatcher makes the count odd, updates the values, and makes it even again; a reader copies
// the values between two reads of an equal, even count, and retries otherwise. So a metrics scrape
// never waits for the dispatcher (it retries only across an update of the same line, a few
// nanoseconds), and the dispatcher never waits for anyone: two plain stores and a fence more than
// bare counters. Every value is an atomic, so a reader that races an update reads no torn word; the
// count rejects its copy.
struct alignas(kCacheLine) CounterLine {
  static constexpr std::size_t kQueued = 0;
  static constexpr std::size_t kDispatched = 1;  // kMaxClasses + 1 of them
  static constexpr std::size_t kCompleted = kDispatched + kMaxClasses + 1;
  static constexpr std::size_t kCostLow = kCompleted + 1;  // the 128-bit cost, in two halves
  static constexpr std::size_t kCostHigh = kCostLow + 1;
  static constexpr std::size_t kValues = kCostHigh + 1;

  std::atomic<std::uint64_t> sequence{0};    // odd while the dispatcher writes
  std::atomic<std::uint32_t> generation{0};  // the participant counted here; 0: none
  std::array<std::atomic<std::uint64_t>, kValues> values{};
};

// The dispatcher's side: one update of a line, from construction to destruction.
class CounterWrite {
 public:
  explicit CounterWrite(CounterLine& line) noexcept
      : line_(line), sequence_(line.sequence.load(std::memory_order_relaxed)) {  // its own
    line_.sequence.store(sequence_ + 1, std::memory_order_relaxed);
    // release: pairs with the acquire fence in read_counters(); a reader that copies any value
    // stored below also sees the odd count above in its second read, and retries.
    std::atomic_thread_fence(std::memory_order_release);
  }
  ~CounterWrite() {
    // release: pairs with the acquire load in read_counters(); the values are complete.
    line_.sequence.store(sequence_ + 2, std::memory_order_release);
  }
  CounterWrite(const CounterWrite&) = delete;
  CounterWrite& operator=(const CounterWrite&) = delete;

  void add(std::size_t i, std::uint64_t delta) noexcept {
    std::atomic<std::uint64_t>& v = line_.values[i];
    v.store(v.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);  // one writer
  }
  void set(std::size_t i, std::uint64_t value) noexcept {
    line_.values[i].store(value, std::memory_order_relaxed);  // ordered by the sequence count
  }
  void add_cost(Balance cost) noexcept {
    const Balance sum = cost_of(line_) + cost;
    set(CounterLine::kCostLow, static_cast<std::uint64_t>(sum));
    set(CounterLine::kCostHigh, static_cast<std::uint64_t>(sum >> 64));
  }
  void reset(std::uint32_t generation) noexcept {
    for (std::atomic<std::uint64_t>& v : line_.values) v.store(0, std::memory_order_relaxed);
    line_.generation.store(generation, std::memory_order_relaxed);  // ordered by the count
  }
  void forget() noexcept { line_.generation.store(0, std::memory_order_relaxed); }

  static Balance cost_of(const CounterLine& line) noexcept {
    // relaxed: the writer's own values, or a reader's copy validated by the count.
    const auto low = line.values[CounterLine::kCostLow].load(std::memory_order_relaxed);
    const auto high = line.values[CounterLine::kCostHigh].load(std::memory_order_relaxed);
    return (static_cast<Balance>(static_cast<std::int64_t>(high)) << 64) |
           static_cast<Balance>(low);
  }

 private:
  CounterLine& line_;
  const std::uint64_t sequence_;
};

// Any thread: a consistent copy of `line`, and the generation it was counted for.
template <class Counters>
std::uint32_t read_counters(const CounterLine& line, Counters& out) noexcept {
  for (;;) {
    // acquire: pairs with ~CounterWrite()'s release; the values of that update are visible.
    const std::uint64_t before = line.sequence.load(std::memory_order_acquire);
    if ((before & 1) != 0) {
      detail::cpu_relax();
      continue;
    }
    // relaxed, all of them: validated by the count below.
    const std::uint32_t generation = line.generation.load(std::memory_order_relaxed);
    out.queued = line.values[CounterLine::kQueued].load(std::memory_order_relaxed);
    for (std::size_t c = 0; c < out.dispatched.size(); ++c) {
      out.dispatched[c] = line.values[CounterLine::kDispatched + c].load(std::memory_order_relaxed);
    }
    out.completed = line.values[CounterLine::kCompleted].load(std::memory_order_relaxed);
    out.cost_charged = CounterWrite::cost_of(line);
    // acquire: pairs with CounterWrite's release fence; an update whose values were copied above
    // has made the count odd before this second read.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (line.sequence.load(std::memory_order_relaxed) == before) return generation;
  }
}

// CPU time of the calling thread.
Nanos thread_cpu_now() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<Nanos>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The CPUs this process may run on, or nothing if the kernel does not say.
std::optional<cpu_set_t> allowed_cpus() noexcept {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return std::nullopt;
  return allowed;
}

// How many, or 0 if unknown.
unsigned usable_cpus() noexcept {
  const std::optional<cpu_set_t> allowed = allowed_cpus();
  return allowed ? static_cast<unsigned>(CPU_COUNT(&*allowed)) : 0;
}

void check_options(const RuntimeOptions& o) {
  if (o.room == nullptr && o.slots == 0) {
    throw std::invalid_argument("runtime options: slots must be at least 1 without a room test");
  }
  if (o.workers > 0 && o.handler == nullptr) {
    throw std::invalid_argument("runtime options: workers need a handler");
  }
  if (o.workers == 0 && o.sink == nullptr) {
    throw std::invalid_argument("runtime options: a sink callback or workers with a handler");
  }
  if (o.batch == 0) throw std::invalid_argument("runtime options: batch must be at least 1");
  if (o.room_recheck.count() <= 0) {
    throw std::invalid_argument("runtime options: room_recheck must be at least 1 ns");
  }
  if (o.spin && o.spin->count() < 0)
    throw std::invalid_argument("runtime options: spin must not be negative");
  if (o.cpu >= 0) {
    const std::optional<cpu_set_t> allowed = o.cpu < CPU_SETSIZE ? allowed_cpus() : std::nullopt;
    if (!allowed || !CPU_ISSET(o.cpu, &*allowed)) {
      throw std::invalid_argument("runtime options: cpu " + std::to_string(o.cpu) +
                                  " is not available to this process");
    }
  }
}

// The inboxes hold a request's address in 48 bits (inbox.hpp). Where this process's pointers
// carry a tag above bit 47 (AArch64 MTE or HWASan tag heap and stack pointers; x86 LAM
// pointers may be tagged too), submit would refuse every request: refuse once, here, and say
// why. `heap` is the runtime's own allocation, made like the embedder's requests usually are.
void check_addresses(const void* heap) {
  const int on_stack = 0;
  if (!Mailbox::Queue::packable(heap) || !Mailbox::Queue::packable(&on_stack)) {
    throw std::runtime_error(
        "runtime: this process's pointers have bits above bit 47 set (a pointer tag: AArch64 MTE "
        "or HWASan, or x86 LAM; or addresses above 2^48), and the runtime's inboxes hold 48-bit "
        "addresses: run without pointer tagging");
  }
}

}  // namespace

class Runtime::Impl {
 public:
  explicit Impl(RuntimeOptions options);
  ~Impl();

  Result<ParticipantId> add(std::string_view name, std::string_view plan, std::uint32_t shares);
  Result<RequestList> remove(ParticipantId p);
  Status replan(ParticipantId p, std::string_view plan, std::uint32_t shares);
  Status scale(ParticipantId p, std::uint32_t millionths);
  std::optional<ParticipantId> find(std::string_view name);
  Status submit(ParticipantId p, RequestHook& request) noexcept;
  Status claim(Ticket ticket, std::int64_t cost_nano, TicketRecord*& record) noexcept;
  void publish(TicketRecord& first, TicketRecord& last) noexcept {
    completions_.push_chain(first, last);  // seq_cst exchange: the work the dispatcher re-checks
    parker_.notify(detail::kWakeOnRoom);
  }
  void publish(detail::PoolBlock& block) noexcept {
    block.lend();
    pool_completions_.push(block);  // seq_cst exchange: the work the dispatcher re-checks
    parker_.notify(detail::kWakeOnRoom);
  }
  void wake() noexcept { parker_.notify(detail::kWakeOnRoom | detail::kWakeOnWork); }
  std::optional<ParticipantSnapshot> snapshot(ParticipantId p);
  std::vector<ParticipantSnapshot> snapshot_participants();
  RuntimeSnapshot snapshot();
  ShutdownReport shutdown(ShutdownMode mode, std::optional<std::chrono::nanoseconds> deadline);
  [[nodiscard]] std::uint64_t handler_errors() const noexcept {
    return handler_errors_.load(std::memory_order_relaxed);  // a statistic: no pairing
  }
  [[nodiscard]] std::optional<ParticipantCounters> counters(ParticipantId p) const noexcept {
    const CounterLine* const line = counters_.find(p.slot);
    if (line == nullptr || p.generation == 0) return std::nullopt;
    ParticipantCounters out;
    if (read_counters(*line, out) != p.generation) return std::nullopt;
    return out;
  }
  [[nodiscard]] RuntimeCounters counters() const noexcept {
    RuntimeCounters out;
    (void)read_counters(totals_, out);
    return out;
  }
  [[nodiscard]] const Core& core() const noexcept { return core_; }
  [[nodiscard]] bool sleeping() const noexcept { return parker_.sleeping(); }

 private:
  enum class Phase : std::uint8_t { running, draining, finishing };
  struct Local {  // dispatcher only, per ring place
    std::uint32_t generation = 0;
    bool open = false;
    std::optional<ClassId> last_class;
  };
  struct Command {
    std::function<void()> work;
    std::binary_semaphore done{0};
  };
  using Job = Dispatched;  // a null request: the worker stops
  struct DispatcherDone {};

  // ---- the dispatcher thread
  // ----------------------------------------------------------------------
  void dispatcher_main();
  bool service(Nanos now);
  bool run_commands();
  void apply_completion(TicketRecord& record, Nanos now);
  void apply_pool_completions(detail::PoolBlock& block, Nanos now);
  void take_inbox(Mailbox& mailbox, Nanos now);
  void move_to_core(RequestHook* oldest, ParticipantId id, Nanos now);
  bool dispatch_batch(Nanos now);
  // The batch decided by one Core::dispatch() call, when the room is a slot count.
  std::uint32_t dispatch_in_one_call(Nanos now);
  // The loop a visit at a time: for an observer that sees each turn begin and end, and for a
  // room test of the embedder's, which must be asked before each visit.
  std::uint32_t dispatch_one_by_one(Nanos now);
  void hand_out(const Dispatch& d, Nanos now);
  [[nodiscard]] bool has_room() const;
  // Tickets issued and not yet applied: every record ever used that is not on the free list.
  [[nodiscard]] std::uint64_t in_flight() const noexcept {
    return tickets_used_ - free_tickets_.size();
  }
  std::uint32_t acquire_ticket();
  // Tickets the table can still issue: free records, and records never used.
  [[nodiscard]] std::uint64_t tickets_left() const noexcept {
    return free_tickets_.size() + (kMaxInFlight - tickets_used_);
  }
  void idle();
  [[nodiscard]] bool work_visible(std::uint32_t reasons) const;
  void begin_shutdown(ShutdownMode mode, Nanos now);
  void ensure_places(std::uint32_t places);
  ParticipantSnapshot describe(ParticipantId p, Nanos now);

  // ---- any thread
  // ---------------------------------------------------------------------------------
  void run_on_dispatcher(Command& command);
  void worker_main(std::size_t index);
  // The embedder's clock; if it throws, the last instant read (time stands still) and a report.
  Nanos now() {
    if (!clock_) return detail::monotonic_now();
    try {
      return clock_();
    } catch (...) {
      report(CallbackKind::clock, std::current_exception());
      return loop_now_;
    }
  }
  // The embedder's room test; if it throws, no room this time (it is re-tested within a
  // millisecond) and a report.
  bool room_test() const {
    try {
      return options_.room();
    } catch (...) {
      report(CallbackKind::room, std::current_exception());
      return false;
    }
  }
  // Hands a callback's exception to on_error (or standard error without one). Never throws: an
  // on_error that throws is reported to standard error.
  void report(CallbackKind kind, std::exception_ptr error, RequestHook* request = nullptr,
              Ticket ticket = {}, ParticipantId participant = {}) const noexcept;
  // The observer, behind a wrapper that reports what its calls throw: the input it was told of
  // has happened whatever it does.
  class GuardedObserver {
   public:
    explicit GuardedObserver(const Impl& impl) noexcept : impl_(impl) {}
    template <class... A>
    void call(void (RuntimeObserver::*f)(A...), auto&&... args) const noexcept {
      try {
        (impl_.observer_->*f)(std::forward<decltype(args)>(args)...);
      } catch (...) {
        impl_.report(CallbackKind::observer, std::current_exception());
      }
    }
#define CREDITLOOP_GUARDED(name)                            \
  template <class... A>                                     \
  void name(A&&... args) const noexcept {                   \
    call(&RuntimeObserver::name, std::forward<A>(args)...); \
  }
    CREDITLOOP_GUARDED(on_add)
    CREDITLOOP_GUARDED(on_remove)
    CREDITLOOP_GUARDED(on_replan)
    CREDITLOOP_GUARDED(on_scale)
    CREDITLOOP_GUARDED(on_complete)
    CREDITLOOP_GUARDED(on_submit)
    CREDITLOOP_GUARDED(on_dispatch)
    CREDITLOOP_GUARDED(on_end_turn)
    CREDITLOOP_GUARDED(on_begin_turn)
    CREDITLOOP_GUARDED(on_visit)
    CREDITLOOP_GUARDED(on_take_all)
#undef CREDITLOOP_GUARDED

   private:
    const Impl& impl_;
  };
  [[nodiscard]] GuardedObserver observe() const noexcept { return GuardedObserver(*this); }
  // The sink threw for `record`'s dispatch: see RuntimeOptions::sink.
  void sink_failed(TicketRecord& record, const Dispatch& d, std::exception_ptr error, Nanos t);

  RuntimeOptions options_;
  std::function<Nanos()> clock_;
  RuntimeObserver* const observer_;
  // Whether the dispatcher decides a batch with one core call (dispatch_in_one_call).
  const bool decides_in_one_call_;
  Core core_;
  const std::chrono::nanoseconds spin_;  // options_.spin, or the default for this machine

  // Shared with producers and completers.
  detail::ChunkedTable<Mailbox> mailboxes_;
  detail::ChunkedTable<TicketRecord> tickets_;
  // Written by the dispatcher alone, read by any thread (counters()).
  detail::ChunkedTable<CounterLine> counters_;
  CounterLine totals_;
  // Each written by different threads: producers, completers, the dispatcher going to sleep.
  OwnLine<detail::WaitFreeBag<Mailbox, std::atomic, &Mailbox::next_listed>> activations_;
  OwnLine<detail::WaitFreeBag<TicketRecord, std::atomic, &TicketRecord::next_completed>>
      completions_;
  OwnLine<detail::WaitFreeBag<detail::PoolBlock, std::atomic, &detail::PoolBlock::next_completed>>
      pool_completions_;
  OwnLine<detail::Parker<std::atomic, detail::LinuxFutex>> parker_;
  static_assert(alignof(decltype(activations_)) == kCacheLine &&
                alignof(decltype(completions_)) == kCacheLine &&
                alignof(decltype(pool_completions_)) == kCacheLine &&
                alignof(decltype(parker_)) == kCacheLine);
  // Read on every refused call and by monitoring; written once, or on a handler error.
  // Only picks the error code of a refused submit (see begin_shutdown() and submit()).
  alignas(kCacheLine) std::atomic<bool> accepting_{true};
  std::atomic<std::uint64_t> handler_errors_{0};

  // Commands: any thread posts, the dispatcher runs.
  std::mutex commands_mutex_;
  std::vector<Command*> commands_;  // guarded by commands_mutex_
  std::vector<Command*> running_;   // dispatcher only
  bool dispatcher_exited_ = false;  // guarded by commands_mutex_
  // The dispatcher's CPU time once it exited (-1 before): written at exit under commands_mutex_,
  // read by commands, which run on the dispatcher itself or, after it exited, under that mutex.
  Nanos dispatcher_exited_cpu_ = -1;
  std::atomic<bool> commands_pending_{false};

  // Dispatcher only.
  detail::ChunkedTable<Local> locals_;
  std::uint32_t places_ = 0;
  std::vector<std::uint32_t> free_tickets_;
  std::uint32_t tickets_used_ = 0;
  // The clock read at the top of the current loop iteration. Commands use it too (a snapshot's
  // balances, an add's start): every core call of an iteration then has the same `now`, and an
  // observer's replay makes exactly the same calls.
  Nanos loop_now_ = 0;
  Phase phase_ = Phase::running;
  RequestList handed_back_;
  std::uint64_t submitted_ = 0, dispatched_ = 0, completed_ = 0, parks_ = 0, wakeups_ = 0;
  detail::HalfPushBackoff half_push_backoff_;
  std::array<ClassSnapshot, kMaxClasses + 1> per_class_{};

  // The worker pool. moodycamel rather than oneTBB tasks, fed once per batch: bench_queues'
  // BM_Pool measured one enqueue_bulk per 64 jobs at 1.3 to 1.5 times oneTBB's task_group and
  // task_arena with a dispatcher-like gap between jobs, and 3 to 4.6 times without; one enqueue
  // per job lost to oneTBB (each signals the semaphore, and idle workers wake one job at a time).
  // Enqueueing reuses the queue's blocks instead of allocating a task; a worker takes up to
  // kWorkerBulk jobs per dequeue.
  moodycamel::BlockingConcurrentQueue<Job> jobs_;
  std::vector<Job> batch_jobs_;  // dispatcher only: this batch's jobs, handed over at its end
  std::vector<Dispatch> batch_dispatches_;  // dispatcher only: options_.batch of them
  std::unique_ptr<moodycamel::ProducerToken> jobs_token_;  // dispatcher only
  // Each worker's completion blocks, so that it fills one while the dispatcher still holds others.
  // Eight: with two, bench_runtime's one-worker case found both lent for 27 % of its completions
  // (which then went through the ticket records), with four for 12 %, with eight for 13 of 1.6
  // million. 4.6 KiB per worker. They outlive the threads (destroyed with the runtime).
  static constexpr std::size_t kBlocksPerWorker = 8;
  std::vector<std::unique_ptr<std::array<detail::PoolBlock, kBlocksPerWorker>>> worker_blocks_;
  std::vector<std::thread> workers_;

  std::thread dispatcher_;
  std::thread::id dispatcher_id_;  // written before any other thread can read it
  // The pool's threads, recorded before any of them can run a handler: shutdown() refuses them.
  std::vector<std::thread::id> worker_ids_;
  std::condition_variable exited_;  // dispatcher_exited_ became true (commands_mutex_)
  std::mutex shutdown_mutex_;
  bool shutdown_begun_ = false;  // guarded by shutdown_mutex_
  bool joined_ = false;          // guarded by shutdown_mutex_
  [[nodiscard]] bool on_runtime_thread() const noexcept;
  // Dispatcher only: every ticket issued and not yet applied.
  [[nodiscard]] std::vector<Ticket> tickets_in_flight() const;
};

// ---- construction -------------------------------------------------------------------------------

Runtime::Impl::Impl(RuntimeOptions options)
    : options_((check_options(options), check_addresses(this), std::move(options))),
      clock_(options_.clock),
      observer_(options_.observer),
      decides_in_one_call_(!options_.room &&
                           (observer_ == nullptr || observer_->follows_batches())),
      core_(options_.config),
      spin_(options_.spin ? *options_.spin
                          : detail::default_spin(usable_cpus(), options_.workers)) {
  core_.reserve(options_.expected_participants, options_.expected_in_flight);
  ensure_places(static_cast<std::uint32_t>(
      std::min<std::size_t>(options_.expected_participants, kMaxParticipants)));
  tickets_.grow_to(std::min<std::size_t>(options_.expected_in_flight, kMaxInFlight),
                   number_tickets);
  free_tickets_.reserve(tickets_.capacity());
  batch_jobs_.reserve(options_.batch);
  batch_dispatches_.resize(options_.batch);
  commands_.reserve(16);
  running_.reserve(16);
  // Every worker's blocks exist before the first worker starts: the vector must not grow while
  // a worker reads it.
  for (unsigned i = 0; i < options_.workers; ++i) {
    worker_blocks_.push_back(std::make_unique<std::array<detail::PoolBlock, kBlocksPerWorker>>());
  }
  // A worker reads worker_ids_ only in a handler, which needs a submit, which needs the
  // constructor to have returned: the ids are all recorded by then.
  for (std::size_t i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this, i] { worker_main(i); });
    worker_ids_.push_back(workers_.back().get_id());
  }
  std::binary_semaphore started{0};
  dispatcher_ = std::thread([this, &started] {
    dispatcher_id_ = std::this_thread::get_id();
    started.release();
    dispatcher_main();
  });
  started.acquire();
}

Runtime::Impl::~Impl() { (void)shutdown(ShutdownMode::hand_back, std::nullopt); }

void Runtime::Impl::ensure_places(std::uint32_t places) {
  if (places <= places_) return;
  locals_.grow_to(places);
  mailboxes_.grow_to(places, [](Mailbox* chunk, std::size_t first) {
    for (std::size_t i = 0; i < detail::ChunkedTable<Mailbox>::kChunk; ++i) {
      chunk[i].slot = static_cast<std::uint32_t>(first + i);
    }
  });
  counters_.grow_to(places, [](CounterLine*, std::size_t) {});
  places_ =
      static_cast<std::uint32_t>(std::min<std::size_t>(mailboxes_.capacity(), kMaxParticipants));
}

// ---- commands -----------------------------------------------------------------------------------

void Runtime::Impl::run_on_dispatcher(Command& command) {
  if (std::this_thread::get_id() == dispatcher_id_) {  // from a sink or observer: inline
    command.work();
    return;
  }
  {
    std::lock_guard lock(commands_mutex_);
    if (dispatcher_exited_) {  // the core is quiescent: run here, under the lock
      command.work();
      return;
    }
    commands_.push_back(&command);
    // seq_cst: the work the dispatcher re-checks after Parker::prepare().
    commands_pending_.store(true, std::memory_order_seq_cst);
  }
  parker_.notify(detail::kWakeOnWork | detail::kWakeOnRoom);
  command.done.acquire();  // pairs with the release in run_commands(): the result is visible
}

bool Runtime::Impl::run_commands() {
  {
    std::lock_guard lock(commands_mutex_);
    running_.swap(commands_);
    // relaxed: set and cleared under the mutex; the flag is only a hint to take it.
    commands_pending_.store(false, std::memory_order_relaxed);
  }
  for (Command* c : running_) {
    c->work();
    c->done.release();
  }
  const bool any = !running_.empty();
  running_.clear();
  return any;
}

Result<ParticipantId> Runtime::Impl::add(std::string_view name, std::string_view plan,
                                         std::uint32_t shares) {
  Result<ParticipantId> result = Errc::shut_down;
  Command c;
  c.work = [&] {
    if (phase_ != Phase::running) return;
    const Nanos t = loop_now_;
    result = core_.add(name, plan, shares, t);
    if (!result) return;
    const ParticipantId id = *result;
    ensure_places(core_.ring_size());
    Local& local = locals_[id.slot];
    local = Local{};
    local.generation = id.generation;
    local.open = true;
    mailboxes_[id.slot].open(id.generation);
    CounterWrite(counters_[id.slot]).reset(id.generation);
    if (observer_ != nullptr) {
      observe().on_add(id, name, core_.plan(id), shares, t);
    }
  };
  run_on_dispatcher(c);
  return result;
}

Result<RequestList> Runtime::Impl::remove(ParticipantId p) {
  Result<RequestList> result = Errc::shut_down;
  Command c;
  c.work = [&] {
    if (phase_ != Phase::running) return;
    result = core_.remove(p);
    if (!result) return;
    // Requests still in the inbox are newer than every one the core held.
    Local& local = locals_[p.slot];
    local.open = false;
    CounterWrite(counters_[p.slot]).forget();
    CounterWrite(totals_).add(CounterLine::kQueued, -static_cast<std::uint64_t>(result->size()));
    RequestList inbox;
    for (RequestHook* r = mailboxes_[p.slot].inbox.close(); r != nullptr;) {
      RequestHook* const next = r->next_in_queue;
      inbox.push_back(*r);
      // release: pairs with the acquire of the request's next submit (request.hpp).
      r->held.store(RequestHook::kIdle, std::memory_order_release);
      r = next;
    }
    result->splice_back(std::move(inbox));
    if (observer_ != nullptr) observe().on_remove(p);
  };
  run_on_dispatcher(c);
  return result;
}

Status Runtime::Impl::replan(ParticipantId p, std::string_view plan, std::uint32_t shares) {
  Status result = Errc::shut_down;
  Command c;
  c.work = [&] {
    if (phase_ != Phase::running) return;
    const std::optional<PlanId> id = core_.find_plan(plan);
    if (!core_.contains(p)) {
      result = Errc::unknown_participant;
      return;
    }
    if (!id) {
      result = Errc::unknown_plan;
      return;
    }
    const Nanos t = loop_now_;
    result = core_.replan(p, *id, shares, t);
    if (result && observer_ != nullptr) observe().on_replan(p, *id, shares, t);
  };
  run_on_dispatcher(c);
  return result;
}

Status Runtime::Impl::scale(ParticipantId p, std::uint32_t millionths) {
  Status result = Errc::shut_down;
  Command c;
  c.work = [&] {
    if (phase_ != Phase::running) return;
    const Nanos t = loop_now_;
    result = core_.scale(p, millionths, t);
    if (result && observer_ != nullptr) observe().on_scale(p, millionths, t);
  };
  run_on_dispatcher(c);
  return result;
}

std::optional<ParticipantId> Runtime::Impl::find(std::string_view name) {
  std::optional<ParticipantId> result;
  Command c;
  c.work = [&] { result = core_.find(name); };
  run_on_dispatcher(c);
  return result;
}

// ---- submit and complete: any thread ------------------------------------------------------------

Status Runtime::Impl::submit(ParticipantId p, RequestHook& request) noexcept {
  // Before anything touches the hook: a tagged address may not be ours to write (inbox.hpp).
  if (!Mailbox::Queue::packable(&request)) [[unlikely]]
    return Errc::unsupported_address;
  std::uint8_t idle = RequestHook::kIdle;
  // acquire on success: pairs with the release that gave the request back (a completion, a
  // hand-back), so the library's last writes to its link come before this producer's. relaxed on
  // failure: the request is left alone.
  if (!request.held.compare_exchange_strong(idle, RequestHook::kInbox, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
    return Errc::already_queued;
  }
  Mailbox* const mailbox = mailboxes_.find(p.slot);
  const Mailbox::Submit outcome = mailbox == nullptr || p.generation == 0
                                      ? Mailbox::Submit::refused
                                      : mailbox->submit(request, p.generation);
  if (outcome == Mailbox::Submit::refused) {
    // relaxed: the request never left this thread.
    request.held.store(RequestHook::kIdle, std::memory_order_relaxed);
    // relaxed: an inbox refused because shutdown closed it was read by an acquire load that
    // synchronizes with close()'s release exchange, which begin_shutdown() makes after clearing
    // the flag: the flag reads false here, on any machine (tests/relacy/shutdown_flag_model).
    return accepting_.load(std::memory_order_relaxed) ? Errc::unknown_participant : Errc::shut_down;
  }
  if (outcome == Mailbox::Submit::unsupported) [[unlikely]] {
    return Errc::unsupported_address;  // checked above already; the inbox keeps its own guard
  }
  CREDITLOOP_PROBE2(submit, p.slot, p.generation);
  if (outcome == Mailbox::Submit::queued_and_listed) {
    activations_.push(*mailbox);  // seq_cst exchange: the work the dispatcher re-checks
    parker_.notify(detail::kWakeOnWork);
  }
  return {};
}

Status Runtime::Impl::claim(Ticket ticket, std::int64_t cost_nano, TicketRecord*& record) noexcept {
  if (cost_nano < 0 || cost_nano > kMaxCostNano) return Errc::bad_cost;
  TicketRecord* const r = tickets_.find(ticket.index);
  if (r == nullptr) return Errc::unknown_ticket;
  switch (r->cell.claim(ticket.generation)) {
    case detail::TicketCell<std::atomic>::Claim::claimed:
      break;
    case detail::TicketCell<std::atomic>::Claim::unknown:
      return Errc::unknown_ticket;
    case detail::TicketCell<std::atomic>::Claim::stale:
      return Errc::stale_ticket;
  }
  r->cost = cost_nano;  // the record is this thread's until published
  // release: pairs with the acquire of the next submit of this request (request.hpp); the
  // request is its caller's from here on, and the dispatcher will not touch it (retire_nano()).
  r->request->held.store(RequestHook::kIdle, std::memory_order_release);
  CREDITLOOP_PROBE3(complete, ticket.index, ticket.generation, cost_nano);
  record = r;
  return {};
}

// ---- the dispatcher -----------------------------------------------------------------------------

void Runtime::Impl::dispatcher_main() {
  if (!options_.thread_name.empty()) {
    const std::string name = options_.thread_name.substr(0, 15);
    pthread_setname_np(pthread_self(), name.c_str());
  }
  if (options_.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(options_.cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // checked in check_options()
  }
  if (options_.workers > 0) jobs_token_ = std::make_unique<moodycamel::ProducerToken>(jobs_);

  for (;;) {
    const Nanos t = now();
    loop_now_ = t;
    const bool serviced = service(t);
    if (phase_ == Phase::finishing && in_flight() == 0) break;
    if (phase_ != Phase::finishing) {
      if (dispatch_batch(t)) continue;
      if (phase_ == Phase::draining && core_.waiting() == 0 && !activations_.maybe_nonempty()) {
        phase_ = Phase::finishing;
        continue;
      }
    }
    if (!serviced) idle();
  }

  std::lock_guard lock(commands_mutex_);
  dispatcher_exited_ = true;
  dispatcher_exited_cpu_ = thread_cpu_now();
  // Commands posted while it finished run now, so that their callers return.
  for (Command* c : commands_) {
    c->work();
    c->done.release();
  }
  commands_.clear();
  exited_.notify_all();
}

bool Runtime::Impl::service(Nanos t) {
  // The flag is read before the drains so that a command sees every submission and completion its
  // caller made before posting it. acquire: pairs with the seq_cst store in run_on_dispatcher().
  const bool commands = commands_pending_.load(std::memory_order_acquire);
  bool did = completions_.drain([&](TicketRecord& r) { apply_completion(r, t); }) > 0;
  did |= pool_completions_.drain([&](detail::PoolBlock& b) { apply_pool_completions(b, t); }) > 0;
  did |= activations_.drain([&](Mailbox& m) { take_inbox(m, t); }) > 0;
  if (commands) did |= run_commands();
  return did;
}

void Runtime::Impl::apply_completion(TicketRecord& record, Nanos t) {
  // retire_nano(): the completer gave the request back already, and it may be gone.
  const Result<Completion> applied = core_.retire_nano(record.core, record.cost, t);
  assert(applied.ok() && "the runtime completes each core ticket once, with a checked cost");
  const bool charged = applied.ok() && applied->charged;
  if (applied.ok() && core_.contains(applied->participant)) {
    CounterWrite w(counters_[applied->participant.slot]);
    w.add(CounterLine::kCompleted, 1);
    if (charged) w.add_cost(record.cost);
  }
  {
    CounterWrite w(totals_);
    w.add(CounterLine::kCompleted, 1);
    if (charged) w.add_cost(record.cost);
  }
  if (observer_ != nullptr) {
    observe().on_complete(Ticket{record.index, record.generation}, record.cost, t);
  }
  record.cell.release();
  free_tickets_.push_back(record.index);  // within the capacity reserved when it was created
  ++completed_;
}

void Runtime::Impl::apply_pool_completions(detail::PoolBlock& block, Nanos t) {
  for (std::uint32_t i = 0; i < block.count; ++i) {
    const detail::PoolCompletion& done = block.entries[i];
    TicketRecord& record = tickets_[done.index];
    assert(static_cast<std::uint32_t>(record.generation) == done.generation &&
           "a pool ticket completes once");
    record.cost = done.cost;
    apply_completion(record, t);
  }
  block.give_back();
}

void Runtime::Impl::take_inbox(Mailbox& mailbox, Nanos t) {
  const Local& local = locals_[mailbox.slot];
  RequestHook* const oldest = mailbox.take_listed(local.open, local.generation);
  move_to_core(oldest, ParticipantId{mailbox.slot, local.generation}, t);
}

void Runtime::Impl::move_to_core(RequestHook* oldest, ParticipantId id, Nanos t) {
  if (oldest == nullptr) return;
  std::uint64_t moved = 0;
  for (RequestHook* r = oldest; r != nullptr; ++moved) {
    RequestHook* const next = r->next_in_queue;
    const Status queued = core_.submit(id, *r, t);
    assert(queued.ok() && "an open inbox belongs to a live participant");
    (void)queued;
    if (observer_ != nullptr) observe().on_submit(id, *r, t);
    ++submitted_;
    r = next;
  }
  CounterWrite(counters_[id.slot]).add(CounterLine::kQueued, moved);
  CounterWrite(totals_).add(CounterLine::kQueued, moved);
}

bool Runtime::Impl::has_room() const {
  if (tickets_left() == 0) return false;
  return options_.room ? room_test() : in_flight() < options_.slots;
}

bool Runtime::Impl::dispatch_batch(Nanos t) {
  const std::uint32_t sent =
      decides_in_one_call_ ? dispatch_in_one_call(t) : dispatch_one_by_one(t);
  if (!batch_jobs_.empty()) {  // one semaphore signal, and at most one wake-up, per batch
    jobs_.enqueue_bulk(*jobs_token_, batch_jobs_.begin(), batch_jobs_.size());
    batch_jobs_.clear();
  }
  return sent > 0;
}

std::uint32_t Runtime::Impl::dispatch_in_one_call(Nanos t) {
  // The room is a slot count, known up front: the core decides the whole batch in one call,
  // which by bench_core costs up to a quarter less per decision than a call per visit (most where
  // decisions are cheapest; the same at a million participants). Room as has_room() counts it:
  // free slots, and tickets the table can still issue.
  const std::uint64_t used = in_flight();
  const std::uint64_t room =
      std::min(used < options_.slots ? options_.slots - used : 0, tickets_left());
  const std::uint64_t want = std::min<std::uint64_t>(room, options_.batch);
  std::uint32_t sent = 0;
  if (want > 0) {
    sent = static_cast<std::uint32_t>(
        core_.dispatch(t, std::span<Dispatch>(batch_dispatches_.data(), want)));
    // Before the hand-outs: their on_visit() calls carry the batch's dispatches.
    if (observer_ != nullptr) observe().on_dispatch(want, sent, t);
    for (std::uint32_t i = 0; i < sent; ++i) hand_out(batch_dispatches_[i], t);
  }
  if (sent == room && core_.in_turn()) {  // no room left ends the turn, as in the loop below
    core_.end_turn();
    if (observer_ != nullptr) observe().on_end_turn();
  }
  return sent;
}

std::uint32_t Runtime::Impl::dispatch_one_by_one(Nanos t) {
  std::uint32_t sent = 0;
  // Each pass of the loop visits once; a turn that dispatches nothing more ends and the next
  // begins, so the bound only guards against a turn that visits nobody.
  for (std::uint32_t step = 0; sent < options_.batch && step < 2 * options_.batch + 2; ++step) {
    if (!has_room()) {
      if (core_.in_turn()) {
        core_.end_turn();
        if (observer_ != nullptr) observe().on_end_turn();
      }
      break;
    }
    if (!core_.in_turn()) {
      const std::optional<ClassId> pass = core_.begin_turn(t);
      if (observer_ != nullptr) observe().on_begin_turn(pass, t);
      if (!pass) break;
    }
    const std::optional<Dispatch> d = core_.visit(t);
    if (!d) {
      if (observer_ != nullptr) observe().on_visit(nullptr, Ticket{}, t);
      continue;
    }
    hand_out(*d, t);
    ++sent;
  }
  return sent;
}

std::uint32_t Runtime::Impl::acquire_ticket() {
  if (!free_tickets_.empty()) {
    const std::uint32_t index = free_tickets_.back();
    free_tickets_.pop_back();
    return index;
  }
  if (tickets_used_ == tickets_.capacity()) {  // more in flight than ever: grow (allocates)
    tickets_.grow_to(tickets_used_ + 1, number_tickets);
    free_tickets_.reserve(tickets_.capacity());
  }
  return tickets_used_++;
}

void Runtime::Impl::hand_out(const Dispatch& d, Nanos t) {
  TicketRecord& record = tickets_[acquire_ticket()];
  record.core = d.ticket;
  record.cost = 0;
  record.request = d.request;
  // A pool job's ticket is its worker's from the start: the worker completes it without touching
  // the record. Any other ticket is claimed by whoever completes it first.
  record.generation = options_.workers > 0 ? record.cell.issue_claimed() : record.cell.issue();
  const Ticket ticket{record.index, record.generation};
  ++dispatched_;
  ++per_class_[d.out].dispatched;
  for (CounterLine* line : {&counters_[d.participant.slot], &totals_}) {
    CounterWrite w(*line);
    w.add(CounterLine::kQueued, ~std::uint64_t{0});  // minus one
    w.add(CounterLine::kDispatched + d.out, 1);
  }
  Local& local = locals_[d.participant.slot];
  local.last_class = d.out;
  if (observer_ != nullptr) observe().on_visit(&d, ticket, t);
  CREDITLOOP_PROBE4(dispatch, d.participant.slot, d.out, ticket.index, ticket.generation);
  if (options_.workers > 0) {
    batch_jobs_.push_back(Dispatched{d.request, ticket, d.participant, d.out, d.turn, t});
  } else {
    try {
      options_.sink(Dispatched{d.request, ticket, d.participant, d.out, d.turn, t});
    } catch (...) {
      sink_failed(record, d, std::current_exception(), t);
    }
  }
}

void Runtime::Impl::sink_failed(TicketRecord& record, const Dispatch& d, std::exception_ptr error,
                                Nanos t) {
  // The sink did not take the request: the runtime completes it at cost 0 (the credit taken at
  // dispatch stays spent, as for any dispatch) and gives it back to its caller in the report.
  // If the sink completed it before throwing, the claim fails and the request is the caller's
  // already.
  TicketRecord* claimed = nullptr;
  const Ticket ticket{record.index, record.generation};
  const bool ours = claim(ticket, 0, claimed).ok();
  if (ours) apply_completion(*claimed, t);  // on the dispatcher: applied at once, not published
  report(CallbackKind::sink, std::move(error), ours ? d.request : nullptr, ticket, d.participant);
}

void Runtime::Impl::report(CallbackKind kind, std::exception_ptr error, RequestHook* request,
                           Ticket ticket, ParticipantId participant) const noexcept {
  const CallbackError e{std::move(error), kind, request, ticket, participant};
  try {
    if (options_.on_error) {
      options_.on_error(e);
      return;
    }
  } catch (...) {
    std::fputs("creditloop: the on_error callback threw\n", stderr);
  }
  static constexpr const char* kNames[] = {"sink", "room test", "clock", "observer", "handler"};
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(e.error);
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
  }
  std::fprintf(stderr, "creditloop: the %s threw: %s\n", kNames[static_cast<int>(kind)],
               what.c_str());
}

bool Runtime::Impl::work_visible(std::uint32_t reasons) const {
  // seq_cst loads (inside the bags and here): the re-check half of the parking protocol.
  if (commands_pending_.load(std::memory_order_seq_cst)) return true;
  if ((reasons & detail::kWakeOnWork) != 0 && activations_.maybe_nonempty()) return true;
  if ((reasons & detail::kWakeOnRoom) != 0 &&
      (completions_.maybe_nonempty() || pool_completions_.maybe_nonempty())) {
    return true;
  }
  return false;
}

void Runtime::Impl::idle() {
  // What can end this wait: a completion when room or the end of shutdown waits on one; a
  // submission when there is room to use it. Commands always wake.
  std::uint32_t reasons = 0;
  const bool finishing = phase_ == Phase::finishing;
  if (finishing || !has_room()) reasons |= detail::kWakeOnRoom;
  if (!finishing && has_room()) reasons |= detail::kWakeOnWork;
  if (reasons == 0) return;

  // Where work comes from, for detail::idle_wait(), which the Relacy parking model runs too.
  struct Env {
    Impl& rt;
    const std::uint32_t reasons;
    const bool room_poll = rt.options_.room && (reasons & detail::kWakeOnRoom) != 0;
    Nanos spin_until = 0;

    bool work_visible() const { return rt.work_visible(reasons); }
    bool room_polled() const { return room_poll; }
    bool room_ready() const { return room_poll && rt.room_test(); }
    std::int64_t room_recheck_ns() const { return rt.options_.room_recheck.count(); }
    bool half_pushed() const {
      return rt.activations_.has_half_pushed() || rt.completions_.has_half_pushed() ||
             rt.pool_completions_.has_half_pushed();
    }
    // Without a spin (no CPU to spare) the clock is not read at all.
    bool start_spin() {
      if (rt.spin_.count() <= 0) return false;
      spin_until = detail::monotonic_now() + rt.spin_.count();
      return true;
    }
    bool spin_more(std::uint32_t i) const {
      return (i & 63) != 0 || detail::monotonic_now() < spin_until;
    }
    static void relax() noexcept { detail::cpu_relax(); }
    static void yield() noexcept { std::this_thread::yield(); }
    void parked(std::int64_t /*timeout_ns*/) {
      CREDITLOOP_PROBE2(park, reasons, rt.in_flight());
      ++rt.parks_;
    }
  } env{*this, reasons};
  if (detail::idle_wait(parker_, reasons, env, half_push_backoff_)) {
    ++wakeups_;
    CREDITLOOP_PROBE2(wake, reasons, in_flight());
  }
}

// ---- shutdown -----------------------------------------------------------------------------------

void Runtime::Impl::begin_shutdown(ShutdownMode mode, Nanos t) {
  // relaxed: published by each inbox's close() below (release), which every producer refused by
  // it reads with acquire (inbox.hpp): that producer then reads false and reports shut_down.
  accepting_.store(false, std::memory_order_relaxed);
  // Close every inbox: a push from now on is refused. What the inboxes held joins the core's
  // queues behind what they already hold, so each participant's order is kept.
  for (std::uint32_t slot = 0; slot < core_.ring_size(); ++slot) {
    Local& local = locals_[slot];
    if (!local.open) continue;
    local.open = false;
    move_to_core(mailboxes_[slot].inbox.close(), ParticipantId{slot, local.generation}, t);
  }
  if (mode == ShutdownMode::hand_back) {
    for (std::uint32_t slot = 0; slot < core_.ring_size(); ++slot) {
      if (core_.at(slot)) CounterWrite(counters_[slot]).set(CounterLine::kQueued, 0);
    }
    CounterWrite(totals_).set(CounterLine::kQueued, 0);
    handed_back_ = core_.take_all_queued();
    if (observer_ != nullptr) observe().on_take_all();
    phase_ = Phase::finishing;
  } else {
    phase_ = Phase::draining;
  }
}

bool Runtime::Impl::on_runtime_thread() const noexcept {
  const std::thread::id me = std::this_thread::get_id();
  return me == dispatcher_id_ ||
         std::find(worker_ids_.begin(), worker_ids_.end(), me) != worker_ids_.end();
}

std::vector<Ticket> Runtime::Impl::tickets_in_flight() const {
  std::vector<bool> free(tickets_used_, false);
  for (const std::uint32_t index : free_tickets_) free[index] = true;
  std::vector<Ticket> out;
  for (std::uint32_t i = 0; i < tickets_used_; ++i) {
    if (!free[i]) out.push_back(Ticket{i, tickets_[i].generation});
  }
  return out;
}

ShutdownReport Runtime::Impl::shutdown(ShutdownMode mode,
                                       std::optional<std::chrono::nanoseconds> deadline) {
  ShutdownReport report;
  // Checked before anything waits: the dispatcher or a worker waiting for the runtime to finish
  // would wait for itself.
  if (on_runtime_thread()) {
    report.status = Errc::wrong_thread;
    return report;
  }
  const auto until = deadline ? std::chrono::steady_clock::now() + *deadline
                              : std::chrono::steady_clock::time_point::max();
  std::lock_guard lock(shutdown_mutex_);
  if (joined_) {
    report.finished = true;
    return report;
  }
  if (!shutdown_begun_) {
    shutdown_begun_ = true;
    Command c;
    c.work = [&] {
      begin_shutdown(mode, loop_now_);
      report.handed_back = std::move(handed_back_);
    };
    run_on_dispatcher(c);
  }
  bool exited = false;
  {
    std::unique_lock wait(commands_mutex_);
    exited = deadline ? exited_.wait_until(wait, until, [&] { return dispatcher_exited_; })
                      : (exited_.wait(wait, [&] { return dispatcher_exited_; }), true);
  }
  if (!exited) {
    Command c;
    c.work = [&] {
      report.in_flight = tickets_in_flight();
      report.still_queued = counters().queued;
    };
    run_on_dispatcher(c);
    return report;
  }
  dispatcher_.join();
  for (std::size_t i = 0; i < workers_.size(); ++i) jobs_.enqueue(Job{});
  for (std::thread& w : workers_) w.join();
  joined_ = true;
  report.finished = true;
  return report;
}

// ---- snapshots ----------------------------------------------------------------------------------

ParticipantSnapshot Runtime::Impl::describe(ParticipantId p, Nanos t) {
  ParticipantSnapshot s;
  s.id = p;
  s.name = std::string(core_.name(p));
  s.plan = core_.plan(p);
  s.shares = core_.shares(p);
  s.scale = core_.scale_of(p);
  s.queued = core_.queued(p);
  for (int c = 0; c < core_.classes(); ++c) {
    const Result<Balance> b = core_.balance(p, static_cast<ClassId>(c), t);
    if (b) s.balance[static_cast<std::size_t>(c)] = *b;
  }
  s.stats = core_.stats(p);
  const Local& local = locals_[p.slot];
  s.last_class = local.last_class;
  for (int c = 0; c < core_.classes(); ++c) {
    const auto cls = static_cast<ClassId>(c);
    const std::optional<Nanos> next = core_.next_credit(p, cls, t);
    if (next && *next > t) s.next_credit[static_cast<std::size_t>(c)] = next;
  }
  if (const std::optional<Nanos> oldest = core_.oldest_queued_at(p)) {
    s.oldest_queued_age = t - *oldest;
  }
  return s;
}

std::optional<ParticipantSnapshot> Runtime::Impl::snapshot(ParticipantId p) {
  std::optional<ParticipantSnapshot> result;
  Command c;
  c.work = [&] {
    if (!core_.contains(p)) return;
    const Nanos t = loop_now_;
    // What producers have queued so far counts: move it into the core first.
    activations_.drain([&](Mailbox& m) { take_inbox(m, t); });
    result = describe(p, t);
  };
  run_on_dispatcher(c);
  return result;
}

std::vector<ParticipantSnapshot> Runtime::Impl::snapshot_participants() {
  std::vector<ParticipantSnapshot> result;
  Command c;
  c.work = [&] {
    const Nanos t = loop_now_;
    activations_.drain([&](Mailbox& m) { take_inbox(m, t); });
    result.reserve(core_.size());
    for (std::uint32_t slot = 0; slot < core_.ring_size(); ++slot) {
      if (const std::optional<ParticipantId> p = core_.at(slot)) result.push_back(describe(*p, t));
    }
  };
  run_on_dispatcher(c);
  return result;
}

RuntimeSnapshot Runtime::Impl::snapshot() {
  RuntimeSnapshot s;
  Command c;
  c.work = [&] {
    s.at = loop_now_;
    s.participants = core_.size();
    s.waiting = core_.waiting();
    s.in_flight = in_flight();
    s.submitted = submitted_;
    s.dispatched = dispatched_;
    s.completed = completed_;
    s.parks = parks_;
    s.wakeups = wakeups_;
    s.half_push_waits = half_push_backoff_.waits();
    s.dispatcher_cpu = dispatcher_exited_cpu_ >= 0 ? dispatcher_exited_cpu_ : thread_cpu_now();
    s.classes = core_.classes();
    s.per_class = per_class_;
    for (int cls = 0; cls <= core_.classes(); ++cls) {
      s.per_class[static_cast<std::size_t>(cls)].passes = core_.passes(static_cast<ClassId>(cls));
    }
  };
  run_on_dispatcher(c);
  return s;
}

// ---- the worker pool ----------------------------------------------------------------------------

void Runtime::Impl::worker_main(std::size_t index) {
  moodycamel::ConsumerToken token(jobs_);
  std::array<Job, detail::kWorkerBulk> jobs;
  std::array<detail::PoolBlock, kBlocksPerWorker>& blocks = *worker_blocks_[index];
  std::size_t next_block = 0;
  for (;;) {
    const std::size_t n = jobs_.wait_dequeue_bulk(token, jobs.begin(), jobs.size());
    // This bulk's completions go in a block of this worker's, or, when the dispatcher holds every
    // one of them, through the ticket records, chained and published at once.
    detail::PoolBlock* block = nullptr;
    for (std::size_t i = 0; i < kBlocksPerWorker && block == nullptr; ++i) {
      detail::PoolBlock& candidate = blocks[(next_block + i) % kBlocksPerWorker];
      if (candidate.available()) block = &candidate;
    }
    if (block != nullptr) {
      block->count = 0;
      next_block = static_cast<std::size_t>(block - blocks.data() + 1) % kBlocksPerWorker;
    }
    TicketRecord* first = nullptr;
    TicketRecord* last = nullptr;
    std::size_t stops = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Job& job = jobs[i];
      if (job.request == nullptr) {
        ++stops;
        continue;
      }
      // The request is the handler's from here on (runtime.hpp): the pool keeps only its ticket,
      // and the dispatcher never touches it again (retire_nano()). release: pairs with the
      // acquire of the request's next submit (request.hpp).
      job.request->held.store(RequestHook::kIdle, std::memory_order_release);
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
      if (block != nullptr) {
        block->entries[block->count++] = {
            job.ticket.index, static_cast<std::uint32_t>(job.ticket.generation), nano.value_or(0)};
        continue;
      }
      // The ticket was issued claimed for this pool (hand_out()): the record is this worker's.
      TicketRecord* const record = tickets_.find(job.ticket.index);
      record->cost = nano.value_or(0);
      detail::chain(first, last, *record);
    }
    if (block != nullptr && block->count > 0) publish(*block);
    if (first != nullptr) publish(*first, *last);
    if (stops > 0) {
      for (std::size_t i = 1; i < stops; ++i) jobs_.enqueue(Job{});  // another worker's stop
      return;
    }
  }
}

// ---- Runtime ------------------------------------------------------------------------------------

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Runtime::~Runtime() = default;

const Config& Runtime::config() const noexcept { return impl_->core().config(); }
int Runtime::classes() const noexcept { return impl_->core().classes(); }

Result<ParticipantId> Runtime::add(std::string_view name, std::string_view plan,
                                   std::uint32_t shares) {
  return impl_->add(name, plan, shares);
}
Result<RequestList> Runtime::remove(ParticipantId p) { return impl_->remove(p); }
Status Runtime::replan(ParticipantId p, std::string_view plan, std::uint32_t shares) {
  return impl_->replan(p, plan, shares);
}
Status Runtime::scale(ParticipantId p, std::uint32_t millionths) {
  return impl_->scale(p, millionths);
}
std::optional<ParticipantId> Runtime::find(std::string_view name) { return impl_->find(name); }

Status Runtime::submit(ParticipantId p, RequestHook& request) noexcept {
  return impl_->submit(p, request);
}

Status Runtime::complete(Ticket ticket, double cost) noexcept {
  const std::optional<std::int64_t> nano = to_nano_credits(cost, kMaxCost);
  if (!nano) return Errc::bad_cost;
  return complete_nano(ticket, *nano);
}

Status Runtime::complete_nano(Ticket ticket, std::int64_t cost_nano) noexcept {
  TicketRecord* record = nullptr;
  const Status claimed = impl_->claim(ticket, cost_nano, record);
  if (claimed) impl_->publish(*record, *record);
  return claimed;
}

void Runtime::wake() noexcept { impl_->wake(); }

std::optional<ParticipantSnapshot> Runtime::snapshot(ParticipantId p) { return impl_->snapshot(p); }
std::vector<ParticipantSnapshot> Runtime::snapshot_participants() {
  return impl_->snapshot_participants();
}
RuntimeSnapshot Runtime::snapshot() { return impl_->snapshot(); }
std::uint64_t Runtime::handler_errors() const noexcept { return impl_->handler_errors(); }
bool Runtime::dispatcher_sleeping() const noexcept { return impl_->sleeping(); }
std::optional<ParticipantCounters> Runtime::counters(ParticipantId p) const noexcept {
  return impl_->counters(p);
}
RuntimeCounters Runtime::counters() const noexcept { return impl_->counters(); }

ShutdownReport Runtime::shutdown(ShutdownMode mode,
                                 std::optional<std::chrono::nanoseconds> deadline) {
  return impl_->shutdown(mode, deadline);
}
RequestList Runtime::shutdown(ShutdownMode mode) {
  return std::move(impl_->shutdown(mode, std::nullopt).handed_back);
}

// ---- CompletionBatch ----------------------------------------------------------------------------

CompletionBatch::CompletionBatch(Runtime& runtime) noexcept : impl_(runtime.impl_.get()) {}
CompletionBatch::~CompletionBatch() { flush(); }

Status CompletionBatch::add(Ticket ticket, double cost) noexcept {
  const std::optional<std::int64_t> nano = to_nano_credits(cost, kMaxCost);
  if (!nano) return Errc::bad_cost;
  return add_nano(ticket, *nano);
}

Status CompletionBatch::add_nano(Ticket ticket, std::int64_t cost_nano) noexcept {
  TicketRecord* record = nullptr;
  const Status claimed = impl_->claim(ticket, cost_nano, record);
  if (!claimed) return claimed;
  detail::chain(first_, last_, *record);  // published by flush()
  ++count_;
  return {};
}

void CompletionBatch::flush() noexcept {
  if (first_ == nullptr) return;
  impl_->publish(*first_, *last_);
  first_ = last_ = nullptr;
  count_ = 0;
}

}  // namespace creditloop
