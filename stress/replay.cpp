#include "replay.hpp"

#include <cinttypes>
#include <cstdio>

namespace creditloop::stress {

using creditloop::model::Pid;

namespace {

const char* kind_str(EventKind k) {
  switch (k) {
    case EventKind::add:
      return "add";
    case EventKind::remove:
      return "remove";
    case EventKind::replan:
      return "replan";
    case EventKind::scale:
      return "scale";
    case EventKind::submit:
      return "submit";
    case EventKind::begin_turn:
      return "begin_turn";
    case EventKind::visit:
      return "visit";
    case EventKind::visit_none:
      return "visit (turn over)";
    case EventKind::dispatch:
      return "dispatch (a batch)";
    case EventKind::end_turn:
      return "end_turn";
    case EventKind::complete:
      return "complete";
    case EventKind::take_all:
      return "take_all";
  }
  return "?";
}

std::string ids_str(const std::vector<std::uint64_t>& ids, std::size_t from) {
  std::string s;
  for (std::size_t i = from; i < ids.size() && i < from + 8; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s0x%" PRIx64, s.empty() ? "" : " ", ids[i]);
    s += buf;
  }
  return s.empty() ? "(none)" : s;
}

}  // namespace

// ---- HandBacks ----------------------------------------------------------------------------------

void HandBacks::real(std::uint64_t key, std::vector<std::uint64_t> ids, std::size_t queued,
                     std::string subject) {
  std::lock_guard lock(mutex_);
  Entry& e = entries_[key];
  if (e.real) fail("check 1 (fate)", subject + " handed back twice");
  e.real = std::move(ids);
  e.queued = queued;
  e.subject = std::move(subject);
  match(key, e);
}

void HandBacks::model(std::uint64_t key, std::vector<std::uint64_t> ids) {
  std::lock_guard lock(mutex_);
  Entry& e = entries_[key];
  if (e.model) fail("check 4 (replay)", "the model handed back one participant's queue twice");
  e.model = std::move(ids);
  match(key, e);
}

void HandBacks::match(std::uint64_t key, Entry& e) {
  if (!e.real || !e.model) return;
  const std::vector<std::uint64_t>& real = *e.real;
  const std::vector<std::uint64_t>& model = *e.model;
  // The runtime hands back the core's queue, oldest first, then what was still in the inbox.
  // The model saw only the former.
  if (e.queued != model.size()) {
    fail("check 4 (replay)", e.subject + ": the runtime handed back " + std::to_string(e.queued) +
                                 " requests from the core's queue, the model " +
                                 std::to_string(model.size()) + " (runtime: " + ids_str(real, 0) +
                                 "; model: " + ids_str(model, 0) + ")");
  }
  for (std::size_t i = 0; i < model.size(); ++i) {
    if (real[i] != model[i]) {
      fail("check 4 (replay)", e.subject + ": hand-back differs at position " + std::to_string(i) +
                                   ": runtime " + ids_str(real, i) + "; model " +
                                   ids_str(model, i));
    }
  }
  ++matched_;
  entries_.erase(key);
}

void HandBacks::check_drained(bool whole_run) {
  std::lock_guard lock(mutex_);
  for (const auto& [key, e] : entries_) {
    if (e.model) {
      fail("check 4 (replay)", "the model handed back requests the runtime never returned (key " +
                                   std::to_string(key) + ")");
    }
    if (whole_run) {
      fail("check 4 (replay)",
           e.subject + ": handed back by the runtime, but the model never " + "removed it");
    }
  }
}

// ---- Replayer -----------------------------------------------------------------------------------

Replayer::Replayer(const creditloop::Config& config, const Options& options, HandBacks& handbacks)
    : slack_ns_(static_cast<Nanos>(options.wait_slack_ms * 1e6)),
      handbacks_(handbacks),
      model_(config) {}

std::optional<Pid> Replayer::pid_of(ParticipantId p) const noexcept {
  if (p.place >= places_.size()) return std::nullopt;
  const Place& pl = places_[p.place];
  if (!pl.live || pl.generation != p.generation) return std::nullopt;
  return pl.pid;
}

void Replayer::run(EventLog& log) {
  log.read_all([&](const Event& e) {
    if (abandoned_.load(std::memory_order_relaxed)) return false;
    apply(e);
    return true;
  });
  summary_.ring = model_.ring_size();
  {
    std::lock_guard lock(done_mutex_);
    done_ = true;
  }
  done_cv_.notify_all();
}

bool Replayer::wait_done(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(done_mutex_);
  return done_cv_.wait_for(lock, timeout, [&] { return done_; });
}

void Replayer::diverge(const Event& e, const std::string& what) {
  std::string where = "event " + std::to_string(summary_.events) + " (" + kind_str(e.kind) +
                      ", now " + std::to_string(e.now) + " ns";
  if (e.place < places_.size() &&
      (e.kind == EventKind::submit || e.kind == EventKind::visit || e.kind == EventKind::add ||
       e.kind == EventKind::remove || e.kind == EventKind::replan || e.kind == EventKind::scale)) {
    where += ", " + who(places_[e.place].name, ParticipantId{e.place, e.generation});
  }
  fail("check 4 (replay)", where + "): " + what);
}

Replayer::Place& Replayer::place(const Event& e, const char* what) {
  if (e.place >= places_.size() || !places_[e.place].live ||
      places_[e.place].generation != e.generation) {
    diverge(e, std::string(what) + " for a participant the replay does not know");
  }
  return places_[e.place];
}

std::optional<ClassId> Replayer::begin_model_turn(Nanos now) {
  if (queued_ == 0) {
    // With every queue empty the model's answer is certain, and its only other effect is to end
    // the turn in progress; its scan of every place is what would make replaying an idle
    // dispatcher (one such call per wake-up) quadratic in the participants.
    model_.end_turn();
    return std::nullopt;
  }
  const std::optional<ClassId> pass = model_.begin_turn(now);
  if (pass) {
    ++summary_.turns;
    ++summary_.turns_in[*pass];
  }
  return pass;
}

// Core::dispatch() decides as the loop of begin_turn and visit does; the model walks that loop
// to its next dispatch. A turn that ends without one (every participant it found had lost its
// credit to a charge-back) is followed by the next, as in the core; each such turn re-files
// somebody, so a model that began turn after turn without dispatching would be wrong.
std::optional<creditloop::model::Decision> Replayer::visit_in_batch(const Event& e) {
  for (int empty_turns = 0; empty_turns <= creditloop::kMaxClasses + 64; ++empty_turns) {
    if (!model_.in_turn() && !begin_model_turn(e.now)) {
      diverge(e, "the runtime dispatched in a batch, the model finds every queue empty");
    }
    if (auto d = model_.visit(e.now)) return d;
  }
  diverge(e, "the model begins turn after turn without a dispatch");
}

void Replayer::end_batch(const Event& e) {
  if (!batch_short_) return;  // the span filled: the turn it stopped in stays open
  // It stopped short: the core's loop went on to find every queue empty.
  for (;;) {
    if (!model_.in_turn() && !begin_model_turn(e.now)) return;
    if (const auto d = model_.visit(e.now)) {
      diverge(e, "the runtime's batch found every queue empty, the model dispatches from place " +
                     std::to_string(d->participant.place) + " under " + class_str(d->out));
    }
  }
}

void Replayer::apply(const Event& e) {
  replayed_.store(++summary_.events, std::memory_order_relaxed);
  if (e.now > now_) now_ = e.now;
  mark_due_credits();
  switch (e.kind) {
    case EventKind::add:
      apply_add(e);
      break;
    case EventKind::remove:
      apply_remove(e);
      break;
    case EventKind::replan:
    case EventKind::scale:
      apply_plan_change(e);
      break;
    case EventKind::submit:
      apply_submit(e);
      break;
    case EventKind::begin_turn:
      apply_begin_turn(e);
      break;
    case EventKind::dispatch:
      apply_batch(e);
      break;
    case EventKind::visit:
      apply_visit(e);
      break;
    case EventKind::visit_none:
      apply_visit_none(e);
      break;
    case EventKind::end_turn:
      model_.end_turn();
      break;
    case EventKind::complete:
      apply_complete(e);
      break;
    case EventKind::take_all:
      apply_take_all();
      break;
  }
}

void Replayer::mark_due_credits() {
  while (!due_.empty() && due_.top().at <= now_) {
    const Due d = due_.top();
    due_.pop();
    Place& p = places_[d.place];
    if (p.watching && p.credit_known && !p.marked && p.version == d.version) {
      p.marked = true;
      p.mark = summary_.dispatches;
    }
  }
}

void Replayer::apply_add(const Event& e) {
  const std::string name = participant_name(static_cast<std::uint32_t>(e.value));
  const auto r = model_.add(name, e.x, e.y, e.now);
  if (!r) diverge(e, "the model refuses the registration of " + name + ": " + errc_str(r.error()));
  if (r->place != e.place) {
    diverge(e, name + " took ring place " + std::to_string(e.place) + ", the model gives " +
                   std::to_string(r->place));
  }
  if (e.place >= places_.size()) places_.resize(std::size_t{e.place} + 1);
  Place& p = places_[e.place];
  p = Place{e.generation, true, static_cast<std::uint32_t>(e.value), *r};
}

void Replayer::apply_remove(const Event& e) {
  Place& p = place(e, "remove");
  auto r = model_.remove(p.pid);
  if (!r) diverge(e, "the model refuses the removal: " + errc_str(r.error()));
  queued_ -= r->size();
  handbacks_.model(HandBacks::key(ParticipantId{e.place, e.generation}), std::move(*r));
  p.live = false;
  p.watching = false;
}

void Replayer::apply_plan_change(const Event& e) {
  const bool replan = e.kind == EventKind::replan;
  Place& p = place(e, replan ? "replan" : "scale");
  const creditloop::Status s =
      replan ? model_.replan(p.pid, e.x, e.y, e.now) : model_.scale(p.pid, e.x, e.now);
  if (!s) {
    diverge(e, std::string("the model refuses the ") + (replan ? "re-plan" : "scale") + ": " +
                   errc_str(s.error()));
  }
  rewatch(p, e);
}

void Replayer::apply_submit(const Event& e) {
  Place& p = place(e, "submit");
  const creditloop::Status s = model_.submit(p.pid, e.value, e.now);
  if (!s) diverge(e, "the model refuses the submission: " + errc_str(s.error()));
  ++queued_;
  if (!p.watching && model_.queued(p.pid) == 1 && model_.holds(p.pid, 0)) watch(e.place, e.now);
}

void Replayer::apply_begin_turn(const Event& e) {
  auto name = [](std::uint8_t c) { return c == kNoClass ? std::string("none") : class_str(c); };
  const std::uint8_t model_pass = begin_model_turn(e.now).value_or(kNoClass);
  if (model_pass != e.out) {
    diverge(e, "the runtime's turn is " + name(e.out) + ", the model's " + name(model_pass));
  }
}

void Replayer::apply_batch(const Event& e) {
  if (batch_left_ != 0) {
    diverge(e, "a batch began with " + std::to_string(batch_left_) +
                   " dispatches of the last one unreported");
  }
  if (e.x > e.value)
    diverge(e, "a batch of " + std::to_string(e.x) + " in a span of " + std::to_string(e.value));
  batch_left_ = e.x;
  batch_short_ = e.x < e.value;
  if (batch_left_ == 0) end_batch(e);
}

void Replayer::apply_visit(const Event& e) {
  const auto d = batch_left_ > 0 ? visit_in_batch(e) : model_.visit(e.now);
  const std::string subject = e.place < places_.size()
                                  ? who(places_[e.place].name, ParticipantId{e.place, e.generation})
                                  : str(ParticipantId{e.place, e.generation});
  if (!d) diverge(e, "the runtime dispatched from " + subject + ", the model ends the turn");
  if (d->participant.place != e.place || d->request != e.value || d->out != e.out ||
      d->turn != e.turn) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "runtime: request 0x%" PRIx64
                  " out %s in a %s turn; model: place %u, "
                  "request 0x%" PRIx64 " out %s in a %s turn",
                  e.value, class_str(e.out).c_str(), class_str(e.turn).c_str(),
                  d->participant.place, d->request, class_str(d->out).c_str(),
                  class_str(d->turn).c_str());
    diverge(e, "dispatch from " + subject + " differs: " + buf);
  }
  Place& p = place(e, "visit");
  if (e.x >= flights_.size()) flights_.resize(std::size_t{e.x} + 1024);
  flights_[e.x] = Flight{e.y, d->ticket, true};
  end_wait(e.place, e.now);
  --queued_;
  ++summary_.dispatches;
  if (e.out < e.turn) ++summary_.out_above_turn;
  if (model_.holds(p.pid, 0) && model_.queued(p.pid) > 0) watch(e.place, e.now);
  if (batch_left_ > 0 && --batch_left_ == 0) end_batch(e);
}

void Replayer::apply_visit_none(const Event& e) {
  if (const auto d = model_.visit(e.now)) {
    diverge(e, "the runtime ends the turn, the model dispatches from place " +
                   std::to_string(d->participant.place) + " under " + class_str(d->out));
  }
}

void Replayer::apply_complete(const Event& e) {
  if (e.x >= flights_.size() || !flights_[e.x].live || flights_[e.x].generation != e.y) {
    diverge(e, "completion of ticket " + str(Ticket{e.x, 0, e.y}) + ", not in flight");
  }
  Flight& f = flights_[e.x];
  f.live = false;
  const auto r = model_.complete_nano(f.id, static_cast<std::int64_t>(e.value), e.now);
  if (!r) diverge(e, "the model refuses the completion: " + errc_str(r.error()));
  ++summary_.completions;
  if (r->charged) ++summary_.charged;
  if (r->charged && r->bucket == 0 && r->participant.place < places_.size()) {
    const Place& p = places_[r->participant.place];
    if (p.live && p.pid == r->participant) update_credit(r->participant.place, e.now);
  }
}

void Replayer::apply_take_all() {
  handbacks_.model(HandBacks::kShutdownKey, model_.take_all_queued());
  queued_ = 0;
  for (Place& p : places_) p.watching = false;
}

void Replayer::watch(std::uint32_t place, Nanos now) {
  Place& p = places_[place];
  p.watching = true;
  p.credit_known = false;
  p.marked = false;
  update_credit(place, now);
}

void Replayer::rewatch(Place& p, const Event& e) {
  if (!model_.holds(p.pid, 0)) {
    p.watching = false;
  } else if (!p.watching && model_.queued(p.pid) > 0) {
    watch(e.place, e.now);
  } else {
    update_credit(e.place, e.now);
  }
}

void Replayer::update_credit(std::uint32_t place, Nanos now) {
  Place& p = places_[place];
  if (!p.watching) return;
  const std::optional<Nanos> at = model_.credit_instant(p.pid, 0);
  if (!at) {  // beyond the clock's end: nothing to bound
    p.watching = false;
    return;
  }
  if (*at <= now) {
    // It holds a credit now. If it already held one, the wait began at that earlier instant.
    if (p.credit_known && p.credit_at <= now) return;
    p.credit_known = true;
    p.credit_at = *at;
    p.marked = true;
    p.mark = summary_.dispatches;
    return;
  }
  p.credit_known = true;
  p.credit_at = *at;
  p.marked = false;
  ++p.version;
  due_.push(Due{*at, place, p.version});
}

void Replayer::end_wait(std::uint32_t place, Nanos now) {
  Place& p = places_[place];
  if (!p.watching) return;
  p.watching = false;
  if (!p.credit_known || p.credit_at > now) return;  // went out before its P1 credit came
  ++summary_.waits_checked;
  const Nanos waited = now - p.credit_at;
  const std::uint64_t between = p.marked ? summary_.dispatches - p.mark : 0;
  if (waited > summary_.max_wait_after_credit) summary_.max_wait_after_credit = waited;
  if (between > summary_.max_dispatches_after_credit) {
    summary_.max_dispatches_after_credit = between;
  }
  const std::uint64_t ring = model_.ring_size();
  const std::string subject = who(p.name, ParticipantId{place, p.generation});
  if (between > 2 * ring) {
    fail("check 5 (bounded wait)",
         subject + " held a P1 credit and a queued request from " + std::to_string(p.credit_at) +
             " ns, and " + std::to_string(between) +
             " dispatches went to others before its next one: more than the turn in progress "
             "plus one P1 turn (2 x " +
             std::to_string(ring) + " ring places)");
  }
  if (waited > slack_ns_) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  " held a P1 credit and a queued request from %" PRId64
                  " ns; its next dispatch came %.3f ms later (%" PRIu64
                  " dispatches in between, ring %" PRIu64 "), beyond the slack of %.3f ms",
                  p.credit_at, static_cast<double>(waited) / 1e6, between, ring,
                  static_cast<double>(slack_ns_) / 1e6);
    fail("check 5 (bounded wait)", subject + buf);
  }
}

}  // namespace creditloop::stress
