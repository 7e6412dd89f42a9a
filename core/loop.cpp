// A request's way through the core: queued (submit, withdraw), dispatched in a turn (the class,
// the cursor's visits, the ticket), completed (the cost charged back), and the filing of
// buckets in the ready sets and timers that all three change. One file, so that GCC inlines
// these calls as it sees fit: split into a file each around a shared header, the hot paths'
// inlining changed and a cycle cost 5 to 11 % more instructions (tools/instruction-budget).
// Even its cold part apart (withdraw, take_all_queued and the queue's queries in a file of their
// own) cost 10 more per decision and per cycle, so it stays one file above the house's 700 lines.
#include "creditloop/core.hpp"

#include "creditloop/detail/hand_back.hpp"
#include "creditloop/detail/queued_mark.hpp"

#include <algorithm>
#include <bit>
#include <new>

namespace creditloop {
namespace {

// Ring size from which a visit prefetches the next stop's record: about where the records of a
// ring (192 bytes each at k = 2) outgrow a core's share of L2.
constexpr std::uint32_t kPrefetchFrom = 8192;

// The gap since a participant's last refill past which a visit that fills a bucket moves the
// refill instant to the present (when nothing else needs refilling). Taken at the cap, the
// stored value is the cap less the refill over the gap, which sinks as the gap grows until it
// lacks the credit the bucket has and the visit takes the slow path; a shorter gap would check
// the other buckets on most visits.
constexpr std::uint64_t kCatchUpGap = 1'000'000;

}  // namespace

bool Core::live(ParticipantId p) const noexcept { return live_header(p) != nullptr; }

const Core::Header* Core::live_header(ParticipantId p) const noexcept {
  if (p.place >= ring_size_) return nullptr;
  const Header& header = header_at(p.place);
  return header.live && header.generation == p.generation && p.issuer == issuer_ ? &header
                                                                                 : nullptr;
}

// ---- buckets and filing ---------------------------------------------------------------------

void Core::bring_to(Header& header, Nanos now) noexcept {
  if (now <= header.refilled_at) return;
  // In unsigned arithmetic: a participant registered before 0 and read near the clock's end is
  // more than INT64_MAX nanoseconds behind.
  const std::uint64_t dt =
      static_cast<std::uint64_t>(now) - static_cast<std::uint64_t>(header.refilled_at);
  header.refilled_at = now;
  BucketRec* buckets = buckets_of(header);
  for (std::uint8_t held = header.held; held != 0; held &= static_cast<std::uint8_t>(held - 1)) {
    BucketRec& b = buckets[std::countr_zero(held)];
    refill(b.value, dt, b.rate, b.cap_atto());
  }
}

void Core::refile(std::uint32_t place, Header& header, ClassId c) noexcept {
  BucketRec& b = buckets_of(header)[c];
  if (b.has_credit()) {
    timers_[c].erase(place);
    ready_[c].set(place);
  } else {
    ready_[c].clear(place);
    Nanos due = 0;
    // A bucket just debited had a credit, so file_spent() needs no such test: only one scaled
    // below a capacity of one credit reaches this branch without ever having had one.
    if (b.cap_reaches_a_credit() && credit_instant(b.value, b.rate, header.refilled_at, due)) {
      timers_[c].set(place, due);
    } else {
      // Its credit lies beyond the clock, or never comes at these terms: nothing to wait for.
      timers_[c].erase(place);
      b.timer.set_instant(std::numeric_limits<Nanos>::max());
    }
  }
}

void Core::file_spent(std::uint32_t place, Header& header, ClassId c) noexcept {
  BucketRec& b = buckets_of(header)[c];
  ready_[c].clear(place);
  Nanos due = 0;
  if (credit_instant(b.value, b.rate, header.refilled_at, due)) {
    timers_[c].file(place, due);
  } else {
    b.timer.set_instant(std::numeric_limits<Nanos>::max());
  }
}

bool Core::others_full(const Header& header, ClassId c) noexcept {
  const BucketRec* buckets = buckets_of(header);
  for (auto others = static_cast<std::uint8_t>(header.held & ~(1u << c)); others != 0;
       others &= static_cast<std::uint8_t>(others - 1)) {
    const BucketRec& b = buckets[std::countr_zero(others)];
    if (b.value < b.cap_atto()) return false;
  }
  return true;
}

bool Core::credit_at(const Header& header, std::uint8_t among, Nanos now) noexcept {
  const BucketRec* buckets = buckets_of(header);
  for (; among != 0; among &= static_cast<std::uint8_t>(among - 1)) {
    const BucketRec& b = buckets[std::countr_zero(among)];
    if (b.has_credit() || b.timer.instant() <= now) return true;
  }
  return false;
}

void Core::file_charged(std::uint32_t place, Header& header, ClassId c, bool credit_now) noexcept {
  BucketRec& b = buckets_of(header)[c];
  if (!credit_now) {
    refile(place, header, c);  // its credit instant lies ahead: filed at it
    settle_credit_from(header);
    return;
  }
  // It had the credit before the charge too, so it is in the ready set already, or its timer
  // has fallen due and waits to be moved there.
  if (!b.has_credit()) [[unlikely]] {
    // A credit at `now` but not as of the last refill: the handle must hold the exact instant it
    // came (settle_credit_from reads it), at or before `now`.
    Nanos due = 0;
    (void)credit_instant(b.value, b.rate, header.refilled_at, due);
    timers_[c].erase(place);
    b.timer.set_instant(due);
    ready_[c].set(place);
  } else if (!ready_[c].test(place)) [[unlikely]] {
    timers_[c].erase(place);
    ready_[c].set(place);
  }
  // What settle_credit_from would find: a held bucket with a credit makes it "now".
  header.credit_from = std::numeric_limits<Nanos>::min();
}

void Core::settle_credit_from(Header& header) noexcept {
  // A held bucket without a credit is filed at its exact instant (or the clock's end), since
  // every debit, charge and re-plan that took a credit away re-filed it. A due timer that expired
  // into the ready set kept its key, so "key reached" covers it too.
  const BucketRec* buckets = buckets_of(header);
  Nanos earliest = std::numeric_limits<Nanos>::max();
  for (std::uint8_t held = header.held; held != 0; held &= static_cast<std::uint8_t>(held - 1)) {
    const BucketRec& b = buckets[std::countr_zero(held)];
    const Nanos instant = b.has_credit() ? std::numeric_limits<Nanos>::min() : b.timer.instant();
    if (instant < earliest) earliest = instant;
  }
  header.credit_from = earliest;
}

void Core::refile_held(std::uint32_t place, Header& header) noexcept {
  for (std::uint8_t held = header.held; held != 0; held &= static_cast<std::uint8_t>(held - 1)) {
    refile(place, header, static_cast<ClassId>(std::countr_zero(held)));
  }
  settle_credit_from(header);
}

void Core::enter_waiting(std::uint32_t place) noexcept {
  waiting_.set(place);
  Header& header = header_at(place);
  BucketRec* buckets = buckets_of(header);
  for (std::uint8_t held = header.held; held != 0; held &= static_cast<std::uint8_t>(held - 1)) {
    const auto c = static_cast<ClassId>(std::countr_zero(held));
    // A timer still filed from before the participant went idle is exact: whatever changed the
    // bucket took the timer out (the dispatch that emptied the queue, a charge or re-plan while
    // idle), and refill alone does not move the instant. Only a credit that has landed since
    // needs the ready set.
    if (buckets[c].has_credit() || !timers_[c].contains(place)) refile(place, header, c);
  }
  settle_credit_from(header);
}

void Core::leave_waiting(std::uint32_t place) noexcept {
  waiting_.clear(place);
  // The timers stay filed (a participant that comes back before its credit lands finds them
  // exact, and one that fires meanwhile is dropped by expire_timers): going idle and coming back,
  // the usual life of a queue one request deep, then costs no timer work and no division.
  for (std::uint8_t held = header_at(place).held; held != 0;
       held &= static_cast<std::uint8_t>(held - 1)) {
    ready_[std::countr_zero(held)].clear(place);
  }
}

void Core::forget_timers(std::uint32_t place, std::uint8_t held) noexcept {
  for (; held != 0; held &= static_cast<std::uint8_t>(held - 1)) {
    timers_[std::countr_zero(held)].forget(place);
  }
}

void Core::expire_due_timers(ClassId c, Nanos now) noexcept {
  auto& timers = timers_[c];
  // A due instant is exact: every change to the bucket since it was filed (debit, charge,
  // re-plan) re-filed it. So a due participant has its credit and joins the ready set without
  // its record being read (only its timer handle is written; the visit re-tests the credit anyway,
  // for one comparison).
  for (std::uint32_t place = timers.pop_due(now); place != detail::TimerHeap::npos;
       place = timers.pop_due(now)) {
    // An idle participant's timer only falls due: its bucket has the credit, which it finds
    // when it next starts waiting.
    if (waiting_.test(place)) ready_[c].set(place);
  }
}

// ---- requests -------------------------------------------------------------------------------

Status Core::submit(ParticipantId p, RequestHook& request, Nanos now) noexcept {
  Header* const found = live_header(p);
  if (found == nullptr) return Errc::unknown_participant;
  // relaxed: the core runs on one thread; a runtime's producer marked the request kInbox before
  // the inbox's hand-off, which orders that store before this load.
  const std::uint8_t state = request.held.load(std::memory_order_relaxed);
  if (state != RequestHook::kIdle && state != RequestHook::kInbox) {
    return Errc::already_queued;  // queued, in flight, or in a list not yet walked past it
  }
  // Another runtime's dispatcher may read whose it is now (withdraw()): detail/queued_mark.hpp.
  detail::mark_queued(request, issuer_, p.place, RequestHook::kQueued);
  now = advance_clock(now);
  request.queued_at = now;
  Header& header = *found;
  request.next_in_queue = nullptr;
  request.prev_in_queue = header.tail;
  if (header.tail == nullptr) {
    header.head = &request;
  } else {
    header.tail->next_in_queue = &request;
  }
  header.tail = &request;
  if (++header.queued != 1) return {};
  return start_waiting(header, p.place, now);
}

// Out of line: inlined, its loops over the buckets made every submit save six registers. It
// returns the submission's status so that submit() ends in a jump to it: with a call and then
// a return of its own, submit() kept its participant on the stack across the call (7
// instructions a submission, cycle/16-deep/plentiful/1024 485.7 to 478.7).
Status Core::start_waiting(Header& header, std::uint32_t place, Nanos now) noexcept {
  bring_to(header, now);
  enter_waiting(place);
  return {};
}

Status Core::withdraw(RequestHook& request) noexcept {
  // The request may be another core's, queued on another thread (detail/queued_mark.hpp).
  const detail::QueuedMark mark = detail::read_queued_mark(request);
  if (mark.state == RequestHook::kInFlight && mark.by == issuer_) return Errc::in_flight;
  if (mark.state != RequestHook::kQueued || mark.by != issuer_) return Errc::not_queued;
  const std::uint32_t place = mark.place;
  Header& header = header_at(place);
  // The head's prev_in_queue is not kept (request.hpp): the queue says who its head is.
  RequestHook* const before = header.head == &request ? nullptr : request.prev_in_queue;
  RequestHook* const after = request.next_in_queue;
  if (before == nullptr) {
    header.head = after;
  } else {
    before->next_in_queue = after;
  }
  if (after == nullptr) {
    header.tail = before;
  } else {
    after->prev_in_queue = before;
  }
  request.next_in_queue = nullptr;
  request.prev_in_queue = nullptr;
  detail::hand_back(request.held);  // the last access: it may be submitted again at once
  // No credit was taken at submission and none is given back: the buckets, their timers and the
  // cursors are as they were. A queue left empty leaves the waiting and ready sets, as after the
  // dispatch of its last request; its timers stay filed (leave_waiting()).
  if (--header.queued == 0) leave_waiting(place);
  return {};
}

std::size_t Core::queued(ParticipantId p) const noexcept {
  return live(p) ? header_at(p.place).queued : 0;
}

std::optional<Nanos> Core::oldest_queued_at(ParticipantId p) const noexcept {
  if (!live(p)) return std::nullopt;
  const RequestHook* const oldest = header_at(p.place).head;
  return oldest == nullptr ? std::nullopt : std::optional<Nanos>(oldest->queued_at);
}

RequestList Core::take_all_queued() noexcept {
  RequestList all;
  for (std::uint32_t place = waiting_.find_next(0); place != detail::ReadySet::npos;
       place = waiting_.find_next(place + 1)) {
    Header& header = header_at(place);
    leave_waiting(place);
    detail::keep_for_list<detail::HookLink>(header.head);  // the list hands each back
    all.splice_back(RequestList(header.head, header.tail, header.queued));
    header.head = header.tail = nullptr;
    header.queued = 0;
  }
  turn_.active = false;
  return all;
}

// ---- the loop -------------------------------------------------------------------------------

[[gnu::flatten]] std::optional<ClassId> Core::begin_turn(Nanos now) noexcept {
  now = advance_clock(now);
  turn_.active = false;
  ClassId chosen = unmetered();
  for (int i = 0; i < k_; ++i) {
    const auto c = static_cast<ClassId>(i);
    expire_timers(c, now);
    if (ready_[c].any()) {
      chosen = c;
      break;
    }
  }
  if (chosen == unmetered() && !waiting_.any()) return std::nullopt;
  const std::int64_t cursor = cursor_[chosen];
  turn_.active = true;
  turn_.wrapped = false;
  turn_.cls = chosen;
  turn_.start = static_cast<std::uint32_t>(cursor + 1);  // -1 (never dispatched) starts at 0
  turn_.end = ring_size_;
  turn_.next = turn_.start;
  ++turn_.serial;
  lookahead_.from = 0;
  ++turns_[chosen];
  return chosen;
}

[[gnu::always_inline]] inline std::uint32_t Core::next_in_turn(
    const detail::ReadySet& set) noexcept {
  // A search from a side's end would climb the ready set's levels to find nothing: at a ring of
  // one, twice a decision.
  if (!turn_.wrapped) {
    if (turn_.next < turn_.end) {
      const std::uint32_t p = set.find_next(turn_.next);
      if (p < turn_.end) return p;  // npos is never below end
    }
    turn_.wrapped = true;
    turn_.next = 0;
    lookahead_.from = 0;
  }
  if (turn_.next >= turn_.start) return detail::ReadySet::npos;
  const std::uint32_t p = set.find_next(turn_.next);
  return p < turn_.start ? p : detail::ReadySet::npos;
}

bool Core::grow_records() noexcept {
  // Past the reservation, on the visit that needs a record. It must not throw: the visit is
  // noexcept, and an allocation that fails on a server's dispatcher is a full room, not the end
  // of the process. The free list grows first, so that complete() never allocates and a failure
  // leaves both as they were.
  const std::size_t capacity = in_flight_records_.capacity();
  if (capacity >= kMaxInFlight) return false;
  try {
    free_tickets_.resize(capacity + decltype(in_flight_records_)::kChunk);
    in_flight_records_.grow_to(capacity + 1);
  } catch (const std::bad_alloc&) {
    return false;
  }
  free_new_records(capacity);
  return true;
}

void Core::free_new_records(std::size_t from) noexcept {
  // Under the retired records, the lowest on top: retired records are reused first, then the new
  // ones in order of their index.
  const std::size_t added = in_flight_records_.capacity() - from;
  const auto retired = free_tickets_.begin() + free_count_;
  std::copy_backward(free_tickets_.begin(), retired, retired + static_cast<std::ptrdiff_t>(added));
  for (std::size_t i = 0; i < added; ++i) {
    free_tickets_[i] = static_cast<std::uint32_t>(from + added - 1 - i);
  }
  free_count_ += static_cast<std::uint32_t>(added);
}

Ticket Core::issue(std::uint32_t place, std::uint32_t generation, ClassId out,
                   std::uint32_t incarnation, RequestHook& request) noexcept {
  // One is free: the visit checked record_ready().
  const std::uint32_t index = free_tickets_[--free_count_];
  InFlight& f = in_flight_records_[index];
  ++f.generation;  // odd: in flight
  f.place = place;
  f.participant_generation = generation;
  f.bucket = out;
  f.incarnation = incarnation;
  f.request = &request;
  return Ticket{index, issuer_, f.generation};
}

const Core::Header Core::kNoRecord{};

// A fresh start searches kLookAhead stops ahead, and notes what the turn's stops are searched in
// and how much of each record is loaded: the usual step then reads them rather than work them
// out from the turn's class (5 instructions a dispatch, decision/visit/plentiful/1M-all).
void Core::start_lookahead(std::uint32_t place) noexcept {
  Lookahead& la = lookahead_;
  const ClassId c = turn_.cls;
  la.whole_record = c != unmetered();
  la.set = la.whole_record ? &ready_[c] : &waiting_;
  la.from = place + 1;
  // The turn's walk runs to the ring's end, then from its start to where the turn began.
  la.end = turn_.wrapped ? turn_.start : turn_.end;
  la.found = 0;
  // Until kLookAhead / 2 stops are found, the stop at half distance is an empty record: the usual
  // step then reads it with no count to test.
  la.records.fill(&kNoRecord);
  for (int searches = 0; searches < kLookAhead; ++searches) {
    if (!look_ahead_once()) break;
  }
}

[[gnu::always_inline]] inline bool Core::look_ahead_once() noexcept {
  Lookahead& la = lookahead_;
  const std::uint32_t next = la.set->find_next(la.from);
  if (next >= la.end) return false;  // npos too
  la.from = next + 1;
  const Header& record = header_at(next);
  la.records[la.found++ % kLookAhead] = &record;
  if (la.whole_record) {
    places_store_.prefetch(record);
  } else {
    __builtin_prefetch(&record);
  }
  return true;
}

void Core::prefetch_ahead() noexcept {
  // At a million participants a record is rarely in cache, and a miss costs several visits'
  // time: the records of the cursor's next kLookAhead stops are loaded ahead, each found by one
  // search of the ready set per dispatch from where the last one stopped (a fresh start, at a new
  // turn or when the cursor overtook the frontier, searches kLookAhead times). The requests at
  // the head of the queues half that distance ahead are loaded too, once their headers have
  // arrived: taking a request off its queue reads its link. An unmetered visit usually reads
  // the header alone (see credit_possible), so only that line is worth the bandwidth there; but
  // a header at half distance that shows a credit landed (its buckets will be refilled and
  // debited) has its held bucket lines loaded too: at a million participants that visit was a
  // miss per line, and loading them took 2 to 3 ns off a decision (1 % and 100 % waiting, side by
  // side three times). The test uses the latest clock seen, which the visit's can only pass, so
  // it loads lines the visit will not read only when a charge-back moves the instant meanwhile.
  // The frontier is a hint: a participant that joins the set behind it is simply not prefetched.
  // Called after a dispatch, where the visit's values are no longer live: a call inside the
  // walk made GCC keep them in callee-saved registers or spill them on every visit (6
  // instructions a decision at 1,024 participants, where it never runs), and inlined there, GCC
  // 12 dropped the record's prefetches from the metered visits (seen in the disassembly; 12 %
  // slower at a million participants all waiting, side by side).
  const std::uint32_t place = turn_.next - 1;  // the stop that dispatched
  Lookahead& la = lookahead_;
  if (la.from <= place) [[unlikely]] {
    start_lookahead(place);
    return;
  }
  look_ahead_once();
  const Header& h = *la.records[(la.found - 1 - kLookAhead / 2) % kLookAhead];
  if (const RequestHook* head = h.head) __builtin_prefetch(head);
  if (!la.whole_record && credit_possible(h, now_)) {
    const BucketRec* buckets = buckets_of(h);
    for (std::uint8_t held = h.held; held != 0; held &= static_cast<std::uint8_t>(held - 1)) {
      __builtin_prefetch(&buckets[std::countr_zero(held)]);
    }
  }
}

// Writes each field of `d` on its own, as the caller's copies read them: built in a register
// first, the outcome went through the stack and was read back wider than it was written.
[[gnu::always_inline]] inline void Core::take_oldest(std::uint32_t place, Header& header,
                                                     ClassId out, ClassId turn, Nanos now,
                                                     Decision& d) noexcept {
  std::uint32_t incarnation = 0;
  if (out != unmetered()) {
    BucketRec& b = buckets_of(header)[out];
    ++b.dispatched;
    incarnation = b.incarnation;
  } else {
    ++header.unmetered_dispatched;
  }
  RequestHook* request = header.head;
  header.head = request->next_in_queue;
  if (header.head == nullptr) header.tail = nullptr;
  request->next_in_queue = nullptr;
  // A completer that clears it hears of the dispatch through the embedder's own hand-off (or the
  // runtime's job queue), which orders this store first. release: pairs with withdraw()'s acquire
  // load, for another core's withdrawal (see submit()).
  request->held.store(RequestHook::kInFlight, std::memory_order_release);
  --header.queued;
  cursor_[turn] = place;
  d.request = request;
  d.ticket = issue(place, header.generation, out, incarnation, *request);
  d.participant = ParticipantId{place, header.generation, issuer_};
  d.out = out;
  d.turn = turn;
  d.at = now;
}

ClassId Core::highest_credit(const Header& header, std::uint8_t among) noexcept {
  const BucketRec* buckets = buckets_of(header);
  for (std::uint8_t held = among; held != 0; held &= static_cast<std::uint8_t>(held - 1)) {
    const auto h = static_cast<ClassId>(std::countr_zero(held));
    if (buckets[h].has_credit()) return h;
  }
  return kNoClass;
}

std::optional<Decision> Core::visit(Nanos now) noexcept {
  // One named result on every path, so that it is built in place in the caller's slot: a local
  // copied out on return is read back wider than it was written (see dispatch()).
  // Engaged from the start: GCC zeroes the whole storage of a default-constructed optional
  // (its empty member's value-initialisation), then emplace() zeroed it again.
  std::optional<Decision> d(std::in_place);
  if (!turn_.active) [[unlikely]] {
    d.reset();
    return d;
  }
  if (!record_ready()) [[unlikely]] {
    turn_.active = false;
    ++record_shortages_;
    d.reset();
    return d;
  }
  now = advance_clock(now);
  if (!visit_turn(now, *d)) {
    d.reset();
  } else if (ring_size_ >= kPrefetchFrom) {
    prefetch_ahead();
  }
  return d;
}

std::size_t Core::dispatch(Nanos now, std::span<Decision> out) noexcept {
  now = advance_clock(now);
  std::size_t n = 0;
  // The records free for this call's dispatches, counted once: each dispatch takes one, so the
  // table is looked at again only when the n taken reach them (a compare of two registers per
  // visit instead of record_ready()'s loads: 1.5 instructions less per decision, by
  // tools/instruction-budget's decision/batch cases).
  std::size_t records = free_count_;
  while (n < out.size()) {
    if (!turn_.active && !begin_turn(now)) break;
    if (n == records) [[unlikely]] {
      if (!grow_records()) {
        turn_.active = false;
        ++record_shortages_;
        break;
      }
      records = n + free_count_;
    }
    // Inlined here, each visit's outcome is stored straight into `out`. Returned by value from
    // visit(), the caller copies it with wider loads than the stores that built it: a
    // store-forwarding stall that, by perf, was over half of an unmetered visit's time.
    Decision& d = out[n];
    if (visit_turn(now, d)) {
      ++n;
      if (ring_size_ >= kPrefetchFrom) prefetch_ahead();
    }
  }
  return n;
}

[[gnu::always_inline]] inline Core::Header* Core::next_stop(const detail::ReadySet& set,
                                                            std::uint32_t& place) noexcept {
  for (;;) {
    place = next_in_turn(set);
    if (place == detail::ReadySet::npos) {
      turn_.active = false;
      return nullptr;
    }
    turn_.next = place + 1;
    Header& header = header_at(place);
    if (header.joined_turn != turn_.serial) return &header;
  }
}

// The turn's class chooses the visit. P1 (always metered) and P2 (metered unless k is 1) each
// have a copy of the metered visit with the class a constant: the class's timer heap, ready set
// and bucket line are then fixed offsets and the mask of the classes above it a constant (none
// above P1), where a class read at run time cost a visit about 24 instructions computing and
// spilling them (tools/instruction-budget: decision/visit/plentiful/1024-all 261.7 to 237.9,
// decision/batch/plentiful/1024-all 226.0 to 199.4). Lower classes share one copy that reads it.
[[gnu::always_inline]] inline bool Core::visit_turn(Nanos now, Decision& d) noexcept {
  const ClassId c = turn_.cls;
  if (c == 0) return visit_metered<0>(0, now, d);
  if (c == unmetered()) return visit_unmetered(now, d);
  if (c == 1) return visit_metered<1>(1, now, d);
  return visit_metered<-1>(c, now, d);
}

// The two kinds of visit are separate loops: an unmetered visit usually reads one line and no
// bucket, and sharing one body with the metered visit made GCC keep both paths' values live at
// once (a 472-byte frame and a spill or reload every few instructions).
template <int kClass>
[[gnu::always_inline]] inline bool Core::visit_metered(ClassId c_read, Nanos now,
                                                       Decision& d) noexcept {
  const ClassId c = kClass >= 0 ? static_cast<ClassId>(kClass) : c_read;
  for (;;) {
    // Credits that land during the turn count when the cursor reaches their owner.
    expire_timers(c, now);
    std::uint32_t place = 0;
    Header* const stop = next_stop(ready_[c], place);
    if (stop == nullptr) return false;
    Header& header = *stop;
    BucketRec* buckets = buckets_of(header);
    // Rule 4: the highest class with a credit, which is c unless one above it has a credit
    // (landed since the turn began).
    const auto above = static_cast<std::uint8_t>(header.held & ((1u << c) - 1u));
    {
      // The usual visit: it goes out under c, whose bucket takes the credit behind its refill
      // (bucket.hpp, take_behind), so that neither its other buckets nor its refill instant are
      // touched. It keeps the credit's place in the ready set when it has another.
      BucketRec& b = buckets[c];
      Atto value = b.value;
      Atto at_now = 0;
      const Taken taken = above == 0 || !credit_at(header, above, now)
                              ? take_behind(value, since_refill(header, now), b.rate, b.cap_atto(),
                                            kAttoPerCredit, at_now)
                              : Taken::refused;
      // A bucket taken from at its cap stores its value less the refill since the last one, which
      // sinks as that gap grows, until the stored value lacks the credit the bucket has: when
      // nothing else needs refilling, the refill instant moves to `now` too.
      const bool caught_up = taken == Taken::at_cap && since_refill(header, now) > kCatchUpGap &&
                             others_full(header, c);
      if (caught_up) value = at_now;
      // It goes out this way when the stored value keeps a credit (and so at `now` too, which is
      // that plus a refill), or when it had the credit now and has spent it: both filings then
      // agree with the stored value. The stored value lacking a credit it has now is the slow way.
      const bool keeps_credit = has_credit(value);
      if (taken != Taken::refused && (keeps_credit || (at_now >= 0 && at_now < kAttoPerCredit)))
          [[likely]] {
        if (caught_up) header.refilled_at = now;
        b.value = value;
        take_oldest(place, header, c, c, now, d);
        if (header.queued == 0) {
          leave_waiting(place);
        } else if (keeps_credit) {
          header.credit_from = std::numeric_limits<Nanos>::min();
        } else {
          file_spent(place, header, c);
          settle_credit_from(header);
        }
        return true;
      }
    }
    // Refilled first: a credit above c, a charge-back that took c's credit since it was filed,
    // a gap too long for take_behind(), or a credit at `now` that the stored value (as of the
    // last refill) lacks, whose exact instant a refill saves computing.
    if (visit_refilled(place, header, c, now, d)) return true;
  }
}

// Out of line, so that the usual visit's registers are allocated for it alone: inlined, this
// path's values kept a 168-byte frame live and spilled the usual path's.
bool Core::visit_refilled(std::uint32_t place, Header& header, ClassId c, Nanos now,
                          Decision& d) noexcept {
  BucketRec* buckets = buckets_of(header);
  const auto above = static_cast<std::uint8_t>(header.held & ((1u << c) - 1u));
  bring_to(header, now);
  if (!buckets[c].has_credit()) [[unlikely]] {
    refile(place, header, c);  // a charge-back landed since it was filed
    settle_credit_from(header);
    return false;
  }
  ClassId out = c;
  if (above != 0) [[unlikely]] {
    const ClassId h = highest_credit(header, above);
    if (h != kNoClass) out = h;
  }
  buckets[out].value -= kAttoPerCredit;
  take_oldest(place, header, out, c, now, d);
  if (out == c) {
    // From the ready set, so its c timer is not filed: an empty queue leaves it exact, and
    // a spent credit files it without the heap looking for it first.
    if (header.queued == 0) {
      leave_waiting(place);
      return true;
    }
    if (buckets[c].has_credit()) {
      // What settle_credit_from would find: a held bucket with a credit makes it "now".
      header.credit_from = std::numeric_limits<Nanos>::min();
      return true;
    }
    file_spent(place, header, c);
    settle_credit_from(header);
    return true;
  }
  // Went out above the turn's class (rule 4): that bucket is re-filed.
  file_after_debit(place, header, out, true);
  return true;
}

[[gnu::always_inline]] inline bool Core::visit_unmetered(Nanos now, Decision& d) noexcept {
  const ClassId c = unmetered();
  std::uint32_t place = 0;
  Header* const stop = next_stop(waiting_, place);
  if (stop == nullptr) return false;
  Header& header = *stop;
  if (credit_possible(header, now)) {
    visit_unmetered_with_credit(place, header, now, d);
    return true;
  }
  // The usual unmetered visit: every bucket of this participant is filed with an exact credit
  // instant still ahead (or none), so it goes out unmetered without its buckets being read;
  // refill is lazy and exact, so skipping it loses nothing. It is in no ready set either (a ready
  // participant has a credit, so its credit_from is behind the clock), so going idle only leaves
  // the waiting set.
  take_oldest(place, header, c, c, now, d);
  if (header.queued == 0) waiting_.clear(place);
  return true;
}

// A credit landed since the turn began (unmetered turns expire no timers): the request goes out
// under the highest class that has one, if the refill confirms it.
void Core::visit_unmetered_with_credit(std::uint32_t place, Header& header, Nanos now,
                                       Decision& d) noexcept {
  bring_to(header, now);
  const ClassId h = highest_credit(header, header.held);
  const ClassId out = h == kNoClass ? unmetered() : h;
  if (out != unmetered()) buckets_of(header)[out].value -= kAttoPerCredit;
  take_oldest(place, header, out, unmetered(), now, d);
  file_after_debit(place, header, out, out != unmetered());
}

[[gnu::always_inline]] inline void Core::file_after_debit(std::uint32_t place, Header& header,
                                                          ClassId out, bool refile_out) noexcept {
  if (header.queued == 0) {
    leave_waiting(place);
    // An idle participant's timers must be exact (enter_waiting keeps them); the debited
    // bucket's may still be filed at the instant of the credit just spent.
    if (out != unmetered()) timers_[out].erase(place);
  } else {
    if (refile_out) refile(place, header, out);
    settle_credit_from(header);  // its lines are in cache now
  }
}

// ---- completions ----------------------------------------------------------------------------

template <bool kHandBack>
Result<Completion> Core::complete_ticket(Ticket t, std::int64_t cost_nano, Nanos now) noexcept {
  if (cost_nano < 0 || cost_nano > kMaxCostNano) return Errc::bad_cost;
  if (t.issuer != issuer_ || t.index >= in_flight_records_.capacity() || (t.generation & 1u) == 0) {
    return Errc::unknown_ticket;
  }
  InFlight& f = in_flight_records_[t.index];
  if (t.generation > f.generation) return Errc::unknown_ticket;
  if (t.generation != f.generation) return Errc::stale_ticket;
  now = advance_clock(now);

  ++f.generation;                          // even: retired; a repeat of this ticket is now stale
  free_tickets_[free_count_++] = t.index;  // sized for every record
  if constexpr (kHandBack) detail::hand_back(f.request->held);

  const ParticipantId p{f.place, f.participant_generation, t.issuer};  // issuer_, checked above
  Completion done{p, f.bucket, false};
  // Its place is in the ring, which never shrinks: only the registration is checked, not the
  // place's range and issuer as live_header() checks a participant id from outside.
  Header& header = header_at(f.place);
  if (!header.live || header.generation != f.participant_generation) return done;
  done.registered = true;
  Cold& st = cold_[f.place];
  ++st.completed;
  const ClassId c = f.bucket;
  // Reached through the header: the chunked store's lookup is not repeated for each use.
  // A bucket the plan no longer holds was dropped by a re-plan, which moved its incarnation on.
  if (c == unmetered() || buckets_of(header)[c].incarnation != f.incarnation) {
    st.cost_uncharged += cost_nano;
    return done;
  }
  done.charged = true;
  // A zero cost changes no balance and so no credit instant: nothing to refill or re-file
  // (refill is lazy and exact, so skipping it loses nothing).
  if (cost_nano == 0) return done;
  st.cost_charged += cost_nano;
  // Charged behind the refill (bucket.hpp, take_behind): the same balance at `now` as a refill
  // followed by the charge, with the participant's other buckets and its refill instant left
  // alone. A charge to a bucket that sat full is still not absorbed by its cap (that would
  // forgive debt): the stored value is the charged one less the refill still to come.
  BucketRec& b = buckets_of(header)[c];
  const Atto cost = to_atto_unsigned(static_cast<std::uint64_t>(cost_nano));  // checked above: >= 0
  Atto value = b.value;
  Atto at_now = 0;
  const Taken taken =
      take_behind(value, since_refill(header, now), b.rate, b.cap_atto(), cost, at_now);
  if (taken == Taken::refused) [[unlikely]] {
    bring_to(header, now);
    value = b.value;
    (void)take_behind(value, 0, b.rate, b.cap_atto(), cost, at_now);
  } else if (taken == Taken::at_cap && others_full(header, c)) {
    header.refilled_at = now;
    value = at_now;
  }
  if (value < kDeepestDebt) [[unlikely]] {
    at_now += kDeepestDebt - value;
    value = kDeepestDebt;
  }
  b.value = value;
  if (header.queued != 0) {
    // The common completion changes no class: the bucket keeps a credit, as of its last refill
    // too, and so its place in the ready set.
    if (at_now >= kAttoPerCredit && b.has_credit() && ready_[c].test(f.place)) [[likely]] {
      header.credit_from = std::numeric_limits<Nanos>::min();
    } else {
      file_charged(f.place, header, c, at_now >= kAttoPerCredit);
    }
  } else {
    timers_[c].erase(f.place);  // its instant moved; enter_waiting files it again
  }
  return done;
}

template Result<Completion> Core::complete_ticket<true>(Ticket, std::int64_t, Nanos) noexcept;
template Result<Completion> Core::complete_ticket<false>(Ticket, std::int64_t, Nanos) noexcept;

}  // namespace creditloop
