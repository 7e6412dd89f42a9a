// The dispatcher thread: its loop (docs/contract.md §2 on the monotonic clock), the drains of the
// activation and completion lists, the decisions and their hand-outs to the sink or the pool, and
// parking when it has nothing to do.
#include <pthread.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <thread>

#include "creditloop/runtime.hpp"
#include "internal/options.hpp"
#include "internal/runtime_impl.hpp"

namespace creditloop {
namespace {

// The dispatcher's clock for its spin, and its pauses (idle_env.hpp).
struct SystemPause {
  static Nanos now() noexcept { return detail::monotonic_now(); }
  static void relax() noexcept { detail::cpu_relax(); }
  static void yield() noexcept { std::this_thread::yield(); }
};

}  // namespace

void Runtime::Impl::dispatcher_main() {
  detail::place_this_thread(options_.thread_name, options_.cpu);
  if (options_.workers > 0) open_pool_to_dispatcher();

  for (;;) {
    const Nanos t = now();
    loop_now_ = t;
    const bool serviced = service(t);
    // A batch the pool's queue could not take (it could not allocate): again, in every phase,
    // since its tickets are in flight.
    if (!batch_jobs_.empty()) [[unlikely]]
      (void)hand_batch_to_pool();
    // The totals need no flush on the way out: service() wrote them after its drains and after
    // each command.
    if (phase_ == Phase::finishing && in_flight() == 0) break;
    if (phase_ != Phase::finishing) {
      const bool sent = dispatch_batch(t);
      flush_totals();
      if (sent) continue;
      if (phase_ == Phase::draining && core_.waiting() == 0 && intake_first_ == kNoPlace &&
          !activations_.maybe_nonempty()) {
        phase_ = Phase::finishing;
        continue;
      }
    }
    if (!serviced) idle();
  }

  std::lock_guard lock(exit_mutex_);
  dispatcher_exited_ = true;
  dispatcher_exited_cpu_ = detail::thread_cpu_now();
  // Commands posted while it finished run now, so that their callers return; a later post is
  // refused, and its caller runs the command under this mutex.
  (void)run_commands(commands_.close());
  exited_.notify_all();
}

bool Runtime::Impl::service(Nanos t) {
  // The commands are taken before the drains so that a command sees every submission and
  // completion its caller made before posting it (the take acquires the post).
  Command* const commands = commands_.take();
  bool did = completions_.drain([&](TicketRecord& r) { apply_completion(r, t); }) > 0;
  did |= detail::take_blocks(pool_completions_, [&](const detail::PoolCompletion& done) {
    apply_pool_completion(done, t);
  });
  did |= activations_.drain([&](Mailbox& m) { take_inbox(m); }) > 0;
  if (stale_listings_.take()) [[unlikely]] {
    take_stale_listings();
    did = true;
  }
  did |= take_in(t);
  if (commands != nullptr) CREDITLOOP_TEST_HOOK(commands_taken);
  // The totals whole before any command reads them, and after the drains whatever follows.
  flush_totals();
  did |= run_commands(commands);
  return did;
}

void Runtime::Impl::apply_completion(TicketRecord& record, Nanos t, bool timed) {
  // retire_nano(): the completer gave the request back already, and it may be gone.
  const Result<Completion> applied = core_.retire_nano(record.core, record.cost, t);
  assert(applied.ok() && "the runtime completes each core ticket once, with a checked cost");
  const bool charged = applied.ok() && applied->charged;
  // Its own line only while it is registered: a removed participant's line was forgotten.
  if (applied.ok() && applied->registered) {
    CounterWrite w(counters_[applied->participant.place]);
    w.add(CounterLine::kCompleted, 1);
    if (charged) w.add_cost(record.cost);
  }
  pending_totals_.completed += 1;
  if (charged) pending_totals_.cost += record.cost;
  pending_totals_.any = true;
  if (observer_ != nullptr) {
    guarded_observer().on_complete(Ticket{record.index, core_.issuer(), record.generation},
                                   record.cost, t);
  }
  if (learned_ && timed) learned_->completed(record.index, t);
  record.cell.release();
  free_tickets_.push_back(record.index);  // within the capacity reserved when it was created
  ++completed_;
}

void Runtime::Impl::flush_totals() noexcept {
  PendingTotals& pending = pending_totals_;
  if (!pending.any) return;
  CounterWrite w(totals_);
  w.add(CounterLine::kQueued, pending.queued);
  for (std::size_t c = 0; c < pending.dispatched.size(); ++c) {
    if (pending.dispatched[c] != 0) w.add(CounterLine::kDispatched + c, pending.dispatched[c]);
  }
  if (pending.completed != 0) w.add(CounterLine::kCompleted, pending.completed);
  if (pending.cost != 0) w.add_cost(pending.cost);
  pending = PendingTotals{};
}

void Runtime::Impl::apply_pool_completion(const detail::PoolCompletion& done, Nanos t) {
  TicketRecord& record = tickets_[done.index];
  assert(static_cast<std::uint32_t>(record.generation) == done.generation &&
         "a pool ticket completes once");
  record.cost = done.cost;
  apply_completion(record, t);
}

void Runtime::Impl::take_inbox(Mailbox& mailbox) {
  const Local& local = locals_[mailbox.place];
  queue_intake(mailbox.place, mailbox.take_listed(local.open, local.generation));
}

void Runtime::Impl::queue_intake(std::uint32_t place, RequestHook* oldest) {
  if (oldest == nullptr) return;
  Local& local = locals_[place];
  if (local.intake == nullptr) {
    local.intake = oldest;  // its newest is found only if something is appended
  } else {
    // A flood arrives in many takes: each chain is walked once here, and the first one once when
    // the second comes.
    RequestHook* newest = local.intake_newest != nullptr ? local.intake_newest : local.intake;
    while (newest->next_in_queue != nullptr) newest = newest->next_in_queue;
    newest->next_in_queue = oldest;
    while (newest->next_in_queue != nullptr) newest = newest->next_in_queue;
    local.intake_newest = newest;
  }
  if (local.queued_for_intake) return;
  local.queued_for_intake = true;
  local.next_intake = kNoPlace;
  if (intake_last_ == kNoPlace) {
    intake_first_ = place;
  } else {
    locals_[intake_last_].next_intake = place;
  }
  intake_last_ = place;
}

bool Runtime::Impl::take_in(Nanos t) {
  std::uint64_t moved = 0;
  bool any = false;
  while (moved < kIntakePerLoop && intake_first_ != kNoPlace) {
    const std::uint32_t place = intake_first_;
    Local& local = locals_[place];
    intake_first_ = local.next_intake;
    if (intake_first_ == kNoPlace) intake_last_ = kNoPlace;
    local.queued_for_intake = false;
    if (local.intake == nullptr) continue;  // emptied since it was queued
    RequestHook* const rest =
        move_to_core(local.intake, ParticipantId{place, local.generation, core_.issuer()}, t,
                     std::min(kIntakeSlice, kIntakePerLoop - moved), &moved);
    any = true;
    local.intake = nullptr;
    if (rest == nullptr) {
      local.intake_newest = nullptr;
    } else {
      queue_intake(place, rest);  // to the back of the queue: its newest, if found, stays so
    }
  }
  return any;
}

void Runtime::Impl::take_into_core(std::uint32_t place, RequestHook* oldest, Nanos t) {
  Local& local = locals_[place];
  const ParticipantId id{place, local.generation, core_.issuer()};
  if (local.intake != nullptr) {
    (void)move_to_core(local.intake, id, t);
    local.intake = local.intake_newest = nullptr;  // the place may stay queued: it is skipped
  }
  (void)move_to_core(oldest, id, t);
}

void Runtime::Impl::take_stale_listings() {
  // A scan of the ring, but only after a removal and re-registration raced a push (mailbox.hpp).
  for (std::uint32_t place = 0; place < core_.ring_size(); ++place) {
    const Local& local = locals_[place];
    if (!local.open) continue;
    queue_intake(place, mailboxes_[place].take_if_stale(local.generation));
  }
}

RequestHook* Runtime::Impl::move_to_core(RequestHook* oldest, ParticipantId id, Nanos t,
                                         std::uint64_t limit, std::uint64_t* moved_so_far) {
  if (oldest == nullptr) return nullptr;
  std::uint64_t moved = 0;
  RequestHook* r = oldest;
  for (; r != nullptr && moved < limit; ++moved) {
    RequestHook* const next = r->next_in_queue;
    const Status queued = core_.submit(id, *r, t);
    assert(queued.ok() && "an open inbox belongs to a live participant");
    (void)queued;
    if (observer_ != nullptr) guarded_observer().on_submit(id, *r, t);
    ++submitted_;
    r = next;
  }
  CounterWrite(counters_[id.place]).add(CounterLine::kQueued, moved);
  pending_totals_.queued += moved;
  pending_totals_.any = true;
  if (moved_so_far != nullptr) *moved_so_far += moved;
  return r;
}

bool Runtime::Impl::has_room() const {
  if (tickets_left() == 0) return false;
  return options_.room ? room_test() : in_flight() < slots_now();
}

bool Runtime::Impl::dispatch_batch(Nanos t) {
  if (!batch_jobs_.empty()) [[unlikely]]
    return false;  // nothing more is decided until the pool has taken the last batch
  // Below the room's bound (a room test's), the tables grow here, before a batch could find
  // no record; after a growth that failed, only once every record is in use, each loop that
  // finds them so being a retry.
  if (ticket_capacity_ < room_bound_ &&
      tickets_left() < (growth_failed_ ? 1 : std::uint64_t{options_.batch})) [[unlikely]] {
    (void)grow_tickets();
  }
  const std::uint32_t sent =
      decides_in_one_call_ ? dispatch_in_one_call(t) : dispatch_one_by_one(t);
  // One semaphore signal, at most one wake-up; if the queue cannot take them, the loop tries again.
  if (!batch_jobs_.empty()) (void)hand_batch_to_pool();
  return sent > 0;
}

std::uint32_t Runtime::Impl::dispatch_in_one_call(Nanos t) {
  // The room is a slot count, known up front: the core decides the whole batch in one call,
  // which by bench_core costs up to a quarter less per decision than a call per visit (most where
  // decisions are cheapest; the same at a million participants). Room as has_room() counts it:
  // free slots, and tickets the table can still issue.
  // A learned room lowered below what is in flight gives none: nothing is preempted (§5c).
  const std::uint64_t used = in_flight();
  const std::uint64_t slots = slots_now();
  const std::uint64_t room = std::min(used < slots ? slots - used : 0, tickets_left());
  const std::uint64_t want = std::min<std::uint64_t>(room, options_.batch);
  std::uint32_t sent = 0;
  if (want > 0) {
    sent = static_cast<std::uint32_t>(
        core_.dispatch(t, std::span<Decision>(batch_dispatches_.data(), want)));
    // Before the hand-outs: their on_visit() calls carry the batch's dispatches.
    if (observer_ != nullptr) guarded_observer().on_dispatch(want, sent, t);
    for (std::uint32_t i = 0; i < sent; ++i) hand_out(batch_dispatches_[i], t);
  }
  if (sent == room && core_.in_turn()) {  // no room left ends the turn, as in the loop below
    core_.end_turn();
    if (observer_ != nullptr) guarded_observer().on_end_turn();
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
        if (observer_ != nullptr) guarded_observer().on_end_turn();
      }
      break;
    }
    if (!core_.in_turn()) {
      const std::optional<ClassId> pass = core_.begin_turn(t);
      if (observer_ != nullptr) guarded_observer().on_begin_turn(pass, t);
      if (!pass) break;
    }
    const std::optional<Decision> d = core_.visit(t);
    if (!d) {
      if (observer_ != nullptr) guarded_observer().on_visit(nullptr, Ticket{}, t);
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
  assert(tickets_used_ < ticket_capacity_ && "a decision is made only with a record left");
  return tickets_used_++;
}

bool Runtime::Impl::grow_tickets() noexcept {
  const std::size_t want =
      std::min(ticket_capacity_ + detail::ChunkedTable<TicketRecord>::kChunk, room_bound_);
  try {
    // Each step keeps what it grew if a later one fails; the capacity counts only what all of
    // them hold, so a record is never issued that a free list or the core could not take back.
    core_.reserve_in_flight(want);
    tickets_.grow_to(want, detail::number_tickets);
    free_tickets_.reserve(tickets_.capacity());
    if (learned_) learned_->reserve(tickets_.capacity());
  } catch (const std::bad_alloc&) {
    growth_failed_ = true;
    ++ticket_growth_failures_;
    return false;
  }
  growth_failed_ = false;
  ticket_capacity_ = std::min(tickets_.capacity(), core_.in_flight_capacity());
  return true;
}

void Runtime::Impl::hand_out(const Decision& d, Nanos t) {
  TicketRecord& record = tickets_[acquire_ticket()];
  record.core = d.ticket;
  record.cost = 0;
  record.request = d.request;
  // A pool job's ticket is its worker's from the start: the worker completes it without touching
  // the record. Any other ticket is claimed by whoever completes it first.
  record.generation = options_.workers > 0 ? record.cell.issue_claimed() : record.cell.issue();
  const Ticket ticket{record.index, core_.issuer(), record.generation};
  ++dispatched_;
  ++per_class_[d.out].dispatched;
  if (learned_) learned_->dispatched(record.index, t, in_flight());
  // The rest of a batch decided in one call is handed out after a sink that removed the
  // participant and registered another in its place, inline: that place's counters and record are
  // the newcomer's, and this dispatch is not.
  Local& local = locals_[d.participant.place];
  const bool still_registered = local.generation == d.participant.generation;
  if (still_registered) {
    CounterWrite w(counters_[d.participant.place]);
    w.add(CounterLine::kQueued, ~std::uint64_t{0});  // minus one
    w.add(CounterLine::kDispatched + d.out, 1);
    local.last_class = d.out;
  }
  pending_totals_.queued -= 1;
  pending_totals_.dispatched[d.out] += 1;
  pending_totals_.any = true;
  if (observer_ != nullptr) guarded_observer().on_visit(&d, ticket, t);
  CREDITLOOP_PROBE4(dispatch, d.participant.place, d.out, ticket.index, ticket.generation);
  if (options_.workers > 0) {
    batch_jobs_.push_back(Decision{d.request, ticket, d.participant, d.out, d.turn, t});
  } else {
    try {
      options_.sink(Decision{d.request, ticket, d.participant, d.out, d.turn, t});
    } catch (...) {
      sink_failed(record, d, std::current_exception(), t);
    }
  }
}

void Runtime::Impl::sink_failed(TicketRecord& record, const Decision& d, std::exception_ptr error,
                                Nanos t) {
  // The sink did not take the request: the runtime completes it at cost 0 (the credit taken at
  // dispatch stays spent, as for any dispatch) and hands it back to its caller in the report.
  // If the sink completed it before throwing, the claim fails and the request is the caller's
  // already.
  TicketRecord* claimed = nullptr;
  const Ticket ticket{record.index, core_.issuer(), record.generation};
  const bool ours = claim(ticket, 0, claimed).ok();
  // On the dispatcher: applied at once, not published. Untimed: the backend never saw it.
  if (ours) apply_completion(*claimed, t, false);
  report(CallbackKind::sink, std::move(error), ours ? d.request : nullptr, ticket, d.participant);
}

void Runtime::Impl::idle() {
  // What can end this wait: a completion when room or the end of shutdown waits on one; a
  // submission when there is room to use it. Commands always wake.
  std::uint32_t reasons = 0;
  const bool finishing = phase_ == Phase::finishing;
  // A learned room times each completion as it is applied: one left until the next submission
  // would read as latency of the backend's, so a completion always wakes it.
  if (finishing || !has_room() || learned_) reasons |= detail::kWakeOnRoom;
  if (!finishing && has_room()) reasons |= detail::kWakeOnWork;
  if (reasons == 0) return;

  // Where work comes from (idle_env.hpp, which the Relacy models that sleep the dispatcher run).
  using Sources =
      detail::WorkSources<decltype(commands_), decltype(activations_), decltype(stale_listings_),
                          decltype(completions_), decltype(pool_completions_)>;
  const Sources sources{commands_, activations_, stale_listings_, completions_, pool_completions_};
  struct Host {
    Impl& rt;
    bool has_room() const { return rt.has_room(); }
    // A batch the pool's queue could not take, or a growth of the ticket tables that failed with
    // every record in use: no waker will say when memory is back, so the sleep has a timeout,
    // and the loop tries again after it.
    bool retry_pending() const { return !rt.batch_jobs_.empty() || rt.growth_retry_pending(); }
    // `why` goes to the probe alone, which a build without USDT probes compiles away.
    void parked([[maybe_unused]] std::uint32_t why, std::int64_t /*timeout_ns*/) {
      CREDITLOOP_PROBE2(park, why, rt.in_flight());
      ++rt.parks_;
    }
  } host{*this};
  detail::IdleEnv<Sources, Host, SystemPause> env(
      sources, host,
      {.reasons = reasons,
       .room_polled = options_.room && (reasons & detail::kWakeOnRoom) != 0,
       .room_recheck_ns = options_.room_recheck.count(),
       .spin_ns = spin_.count()});
  if (detail::idle_wait(parker_, reasons, env, retry_backoff_)) {
    ++wakeups_;
    CREDITLOOP_PROBE2(wake, reasons, in_flight());
  }
}

}  // namespace creditloop
