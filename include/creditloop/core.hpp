// creditloop/core.hpp: the deterministic dispatcher core: the scheduling contract
// (docs/contract.md §1-5) as a single-threaded state machine that reads no clock and starts no
// thread.
//
//  - Every call that depends on time takes `now`; the embedder runs the loop only while its
//    server has room. Use the core directly in a simulator, a test, or an embedder that already
//    serialises all calls on one thread; otherwise use the runtime (runtime.hpp).
//  - run() is the loop of docs/design.md#calls with a small handler: prefer it. dispatch() runs
//    it for a known room (a slot count) into a span of decisions: the cheapest per decision.
//  - O(log64 N) per visit, O(1) per submission and completion, nothing allocated on either once
//    reserve() has been called. Past the reservation a visit grows the in-flight records a chunk
//    at a time and dispatches nothing if that fails: the loop never throws.
//  - No atomics but a request's hand-back state: a runtime's dispatcher calls complete_nano()
//    with each completion's cost before its next decision.
//
// Why: docs/design.md#the-core
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "creditloop/bucket.hpp"
#include "creditloop/detail/chunked_table.hpp"
#include "creditloop/detail/name_index.hpp"
#include "creditloop/detail/place_store.hpp"
#include "creditloop/detail/ready_set.hpp"
#include "creditloop/detail/timer_heap.hpp"
#include "creditloop/error.hpp"
#include "creditloop/participant.hpp"
#include "creditloop/plan.hpp"
#include "creditloop/request.hpp"
#include "creditloop/ticket.hpp"
#include "creditloop/units.hpp"

namespace creditloop {

/// One decision: a request that went out. The core returns it from a visit; a runtime hands it to
/// its sink with the runtime's own ticket in place of the core's.
struct Decision {
  RequestHook* request = nullptr;
  Ticket ticket;  // complete the request with this
  ParticipantId participant;
  ClassId out = 0;   // the class it went out under; the unmetered class id (k) when no credit
  ClassId turn = 0;  // the class of the turn that visited it
  Nanos at = 0;      // the clock at the decision
};

/// What a completion did.
struct Completion {
  ParticipantId participant;
  ClassId bucket = 0;    // the admitting class; k for an unmetered request
  bool charged = false;  // false when the cost went nowhere (unmetered, removed, dropped bucket)
  // The participant is still registered: false once it was removed after the dispatch. Said
  // here so that a caller keeping its own per-participant state needs no second lookup.
  bool registered = false;
};

namespace detail {
// Defined by the tests alone, which move a ticket record to a generation no test could reach by
// use.
struct CoreTestAccess;
}  // namespace detail

class Core {
 public:
  /// Validates `config` once. Throws std::invalid_argument naming the plan and field at fault.
  explicit Core(Config config);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // ---- configuration ----------------------------------------------------------------------
  [[nodiscard]] int classes() const noexcept { return k_; }
  [[nodiscard]] ClassId unmetered() const noexcept { return static_cast<ClassId>(k_); }
  [[nodiscard]] const Config& config() const noexcept { return config_; }
  /// This core's identity, stamped on every ticket and participant id it issues
  /// (detail/issuer.hpp): another core refuses them.
  [[nodiscard]] std::uint32_t issuer() const noexcept { return issuer_; }
  [[nodiscard]] std::optional<PlanId> find_plan(std::string_view name) const noexcept;
  [[nodiscard]] bool plan_holds(PlanId plan, ClassId c) const noexcept;

  /// Reserves room so that up to `participants` registrations and `in_flight` outstanding
  /// dispatches allocate nothing more. May allocate.
  void reserve(std::size_t participants, std::size_t in_flight);
  /// The in-flight half of reserve(): records for up to `in_flight` outstanding dispatches (at
  /// most kMaxInFlight). May allocate; if that fails it throws std::bad_alloc and nothing changed.
  void reserve_in_flight(std::size_t in_flight);
  /// Outstanding dispatches the records reserved so far hold without allocating.
  [[nodiscard]] std::size_t in_flight_capacity() const noexcept {
    return in_flight_records_.capacity();
  }

  // ---- participants (may allocate; dispatcher thread only) --------------------------------
  /// Registers a participant at the end of the ring, or in the place of a removed one. Its
  /// buckets start full at `now`. Errors: unknown_plan, duplicate_name, bad_shares,
  /// too_many_participants.
  Result<ParticipantId> add(std::string_view name, std::string_view plan, std::uint32_t shares,
                            Nanos now);
  Result<ParticipantId> add(std::string_view name, PlanId plan, std::uint32_t shares, Nanos now);

  /// Unregisters `p` and hands back its queued requests, oldest first; each is the caller's once
  /// the list hands it back (request.hpp, RequestList). Its in-flight requests
  /// stay completable; their costs are counted nowhere but in the core totals. Errors:
  /// unknown_participant.
  Result<RequestList> remove(ParticipantId p);

  /// Gives `p` a new plan and share count. Each bucket the new plan still holds keeps its balance
  /// (refilled to `now` at the old terms), clipped to the new capacity; a newly held bucket starts
  /// full; a dropped one is gone, and completions it admitted are charged nowhere.
  /// Errors: unknown_participant, unknown_plan, bad_shares.
  /// A participant's scale (see scale()) is kept: the new terms are scaled alike.
  Status replan(ParticipantId p, PlanId plan, std::uint32_t shares, Nanos now);

  /// Gives `p` a fraction of its plan, in millionths (kWholePlan, which every participant starts
  /// at, is the whole plan): each bucket's rate becomes the plan's rate x shares x millionths /
  /// 1e6 and its capacity burst x shares x millionths / 1e6, in nano-credits, rounded down. As for
  /// a re-plan, each bucket keeps its balance (refilled to `now` at the old terms), clipped to the
  /// new capacity. A bucket whose capacity falls below one credit, or whose rate rounds to 0, gets
  /// no further credit until scaled up (at 0, `p` only goes out unmetered); its balance is kept.
  /// Errors, tested in this order: unknown_participant, bad_scale (above kWholePlan); on error
  /// nothing changes. O(k); no allocation.
  Status scale(ParticipantId p, std::uint32_t millionths, Nanos now) noexcept;

  [[nodiscard]] std::optional<ParticipantId> find(std::string_view name) const;
  [[nodiscard]] bool contains(ParticipantId p) const noexcept;
  /// Preconditions for these five: contains(p).
  [[nodiscard]] std::string_view name(ParticipantId p) const noexcept;
  [[nodiscard]] PlanId plan(ParticipantId p) const noexcept;
  [[nodiscard]] std::uint32_t shares(ParticipantId p) const noexcept;
  /// The fraction of its plan `p` has, in millionths (scale()).
  [[nodiscard]] std::uint32_t scale_of(ParticipantId p) const noexcept;
  [[nodiscard]] ParticipantStats stats(ParticipantId p) const noexcept;

  /// Participants registered now, and places in the ring (registered or free).
  [[nodiscard]] std::size_t size() const noexcept { return live_; }
  [[nodiscard]] std::uint32_t ring_size() const noexcept { return ring_size_; }
  /// The participant at ring place `place`, if one is registered there.
  [[nodiscard]] std::optional<ParticipantId> at(std::uint32_t place) const noexcept;

  // ---- requests (noexcept, no allocation) --------------------------------------------------
  /// Appends `request` to `p`'s queue. On error the request is not linked and nothing changes:
  /// unknown_participant; already_queued (it is queued, or dispatched and not yet completed, or
  /// in a handed-back RequestList not yet walked past it: a request is the caller's again once
  /// completed, or once its list hands it back). O(1), or O(k) when the queue was empty.
  Status submit(ParticipantId p, RequestHook& request, Nanos now) noexcept;

  /// Withdraws a queued request (its client went away): it leaves its participant's queue, takes
  /// no credit, and is the caller's again when this returns. The participant keeps its place in
  /// every class's cursor, and a queue left empty goes idle as after its last dispatch. Errors:
  /// not_queued (not queued in this core: the caller's already, handed back, or queued in another
  /// core or still in a runtime's inbox); in_flight (dispatched: complete it as usual). On error
  /// nothing changes. O(1); no allocation.
  Status withdraw(RequestHook& request) noexcept;

  /// Queued requests of `p` (0 for an unknown participant).
  [[nodiscard]] std::size_t queued(ParticipantId p) const noexcept;
  /// When `p`'s oldest queued request was queued (its RequestHook::queued_at); nothing when its
  /// queue is empty or `p` is unknown. O(1).
  [[nodiscard]] std::optional<Nanos> oldest_queued_at(ParticipantId p) const noexcept;
  /// Participants with a non-empty queue.
  [[nodiscard]] std::size_t waiting() const noexcept { return waiting_.count(); }

  // ---- the loop (noexcept, no allocation once reserved) ------------------------------------
  /// Step 2: settles the turn class at `now` and starts its turn. Nothing when every queue is
  /// empty. Ends any turn in progress first.
  std::optional<ClassId> begin_turn(Nanos now) noexcept;

  /// Step 3-4: the next visit of the current turn, or nothing when the cursor has been once round
  /// the ring (the turn is then over). Call only while the server has room. A participant
  /// registered during a turn is not visited by it: it joins the ring for the next turn.
  ///  - Every dispatch holds an in-flight record until its completion. When all are in use and
  ///    the table cannot grow (the allocation failed, or kMaxInFlight are in flight), the visit
  ///    does nothing, ends the turn as a full room would, returns nothing and counts one in
  ///    record_shortages(): a loop should stop there until a completion frees a record (run()
  ///    does). reserve() up front for a bound that never needs to grow.
  std::optional<Decision> visit(Nanos now) noexcept;

  /// Steps 2-4 for up to out.size() dispatches at `now`: begins turns as they end, visits, and
  /// stores each dispatch in `out`, in order; stops early when every queue is empty. The same
  /// decisions as the loop of begin_turn and visit, at less cost per decision (no call and no
  /// copy of the outcome per visit): for a dispatcher that knows its room. It does not end the
  /// turn it stops in: call end_turn() when the server has no room left. It stops early too, the
  /// turn ended, when no in-flight record is left and none can be grown, as visit() does.
  std::size_t dispatch(Nanos now, std::span<Decision> out) noexcept;

  /// The server has no room: the current turn ends here.
  void end_turn() noexcept { turn_.active = false; }

  [[nodiscard]] bool in_turn() const noexcept { return turn_.active; }
  /// Visits (and dispatch() calls) that found every in-flight record in use and could not grow
  /// the table, so dispatched nothing and ended the turn (see visit()).
  [[nodiscard]] std::uint64_t record_shortages() const noexcept { return record_shortages_; }
  /// Turns begun on class c (the unmetered class included) since construction: how a caller of
  /// dispatch(), which begins turns unseen, counts turns.
  [[nodiscard]] std::uint64_t turns(ClassId c) const noexcept { return turns_[c]; }
  [[nodiscard]] std::optional<ClassId> turn_class() const noexcept {
    return turn_.active ? std::optional<ClassId>(turn_.cls) : std::nullopt;
  }

  /// Runs the loop at `now` while `handler.room()` is true, work is queued and an in-flight record
  /// can be had (see visit()). Calls `handler.on_turn(ClassId)` when a turn settles its class and
  /// `handler.on_dispatch(const Decision&)` for each dispatch (the handler takes the room there).
  /// Returns the dispatch count.
  template <class Handler>
  std::size_t run(Nanos now, Handler&& handler) {
    std::size_t dispatched = 0;
    while (handler.room()) {
      if (!turn_.active) {
        const std::optional<ClassId> c = begin_turn(now);
        if (!c) return dispatched;
        handler.on_turn(*c);
      }
      const std::uint64_t shortages = record_shortages_;
      if (const std::optional<Decision> d = visit(now)) {
        ++dispatched;
        handler.on_dispatch(*d);
      } else if (record_shortages_ != shortages) {
        return dispatched;  // no record for a ticket: the turn has ended, as without room
      }
    }
    end_turn();
    return dispatched;
  }

  // ---- completions -------------------------------------------------------------------------
  /// Charges `cost` credits (taken to 9 decimals) to the request's admitting bucket, after its
  /// refill to `now`, and retires the ticket. Errors, tested in this order: bad_cost,
  /// unknown_ticket (never issued), stale_ticket (completed already); on error nothing changes.
  /// The cost is converted here, once: everything after it is fixed point.
  Result<Completion> complete(Ticket t, double cost, Nanos now) noexcept {
    const std::optional<std::int64_t> nano = to_nano_credits(cost, kMaxCost);
    if (!nano) return Errc::bad_cost;
    return complete_ticket<true>(t, *nano, now);
  }
  /// The same with a cost already in nano-credits (0 .. kMaxCost * 1e9).
  Result<Completion> complete_nano(Ticket t, std::int64_t cost_nano, Nanos now) noexcept {
    return complete_ticket<true>(t, cost_nano, now);
  }
  /// complete_nano() for an embedder that hands each request back to its owner itself, before
  /// the core hears of its completion (the runtime's completers do): the request's hook is not
  /// touched, since by then it may be queued again elsewhere or gone.
  Result<Completion> retire_nano(Ticket t, std::int64_t cost_nano, Nanos now) noexcept {
    return complete_ticket<false>(t, cost_nano, now);
  }
  /// Dispatched and not yet completed.
  [[nodiscard]] std::size_t in_flight() const noexcept {
    return in_flight_records_.capacity() - free_count_;
  }

  // ---- reading balances (each read refills to `now` first) --------------------------------
  [[nodiscard]] bool holds(ParticipantId p, ClassId c) const noexcept;
  /// `p`'s balance in class c in nano-credits. Errors: unknown_participant, unknown_class (c not
  /// metered, or not held by p's plan).
  Result<Balance> balance(ParticipantId p, ClassId c, Nanos now) noexcept;
  /// The first instant, at or after `now`, at which `p`'s class-c bucket has a credit: `now` when
  /// it has one, otherwise the exact nanosecond its refill reaches one (the instant its timer is
  /// filed at). Nothing for an unknown participant, a class `p`'s plan does not hold, an instant
  /// beyond the clock's end, or a bucket scaled so far down that it never refills to a credit.
  /// O(k) (refills the buckets to `now`).
  std::optional<Nanos> next_credit(ParticipantId p, ClassId c, Nanos now) noexcept;
  /// Whether `p` qualifies for class c at `now`: a queued request and, for a metered class, a
  /// credit in its c bucket. False for an unknown participant.
  bool qualifies(ParticipantId p, ClassId c, Nanos now) noexcept;

  /// Calls f(ParticipantId) for each participant with queued work, in ring order from the first.
  /// O(W log64 N).
  template <class F>
  void for_each_waiting(F&& f) const {
    for (std::uint32_t place = waiting_.find_next(0); place != detail::ReadySet::npos;
         place = waiting_.find_next(place + 1)) {
      f(ParticipantId{place, header_at(place).generation, issuer_});
    }
  }

  /// Hands back every queued request of every participant (shutdown), oldest first per
  /// participant and participants in ring order; ends any turn. Participants stay registered.
  /// O(requests handed back): each is marked as the list's, and is the caller's again once the
  /// list hands it back (request.hpp, RequestList).
  RequestList take_all_queued() noexcept;

 private:
  friend struct detail::CoreTestAccess;

  struct alignas(64) Header {  // hot per-participant state, one cache line
    RequestHook* head = nullptr;
    RequestHook* tail = nullptr;
    Nanos refilled_at = 0;
    std::uint64_t joined_turn = 0;  // the turn during which it registered, or 0
    std::uint64_t unmetered_dispatched = 0;
    // While waiting: the earliest instant at which a held bucket has a credit (the minimum when
    // one has it now). Settled after every re-filing, so an unmetered visit that finds it ahead
    // of the clock reads no bucket line at all.
    Nanos credit_from = std::numeric_limits<Nanos>::max();
    std::uint32_t generation = 0;  // of the latest registration in this place
    std::uint32_t queued = 0;
    // Millionths of the plan (scale()). No visit reads it: it sits in the line's spare bytes
    // because in Cold, whose entries are all zero by default, it made growing that vector
    // construct each entry in turn instead of clearing memory (13 % more instructions per add).
    std::uint32_t scale = kWholePlan;
    std::uint8_t held = 0;  // bit c: the plan holds class c
    bool live = false;
  };
  struct alignas(64) BucketRec {    // one cache line per bucket, right after its Header
    Atto value = 0;                 // the exact value as of the header's refilled_at (bucket.hpp)
    std::uint64_t rate = 0;         // nano-credits per second: plan rate x shares x scale
    std::uint64_t cap = 0;          // nano-credits: plan burst x shares x scale
    std::uint64_t dispatched = 0;   // kept across re-plans: counts every dispatch in this class
    std::uint32_t incarnation = 0;  // bumped when a re-plan creates or drops this bucket
    // Its entry in the class's timer heap. While its participant waits, the key is the exact
    // instant its value (as last filed) reaches a credit, or the clock's end if never.
    detail::TimerHandle timer;
    [[nodiscard]] bool has_credit() const noexcept { return creditloop::has_credit(value); }
    // The capacity as an exact value: a multiply by a constant, cheaper than a second 16-byte
    // field, which would not fit the line.
    [[nodiscard]] Atto cap_atto() const noexcept { return to_atto_unsigned(cap); }
    // Whether its capacity reaches one credit (has_credit() asks it of the value). Only a plan
    // scaled down has less, and then no refill brings a credit (credit_instant() ignores the cap).
    [[nodiscard]] bool cap_reaches_a_credit() const noexcept {
      return cap >= static_cast<std::uint64_t>(kNanoPerCredit);
    }
  };
  static_assert(sizeof(Header) == 64);
  static_assert(sizeof(BucketRec) == 64);
  using Places = detail::PlaceStore<Header, BucketRec>;
  // Class c's timer heap keeps each participant's timer handle in its c bucket.
  struct BucketTimers {
    Places* places = nullptr;
    ClassId c = 0;
    detail::TimerHandle& operator()(std::uint32_t place) const noexcept {
      return places->bucket(place, c).timer;
    }
  };
  struct Cold {  // per-place state that no visit reads
    PlanId plan = 0;
    std::uint32_t shares = 0;
    std::uint64_t completed = 0;
    Balance cost_charged = 0;
    Balance cost_uncharged = 0;
  };
  struct InFlight {
    // Odd while in flight. 64 bits: 2^63 uses of one record before it wraps (ticket.hpp).
    std::uint64_t generation = 0;
    std::uint32_t place = 0;
    std::uint32_t participant_generation = 0;
    std::uint32_t incarnation = 0;
    ClassId bucket = 0;
    RequestHook* request = nullptr;  // handed back to its caller at completion
  };
  struct PlanTerms {
    std::array<std::uint64_t, kMaxClasses> rate{};  // nano-credits per second per share
    std::array<std::int64_t, kMaxClasses> burst{};  // nano-credits per share
    std::uint8_t held = 0;
  };
  struct Turn {
    bool active = false;
    bool wrapped = false;
    ClassId cls = 0;
    std::uint32_t start = 0;  // the place just after the cursor when the turn began
    std::uint32_t end = 0;    // the ring's size when the turn began
    std::uint32_t next = 0;   // the next place the cursor reaches
    std::uint64_t serial = 0;
  };
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const noexcept {
      return std::hash<std::string_view>{}(name);
    }
  };

  Header& header_at(std::uint32_t place) noexcept { return places_store_.header(place); }
  const Header& header_at(std::uint32_t place) const noexcept {
    return places_store_.header(place);
  }
  BucketRec& bucket(std::uint32_t place, ClassId c) noexcept {
    return places_store_.bucket(place, c);
  }
  const BucketRec& bucket(std::uint32_t place, ClassId c) const noexcept {
    return places_store_.bucket(place, c);
  }
  // The stored name of a place, for name_index_.
  auto name_of() const noexcept {
    return [this](std::uint32_t place) -> std::string_view { return names_[place]; };
  }
  [[nodiscard]] bool live(ParticipantId p) const noexcept;
  // p's header when p is registered here, else null: the check and the lookup in one.
  [[nodiscard]] const Header* live_header(ParticipantId p) const noexcept;
  Header* live_header(ParticipantId p) noexcept {
    return const_cast<Header*>(std::as_const(*this).live_header(p));
  }
  void set_terms(std::uint32_t place, ClassId c) noexcept;
  static BucketRec* buckets_of(Header& header) noexcept { return Places::buckets_after(header); }
  static const BucketRec* buckets_of(const Header& header) noexcept {
    return Places::buckets_after(header);
  }
  void bring_to(std::uint32_t place, Nanos now) noexcept { bring_to(header_at(place), now); }
  static void bring_to(Header& header, Nanos now) noexcept;
  // Nanoseconds from the participant's last refill to `now` (0 when `now` is not later).
  [[nodiscard]] static std::uint64_t since_refill(const Header& header, Nanos now) noexcept {
    return now > header.refilled_at
               ? static_cast<std::uint64_t>(now) - static_cast<std::uint64_t>(header.refilled_at)
               : 0;
  }
  // Whether every held bucket but c's is full: a refill changes none of them (a full bucket
  // stays full), so that when take_behind() reaches c's cap the participant's refill instant
  // may move to the present, c's value there being exact, and the next gap starts from there.
  [[nodiscard]] static bool others_full(const Header& header, ClassId c) noexcept;
  // Whether a class in `among` has a credit at `now`, read from the filing alone: a waiting
  // participant's held bucket without a credit as of its last refill has its exact credit
  // instant in its timer handle.
  [[nodiscard]] static bool credit_at(const Header& header, std::uint8_t among, Nanos now) noexcept;
  // Files class c of waiting `s` after a charge taken behind its refill (take_behind), which
  // left it `credit_now` at `now`: only what changed moves. A participant that keeps its credit
  // keeps its place in the ready set.
  void file_charged(std::uint32_t place, Header& header, ClassId c, bool credit_now) noexcept;
  void refile(std::uint32_t place, Header& header, ClassId c) noexcept;
  // refile() for a bucket just debited below a credit by a participant from c's ready set, whose
  // c timer is therefore not filed (the ready set and the timer heap never both hold a place).
  void file_spent(std::uint32_t place, Header& header, ClassId c) noexcept;
  // Every held class, then the earliest credit instant: for a waiting participant that changes
  // plan.
  void refile_held(std::uint32_t place, Header& header) noexcept;
  void enter_waiting(std::uint32_t place) noexcept;
  // A queue that was empty has its first request: refilled to `now`, it enters the waiting set.
  // Returns submit()'s status, ok.
  [[gnu::noinline]] Status start_waiting(Header& header, std::uint32_t place, Nanos now) noexcept;
  // Whether any held bucket of waiting `s` may have a credit at `now`. False proves none has one
  // (filing is exact); reads only the header line.
  [[nodiscard]] static bool credit_possible(const Header& header, Nanos now) noexcept {
    return header.credit_from <= now;
  }
  // Sets s.credit_from from the held buckets, each filed already.
  static void settle_credit_from(Header& header) noexcept;
  void leave_waiting(std::uint32_t place) noexcept;
  // Takes `place` out of the timer heaps of the classes in `held`, and gives their ids back: it
  // is leaving, or it has new terms.
  void forget_timers(std::uint32_t place, std::uint8_t held) noexcept;
  // Moves class c's participants whose credit has landed by `now` into its ready set; one
  // compare when none has.
  void expire_timers(ClassId c, Nanos now) noexcept {
    if (timers_[c].may_be_due(now)) expire_due_timers(c, now);
  }
  [[gnu::noinline]] void expire_due_timers(ClassId c, Nanos now) noexcept;
  // The turn's next stop in `set` (its place in `place`), past any participant that registered
  // during the turn; null when the cursor has been round (the turn is then over).
  Header* next_stop(const detail::ReadySet& set, std::uint32_t& place) noexcept;
  // One visit of the current turn: true with the dispatch in `d`, false when the turn is over.
  bool visit_turn(Nanos now, Decision& d) noexcept;
  // The same for a metered class c, or the unmetered class. kClass is c when c is 0 or 1, a
  // constant to the compiler (see visit_turn()), and -1 for any other c. Always inlined: the
  // attribute must be on this first declaration for a template's copies to take it.
  template <int kClass>
  [[gnu::always_inline]] bool visit_metered(ClassId c, Nanos now, Decision& d) noexcept;
  bool visit_unmetered(Nanos now, Decision& d) noexcept;
  // The visit of `place` after refilling its buckets, when the usual visit (taken behind the
  // refill) does not apply: true with the dispatch in `d`, false when a charge-back took its
  // credit since it was filed (it is then re-filed, and the turn moves on).
  [[gnu::noinline]] bool visit_refilled(std::uint32_t place, Header& header, ClassId c, Nanos now,
                                        Decision& d) noexcept;
  [[gnu::noinline]] void visit_unmetered_with_credit(std::uint32_t place, Header& header, Nanos now,
                                                     Decision& d) noexcept;
  // Moves the look-ahead on from the stop that just dispatched (a ring of kPrefetchFrom places
  // or more).
  [[gnu::noinline]] void prefetch_ahead() noexcept;
  [[gnu::noinline]] void start_lookahead(std::uint32_t place) noexcept;
  // Finds the stop after the frontier and prefetches its record; false at the turn's end.
  bool look_ahead_once() noexcept;
  static constexpr int kLookAhead = 8;
  static const Header kNoRecord;  // no queue, holds nothing: the look-ahead's filler
  struct Lookahead {              // prefetch_ahead's frontier in the current turn
    // The place after the furthest stop prefetched; 0 when a turn begins or wraps, which no
    // stop is below, so that the next dispatch starts afresh.
    std::uint32_t from = 0;
    std::uint32_t end = 0;                  // where this side of the turn's walk ends
    std::uint32_t found = 0;                // stops prefetched since the fresh start
    const detail::ReadySet* set = nullptr;  // the turn's stops: its class's ready set, or waiting_
    bool whole_record = false;              // a metered turn: the buckets' lines too
    std::array<const Header*, kLookAhead> records{};  // the latest of them, by found % kLookAhead
  };
  // Counts the dispatch under `out`, dequeues the oldest request, issues its ticket and moves the
  // turn's cursor here, into `d`. The caller has debited `out` (behind the refill or after it)
  // and then files what changed.
  void take_oldest(std::uint32_t place, Header& header, ClassId out, ClassId turn, Nanos now,
                   Decision& d) noexcept;
  // After a visit that read the buckets: a queue left empty goes idle; otherwise `out` is
  // re-filed when `refile_out`, and the earliest credit instant is settled again.
  void file_after_debit(std::uint32_t place, Header& header, ClassId out, bool refile_out) noexcept;
  static constexpr ClassId kNoClass = 0xff;
  // The highest class in `among` whose bucket has a credit, or kNoClass. Reads no clock: the
  // buckets must be refilled already.
  [[nodiscard]] static ClassId highest_credit(const Header& header, std::uint8_t among) noexcept;
  [[nodiscard]] std::uint32_t next_in_turn(const detail::ReadySet& set) noexcept;
  // Stores unconditionally: a select and a store, where a conditional store took a branch.
  Nanos advance_clock(Nanos now) noexcept {
    now_ = now > now_ ? now : now_;
    return now_;
  }
  void grow_places(std::uint32_t places);
  Ticket issue(std::uint32_t place, std::uint32_t generation, ClassId out,
               std::uint32_t incarnation, RequestHook& request) noexcept;
  // complete_nano() and retire_nano() in one: kHandBack says which. A template parameter, not a
  // seventh argument, which went through the stack on every completion.
  template <bool kHandBack>
  Result<Completion> complete_ticket(Ticket t, std::int64_t cost_nano, Nanos now) noexcept;
  // Whether the next visit has a record for its ticket: one is free, or the table grew by a chunk.
  // Checked before the visit changes anything, so that a growth that fails leaves all as it was.
  [[nodiscard]] bool record_ready() noexcept { return free_count_ != 0 || grow_records(); }
  // Out of line and cold, so that a visit saves no registers for it. False when the allocation
  // failed or kMaxInFlight records exist: the caller dispatches nothing (see visit()).
  [[gnu::cold, gnu::noinline]] bool grow_records() noexcept;
  // Puts the records the table grew past `from` on the free list.
  void free_new_records(std::size_t from) noexcept;

  Config config_;
  std::uint32_t issuer_;
  int k_ = 2;
  std::vector<PlanTerms> terms_;
  std::unordered_map<std::string, PlanId, NameHash, std::equal_to<>> plan_index_;

  Places places_store_;
  // A deque, so that growing it moves no name: name() hands out views into them.
  std::deque<std::string> names_;
  std::vector<Cold> cold_;
  detail::NameIndex name_index_;            // into names_
  std::vector<std::uint32_t> free_places_;  // LIFO: the most recently freed place is reused first
  std::uint32_t ring_size_ = 0;
  std::size_t live_ = 0;

  detail::ReadySet waiting_;
  std::array<detail::ReadySet, kMaxClasses> ready_;
  std::array<detail::BasicTimerHeap<BucketTimers>, kMaxClasses> timers_;
  std::array<std::int64_t, kMaxClasses + 1> cursor_{};  // place of the last dispatch; -1 = none
  std::array<std::uint64_t, kMaxClasses + 1> turns_{};
  Turn turn_;
  Lookahead lookahead_;

  std::uint32_t places_ = 0;  // capacity of the per-place structures

  detail::ChunkedTable<InFlight> in_flight_records_;
  // The free records, taken from the top: the first free_count_ entries. Sized for every record,
  // so that a completion stores without the capacity test of a push_back. Every record is on it
  // unless in flight, so the records in flight are the others: no count of its own to keep.
  std::vector<std::uint32_t> free_tickets_;
  std::uint32_t free_count_ = 0;
  std::uint64_t record_shortages_ = 0;

  // The latest time seen: time never runs backwards inside the core.
  Nanos now_ = std::numeric_limits<Nanos>::min();
};

}  // namespace creditloop
