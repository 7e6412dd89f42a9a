// creditloop/runtime.hpp: the piece a server embeds: the deterministic core (core.hpp) behind
// one dispatcher thread, with lock-free queues in front of it and completions from any thread.
//
//  - submit(), any thread: O(1), lock-free, allocation-free, into the participant's own queue.
//  - The dispatcher (named, optionally pinned) runs the loop of docs/contract.md §2 on the
//    monotonic clock and hands each decision to a sink: a callback on the dispatcher thread, or
//    the worker pool, which runs a handler and completes with the cost it returns (a pool's
//    tickets are its own: completing one yourself is refused as stale).
//  - complete(), any thread: O(1), lock-free, takes no lock. It claims the ticket (a repeated,
//    stale, foreign or never-issued one is refused and changes nothing; one copied or guessed that
//    names a ticket in flight completes it), returns the room, and passes the cost on; the
//    dispatcher charges the admitting bucket before its next decision.
//  - Room: a slot count, a slot count learned from latency (room_controller.hpp), or a room test.
//  - add, remove (hands back the queued requests), replan, scale, withdraw, shutdown (hands back
//    or drains the queue, then waits for what is in flight) and snapshots: any thread, while
//    producers and workers run; each a round trip to the dispatcher. Destruction without
//    shutdown shuts down handing back.
//  - A sink callback must not block (the dispatcher waits for it; a slow handler only delays
//    room). It may call submit(), complete() and the lifecycle calls, which run inline.
//  - Not promised: an order across participants beyond the core's; that a request submitted
//    during a turn is seen by that turn (docs/contract.md §5a); any bound on a callback's time.
//
// Why: docs/design.md#the-runtime
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/error.hpp"
#include "creditloop/observer.hpp"
#include "creditloop/participant.hpp"
#include "creditloop/plan.hpp"
#include "creditloop/request.hpp"
#include "creditloop/room_controller.hpp"
#include "creditloop/snapshot.hpp"
#include "creditloop/ticket.hpp"
#include "creditloop/units.hpp"

namespace creditloop {

namespace detail {
struct TicketRecord;
}

/// The embedder's callbacks, as an error report names them.
enum class CallbackKind : std::uint8_t { sink, room, clock, observer, handler };

/// A callback threw. What became of the request in question, per callback:
///  - sink: the sink did not take the request. The runtime completes it at cost 0 (the credit
///    taken at dispatch stays spent) and hands it back here in `request`, the caller's again (to
///    submit again, or drop). If the sink completed it before throwing, `request` is null: the
///    completion stands and the request is the caller's already.
///  - handler: the request is completed at cost 0 and counted in handler_errors(); `request` is
///    the handler's, as it always is once the handler was called.
///  - room: no room this time; the test is asked again within a millisecond. No request is
///    concerned.
///  - clock: the dispatcher keeps the last instant it read (time stands still until the clock
///    works again).
///  - observer: the input it was told of has happened; the runtime carries on.
/// Nothing is lost and the runtime keeps running in every case.
struct CallbackError {
  std::exception_ptr error;
  CallbackKind kind = CallbackKind::sink;
  RequestHook* request = nullptr;  // sink and handler: see above
  Ticket ticket;                   // sink and handler: the dispatch's ticket
  ParticipantId participant;       // sink and handler
};

struct RuntimeOptions {
  /// Classes and plans. Validated once by the constructor.
  Config config;

  /// Room, slot model: at most this many requests in flight. Used when `room` and
  /// `learned_room` are empty.
  std::uint32_t slots = 64;
  /// Room, learned: a slot count between these bounds, set by a RoomController
  /// (room_controller.hpp) from each dispatch's instant and its completion's, on the dispatcher's
  /// clock: the backend runs near its capacity and the queue forms here (docs/contract.md §5c; a
  /// lowered room never preempts). Replaces `slots`; excludes `room`. Read it with
  /// Runtime::room_slots() and room_latency().
  std::optional<RoomBounds> learned_room;
  /// Room, your own test: called on the dispatcher thread before every decision. When it says
  /// no, the dispatcher re-tests every `room_recheck`, and at once after wake().
  std::function<bool()> room;
  /// How often a room test that said no is asked again without a wake(): docs/contract.md §5a's
  /// millisecond by default. An embedder that calls wake() whenever room appears may lengthen it to
  /// save the dispatcher's wake-ups; at least 1 ns.
  std::chrono::nanoseconds room_recheck{1'000'000};

  /// Sink, your callback: called on the dispatcher thread for each dispatch. Must not block.
  std::function<void(const Decision&)> sink;
  /// Sink, the built-in worker pool: used when `workers` > 0. Each worker runs `handler` on the
  /// dispatch (its request, participant, class out and ticket; the ticket is the pool's own, for
  /// logs: completing it yourself is refused as stale) and completes the request with the cost
  /// it returns (credits, docs/contract.md §2). A handler that throws or returns a cost the runtime
  /// refuses completes with cost 0, counted in handler_errors().
  unsigned workers = 0;
  std::function<double(const Decision&)> handler;

  /// The dispatcher thread's name (at most 15 characters are kept) and the CPU to pin it to
  /// (negative: not pinned).
  std::string thread_name = "creditloop";
  int cpu = -1;

  /// Capacity reserved up front so that steady state allocates nothing.
  ///  - The records of requests in flight are reserved for at least the room's bound (`slots`,
  ///    or `learned_room`'s most; at most kMaxInFlight), so that the dispatcher never allocates
  ///    for a dispatch: an allocation that fails there would have to fail a decision. About
  ///    110 bytes per slot of the bound.
  ///  - A room test bounds nothing. Past `expected_in_flight` the dispatcher grows the records a
  ///    chunk of 4,096 at a time, between decisions, before a batch needs them. While that
  ///    allocation fails the room is full beyond the records there are: nothing is lost or
  ///    refused, completions free records for more dispatches, and the growth is tried again
  ///    after a timed sleep (16 µs doubling to 1 ms) or a wake(). RuntimeSnapshot::
  ///    ticket_growth_failures counts the failures.
  std::size_t expected_participants = 1024;
  std::size_t expected_in_flight = 1024;

  /// Most dispatches between two looks at new submissions, completions and commands.
  std::uint32_t batch = 64;
  /// How long the dispatcher spins, then yields, before it sleeps. Empty: 20 µs if the process
  /// may run on more CPUs than the dispatcher and the workers take, none otherwise (spinning
  /// without a CPU of its own only delays the threads it waits for).
  std::optional<std::chrono::nanoseconds> spin;

  /// The monotonic clock, in nanoseconds. Empty: std::chrono::steady_clock. Tests pass a manual
  /// clock.
  std::function<Nanos()> clock;

  /// Sees every core input the dispatcher makes (observer.hpp). Not owned; must outlive the
  /// runtime.
  RuntimeObserver* observer = nullptr;

  /// Told when a callback above throws (CallbackError says what became of the request). Called
  /// on the thread whose callback threw: the dispatcher, or a pool worker for the handler, so it
  /// must be thread-safe with workers, and must not block. Empty: one line on standard error.
  /// If it throws itself, that is written to standard error and otherwise ignored.
  std::function<void(const CallbackError&)> on_error;
};

enum class ShutdownMode : std::uint8_t {
  hand_back,  // stop dispatching; hand every queued request back
  drain,      // refuse new submissions; dispatch everything queued first
};

/// What shutdown(mode, deadline, wait) waits for, up to its deadline.
enum class ShutdownWait : std::uint8_t {
  finished,  // everything in flight to complete, then the joins of the runtime's threads
  answered,  // the dispatcher's answer alone: the hand-back and the report, not what is in flight
};

/// What shutdown(mode, deadline, wait) did.
struct ShutdownReport {
  /// wrong_thread: called from the dispatcher thread (a sink, an observer, a room test, the
  /// clock), a worker of the pool (a handler), or a thread whose CompletionBatch holds
  /// completions of this runtime not yet flushed, where waiting would deadlock; nothing was done.
  Status status;
  /// The requests handed back, oldest first per participant, to the first call in hand_back mode
  /// that the dispatcher answers: the call that hands them back (the first in hand_back mode,
  /// which also escalates a drain that has not finished: it hands back what the drain had not
  /// dispatched yet), or, if that call returned unanswered, the next one answered.
  RequestList handed_back;
  /// True when everything queued was dispatched (drain) and every request in flight completed
  /// before the deadline: the runtime's threads are joined.
  bool finished = false;
  /// True when the dispatcher ran this call's command before the deadline. False when it could
  /// not (a callback held it, or the deadline was shorter than a round trip, as 0 is): what the
  /// call asked for still happens when the dispatcher gets to it, and what it hands back goes to
  /// the next call in hand_back mode that is answered.
  bool answered = false;
  /// When not finished: the tickets still in flight as the deadline passed (pool tickets
  /// included), and the requests still queued (drain mode; counters().queued), both read without
  /// the dispatcher. The runtime goes on accepting their completions; call shutdown() again to
  /// wait for them.
  std::vector<Ticket> in_flight;
  std::uint64_t still_queued = 0;
};

class Runtime {
 public:
  /// Validates the options (throws std::invalid_argument naming the problem), reserves, and starts
  /// the dispatcher thread and the worker pool. Throws std::runtime_error where heap or stack
  /// pointers carry a tag above bit 47 (AArch64 MTE or HWASan, x86 LAM): see submit(). Throws
  /// std::system_error when a thread cannot start, with every thread it had started joined.
  explicit Runtime(RuntimeOptions options);
  /// Shuts down handing back (the handed-back requests are dropped: they are the caller's
  /// storage) if shutdown() was not called or only drained without finishing, and waits without
  /// limit for everything in flight:
  /// call shutdown() with a deadline first to learn what is outstanding. Must not run on the
  /// dispatcher thread or a pool worker (it would wait for itself).
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  [[nodiscard]] const Config& config() const noexcept;
  [[nodiscard]] int classes() const noexcept;
  /// This runtime's identity, stamped on its tickets and participant ids (detail/issuer.hpp):
  /// another runtime refuses them, and a sharded embedder can tell by it which shard issued one.
  [[nodiscard]] std::uint32_t issuer() const noexcept;

  // ---- participants: any thread, a round trip to the dispatcher --------------------------------
  /// Errors: those of Core::add, and shut_down.
  Result<ParticipantId> add(std::string_view name, std::string_view plan, std::uint32_t shares);
  /// Unregisters `p` and hands back everything it had queued, oldest first; each request is the
  /// caller's once the list hands it back (its pop_front(), or the list's end), so that a thread
  /// may submit it again at once while the list is still walked. Its in-flight requests stay
  /// completable; their costs are charged nowhere. Errors: unknown_participant, shut_down.
  Result<RequestList> remove(ParticipantId p);
  /// Errors: unknown_participant, unknown_plan, bad_shares, shut_down.
  Status replan(ParticipantId p, std::string_view plan, std::uint32_t shares);
  /// Gives `p` a fraction of its plan, in millionths, at the dispatcher's clock: Core::scale
  /// (balances kept, clipped; a later replan keeps the fraction). Any thread; blocks for the round
  /// trip (a sink runs it inline). Errors: unknown_participant, bad_scale, shut_down.
  Status scale(ParticipantId p, std::uint32_t millionths);
  [[nodiscard]] std::optional<ParticipantId> find(std::string_view name);

  /// Withdraws `request`, submitted for `p` and not yet dispatched (Core::withdraw): it leaves the
  /// queue, takes no credit, `p` keeps its place in the cursor, and the request is the caller's
  /// again when this returns. A request whose submit() has returned is found wherever it waits,
  /// in the core's queue or still in `p`'s inbox. Any thread; blocks for the round trip (a sink
  /// runs it inline); allocates nothing. Errors: unknown_participant; not_queued (not waiting for
  /// `p`: never submitted, handed back, completed, or submitted for another participant);
  /// in_flight (dispatched: complete it as usual); shut_down.
  Status withdraw(ParticipantId p, RequestHook& request);

  // ---- requests: any thread, no allocation --------------------------------------------------
  /// Queues `request` for `p`. On error the request is not linked and stays the caller's:
  /// already_queued (submitted before and not yet completed or handed back by its handed-back
  /// list, or, with the worker pool, not yet given to the handler: it is the library's, and stays
  /// where it is),
  /// unknown_participant (never registered, or removed), shut_down, or unsupported_address (its
  /// address has a bit above bit 47 set, such as a top-byte pointer tag: the runtime holds 48-bit
  /// addresses). Lock-free.
  Status submit(ParticipantId p, RequestHook& request) noexcept;

  /// Completes a dispatched request with its real cost in credits, and makes the request its
  /// caller's again (it may be submitted anew once this returns): the request must stay alive
  /// until its completion. Errors, in this order: bad_cost, unknown_ticket, stale_ticket (also
  /// for a ticket of the worker pool, which completes its own); on error nothing changes.
  /// Lock-free: its push retries only when another push or the dispatcher's take got in between.
  Status complete(Ticket ticket, double cost) noexcept;
  /// The same with the cost in nano-credits (0 .. kMaxCost * 1e9).
  Status complete_nano(Ticket ticket, std::int64_t cost_nano) noexcept;

  /// Wakes the dispatcher to re-test a room test of your own.
  void wake() noexcept;

  // ---- observability: any thread ------------------------------------------------------------
  [[nodiscard]] std::optional<ParticipantSnapshot> snapshot(ParticipantId p);
  /// Every participant, described by the dispatcher in chunks of a few hundred between its
  /// decisions, so a scrape of a million holds up no decision for more than one chunk (nearly
  /// all under 100 us, bench/snapshot_gap). Each participant appears at most once and is
  /// consistent as of its chunk's instant; one added or removed during the scrape may or may not
  /// appear. Allocates on this thread; the dispatcher allocates only to lengthen one of the
  /// chunk's reused names (at most a few hundred a scrape).
  [[nodiscard]] std::vector<ParticipantSnapshot> snapshot_participants();
  [[nodiscard]] RuntimeSnapshot snapshot();
  /// `p`'s counters (snapshot.hpp), without a round trip: lock-free, no allocation; it retries
  /// only while the dispatcher updates that same participant (nanoseconds). Nothing for a
  /// participant never registered or removed.
  [[nodiscard]] std::optional<ParticipantCounters> counters(ParticipantId p) const noexcept;
  /// The runtime's totals, on the same terms, written once per dispatcher loop iteration: they may
  /// lag the participants' counters by the iteration in progress; whole when any command (a
  /// snapshot, a removal) returns.
  [[nodiscard]] RuntimeCounters counters() const noexcept;
  /// Whether the dispatcher is asleep (or about to be). Unlike a snapshot it does not wake it.
  [[nodiscard]] bool dispatcher_sleeping() const noexcept;
  /// Completions by the worker pool whose handler threw or returned a refused cost.
  [[nodiscard]] std::uint64_t handler_errors() const noexcept;
  /// The room as a slot count: the learned room's slots now (as of the dispatcher's last
  /// completion), `slots` otherwise, 0 with a room test. Lock-free, no round trip.
  [[nodiscard]] std::uint32_t room_slots() const noexcept;
  /// The learned room's estimate of the backend's latency without a queue (RoomController::
  /// no_queue_latency()); 0 until measured, and without a learned room.
  [[nodiscard]] Nanos room_latency() const noexcept;

  // ---- shutdown -----------------------------------------------------------------------------
  /// Stops accepting submissions, hands back (or first dispatches) everything queued, waits until
  /// every request in flight is completed or `deadline` (from the call; empty: no limit) has
  /// passed, and, once everything is completed, joins the runtime's threads. Always returns: at
  /// the deadline it reports what is still in flight; a later call waits again (with its own
  /// deadline) and reports anew. Only the first call in hand_back mode hands back; after a drain
  /// that did not finish, it hands back what is still queued and waits only for what is in
  /// flight.
  ///  - The deadline bounds every wait, the round trip to the dispatcher included: a call whose
  ///    command the dispatcher has not run by then returns with `answered` false (see there).
  ///    To hand back at once without waiting for what is in flight, pass ShutdownWait::answered
  ///    with a deadline for the round trip: a deadline of 0 usually returns before the
  ///    dispatcher could answer.
  ///  - Calls from several threads wait for none of each other's: a hand_back escalates a drain
  ///    that another thread waits for, whether or not the dispatcher has answered the drain yet.
  /// Once it reports finished (or the destructor returns), no complete() or
  /// CompletionBatch::flush() is still touching the runtime, even one whose thread has not
  /// returned from it yet: the runtime may be destroyed at once. (A submit() must have returned
  /// before the destructor starts, as for any member call.) A submit that races shutdown is
  /// refused with shut_down. From the dispatcher thread or a pool worker it does nothing and
  /// reports wrong_thread. Any other thread; blocks up to the deadline; allocates.
  ShutdownReport shutdown(ShutdownMode mode, std::optional<std::chrono::nanoseconds> deadline,
                          ShutdownWait wait = ShutdownWait::finished);
  /// The same without a deadline, returning only the handed-back requests (empty when called
  /// from the dispatcher thread or a pool worker: use the form above to see that error).
  RequestList shutdown(ShutdownMode mode = ShutdownMode::hand_back);

  class Impl;

 private:
  friend class CompletionBatch;
  std::unique_ptr<Impl> impl_;
};

/// Completions gathered on one thread and handed to the dispatcher with one push: what a
/// worker that completes several requests in a row should use. Each add() claims its ticket at
/// once (so errors are reported at once, as by complete()); flush() publishes them. The destructor
/// flushes. Not thread-safe: one batch per thread.
class CompletionBatch {
 public:
  explicit CompletionBatch(Runtime& runtime) noexcept;
  ~CompletionBatch();
  CompletionBatch(const CompletionBatch&) = delete;
  CompletionBatch& operator=(const CompletionBatch&) = delete;

  /// Errors as for Runtime::complete. Wait-free.
  Status add(Ticket ticket, double cost) noexcept;
  Status add_nano(Ticket ticket, std::int64_t cost_nano) noexcept;
  /// Publishes everything added since the last flush. Lock-free (one push, as complete()).
  void flush() noexcept;
  [[nodiscard]] std::size_t pending() const noexcept { return count_; }

 private:
  Runtime::Impl* impl_;
  detail::TicketRecord* first_ = nullptr;
  detail::TicketRecord* last_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace creditloop
