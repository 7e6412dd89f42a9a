#include "simulator.hpp"

#include "common/json_text.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

namespace creditloop::sim {

using creditloop::Balance;
using creditloop::ClassId;
using creditloop::Nanos;
using creditloop::ParticipantId;
using tools::append_uint;
using tools::json_string;

struct Simulator::Request : creditloop::RequestHook {
  Nanos arrived = 0;
  Nanos dispatched = 0;
  std::uint64_t seq = 0;  // dispatch order: completions due together go in this order
  creditloop::Ticket ticket{};
  std::uint32_t entry = 0;  // the arrival entry: its service and cost
  std::uint32_t participant = 0;
  bool sent = false;  // dispatched: a withdrawal due later is moot
};

struct Simulator::Participant {
  ParticipantId id;
  std::string json_name;  // the name as a JSON string, quotes included
  std::array<bool, creditloop::kMaxClasses> holds{};
  std::array<std::uint64_t, creditloop::kMaxClasses + 1> dispatched{};
  std::uint64_t arrived = 0;
  std::uint64_t completed = 0;
  std::uint64_t withdrawn = 0;
  std::optional<Nanos> wait_max;
};

// The room test and callbacks Core::run drives. Room is the slot model's: a slot is free, of a
// fixed number or of the learned room's.
struct Simulator::Loop {
  Simulator& sim;
  bool room() const noexcept { return sim.in_flight_ < sim.room_; }
  void on_turn(ClassId c) { sim.on_turn(c); }
  void on_dispatch(const creditloop::Decision& d) { sim.on_dispatch(d); }
};

namespace {

[[noreturn]] void core_bug(const std::string& what) { throw std::runtime_error(what); }

// Min-heaps through std::push_heap: "less" means "later", so the earliest sits at front().
bool arrival_later(const auto& a, const auto& b) {
  return a.t != b.t ? a.t > b.t : a.entry > b.entry;
}
bool due_later(const auto& a, const auto& b) { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }

}  // namespace

void append_micro(std::string& out, Balance nano) {
  const bool negative = nano < 0;
  const U128 magnitude = negative ? static_cast<U128>(-(nano + 1)) + 1 : static_cast<U128>(nano);
  const U128 units = (magnitude + 500) / 1000;  // micro units, halves away from zero
  if (negative && units != 0) out += '-';
  append_uint(out, units / 1'000'000);
  out += '.';
  auto frac = static_cast<std::uint32_t>(units % 1'000'000);
  char digits[6];
  for (int i = 5; i >= 0; --i) {
    digits[i] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  int len = 6;
  while (len > 1 && digits[len - 1] == '0') --len;
  out.append(digits, static_cast<std::size_t>(len));
}

void LineWriter::flush() {
  if (buf_.empty()) return;
  const std::size_t size = buf_.size();
  const std::size_t written = std::fwrite(buf_.data(), 1, size, out_);
  buf_.clear();
  if (written != size) {
    throw std::runtime_error(std::string("cannot write the trace: ") + std::strerror(errno));
  }
}

Parsed<std::unique_ptr<Simulator>> Simulator::create(Scenario scenario) {
  std::unique_ptr<Simulator> sim;
  try {
    sim.reset(new Simulator(std::move(scenario)));
  } catch (const std::invalid_argument& e) {
    return Refusal{std::string("plans: ") + e.what()};
  }
  Simulator& s = *sim;
  const auto& specs = s.scenario_.participants;
  s.core_.reserve(specs.size(), static_cast<std::size_t>(std::min<std::uint64_t>(
                                    s.scenario_.slots, s.scenario_.requests)));
  s.participants_.reserve(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string path = "participants[" + std::to_string(i) + "]";
    auto id = s.core_.add(specs[i].name, specs[i].plan, specs[i].shares, 0);
    if (!id) {
      switch (id.error()) {
        case creditloop::Errc::unknown_plan:
          return Refusal{path + ".plan: unknown plan " + json_string(specs[i].plan)};
        case creditloop::Errc::duplicate_name:
          return Refusal{path + ".name: duplicate participant name " + json_string(specs[i].name)};
        case creditloop::Errc::bad_shares:
          return Refusal{path + ".shares: must be a whole number from 1 to " +
                         std::to_string(creditloop::kMaxShares)};
        case creditloop::Errc::too_many_participants:
          return Refusal{"participants: more participants than the core's limit of " +
                         std::to_string(creditloop::kMaxParticipants)};
        default:
          return Refusal{path +
                         ": refused by the core: " + std::string(creditloop::describe(id.error()))};
      }
    }
    Participant p;
    p.id = *id;
    p.json_name = json_string(specs[i].name);
    const creditloop::PlanId plan = s.core_.plan(*id);
    for (int c = 0; c < s.core_.classes(); ++c) {
      p.holds[static_cast<std::size_t>(c)] = s.core_.plan_holds(plan, static_cast<ClassId>(c));
    }
    s.participants_.push_back(std::move(p));
  }
  s.by_place_.assign(s.core_.ring_size(), std::numeric_limits<std::uint32_t>::max());
  for (std::size_t i = 0; i < s.participants_.size(); ++i) {
    const std::uint32_t place = s.participants_[i].id.place;
    if (place >= s.by_place_.size()) core_bug("a registered participant lies outside the ring");
    s.by_place_[place] = static_cast<std::uint32_t>(i);
  }
  return sim;
}

Simulator::Simulator(Scenario scenario) : scenario_(std::move(scenario)), core_(scenario_.config) {
  const int k = core_.classes();
  for (int c = 0; c <= k; ++c)
    class_json_.push_back(json_string(creditloop::class_name(static_cast<ClassId>(c))));
  pool_.resize(static_cast<std::size_t>(scenario_.requests));
  scratch_ids_.reserve(scenario_.participants.size());
  scratch_.reserve(scenario_.participants.size());
  arrivals_.reserve(scenario_.arrivals.size());
  const auto most_in_flight =
      static_cast<std::size_t>(std::min<std::uint64_t>(scenario_.slots, scenario_.requests));
  completions_.reserve(most_in_flight);
  room_ = scenario_.slots;
  if (scenario_.room_auto) {
    controller_.emplace(*scenario_.room_auto);
    room_ = controller_->slots();
  }
  if (!scenario_.backend.empty()) backend_fifo_.resize(most_in_flight);
}

Simulator::~Simulator() = default;

Balances Simulator::balances_of(const Participant& p) {
  Balances out{};
  for (int c = 0; c < core_.classes(); ++c) {
    const auto cu = static_cast<std::size_t>(c);
    if (!p.holds[cu]) continue;
    const auto balance = core_.balance(p.id, static_cast<ClassId>(c), now_);
    if (!balance) core_bug("balance() refused a bucket the plan holds");
    out[cu] = *balance;
  }
  return out;
}

void Simulator::write_balances(const Balances& balances) {
  std::string& b = trace_->buffer();
  b += "\"balances\": {";
  bool first = true;
  for (int c = 0; c < core_.classes(); ++c) {
    const auto& balance = balances[static_cast<std::size_t>(c)];
    if (!balance) continue;
    if (!first) b += ", ";
    first = false;
    b += class_json_[static_cast<std::size_t>(c)];
    b += ": ";
    append_micro(b, *balance);
  }
  b += '}';
}

void Simulator::arrive(std::uint32_t entry) {
  const ArrivalSpec& spec = scenario_.arrivals[entry];
  const std::uint64_t req = next_req_++;
  Request& r = pool_[static_cast<std::size_t>(req)];
  r.arrived = now_;
  r.entry = entry;
  r.participant = static_cast<std::uint32_t>(spec.participant);
  Participant& p = participants_[spec.participant];
  ++p.arrived;
  if (!core_.submit(p.id, r, now_)) core_bug("submit() refused a registered participant");
  if (spec.withdraw_after) {
    withdrawals_.push_back(Due{now_ + *spec.withdraw_after, req, static_cast<std::uint32_t>(req)});
    std::push_heap(withdrawals_.begin(), withdrawals_.end(),
                   [](const Due& a, const Due& b) { return due_later(a, b); });
  }
  if (observer_ != nullptr) observer_->arrived(now_, r.participant, req);
  if (trace_ == nullptr) return;
  std::string& b = trace_->buffer();
  b += "{\"t\": ";
  append_micro(b, now_);
  b += ", \"ev\": \"arrive\", \"participant\": ";
  b += p.json_name;
  b += ", \"req\": ";
  append_uint(b, req);
  b += '}';
  trace_->end_line();
}

void Simulator::complete_due(Nanos now) {
  while (!completions_.empty() && completions_.front().t == now) {
    std::pop_heap(completions_.begin(), completions_.end(),
                  [](const Due& a, const Due& b) { return due_later(a, b); });
    const Due due = completions_.back();
    completions_.pop_back();
    Request& r = pool_[due.req];
    const ArrivalSpec& spec = scenario_.arrivals[r.entry];
    const auto done = core_.complete_nano(r.ticket, spec.cost_nano, now_);
    if (!done) core_bug("complete() refused a ticket of a request in flight");
    --in_flight_;
    if (!scenario_.backend.empty()) {
      --serving_;
      start_waiting_in_backend();
    }
    if (controller_) controller_->completed(r.dispatched, now_);
    Participant& p = participants_[r.participant];
    ++p.completed;
    if (trace_ == nullptr && observer_ == nullptr) {
      follow_room();
      continue;
    }
    const Balances balances = balances_of(p);
    if (observer_ != nullptr)
      observer_->completed(now_, r.participant, due.req, spec.cost_nano, balances);
    if (trace_ == nullptr) {
      follow_room();
      continue;
    }
    std::string& b = trace_->buffer();
    b += "{\"t\": ";
    append_micro(b, now_);
    b += ", \"ev\": \"complete\", \"participant\": ";
    b += p.json_name;
    b += ", \"req\": ";
    append_uint(b, std::uint64_t{due.req});
    b += ", \"cost\": ";
    append_micro(b, spec.cost_nano);
    b += ", \"bucket\": ";
    b += done->bucket == core_.unmetered() ? std::string("null") : class_json_[done->bucket];
    b += ", ";
    write_balances(balances);
    b += '}';
    trace_->end_line();
    follow_room();
  }
}

void Simulator::follow_room() {
  if (!controller_ || controller_->slots() == room_) return;
  room_ = controller_->slots();
  if (observer_ != nullptr) observer_->room(now_, static_cast<std::uint32_t>(room_));
  if (trace_ == nullptr) return;
  std::string& b = trace_->buffer();
  b += "{\"t\": ";
  append_micro(b, now_);
  b += ", \"ev\": \"room\", \"slots\": ";
  append_uint(b, room_);
  b += '}';
  trace_->end_line();
}

// The backend takes a dispatched request at once while it serves fewer than its capacity, and
// otherwise holds it in its FIFO: its latency then grows by the wait, which is all a learned room
// sees of a queue there. Without a backend, every request starts at once (capacity unbounded).
void Simulator::start_in_backend(std::uint32_t req) {
  ++serving_;
  const Nanos service = scenario_.arrivals[pool_[req].entry].service;
  const Nanos held =
      slowdown_milli_ == 1000
          ? service
          : static_cast<Nanos>((static_cast<I128>(service) * slowdown_milli_ + 500) / 1000);
  completions_.push_back(Due{now_ + held, pool_[req].seq, req});
  std::push_heap(completions_.begin(), completions_.end(),
                 [](const Due& a, const Due& b) { return due_later(a, b); });
}

void Simulator::start_waiting_in_backend() {
  while (fifo_size_ > 0 && serving_ < capacity_) {
    const std::uint32_t req = backend_fifo_[fifo_head_];
    fifo_head_ = (fifo_head_ + 1) % backend_fifo_.size();
    --fifo_size_;
    start_in_backend(req);
  }
}

void Simulator::step_backend() {
  while (step_ < scenario_.backend.size() && scenario_.backend[step_].at <= now_) {
    capacity_ = scenario_.backend[step_].capacity;
    slowdown_milli_ = scenario_.backend[step_].slowdown_milli;
    ++step_;
  }
  start_waiting_in_backend();
}

// A request dispatched before its withdrawal fell due is served as any other: its withdrawal is
// dropped here, so that it never becomes an instant of the run of its own.
void Simulator::drop_moot_withdrawals() {
  while (!withdrawals_.empty() && pool_[withdrawals_.front().req].sent) {
    std::pop_heap(withdrawals_.begin(), withdrawals_.end(),
                  [](const Due& a, const Due& b) { return due_later(a, b); });
    withdrawals_.pop_back();
  }
}

void Simulator::withdraw_due(Nanos now) {
  for (drop_moot_withdrawals(); !withdrawals_.empty() && withdrawals_.front().t == now;
       drop_moot_withdrawals()) {
    std::pop_heap(withdrawals_.begin(), withdrawals_.end(),
                  [](const Due& a, const Due& b) { return due_later(a, b); });
    const std::uint32_t req = withdrawals_.back().req;
    withdrawals_.pop_back();
    Request& r = pool_[req];
    if (!core_.withdraw(r)) core_bug("withdraw() refused a request still queued");
    Participant& p = participants_[r.participant];
    ++p.withdrawn;
    if (observer_ != nullptr) observer_->withdrawn(now_, r.participant, req);
    if (trace_ == nullptr) continue;
    std::string& b = trace_->buffer();
    b += "{\"t\": ";
    append_micro(b, now_);
    b += ", \"ev\": \"withdraw\", \"participant\": ";
    b += p.json_name;
    b += ", \"req\": ";
    append_uint(b, std::uint64_t{req});
    b += '}';
    trace_->end_line();
  }
}

void Simulator::on_turn(ClassId c) {
  if (trace_ == nullptr && observer_ == nullptr) return;
  // The waiting set is read whole before qualifies() refills anything.
  scratch_ids_.clear();
  core_.for_each_waiting([this](ParticipantId id) { scratch_ids_.push_back(id); });
  scratch_.clear();
  for (const ParticipantId id : scratch_ids_) {
    PassEntry e;
    e.participant = by_place_[id.place];
    e.eligible = core_.qualifies(id, c, now_);
    scratch_.push_back(e);
  }
  const bool explain = explain_passes_ || observer_ != nullptr;
  if (explain) {
    // An ignored participant either holds no bucket of the pass's class, or holds one with less
    // than a credit: then its balance and the instant its next credit lands say when it will
    // qualify again (nothing when that lies beyond the clock's range).
    for (PassEntry& e : scratch_) {
      if (e.eligible) continue;
      const ParticipantId id = participants_[e.participant].id;
      const creditloop::Result<creditloop::Balance> balance = core_.balance(id, c, now_);
      if (!balance) continue;
      e.holds = true;
      e.balance = balance.value();
      e.next_credit = core_.next_credit(id, c, now_);
    }
  }
  if (observer_ != nullptr) observer_->passed(now_, c, scratch_);
  if (trace_ == nullptr) return;
  std::string& b = trace_->buffer();
  b += "{\"t\": ";
  append_micro(b, now_);
  b += ", \"ev\": \"pass\", \"class\": ";
  b += class_json_[c];
  for (const bool want : {true, false}) {
    b += want ? ", \"eligible\": [" : ", \"ignored\": [";
    bool first = true;
    for (const PassEntry& e : scratch_) {
      if (e.eligible != want) continue;
      if (!first) b += ", ";
      first = false;
      b += participants_[e.participant].json_name;
    }
    b += ']';
  }
  if (explain_passes_) {
    b += ", \"reasons\": {";
    bool first = true;
    for (const PassEntry& e : scratch_) {
      if (e.eligible) continue;
      if (!first) b += ", ";
      first = false;
      b += participants_[e.participant].json_name;
      if (!e.holds) {
        b += ": {\"why\": \"no_bucket\"}";
        continue;
      }
      b += ": {\"why\": \"below_one_credit\", \"balance\": ";
      append_micro(b, e.balance);
      b += ", \"next_credit\": ";
      if (e.next_credit) {
        append_micro(b, *e.next_credit);
      } else {
        b += "null";
      }
      b += '}';
    }
    b += '}';
  }
  b += '}';
  trace_->end_line();
}

void Simulator::on_dispatch(const creditloop::Decision& d) {
  if (in_flight_ >= room_) core_bug("the core dispatched without room");
  ++in_flight_;
  auto& r = static_cast<Request&>(*d.request);
  r.ticket = d.ticket;
  r.sent = true;
  r.dispatched = now_;
  r.seq = dispatch_seq_++;
  Participant& p = participants_[r.participant];
  if (!(p.id == d.participant)) core_bug("a request went out for another participant");
  ++p.dispatched[d.out];
  const Nanos wait = now_ - r.arrived;
  if (!p.wait_max || wait > *p.wait_max) p.wait_max = wait;
  const auto req = static_cast<std::uint32_t>(&r - pool_.data());
  if (serving_ < capacity_) {
    start_in_backend(req);
  } else {
    backend_fifo_[(fifo_head_ + fifo_size_) % backend_fifo_.size()] = req;
    ++fifo_size_;
  }
  if (controller_) controller_->dispatched(now_, in_flight_);
  if (trace_ == nullptr && observer_ == nullptr) {
    follow_room();
    return;
  }
  const Balances balances = balances_of(p);
  if (observer_ != nullptr) observer_->dispatched(now_, r.participant, req, d.out, balances);
  if (trace_ == nullptr) {
    follow_room();
    return;
  }
  std::string& b = trace_->buffer();
  b += "{\"t\": ";
  append_micro(b, now_);
  b += ", \"ev\": \"dispatch\", \"participant\": ";
  b += p.json_name;
  b += ", \"req\": ";
  append_uint(b, std::uint64_t{req});
  b += ", \"class\": ";
  b += class_json_[d.out];
  b += ", ";
  write_balances(balances);
  b += '}';
  trace_->end_line();
  follow_room();
}

RunReport Simulator::run(LineWriter* trace) {
  trace_ = trace;
  const auto arrival_cmp = [](const NextArrival& a, const NextArrival& b) {
    return arrival_later(a, b);
  };
  for (std::uint32_t e = 0; e < scenario_.arrivals.size(); ++e) {
    if (scenario_.arrivals[e].in_run == 0) continue;
    arrivals_.push_back(NextArrival{scenario_.arrivals[e].at, e, 0});
    std::push_heap(arrivals_.begin(), arrivals_.end(), arrival_cmp);
  }
  if (controller_) {
    // The room it starts with, so that a reader of the trace knows the room at every instant.
    if (observer_ != nullptr) observer_->room(0, static_cast<std::uint32_t>(room_));
    if (trace_ != nullptr) {
      trace_->buffer() += "{\"t\": 0.0, \"ev\": \"room\", \"slots\": ";
      append_uint(trace_->buffer(), room_);
      trace_->buffer() += '}';
      trace_->end_line();
    }
  }
  constexpr Nanos kNever = std::numeric_limits<Nanos>::max();
  while (true) {
    Nanos t = kNever;
    if (!completions_.empty()) t = completions_.front().t;
    if (!arrivals_.empty()) t = std::min(t, arrivals_.front().t);
    drop_moot_withdrawals();
    if (!withdrawals_.empty()) t = std::min(t, withdrawals_.front().t);
    if (t == kNever) break;
    // A step of the backend is an instant of the run only while something else is to come.
    if (step_ < scenario_.backend.size()) t = std::min(t, scenario_.backend[step_].at);
    if (scenario_.until && t > *scenario_.until) break;
    // A completion that falls due at `now_` while the loop runs (service 0) is the earliest
    // event on the next iteration: the same instant is handled again, completions first.
    now_ = t;
    // The backend's step first, so that the completions of the instant start what its FIFO
    // holds under the capacity that holds from then on.
    if (step_ < scenario_.backend.size()) step_backend();
    complete_due(now_);
    while (!arrivals_.empty() && arrivals_.front().t == now_) {
      std::pop_heap(arrivals_.begin(), arrivals_.end(), arrival_cmp);
      NextArrival& next = arrivals_.back();
      arrive(next.entry);
      const ArrivalSpec& spec = scenario_.arrivals[next.entry];
      if (++next.index == spec.in_run) {
        arrivals_.pop_back();
      } else {
        next.t += spec.every;
        std::push_heap(arrivals_.begin(), arrivals_.end(), arrival_cmp);
      }
    }
    withdraw_due(now_);
    core_.run(now_, Loop{*this});
  }
  return report(scenario_.until ? std::max(*scenario_.until, now_) : now_);
}

RunReport Simulator::report(Nanos stopped_at) {
  RunReport out;
  out.classes = core_.classes();
  out.slots = room_;
  out.room_auto = scenario_.room_auto;
  out.stopped_at = stopped_at;
  out.arrived = next_req_;
  out.withdraws = scenario_.withdraws;
  for (std::uint32_t place = 0; place < core_.ring_size(); ++place) {
    const auto id = core_.at(place);
    if (!id) continue;
    const Participant& p = participants_[by_place_[place]];
    const ParticipantSpec& spec = scenario_.participants[by_place_[place]];
    ParticipantReport r;
    r.name = spec.name;
    r.plan = spec.plan;
    r.shares = spec.shares;
    r.dispatched = p.dispatched;
    r.completed = p.completed;
    r.withdrawn = p.withdrawn;
    r.wait_max = p.wait_max;
    r.waiting = core_.queued(*id);
    // The trace is the simulator's own account; the core counts the same events. A mismatch
    // means one of them is wrong, and the run is not to be trusted.
    std::uint64_t total = 0;
    const creditloop::ParticipantStats& stats = core_.stats(*id);
    for (int c = 0; c <= out.classes; ++c) {
      const auto cu = static_cast<std::size_t>(c);
      total += p.dispatched[cu];
      if (stats.dispatched[cu] != p.dispatched[cu]) {
        core_bug("the core's dispatch count for " + spec.name + " disagrees with the trace");
      }
    }
    if (stats.completed != p.completed) {
      core_bug("the core's completion count for " + spec.name + " disagrees with the trace");
    }
    if (r.waiting != p.arrived - total - p.withdrawn) {
      core_bug("the core's queue length for " + spec.name + " disagrees with the trace");
    }
    for (int c = 0; c < out.classes; ++c) {
      if (!p.holds[static_cast<std::size_t>(c)]) continue;
      const auto balance = core_.balance(*id, static_cast<ClassId>(c), stopped_at);
      if (!balance) core_bug("balance() refused a bucket the plan holds");
      r.balances[static_cast<std::size_t>(c)] = *balance;
    }
    out.participants.push_back(std::move(r));
  }
  return out;
}

}  // namespace creditloop::sim
