#include "model/model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace creditloop::model {
namespace {

// One nano-credit in the model's exact unit (1e-18 credit): rate (nano-credits/s) times
// nanoseconds is then an integer count of units, so refill never rounds.
constexpr Int128 kUnitsPerNano = 1'000'000'000;
constexpr Int128 kUnitsPerCredit = kUnitsPerNano * kNanoPerCredit;

Int128 floor_div(Int128 a, Int128 b) {
  Int128 q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

Int128 ceil_div(Int128 a, Int128 b) { return -floor_div(-a, b); }

}  // namespace

std::optional<std::int64_t> nano_of(double credits, double limit) {
  if (!std::isfinite(credits) || credits < 0 || credits > limit) return std::nullopt;
  return std::llround(credits * 1e9);
}

Model::Model(const Config& config, Flaw flaw) : k_(config.classes), flaw_(flaw) {
  cursor_.fill(-1);
  for (const Plan& plan : config.plans) {
    PlanRec rec;
    rec.name = plan.name;
    for (int c = 0; c < k_; ++c) {
      if (!plan.terms[c]) continue;
      rec.terms[c].held = true;
      rec.terms[c].rate = std::llround(plan.terms[c]->rate * 1e9);
      rec.terms[c].burst = std::llround(plan.terms[c]->burst * 1e9);
    }
    plans_.push_back(rec);
  }
}

std::optional<PlanId> Model::find_plan(std::string_view name) const {
  for (std::size_t i = 0; i < plans_.size(); ++i) {
    if (plans_[i].name == name) return static_cast<PlanId>(i);
  }
  return std::nullopt;
}

bool Model::plan_holds(PlanId plan, ClassId c) const {
  return plan < plans_.size() && c < k_ && plans_[plan].terms[c].held;
}

Nanos Model::observe(Nanos now) {
  latest_ = std::max(latest_, now);
  return latest_;
}

Model::Participant* Model::live(Pid p) {
  if (p.place >= ring_.size()) return nullptr;
  Participant& rec = ring_[p.place];
  return rec.live && rec.serial == p.serial ? &rec : nullptr;
}

const Model::Participant* Model::live(Pid p) const {
  if (p.place >= ring_.size()) return nullptr;
  const Participant& rec = ring_[p.place];
  return rec.live && rec.serial == p.serial ? &rec : nullptr;
}

// A fraction of a plan is a whole number of nano-credits (per second), rounded down.
Int128 Model::rate_units(const Participant& p, ClassId c) const {
  return Int128{plans_[p.plan].terms[c].rate} * p.shares * p.scale / kWholePlan;
}

Int128 Model::cap_units(PlanId plan, std::uint32_t shares, std::uint32_t scale, ClassId c) const {
  return Int128{plans_[plan].terms[c].burst} * shares * scale / kWholePlan * kUnitsPerNano;
}

Int128 Model::refilled(const Participant& p, ClassId c, Nanos now) const {
  const Bucket& b = p.buckets[c];
  const Int128 cap = cap_units(p.plan, p.shares, p.scale, c);
  const Int128 dt = Int128{now} - p.at;
  if (dt <= 0 || b.value >= cap) return b.value;
  const Int128 rate = rate_units(p, c);
  if (rate == 0) return b.value;  // scaled down to nothing
  // dt * rate can exceed 128 bits after a long idle time; whenever it would pass the capacity
  // the answer is the capacity, so compare against the time needed instead of multiplying.
  if (dt >= ceil_div(cap - b.value, rate)) return cap;
  return b.value + dt * rate;
}

void Model::bring(Participant& p, Nanos now) {
  if (now <= p.at) return;
  for (int c = 0; c < k_; ++c) {
    if (p.buckets[c].held) p.buckets[c].value = refilled(p, static_cast<ClassId>(c), now);
  }
  p.at = now;
}

Result<Pid> Model::add(std::string_view name, std::string_view plan, std::uint32_t shares,
                       Nanos now) {
  const std::optional<PlanId> id = find_plan(plan);
  if (!id) return Errc::unknown_plan;
  return add(name, *id, shares, now);
}

Result<Pid> Model::add(std::string_view name, PlanId plan, std::uint32_t shares, Nanos now) {
  if (plan >= plans_.size()) return Errc::unknown_plan;
  // The core tests shares before the name; both refusals are right, so mirror its order.
  if (shares == 0 || shares > kMaxShares) return Errc::bad_shares;
  if (find(name)) return Errc::duplicate_name;
  if (size() >= kMaxParticipants) return Errc::too_many_participants;
  now = observe(now);
  std::uint32_t place = 0;
  if (!free_places_.empty()) {
    place = free_places_.back();
    free_places_.pop_back();
  } else {
    place = static_cast<std::uint32_t>(ring_.size());
    ring_.emplace_back();
  }
  Participant& p = ring_[place];
  p = Participant{};
  p.live = true;
  p.serial = ++serials_;
  p.name = std::string(name);
  names_.emplace(p.name, place);
  p.plan = plan;
  p.shares = shares;
  p.at = now;
  p.joined_turn = turn_.active ? turn_.serial : 0;
  for (int c = 0; c < k_; ++c) {
    if (!plans_[plan].terms[c].held) continue;
    p.buckets[c] =
        Bucket{true, cap_units(plan, shares, kWholePlan, static_cast<ClassId>(c)), ++bucket_ids_};
  }
  return Pid{place, p.serial};
}

Result<std::vector<RequestId>> Model::remove(Pid id) {
  Participant* p = live(id);
  if (p == nullptr) return Errc::unknown_participant;
  std::vector<RequestId> back(p->queue.begin(), p->queue.end());
  names_.erase(p->name);
  *p = Participant{};
  free_places_.push_back(id.place);
  return back;
}

Status Model::replan(Pid id, PlanId plan, std::uint32_t shares, Nanos now) {
  Participant* p = live(id);
  if (p == nullptr) return Errc::unknown_participant;
  if (plan >= plans_.size()) return Errc::unknown_plan;
  if (shares == 0 || shares > kMaxShares) return Errc::bad_shares;
  now = observe(now);
  if (flaw_ == Flaw::refill_at_new_shares) p->shares = shares;
  bring(*p, now);  // at the old terms
  for (int c = 0; c < k_; ++c) {
    const auto cls = static_cast<ClassId>(c);
    Bucket& b = p->buckets[c];
    if (!plans_[plan].terms[c].held) {
      b = Bucket{};
      continue;
    }
    const Int128 cap = cap_units(plan, shares, p->scale, cls);
    if (!b.held) {
      b = Bucket{true, cap, ++bucket_ids_};
    } else if (b.value > cap) {
      b.value = cap;
    }
  }
  p->plan = plan;
  p->shares = shares;
  return {};
}

Status Model::scale(Pid id, std::uint32_t millionths, Nanos now) {
  Participant* p = live(id);
  if (p == nullptr) return Errc::unknown_participant;
  if (millionths > kWholePlan) return Errc::bad_scale;
  now = observe(now);
  if (flaw_ == Flaw::scale_refill_at_new_terms) p->scale = millionths;
  bring(*p, now);  // at the old terms
  p->scale = millionths;
  for (int c = 0; c < k_; ++c) {
    Bucket& b = p->buckets[c];
    if (!b.held) continue;
    b.value = std::min(b.value, cap_units(p->plan, p->shares, p->scale, static_cast<ClassId>(c)));
  }
  return {};
}

bool Model::contains(Pid p) const { return live(p) != nullptr; }

std::optional<Pid> Model::find(std::string_view name) const {
  const auto it = names_.find(name);
  if (it == names_.end()) return std::nullopt;
  return Pid{it->second, ring_[it->second].serial};
}

std::optional<Pid> Model::at(std::uint32_t place) const {
  if (place >= ring_.size() || !ring_[place].live) return std::nullopt;
  return Pid{place, ring_[place].serial};
}

std::size_t Model::size() const { return names_.size(); }

const std::string& Model::name(Pid p) const { return live(p)->name; }
PlanId Model::plan(Pid p) const { return live(p)->plan; }
std::uint32_t Model::shares(Pid p) const { return live(p)->shares; }
std::uint32_t Model::scale_of(Pid p) const { return live(p)->scale; }
const Stats& Model::stats(Pid p) const { return live(p)->stats; }

Status Model::submit(Pid id, RequestId r, Nanos now) {
  Participant* p = live(id);
  if (p == nullptr) return Errc::unknown_participant;
  observe(now);
  p->queue.push_back(r);
  return {};
}

Status Model::withdraw(RequestId r) {
  for (std::uint32_t place = 0; place < ring_.size(); ++place) {
    Participant& p = ring_[place];
    if (!p.live) continue;
    const auto it = std::find(p.queue.begin(), p.queue.end(), r);
    if (it == p.queue.end()) continue;
    p.queue.erase(it);
    if (flaw_ == Flaw::withdraw_moves_cursor) cursor_.fill(place);
    return {};
  }
  for (const TicketRec& t : tickets_) {
    if (!t.done && t.request == r) return Errc::in_flight;
  }
  return Errc::not_queued;
}

std::size_t Model::queued(Pid id) const {
  const Participant* p = live(id);
  return p == nullptr ? 0 : p->queue.size();
}

std::size_t Model::waiting() const {
  return static_cast<std::size_t>(std::count_if(
      ring_.begin(), ring_.end(), [](const Participant& p) { return p.live && !p.queue.empty(); }));
}

std::vector<RequestId> Model::take_all_queued() {
  turn_.active = false;
  std::vector<RequestId> all;
  for (Participant& p : ring_) {
    all.insert(all.end(), p.queue.begin(), p.queue.end());
    p.queue.clear();
  }
  return all;
}

bool Model::qualifies_at(std::uint32_t place, ClassId c, Nanos now) {
  Participant& p = ring_[place];
  if (!p.live || p.queue.empty()) return false;
  if (c == unmetered()) return true;
  if (!p.buckets[c].held) return false;
  bring(p, now);
  return p.buckets[c].value >= kUnitsPerCredit;
}

std::optional<ClassId> Model::begin_turn(Nanos now) {
  turn_.active = false;
  now = observe(now);
  std::optional<ClassId> pass;
  for (int c = 0; c <= k_ && !pass; ++c) {
    for (std::uint32_t place = 0; place < ring_.size(); ++place) {
      if (qualifies_at(place, static_cast<ClassId>(c), now)) {
        pass = static_cast<ClassId>(c);
        break;
      }
    }
  }
  if (!pass) return std::nullopt;
  const std::int64_t after = cursor_[*pass] + 1;
  turn_.active = true;
  turn_.wrapped = false;
  turn_.cls = *pass;
  turn_.end = ring_size();
  turn_.start = after >= turn_.end ? 0u : static_cast<std::uint32_t>(after);
  turn_.next = turn_.start;
  ++turn_.serial;
  return pass;
}

std::optional<Decision> Model::visit(Nanos now) {
  if (!turn_.active) return std::nullopt;
  now = observe(now);
  // The cursor walks from start to the end of the ring as it was when the turn began, then from
  // place 0 up to start. Whoever registered during the turn waits for the next one.
  for (;;) {
    if (!turn_.wrapped && turn_.next >= turn_.end) {
      turn_.wrapped = true;
      turn_.next = 0;
    }
    if (turn_.wrapped && turn_.next >= turn_.start) {
      turn_.active = false;
      return std::nullopt;
    }
    const std::uint32_t place = turn_.next++;
    if (ring_[place].joined_turn == turn_.serial) continue;
    if (qualifies_at(place, turn_.cls, now)) break;
  }
  const std::uint32_t place = turn_.next - 1;
  Participant& p = ring_[place];
  bring(p, now);
  ClassId out = unmetered();
  for (int c = 0; c < k_; ++c) {
    if (p.buckets[c].held && p.buckets[c].value >= kUnitsPerCredit) {
      out = static_cast<ClassId>(c);
      break;
    }
  }
  TicketRec ticket;
  ticket.participant = Pid{place, p.serial};
  ticket.bucket = out;
  if (out != unmetered()) {
    p.buckets[out].value -= kUnitsPerCredit;
    ticket.bucket_id = p.buckets[out].id;
  }
  Decision d;
  d.request = p.queue.front();
  ticket.request = d.request;
  p.queue.pop_front();
  d.participant = ticket.participant;
  d.out = out;
  d.turn = turn_.cls;
  d.ticket = tickets_.size();
  tickets_.push_back(ticket);
  ++in_flight_;
  ++p.stats.dispatched[out];
  if (flaw_ == Flaw::move_every_cursor) {
    cursor_.fill(place);
  } else {
    cursor_[turn_.cls] = place;
  }
  return d;
}

std::optional<ClassId> Model::turn_class() const {
  return turn_.active ? std::optional<ClassId>(turn_.cls) : std::nullopt;
}

Result<Completion> Model::complete(TicketId t, double cost, Nanos now) {
  const std::optional<std::int64_t> nano = nano_of(cost, kMaxCost);
  if (!nano) return Errc::bad_cost;
  return complete_nano(t, *nano, now);
}

Result<Completion> Model::complete_nano(TicketId t, std::int64_t cost_nano, Nanos now) {
  if (cost_nano < 0 || cost_nano > kMaxCostNano) return Errc::bad_cost;
  if (t >= tickets_.size()) return Errc::unknown_ticket;
  TicketRec& ticket = tickets_[t];
  if (ticket.done) return Errc::stale_ticket;
  now = observe(now);
  ticket.done = true;
  --in_flight_;
  Completion done{ticket.participant, ticket.bucket, false};
  Participant* p = live(ticket.participant);
  if (p == nullptr) return done;
  done.registered = true;
  ++p->stats.completed;
  if (ticket.bucket != unmetered()) {
    Bucket& b = p->buckets[ticket.bucket];
    if (b.held && (b.id == ticket.bucket_id || flaw_ == Flaw::charge_readded_bucket)) {
      bring(*p, now);
      b.value -= Int128{cost_nano} * kUnitsPerNano;
      done.charged = true;
    }
  }
  if (done.charged) {
    p->stats.cost_charged += cost_nano;
  } else {
    p->stats.cost_uncharged += cost_nano;
  }
  return done;
}

bool Model::holds(Pid id, ClassId c) const {
  const Participant* p = live(id);
  return p != nullptr && c < k_ && p->buckets[c].held;
}

Result<Int128> Model::balance(Pid id, ClassId c, Nanos now) {
  Participant* p = live(id);
  if (p == nullptr) return Errc::unknown_participant;
  if (c >= k_ || !p->buckets[c].held) return Errc::unknown_class;
  bring(*p, observe(now));
  const Int128 v = p->buckets[c].value;
  return flaw_ == Flaw::round_balance_up ? ceil_div(v, kUnitsPerNano) : floor_div(v, kUnitsPerNano);
}

bool Model::qualifies(Pid id, ClassId c, Nanos now) {
  // Like every call, it takes `now` as the latest time seen only when it reads a bucket; a
  // refused or trivial call leaves the clock where it was.
  const Participant* p = live(id);
  if (p == nullptr || p->queue.empty() || c > k_) return false;
  if (c == unmetered()) return true;
  if (!p->buckets[c].held) return false;
  return qualifies_at(id.place, c, observe(now));
}

std::optional<Nanos> Model::credit_instant(Pid id, ClassId c) const {
  const Participant* p = live(id);
  if (p == nullptr || c >= k_ || !p->buckets[c].held) return std::nullopt;
  const Nanos from = std::max(latest_, p->at);
  const Int128 v = refilled(*p, c, from);
  if (v >= kUnitsPerCredit) return from;
  // Scaled so far down that no refill reaches a credit.
  if (rate_units(*p, c) == 0 || cap_units(p->plan, p->shares, p->scale, c) < kUnitsPerCredit) {
    return std::nullopt;
  }
  const Int128 when = Int128{from} + ceil_div(kUnitsPerCredit - v, rate_units(*p, c));
  if (when > std::numeric_limits<Nanos>::max()) return std::nullopt;
  return static_cast<Nanos>(when);
}

std::optional<Nanos> Model::full_instant(Pid id, ClassId c) const {
  const Participant* p = live(id);
  if (p == nullptr || c >= k_ || !p->buckets[c].held) return std::nullopt;
  const Nanos from = std::max(latest_, p->at);
  const Int128 v = refilled(*p, c, from);
  const Int128 cap = cap_units(p->plan, p->shares, p->scale, c);
  if (v >= cap) return from;
  if (rate_units(*p, c) == 0) return std::nullopt;
  const Int128 when = Int128{from} + ceil_div(cap - v, rate_units(*p, c));
  if (when > std::numeric_limits<Nanos>::max()) return std::nullopt;
  return static_cast<Nanos>(when);
}

}  // namespace creditloop::model
