// The runtime (see runtime.hpp for the contract and docs/design.md for the argument): its
// construction, the commands other threads run on the dispatcher, shutdown, snapshots, and the
// report of a callback's exception. internal/runtime_impl.hpp says which file holds the rest.
#include "creditloop/runtime.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "creditloop/detail/queued_mark.hpp"
#include "internal/announce.hpp"
#include "internal/options.hpp"
#include "internal/runtime_impl.hpp"
#include "internal/unflushed_batches.hpp"

namespace creditloop {

// ---- construction -------------------------------------------------------------------------------

Runtime::Impl::Impl(RuntimeOptions options)
    : options_((detail::check_options(options), detail::check_addresses(this), std::move(options))),
      clock_(options_.clock),
      observer_(options_.observer),
      decides_in_one_call_(!options_.room &&
                           (observer_ == nullptr || observer_->follows_batches())),
      core_(options_.config),
      spin_(options_.spin ? *options_.spin
                          : detail::default_spin(detail::usable_cpus(), options_.workers)) {
  // The room's bound is reserved here, where a failure is the constructor's: the dispatcher then
  // never allocates for a ticket, whose growth would fail inside a decision. A room test bounds
  // nothing, so the tables grow between decisions instead (grow_tickets()).
  if (!options_.room) {
    room_bound_ = std::min<std::size_t>(
        options_.learned_room ? options_.learned_room->most : options_.slots, kMaxInFlight);
  }
  const std::size_t reserved = std::min<std::size_t>(
      std::max(options_.expected_in_flight, options_.room ? std::size_t{0} : room_bound_),
      kMaxInFlight);
  core_.reserve(options_.expected_participants, reserved);
  ensure_places(static_cast<std::uint32_t>(
      std::min<std::size_t>(options_.expected_participants, kMaxParticipants)));
  tickets_.grow_to(reserved, detail::number_tickets);
  free_tickets_.reserve(tickets_.capacity());
  ticket_capacity_ = std::min(tickets_.capacity(), core_.in_flight_capacity());
  if (options_.learned_room) learned_.emplace(*options_.learned_room, tickets_.capacity());
  batch_jobs_.reserve(options_.batch);
  batch_dispatches_.resize(options_.batch);
  // A thread that cannot start (std::system_error) fails the constructor; the members'
  // destructors then run, and a joinable std::thread among them would end the process: every
  // worker started is stopped and joined first.
  try {
    start_pool();
    CREDITLOOP_TEST_HOOK(thread_starting, std::size_t{options_.workers});
    std::binary_semaphore started{0};
    dispatcher_ = std::thread([this, &started] {
      dispatcher_id_ = std::this_thread::get_id();
      started.release();
      dispatcher_main();
    });
    started.acquire();
  } catch (...) {
    stop_pool();
    throw;
  }
}

Runtime::Impl::~Impl() {
  (void)shutdown(ShutdownMode::hand_back, std::nullopt, ShutdownWait::finished);
}

void Runtime::Impl::ensure_places(std::uint32_t places) {
  if (places <= places_) return;
  locals_.grow_to(places);
  mailboxes_.grow_to(places, [](Mailbox* chunk, std::size_t first) {
    for (std::size_t i = 0; i < detail::ChunkedTable<Mailbox>::kChunk; ++i) {
      chunk[i].place = static_cast<std::uint32_t>(first + i);
    }
  });
  counters_.grow_to(places, [](CounterLine*, std::size_t) {});
  places_ =
      static_cast<std::uint32_t>(std::min<std::size_t>(mailboxes_.capacity(), kMaxParticipants));
}

// ---- commands -----------------------------------------------------------------------------------

void Runtime::Impl::run_on_dispatcher(Command& command) {
  if (std::this_thread::get_id() == dispatcher_id_) {  // from a sink or observer: inline
    run_command_work(command);
    return;
  }
  if (!detail::announce_command(commands_, command, parker_)) {
    // The dispatcher has exited: the core is quiescent.
    std::lock_guard lock(exit_mutex_);
    run_command_work(command);
    return;
  }
  command.done.acquire();  // pairs with the release in run_commands(): the result is visible
  if (command.error) std::rethrow_exception(command.error);
}

bool Runtime::Impl::run_on_dispatcher_until(Command& command,
                                            std::chrono::steady_clock::time_point until) {
  if (!detail::announce_command(commands_, command, parker_)) {
    // The dispatcher has exited: the core is quiescent.
    const std::shared_ptr<void> owner = std::move(command.keep_alive);  // run here, and done
    std::lock_guard lock(exit_mutex_);
    run_command_work(command);
    return true;
  }
  // Both pair with the release in run_commands(): the result is visible.
  if (until == std::chrono::steady_clock::time_point::max()) {
    command.done.acquire();
  } else if (!command.done.try_acquire_until(until)) {
    return false;
  }
  if (command.error) std::rethrow_exception(command.error);
  return true;
}

bool Runtime::Impl::run_commands(Command* oldest) {
  const bool any = oldest != nullptr;
  while (oldest != nullptr) {
    // Read before the release: from then on the command is its poster's, and may be gone.
    Command* const next = oldest->next_posted.load(std::memory_order_relaxed);  // the take's
    // A poster that stopped waiting left the command to itself: this keeps it alive through the
    // release below, and frees it at the end of the iteration if the poster has gone.
    const std::shared_ptr<void> owner = std::move(oldest->keep_alive);
    try {
      oldest->work();
    } catch (...) {
      oldest->error = std::current_exception();  // the poster's call throws it
    }
    flush_totals();  // before the poster returns: it may read them
    oldest->done.release();
    oldest = next;
  }
  return any;
}

Result<ParticipantId> Runtime::Impl::add(std::string_view name, std::string_view plan,
                                         std::uint32_t shares) {
  Result<ParticipantId> result = Errc::shut_down;
  Command c;
  c.work = [&] {
    if (phase_ != Phase::running) return;
    const Nanos t = loop_now_;
    // Before the core registers: an allocation that fails here leaves nothing half-added.
    ensure_places(static_cast<std::uint32_t>(
        std::min<std::size_t>(std::size_t{core_.ring_size()} + 1, kMaxParticipants)));
    result = core_.add(name, plan, shares, t);
    if (!result) return;
    const ParticipantId id = *result;
    ensure_places(core_.ring_size());
    Local& local = locals_[id.place];  // its intake is empty, and its queue link kept
    local.generation = id.generation;
    local.open = true;
    local.last_class.reset();
    mailboxes_[id.place].open(id.generation);
    CounterWrite(counters_[id.place]).reset(id.generation);
    if (observer_ != nullptr) {
      guarded_observer().on_add(id, name, core_.plan(id), shares, t);
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
    if (!core_.contains(p)) {
      result = Errc::unknown_participant;
      return;
    }
    // The requests still in its inbox go into the core first (they are newer than every one it
    // holds), so that the core hands them all back in one list, oldest first, each the library's
    // until the caller's walk of the list hands it back (request.hpp).
    take_into_core(p.place, mailboxes_[p.place].inbox.close(), loop_now_);
    result = core_.remove(p);
    if (!result) return;
    locals_[p.place].open = false;
    CounterWrite(counters_[p.place]).forget();
    CounterWrite(totals_).add(CounterLine::kQueued, -static_cast<std::uint64_t>(result->size()));
    if (observer_ != nullptr) guarded_observer().on_remove(p);
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
    if (result && observer_ != nullptr) guarded_observer().on_replan(p, *id, shares, t);
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
    if (result && observer_ != nullptr) guarded_observer().on_scale(p, millionths, t);
  };
  run_on_dispatcher(c);
  return result;
}

Status Runtime::Impl::withdraw(ParticipantId p, RequestHook& request) {
  Status result = Errc::shut_down;
  Command c;
  c.work = [&] {
    if (phase_ != Phase::running) return;
    if (!core_.contains(p)) {
      result = Errc::unknown_participant;
      return;
    }
    // A request whose submit() returned is in the core or in p's inbox: take the inbox into the
    // core now, as its activation would. The mailbox stays listed if it was, and that later take
    // finds only what came since; a submit that finds the inbox empty lists it anew.
    const Local& local = locals_[p.place];
    take_into_core(p.place, mailboxes_[p.place].take_unlisted(local.generation), loop_now_);
    // Core::withdraw finds the request's queue from its hook: one queued for another participant
    // must not be withdrawn and counted against p. The request may be queued by another
    // runtime's dispatcher (detail/queued_mark.hpp); Core::withdraw refuses such a request by
    // its issuer.
    const detail::QueuedMark mark = detail::read_queued_mark(request);
    if (mark.state == RequestHook::kQueued && mark.place != p.place) {
      result = Errc::not_queued;
      return;
    }
    result = core_.withdraw(request);  // its release store makes the request the caller's
    if (!result) return;
    CounterWrite(counters_[p.place]).add(CounterLine::kQueued, ~std::uint64_t{0});
    CounterWrite(totals_).add(CounterLine::kQueued, ~std::uint64_t{0});
    if (observer_ != nullptr) guarded_observer().on_withdraw(p, request);
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

// ---- shutdown -----------------------------------------------------------------------------------

void Runtime::Impl::begin_shutdown(ShutdownMode mode, Nanos t) {
  // Close every inbox: a push from now on is refused, and reports shut_down (accepting_flag.hpp).
  // What the inboxes held joins the core's queues behind what they already hold, so each
  // participant's order is kept.
  accepting_.stop_accepting([&] {
    for (std::uint32_t place = 0; place < core_.ring_size(); ++place) {
      Local& local = locals_[place];
      if (!local.open) continue;
      local.open = false;
      take_into_core(place, mailboxes_[place].inbox.close(), t);
    }
  });
  if (mode == ShutdownMode::hand_back) {
    hand_back_queued();
  } else {
    phase_ = Phase::draining;
  }
}

void Runtime::Impl::hand_back_queued() {
  for (std::uint32_t place = 0; place < core_.ring_size(); ++place) {
    if (core_.at(place)) CounterWrite(counters_[place]).set(CounterLine::kQueued, 0);
  }
  flush_totals();  // what is pending was counted before the set
  CounterWrite(totals_).set(CounterLine::kQueued, 0);
  // Appended: a list a late caller left here is kept for the next call.
  handed_back_.splice_back(core_.take_all_queued());
  if (observer_ != nullptr) guarded_observer().on_take_all();
  phase_ = Phase::finishing;
}

bool Runtime::Impl::on_runtime_thread() const noexcept {
  const std::thread::id me = std::this_thread::get_id();
  return me == dispatcher_id_ ||
         std::find(worker_ids_.begin(), worker_ids_.end(), me) != worker_ids_.end();
}

std::vector<Ticket> Runtime::Impl::tickets_in_flight() const {
  std::vector<Ticket> out;
  // find(): the table may grow meanwhile, and its chunks are found from any thread.
  for (std::size_t i = 0;; ++i) {
    const TicketRecord* const record = tickets_.find(i);
    if (record == nullptr) break;
    if (const std::uint64_t generation = record->cell.outstanding(); generation != 0) {
      out.push_back(Ticket{record->index, core_.issuer(), generation});
    }
  }
  return out;
}

ShutdownReport Runtime::Impl::shutdown(ShutdownMode mode,
                                       std::optional<std::chrono::nanoseconds> deadline,
                                       ShutdownWait wait) {
  ShutdownReport report;
  // Checked before anything waits: the dispatcher or a worker waiting for the runtime to finish
  // would wait for itself, and so would a thread whose batch holds completions it has not
  // flushed (unflushed_batches.hpp).
  if (on_runtime_thread() || detail::unflushed_batches.holds(this)) {
    report.status = Errc::wrong_thread;
    return report;
  }
  const auto until = deadline ? std::chrono::steady_clock::now() + *deadline
                              : std::chrono::steady_clock::time_point::max();
  // The command decides by the phase it finds, on the dispatcher, so concurrent calls need no
  // lock to agree: the first begins the shutdown; a hand_back after a drain that has not
  // finished escalates it (what is still queued is handed back, once). It owns its state: a
  // dispatcher held by a callback may run it after this call has returned at its deadline.
  auto owned = std::make_shared<ShutdownStep>();
  ShutdownStep& step = *owned;
  step.command.keep_alive = owned;  // and this call keeps its own reference
  step.command.work = [this, mode, &step] {
    if (phase_ == Phase::running) {
      begin_shutdown(mode, loop_now_);
    } else if (mode == ShutdownMode::hand_back && phase_ == Phase::draining) {
      hand_back_queued();
    }
    // Before the release of `done` in run_commands(), which publishes the list to the caller.
    if (mode == ShutdownMode::hand_back) (void)step.answer.answer(handed_back_);
  };
  const bool answered = step.answer.answered(run_on_dispatcher_until(step.command, until), [&] {
    step.command.done.acquire();  // pairs with the release in run_commands()
  });
  report.answered = answered;
  if (answered) report.handed_back = step.answer.take();
  // The wait for the dispatcher's exit is made without a lock: another thread's hand_back
  // escalates a drain that waits here (tests/runtime/dispatcher_path_test.cpp).
  bool exited = false;
  if (answered) {
    std::unique_lock lock(exit_mutex_);
    if (wait == ShutdownWait::answered) {
      exited = dispatcher_exited_;
    } else if (deadline) {
      exited = exited_.wait_until(lock, until, [&] { return dispatcher_exited_; });
    } else {
      exited_.wait(lock, [&] { return dispatcher_exited_; });
      exited = true;
    }
  }
  if (!exited) {
    // Without a round trip: the dispatcher may be the reason the deadline passed.
    report.in_flight = tickets_in_flight();
    report.still_queued = counters().queued;
    return report;
  }
  std::lock_guard lock(shutdown_mutex_);
  if (!joined_) {  // the first of the threads that saw the exit joins
    dispatcher_.join();
    stop_pool();
    joined_ = true;
  }
  report.finished = true;
  return report;
}

// ---- snapshots ----------------------------------------------------------------------------------

// Assigns every field, so `into` can be storage a previous description used: its strings keep
// their capacity and the dispatcher allocates nothing for a name that fits.
void Runtime::Impl::fill_snapshot(ParticipantId p, Nanos t, ParticipantSnapshot& into) {
  into.id = p;
  into.name.assign(core_.name(p));
  into.plan = core_.plan(p);
  into.shares = core_.shares(p);
  into.scale = core_.scale_of(p);
  into.queued = core_.queued(p);
  into.balance.fill(std::nullopt);
  into.next_credit.fill(std::nullopt);
  for (int c = 0; c < core_.classes(); ++c) {
    const auto cls = static_cast<ClassId>(c);
    const Result<Balance> b = core_.balance(p, cls, t);
    if (b) into.balance[static_cast<std::size_t>(c)] = *b;
    const std::optional<Nanos> next = core_.next_credit(p, cls, t);
    if (next && *next > t) into.next_credit[static_cast<std::size_t>(c)] = next;
  }
  into.stats = core_.stats(p);
  into.last_class = locals_[p.place].last_class;
  into.oldest_queued_age.reset();
  if (const std::optional<Nanos> oldest = core_.oldest_queued_at(p)) {
    into.oldest_queued_age = t - *oldest;
  }
}

std::optional<ParticipantSnapshot> Runtime::Impl::snapshot(ParticipantId p) {
  std::optional<ParticipantSnapshot> result;
  Command c;
  c.work = [&] {
    if (!core_.contains(p)) return;
    const Nanos t = loop_now_;
    // What producers have queued so far counts: move it into the core first.
    activations_.drain([&](Mailbox& m) { take_inbox(m); });
    take_into_core(p.place, nullptr, t);
    fill_snapshot(p, t, result.emplace());
  };
  run_on_dispatcher(c);
  return result;
}

// One command per kSnapshotChunk ring places: a scrape of a million participants used to hold the
// dispatcher for one command of 1.5 s (bench/snapshot_gap, docs/performance.md); in chunks it
// decides between them. The chunk's storage is this thread's and reused, so the dispatcher touches
// no fresh pages and allocates only to lengthen a reused name; the copy out is this thread's cost.
std::vector<ParticipantSnapshot> Runtime::Impl::snapshot_participants() {
  std::vector<ParticipantSnapshot> result;
  std::vector<ParticipantSnapshot> chunk(kSnapshotChunk);
  std::size_t described = 0;
  std::size_t population = 0;
  std::uint32_t next_place = 0;
  bool finished = false;
  Command c;
  c.work = [&] {
    const Nanos t = loop_now_;
    activations_.drain([&](Mailbox& m) { take_inbox(m); });
    described = 0;
    // The ring may have grown since the previous chunk; places only ever get added.
    const std::uint32_t end = core_.ring_size();
    const std::uint32_t stop =
        end - next_place > kSnapshotChunk ? next_place + kSnapshotChunk : end;
    for (; next_place < stop; ++next_place) {
      if (const std::optional<ParticipantId> p = core_.at(next_place)) {
        take_into_core(next_place, nullptr, t);
        fill_snapshot(*p, t, chunk[described++]);
      }
    }
    finished = next_place >= end;
    population = core_.size();
  };
  do {
    run_on_dispatcher(c);
    if (result.capacity() == 0) result.reserve(population);
    result.insert(result.end(), chunk.begin(),
                  chunk.begin() + static_cast<std::ptrdiff_t>(described));
    if (!finished) CREDITLOOP_TEST_HOOK(snapshot_between_chunks);
  } while (!finished);
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
    s.retry_waits = retry_backoff_.waits();
    s.ticket_growth_failures = ticket_growth_failures_;
    s.dispatcher_cpu =
        dispatcher_exited_cpu_ >= 0 ? dispatcher_exited_cpu_ : detail::thread_cpu_now();
    s.classes = core_.classes();
    s.per_class = per_class_;
    for (int cls = 0; cls <= core_.classes(); ++cls) {
      s.per_class[static_cast<std::size_t>(cls)].turns = core_.turns(static_cast<ClassId>(cls));
    }
  };
  run_on_dispatcher(c);
  return s;
}

// ---- callback errors ----------------------------------------------------------------------------

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

// ---- Runtime ------------------------------------------------------------------------------------

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Runtime::~Runtime() = default;

const Config& Runtime::config() const noexcept { return impl_->core().config(); }
int Runtime::classes() const noexcept { return impl_->core().classes(); }
std::uint32_t Runtime::issuer() const noexcept { return impl_->core().issuer(); }

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
Status Runtime::withdraw(ParticipantId p, RequestHook& request) {
  return impl_->withdraw(p, request);
}

void Runtime::wake() noexcept { impl_->wake(); }

std::optional<ParticipantSnapshot> Runtime::snapshot(ParticipantId p) { return impl_->snapshot(p); }
std::vector<ParticipantSnapshot> Runtime::snapshot_participants() {
  return impl_->snapshot_participants();
}
RuntimeSnapshot Runtime::snapshot() { return impl_->snapshot(); }
std::uint64_t Runtime::handler_errors() const noexcept { return impl_->handler_errors(); }
std::uint32_t Runtime::room_slots() const noexcept { return impl_->room_slots(); }
Nanos Runtime::room_latency() const noexcept { return impl_->room_latency(); }
bool Runtime::dispatcher_sleeping() const noexcept { return impl_->sleeping(); }
std::optional<ParticipantCounters> Runtime::counters(ParticipantId p) const noexcept {
  return impl_->counters(p);
}
RuntimeCounters Runtime::counters() const noexcept { return impl_->counters(); }

ShutdownReport Runtime::shutdown(ShutdownMode mode,
                                 std::optional<std::chrono::nanoseconds> deadline,
                                 ShutdownWait wait) {
  return impl_->shutdown(mode, deadline, wait);
}
RequestList Runtime::shutdown(ShutdownMode mode) {
  return std::move(impl_->shutdown(mode, std::nullopt, ShutdownWait::finished).handed_back);
}

}  // namespace creditloop
