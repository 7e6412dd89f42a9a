#include "recorder.hpp"

#include <algorithm>

namespace creditloop::stress {
namespace {

// The sample and the event log keep a generation's low 32 bits: a stress run reuses a ticket
// record far fewer than 2^32 times.
std::uint32_t low_generation(Ticket t) noexcept { return static_cast<std::uint32_t>(t.generation); }

std::uint64_t pack_ticket(Ticket t) noexcept {
  return (std::uint64_t{t.index} << 32) | low_generation(t);
}

}  // namespace

Recorder::Recorder(const creditloop::Config& config, const Options& options, EventLog* log)
    : config_(config),
      k_(config.classes),
      producers_(options.producers),
      log_(log),
      replay_limit_(options.replay_limit),
      follows_batches_(*options.decide == DecideMode::batches),
      recording_(log != nullptr),
      // Ticket indices stay below the most requests ever in flight at once, which the slot
      // count bounds; the margin covers the runtime's first chunk of records.
      expected_size_(std::size_t{options.slots} + 4096),
      expected_(new Expected[expected_size_]),
      recording_pub_(log != nullptr) {
  accounts_.reserve(options.participants + options.participants / 4 + 16);
  order_.reserve(accounts_.capacity() * producers_);
  tickets_.resize(expected_size_);
}

Recorder::Account& Recorder::live_account(ParticipantId p, const char* event) {
  if (p.place >= accounts_.size() || !accounts_[p.place].live ||
      accounts_[p.place].generation != p.generation) {
    fail("check 3 (ledger)", std::string(event) + " for participant " + str(p) +
                                 ", which is not registered as the observer saw it");
  }
  return accounts_[p.place];
}

void Recorder::record(const Event& e) {
  last_now_ = std::max(last_now_, e.now);
  last_now_pub_.store(last_now_, kRelaxed);
  if (!recording_) return;
  if (const int why = cut_requested_.load(kRelaxed); why != 0) {
    stop_recording(static_cast<Cut>(why));
    return;
  }
  log_->append(e);
}

void Recorder::stop_recording(Cut why) noexcept {
  recording_ = false;
  truncated_ = true;
  cut_reason_ = why;
  cut_at_ = last_now_;
  recording_pub_.store(false, kRelaxed);
}

void Recorder::on_add(ParticipantId p, std::string_view name, creditloop::PlanId plan,
                      std::uint32_t shares, Nanos now) {
  std::uint32_t index = 0;
  if (!parse_participant_name(name, index)) {
    fail("check 3 (ledger)", "on_add reports a name this run never used: " + std::string(name));
  }
  if (p.place >= accounts_.size()) {
    accounts_.resize(std::size_t{p.place} + 1);
    order_.resize(accounts_.size() * producers_, 0);
  }
  Account& a = accounts_[p.place];
  if (a.live) {
    fail("check 3 (ledger)", "on_add of " + who(index, p) + " in place " + std::to_string(p.place) +
                                 ", which " + participant_name(a.name) + " still holds");
  }
  const auto incarnation = a.incarnation;
  a = Account{};
  a.incarnation = incarnation;
  for (auto& i : a.incarnation) ++i;
  a.generation = p.generation;
  a.live = true;
  a.name = index;
  a.plan = plan;
  a.shares = shares;
  std::fill_n(order_.begin() + static_cast<std::ptrdiff_t>(std::size_t{p.place} * producers_),
              producers_, 0);
  record(Event{now, index, p.place, p.generation, plan, shares, EventKind::add, 0, 0});
}

void Recorder::on_remove(ParticipantId p) {
  Account& a = live_account(p, "on_remove");
  a.live = false;
  record(Event{last_now_, 0, p.place, p.generation, 0, 0, EventKind::remove, 0, 0});
}

void Recorder::on_replan(ParticipantId p, creditloop::PlanId plan, std::uint32_t shares,
                         Nanos now) {
  Account& a = live_account(p, "on_replan");
  for (int i = 0; i < k_; ++i) {
    const auto c = static_cast<ClassId>(i);
    if (holds(a.plan, c) != holds(plan, c)) ++a.incarnation[c];
  }
  a.plan = plan;
  a.shares = shares;
  record(Event{now, 0, p.place, p.generation, plan, shares, EventKind::replan, 0, 0});
}

void Recorder::on_scale(ParticipantId p, std::uint32_t millionths, Nanos now) {
  (void)live_account(p, "on_scale");  // checks that it is registered
  record(Event{now, 0, p.place, p.generation, millionths, 0, EventKind::scale, 0, 0});
}

void Recorder::on_submit(ParticipantId p, const creditloop::RequestHook& request, Nanos now) {
  // The request is ours; the observer only gets it as const.
  Req& r = static_cast<Req&>(const_cast<creditloop::RequestHook&>(request));
  Account& a = live_account(p, "on_submit");
  if (!(r.participant == p)) {
    fail("check 1 (fate)", req_str(r) + " was submitted to " + str(r.participant) +
                               " but entered the queue of " + who(a.name, p));
  }
  if (r.producer >= producers_) fail("check 1 (fate)", "on_submit of a request nobody made");
  std::uint64_t& last = order_[std::size_t{p.place} * producers_ + r.producer];
  if (r.seq <= last) {
    fail("check 2 (order)", req_str(r) + " entered the queue of " + who(a.name, p) +
                                " after the same producer's later submission " +
                                std::to_string(last));
  }
  last = r.seq;
  r.core_seq = ++a.entered;
  bump(submits_);
  record(Event{now, r.id, p.place, p.generation, 0, 0, EventKind::submit, 0, 0});
}

void Recorder::on_begin_turn(std::optional<ClassId> pass, Nanos now) {
  if (pass) {
    if (*pass > k_) fail("check 4 (classes)", "a turn of class " + class_str(*pass));
    ++turns_[*pass];
  }
  record(Event{now, 0, 0, 0, 0, 0, EventKind::begin_turn,
               pass ? static_cast<std::uint8_t>(*pass) : kNoClass, 0});
}

void Recorder::on_dispatch(std::size_t asked, std::size_t got, Nanos now) {
  if (!follows_batches_) fail("check 4 (classes)", "a batch reported to an observer of visits");
  if (got > asked) {
    fail("check 4 (classes)",
         "a batch of " + std::to_string(got) + " dispatches in a span of " + std::to_string(asked));
  }
  record(Event{now, asked, 0, 0, static_cast<std::uint32_t>(got), 0, EventKind::dispatch, 0, 0});
}

void Recorder::on_visit(const creditloop::Decision* d, Ticket ticket, Nanos now) {
  if (d == nullptr) {
    record(Event{now, 0, 0, 0, 0, 0, EventKind::visit_none, 0, 0});
    return;
  }
  Req& r = static_cast<Req&>(*d->request);
  Account& a = live_account(d->participant, "on_visit");
  const std::string subject = who(a.name, d->participant);
  if (!(r.participant == d->participant)) {
    fail("check 1 (fate)", req_str(r) + " of " + str(r.participant) + " dispatched for " + subject);
  }
  if (r.core_seq != a.left + 1) {
    fail("check 2 (order)", req_str(r) + " of " + subject + " left the queue as number " +
                                std::to_string(r.core_seq) + " of its entries while number " +
                                std::to_string(a.left + 1) + " was the oldest");
  }
  ++a.left;
  // A visit in a turn of class c finds a credit in c at least (or c is unmetered), and the
  // request goes out under the highest class with a credit: never below the turn's class.
  if (d->out > k_ || d->turn > k_ || d->out > d->turn) {
    fail("check 4 (classes)", req_str(r) + " of " + subject + " went out under " +
                                  class_str(d->out) + " in a turn of " + class_str(d->turn));
  }
  if (d->out < k_ && !holds(a.plan, d->out)) {
    fail("check 4 (classes)", req_str(r) + " of " + subject + " went out under " +
                                  class_str(d->out) + ", which its plan " +
                                  config_.plans[a.plan].name + " does not hold");
  }
  if (ticket.generation == 0) fail("check 3 (ledger)", "a dispatch with ticket generation 0");
  if (ticket.index >= tickets_.size()) tickets_.resize(std::size_t{ticket.index} + 1024);
  InFlight& t = tickets_[ticket.index];
  if (t.in_flight) {
    fail("check 3 (ledger)", "ticket " + str(ticket) + " issued for " + req_str(r) + " of " +
                                 subject + " while its record still holds ticket generation " +
                                 std::to_string(t.generation) + " in flight");
  }
  t = InFlight{ticket.generation,
               d->participant.place,
               d->participant.generation,
               d->out < k_ ? a.incarnation[d->out] : 0,
               d->out,
               true};
  ++in_flight_;
  ++a.dispatched[d->out];
  ++per_class_[d->out];
  r.ticket = ticket;
  max_queue_wait_ = std::max(max_queue_wait_, now - r.submitted_at);
  bump(dispatches_);
  record(Event{now, r.id, d->participant.place, d->participant.generation, ticket.index,
               low_generation(ticket), EventKind::visit, d->out, d->turn});
  if (recording_ && ++recorded_dispatches_ == replay_limit_) stop_recording(Cut::limit);
}

void Recorder::on_end_turn() { record(Event{last_now_, 0, 0, 0, 0, 0, EventKind::end_turn, 0, 0}); }

void Recorder::on_complete(Ticket ticket, std::int64_t cost_nano, Nanos now) {
  if (ticket.index >= tickets_.size() || !tickets_[ticket.index].in_flight ||
      tickets_[ticket.index].generation != ticket.generation) {
    fail("check 3 (ledger)",
         "completion applied for ticket " + str(ticket) + ", which is not in flight");
  }
  InFlight& t = tickets_[ticket.index];
  t.in_flight = false;
  --in_flight_;
  if (ticket.index < expected_size_) {
    const Expected& e = expected_[ticket.index];
    if (e.generation != ticket.generation || e.cost_nano != cost_nano) {
      fail("check 3 (ledger)",
           "ticket " + str(ticket) + " was charged " + std::to_string(cost_nano) +
               " nano-credits; its completer reported " +
               (e.generation == ticket.generation ? std::to_string(e.cost_nano)
                                                  : std::string("nothing for this generation")));
    }
  } else {
    ++unchecked_costs_;
  }
  cost_applied_ += cost_nano;
  // The core's rule: a removed participant's completion counts nowhere; otherwise the cost is
  // charged to the admitting bucket if the participant still holds that very bucket.
  if (t.place < accounts_.size() && accounts_[t.place].live &&
      accounts_[t.place].generation == t.participant_generation) {
    Account& a = accounts_[t.place];
    ++a.completed;
    if (t.out < k_ && holds(a.plan, t.out) && a.incarnation[t.out] == t.incarnation) {
      a.cost_charged += cost_nano;
    } else {
      a.cost_uncharged += cost_nano;
    }
  }
  samples_[sample_next_++ % kSamples].store(pack_ticket(ticket), kRelaxed);
  bump(completions_);
  record(Event{now, static_cast<std::uint64_t>(cost_nano), 0, 0, ticket.index,
               low_generation(ticket), EventKind::complete, 0, 0});
}

void Recorder::on_take_all() { record(Event{last_now_, 0, 0, 0, 0, 0, EventKind::take_all, 0, 0}); }

void Recorder::expect_cost(Ticket t, std::int64_t cost_nano) noexcept {
  if (t.index >= expected_size_) return;
  expected_[t.index] = Expected{t.generation, cost_nano};
}

std::optional<Ticket> Recorder::completed_sample(Rng& rng, std::uint32_t issuer) const noexcept {
  const std::uint64_t v = samples_[rng.below(kSamples)].load(kRelaxed);
  if (v == 0) return std::nullopt;
  return Ticket{static_cast<std::uint32_t>(v >> 32), issuer, static_cast<std::uint32_t>(v)};
}

const Recorder::Account* Recorder::account(ParticipantId p) const noexcept {
  if (p.place >= accounts_.size()) return nullptr;
  const Account& a = accounts_[p.place];
  return a.live && a.generation == p.generation ? &a : nullptr;
}

}  // namespace creditloop::stress
