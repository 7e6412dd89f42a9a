// runtime/internal/runtime_impl.hpp: Runtime::Impl, the runtime's state and the functions its
// source files share. Private to the runtime's sources (runtime/*.cpp).
//
// Who touches what:
//  - The core, the per-place Local records, the free ticket list and every counter not marked
//    atomic belong to the dispatcher thread alone. Other threads reach them only through commands
//    (a lock-free list the dispatcher runs between decisions, command_list.hpp) or, after the
//    dispatcher has exited, under the exit mutex.
//  - Mailboxes (one per ring place) are shared with producers; ticket records with completers.
//    Both live in ChunkedTables whose elements never move, so other threads may index them while
//    the dispatcher grows them.
//
// Which file holds what: construction, commands, shutdown and snapshots in runtime.cpp; submit
// and complete in submit_complete.cpp; the dispatcher's loop in dispatcher.cpp; the worker pool in
// worker_pool.cpp; the option checks and CPU placement in options.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <thread>
#include <utility>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/detail/chunked_table.hpp"
#include "creditloop/runtime.hpp"
#include "internal/accepting_flag.hpp"
#include "internal/command_list.hpp"
#include "internal/completion_handover.hpp"
#include "internal/counter_line.hpp"
#include "internal/futex.hpp"
#include "internal/idle_env.hpp"
#include "internal/learned_room.hpp"
#include "internal/lock_free_bag.hpp"
#include "internal/mailbox.hpp"
#include "internal/parker.hpp"
#include "internal/parking_berth.hpp"
#include "internal/probes.hpp"
#include "internal/queue_link.hpp"
#include "internal/shutdown_answer.hpp"
#include "internal/spin.hpp"
#include "internal/test_hooks.hpp"
#include "internal/ticket_record.hpp"

namespace creditloop {
namespace detail {

using RuntimeMailbox =
    Mailbox<RequestHook, std::atomic, MemberLink<RequestHook, &RequestHook::next_in_queue>>;
static_assert(sizeof(RuntimeMailbox) == 64 && alignof(RuntimeMailbox) == 64,
              "a participant's producers share one line, and only it");

inline constexpr std::size_t kCacheLine = 64;

// A member that must not share a cache line with its neighbours: it starts a line and its size is
// a whole number of lines.
template <class T>
struct alignas(kCacheLine) OwnLine : T {
  using T::T;
};

}  // namespace detail

class Runtime::Impl {
  using Mailbox = detail::RuntimeMailbox;
  using TicketRecord = detail::TicketRecord;
  using CounterLine = detail::CounterLine<std::atomic>;
  using CounterWrite = detail::CounterWrite<std::atomic>;

 public:
  explicit Impl(RuntimeOptions options);
  ~Impl();

  Result<ParticipantId> add(std::string_view name, std::string_view plan, std::uint32_t shares);
  Result<RequestList> remove(ParticipantId p);
  Status replan(ParticipantId p, std::string_view plan, std::uint32_t shares);
  Status scale(ParticipantId p, std::uint32_t millionths);
  std::optional<ParticipantId> find(std::string_view name);
  Status withdraw(ParticipantId p, RequestHook& request);
  Status submit(ParticipantId p, RequestHook& request) noexcept;
  Status claim(Ticket ticket, std::int64_t cost_nano, TicketRecord*& record) noexcept;
  // A completer's whole hand-over (completion_handover.hpp). parker_ is read here, before the
  // push: after it the runtime may be gone, and only the parking berth is left.
  void publish(TicketRecord& first, TicketRecord& last) noexcept {
    detail::publish_completions(completions_, first, last, parker_);
  }
  template <class OwnBlocks, class Fill>
  bool lend(OwnBlocks& own, std::size_t& last, Fill&& fill) noexcept {
    return detail::lend_completion(pool_completions_, own, last, fill, parker_);
  }
  // The embedder's room flag is a plain store: Parker::wake(), not notify().
  void wake() noexcept { parker_.wake(detail::kWakeOnRoom | detail::kWakeOnWork); }
  std::optional<ParticipantSnapshot> snapshot(ParticipantId p);
  // Ring places one snapshot_participants() command describes. At 256, 97 % of the chunks of a
  // scrape of a million held the dispatcher under 100 us (bench/snapshot_gap: 478 gaps over
  // 100 us in 19,500 chunks); at 512, nearly every chunk was such a gap.
  static constexpr std::uint32_t kSnapshotChunk = 256;
  std::vector<ParticipantSnapshot> snapshot_participants();
  RuntimeSnapshot snapshot();
  ShutdownReport shutdown(ShutdownMode mode, std::optional<std::chrono::nanoseconds> deadline,
                          ShutdownWait wait);
  [[nodiscard]] std::uint64_t handler_errors() const noexcept {
    return handler_errors_.load(std::memory_order_relaxed);  // a statistic: no pairing
  }
  [[nodiscard]] std::optional<ParticipantCounters> counters(ParticipantId p) const noexcept {
    const CounterLine* const line = counters_.find(p.place);
    if (line == nullptr || p.generation == 0 || p.issuer != core_.issuer()) return std::nullopt;
    ParticipantCounters out;
    if (detail::read_counters(*line, out) != p.generation) return std::nullopt;
    return out;
  }
  [[nodiscard]] RuntimeCounters counters() const noexcept {
    RuntimeCounters out;
    (void)detail::read_counters(totals_, out);
    return out;
  }
  [[nodiscard]] const Core& core() const noexcept { return core_; }
  [[nodiscard]] bool sleeping() const noexcept { return parker_.sleeping(); }
  [[nodiscard]] std::uint32_t room_slots() const noexcept {
    if (learned_) return learned_->published_slots();
    return options_.room ? 0 : options_.slots;
  }
  [[nodiscard]] Nanos room_latency() const noexcept {
    return learned_ ? learned_->published_latency() : 0;
  }

 private:
  enum class Phase : std::uint8_t { running, draining, finishing };
  static constexpr std::uint32_t kNoPlace = ~std::uint32_t{0};
  struct Local {  // dispatcher only, per ring place
    std::uint32_t generation = 0;
    bool open = false;
    std::optional<ClassId> last_class;
    // The intake: requests taken from the inbox and not yet into the core, oldest first, linked
    // through next_in_queue; and this place's link on the intake queue. Kept across a removal
    // and re-registration (a removal empties the intake; the place may stay queued, and is then
    // skipped).
    RequestHook* intake = nullptr;
    RequestHook* intake_newest = nullptr;  // nullptr: not found yet
    std::uint32_t next_intake = kNoPlace;
    bool queued_for_intake = false;
  };
  // How many requests one loop iteration moves from the intake into the core, and how many of
  // one place's before the next place's turn: a flood of one tenant is taken a slice at a time,
  // with decisions between, and the other tenants' requests go in beside it
  // (tests/runtime/dispatcher_path_test.cpp).
  static constexpr std::uint64_t kIntakePerLoop = 4096;
  static constexpr std::uint64_t kIntakeSlice = 256;
  struct Command {
    std::function<void()> work;
    std::binary_semaphore done{0};
    std::atomic<Command*> next_posted{nullptr};  // the command list's link (command_list.hpp)
    // What work() threw on the dispatcher (an allocation that failed): rethrown to the poster,
    // so that the call fails instead of the process (published by `done`).
    std::exception_ptr error;
    // Set by a poster that may stop waiting (shutdown, at its deadline): the command then owns
    // itself and what its work touches, and the dispatcher drops this reference only after its
    // release of `done`, so whichever of the two finishes last frees it.
    std::shared_ptr<void> keep_alive;
  };
  // A shutdown call's command, which outlives a caller that returned at its deadline, and who
  // takes what it hands back (shutdown_answer.hpp).
  struct ShutdownStep {
    Command command;
    detail::ShutdownAnswer<RequestList, std::atomic> answer;
  };
  using Job = Decision;  // a null request: the worker stops
  struct DispatcherDone {};

  // ---- the dispatcher thread
  // ----------------------------------------------------------------------
  void dispatcher_main();
  bool service(Nanos now);
  // Runs `oldest` and the commands linked after it, and says whether there were any.
  bool run_commands(Command* oldest);
  // `timed`: the completion tells of the backend's latency (not a sink that refused the request).
  void apply_completion(TicketRecord& record, Nanos now, bool timed = true);
  void apply_pool_completion(const detail::PoolCompletion& done, Nanos now);
  // A mailbox taken off the activation list: its inbox onto its intake.
  void take_inbox(Mailbox& mailbox);
  // Every open place's inbox whose mailbox another registration listed (mailbox.hpp).
  void take_stale_listings();
  // Moves up to `limit` requests from `oldest` on into the core as id's, adding how many to
  // `moved`; returns the first not moved.
  RequestHook* move_to_core(RequestHook* oldest, ParticipantId id, Nanos now,
                            std::uint64_t limit = ~std::uint64_t{0},
                            std::uint64_t* moved = nullptr);
  // Appends requests taken from place's inbox to its intake, and queues the place for intake.
  void queue_intake(std::uint32_t place, RequestHook* oldest);
  // One loop iteration's intake: at most kIntakePerLoop requests, a slice per place in turn.
  bool take_in(Nanos now);
  // The place's whole intake into the core, then `oldest` on (newer): for what must see every
  // request of the place at once (a removal, a withdrawal, shutdown, a snapshot).
  void take_into_core(std::uint32_t place, RequestHook* oldest, Nanos now);
  bool dispatch_batch(Nanos now);
  // The batch decided by one Core::dispatch() call, when the room is a slot count.
  std::uint32_t dispatch_in_one_call(Nanos now);
  // The loop a visit at a time: for an observer that sees each turn begin and end, and for a
  // room test of the embedder's, which must be asked before each visit.
  std::uint32_t dispatch_one_by_one(Nanos now);
  void hand_out(const Decision& d, Nanos now);
  [[nodiscard]] bool has_room() const;
  // The room as a slot count, when it is one: learned, or the options' slots.
  [[nodiscard]] std::uint64_t slots_now() const noexcept {
    return learned_ ? learned_->slots() : options_.slots;
  }
  // Tickets issued and not yet applied: every record ever used that is not on the free list.
  [[nodiscard]] std::uint64_t in_flight() const noexcept {
    return tickets_used_ - free_tickets_.size();
  }
  std::uint32_t acquire_ticket();
  // Tickets the tables can issue without allocating: free records, and records never used.
  [[nodiscard]] std::uint64_t tickets_left() const noexcept {
    return free_tickets_.size() + (ticket_capacity_ - tickets_used_);
  }
  // One more chunk of records in the core's table and the runtime's, between decisions; false,
  // counted, when an allocation failed (the tables keep what they had).
  bool grow_tickets() noexcept;
  // A growth failed and every record is in use: the room is full until a completion frees one,
  // and the loop retries the growth after a timed sleep (no waker says when memory is back).
  [[nodiscard]] bool growth_retry_pending() const noexcept {
    return growth_failed_ && tickets_left() == 0;
  }
  void idle();
  void begin_shutdown(ShutdownMode mode, Nanos now);
  // Every request still queued, into handed_back_; the loop then only waits for what is in flight.
  void hand_back_queued();
  // Writes pending_totals_ to totals_ (one counter-line write), if anything is pending.
  void flush_totals() noexcept;
  // A command's work, with what it counted written to the totals before its poster returns.
  void run_command_work(Command& command) {
    command.work();
    flush_totals();
  }
  void ensure_places(std::uint32_t places);
  void fill_snapshot(ParticipantId p, Nanos now, ParticipantSnapshot& into);

  // ---- any thread
  // ---------------------------------------------------------------------------------
  void run_on_dispatcher(Command& command);
  // The same, waiting only until `until` (steady clock; max(): no limit). False: not answered by
  // then; the command still runs when the dispatcher gets to it, so it must own what it touches
  // (Command::keep_alive). Not from the dispatcher thread.
  bool run_on_dispatcher_until(Command& command, std::chrono::steady_clock::time_point until);
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
    CREDITLOOP_GUARDED(on_withdraw)
    CREDITLOOP_GUARDED(on_dispatch)
    CREDITLOOP_GUARDED(on_end_turn)
    CREDITLOOP_GUARDED(on_begin_turn)
    CREDITLOOP_GUARDED(on_visit)
    CREDITLOOP_GUARDED(on_take_all)
#undef CREDITLOOP_GUARDED

   private:
    const Impl& impl_;
  };
  [[nodiscard]] GuardedObserver guarded_observer() const noexcept { return GuardedObserver(*this); }
  // The sink threw for `record`'s dispatch: see RuntimeOptions::sink.
  void sink_failed(TicketRecord& record, const Decision& d, std::exception_ptr error, Nanos t);

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
  // What the dispatcher counted for the totals since it last wrote them: each request changes
  // them three times (intake, hand-out, completion), and each counter-line write is a sequence
  // count written twice around the values, so they are summed here and written once per loop
  // iteration (flush_totals()), before the dispatcher waits, and before and after each command,
  // so that a command's poster and a snapshot see them whole. counters() may lag the
  // participants' own lines by the iteration in progress.
  struct PendingTotals {
    std::uint64_t queued = 0;  // added modulo 2^64: a decrease wraps, as the line's own adds do
    std::array<std::uint64_t, kMaxClasses + 1> dispatched{};
    std::uint64_t completed = 0;
    Balance cost = 0;
    bool any = false;
  };
  PendingTotals pending_totals_;
  // Each written by different threads: producers, completers, the dispatcher going to sleep.
  detail::OwnLine<detail::LockFreeBag<Mailbox, std::atomic, &Mailbox::next_listed>> activations_;
  detail::OwnLine<detail::LockFreeBag<TicketRecord, std::atomic, &TicketRecord::next_completed>>
      completions_;
  detail::OwnLine<
      detail::LockFreeBag<detail::PoolBlock, std::atomic, &detail::PoolBlock::next_completed>>
      pool_completions_;
  // The parking word lives outside the runtime (parking_berth.hpp); its address is read by every
  // waker, and written once.
  detail::ParkingBerth parking_;
  detail::RuntimeParker& parker_ = parking_.parker();
  static_assert(alignof(decltype(activations_)) == detail::kCacheLine &&
                alignof(decltype(completions_)) == detail::kCacheLine &&
                alignof(decltype(pool_completions_)) == detail::kCacheLine);
  // Read on every refused call and by monitoring; written once, or on a handler error.
  // Only picks the error code of a refused submit (see begin_shutdown() and submit()).
  alignas(detail::kCacheLine) detail::AcceptingFlag<std::atomic> accepting_;
  // Raised by a producer that found its mailbox listed by a former registration (mailbox.hpp);
  // read by the dispatcher once per loop, written almost never.
  detail::StaleListings<std::atomic> stale_listings_;
  std::atomic<std::uint64_t> handler_errors_{0};
  // With RuntimeOptions::learned_room: fed and read by the dispatcher, published to any thread.
  std::optional<detail::LearnedRoom> learned_;

  // Commands: any thread posts, the dispatcher runs, taking no lock. The mutex serializes only
  // what runs once the dispatcher exits: its last commands, and those of callers whose post the
  // closed list refused.
  detail::OwnLine<detail::CommandList<Command, std::atomic, &Command::next_posted>> commands_;
  std::mutex exit_mutex_;
  bool dispatcher_exited_ = false;  // guarded by exit_mutex_
  // The dispatcher's CPU time once it exited (-1 before): written at exit under exit_mutex_,
  // read by commands, which run on the dispatcher itself or, after it exited, under that mutex.
  Nanos dispatcher_exited_cpu_ = -1;

  // Dispatcher only.
  detail::ChunkedTable<Local> locals_;
  std::uint32_t places_ = 0;
  std::vector<std::uint32_t> free_tickets_;
  std::uint32_t tickets_used_ = 0;
  // Records both tables hold (the core's and the runtime's, with the free list and the learned
  // room's instants sized for them): what may be in flight without an allocation. They hold the
  // room's bound from construction (slots, learned_room's most); only a room test, which bounds
  // nothing, makes the dispatcher grow them, up to kMaxInFlight (room_bound_).
  std::size_t ticket_capacity_ = 0;
  std::size_t room_bound_ = kMaxInFlight;
  bool growth_failed_ = false;  // the last growth failed (see growth_retry_pending())
  std::uint64_t ticket_growth_failures_ = 0;
  // The clock read at the top of the current loop iteration. Commands use it too (a snapshot's
  // balances, an add's start): every core call of an iteration then has the same `now`, and an
  // observer's replay makes exactly the same calls.
  Nanos loop_now_ = 0;
  Phase phase_ = Phase::running;
  std::uint32_t intake_first_ = kNoPlace, intake_last_ = kNoPlace;  // the intake queue
  RequestList handed_back_;
  std::uint64_t submitted_ = 0, dispatched_ = 0, completed_ = 0, parks_ = 0, wakeups_ = 0;
  detail::RetryBackoff retry_backoff_;
  std::array<ClassSnapshot, kMaxClasses + 1> per_class_{};

  // ---- the worker pool (worker_pool.cpp, the one file that sees moodycamel's queue)
  struct JobQueue;
  struct JobQueueDeleter {
    void operator()(JobQueue* queue) const noexcept;
  };
  // Constructor: the queue, and the workers (with their ids).
  void start_pool();
  // Dispatcher thread, before its first batch: its producer token.
  void open_pool_to_dispatcher();
  // Dispatcher only: this batch's jobs to the workers, at once. False: the queue could not take
  // them (it could not allocate), and they stay in batch_jobs_ for the next try.
  bool hand_batch_to_pool();
  // shutdown(), once the dispatcher has exited, or a constructor that failed: a stop per worker
  // started, and the joins.
  void stop_pool() noexcept;
  void worker_main(std::size_t index);

  std::unique_ptr<JobQueue, JobQueueDeleter> jobs_;  // only with workers
  std::vector<Job> batch_jobs_;  // dispatcher only: this batch's jobs, handed over at its end
  std::vector<Decision> batch_dispatches_;  // dispatcher only: options_.batch of them
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
  std::condition_variable exited_;  // dispatcher_exited_ became true (exit_mutex_)
  // Serializes only the joins: a shutdown call begins, escalates and waits without it.
  std::mutex shutdown_mutex_;
  bool joined_ = false;  // guarded by shutdown_mutex_
  [[nodiscard]] bool on_runtime_thread() const noexcept;
  // Any thread: every ticket issued and not yet applied, read from the ticket cells, so that a
  // shutdown reports them without a round trip to a dispatcher that may be held.
  [[nodiscard]] std::vector<Ticket> tickets_in_flight() const;
};

}  // namespace creditloop
