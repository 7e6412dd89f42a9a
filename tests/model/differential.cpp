// One file: one harness, the core against the model; its operations and checks are its methods.
#include "model/differential.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "creditloop/core.hpp"

namespace creditloop::model {

std::uint64_t SeededSource::below(std::uint64_t bound) {
  // Plain modulo rather than a distribution, whose output differs between standard libraries:
  // a seed must name the same sequence under g++ and clang++.
  return bound <= 1 ? 0 : rng_() % bound;
}

std::uint64_t ByteSource::below(std::uint64_t bound) {
  if (bound <= 1) return 0;
  std::uint64_t value = 0;
  // As many bytes as the bound needs, so that small choices cost the fuzzer one byte each.
  for (std::uint64_t span = bound - 1; span != 0; span >>= 8) {
    const std::uint64_t byte = pos_ < size_ ? data_[pos_] : 0;
    ++pos_;
    value = (value << 8) | byte;
  }
  return value % bound;
}

namespace {

// The model has its own Decision and Completion; these are the core's.
using CoreDispatch = creditloop::Decision;
using CoreCompletion = creditloop::Completion;

constexpr Nanos kNanosMax = std::numeric_limits<Nanos>::max();
constexpr Nanos kSecond = 1'000'000'000;
constexpr Nanos kHour = 3600 * kSecond;
constexpr Nanos kYear = 365 * 24 * kHour;
constexpr TicketId kNeverIssued = std::numeric_limits<TicketId>::max();

std::string str(Int128 v) { return to_decimal(v); }

std::string str(double d) {
  if (std::isnan(d)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

const char* str(Errc e) { return name(e).data(); }  // the names are literals

std::string str(std::int64_t v) { return std::to_string(v); }

std::string pc(ClassId c) { return "P" + std::to_string(c + 1); }

std::string str(Status s) { return s.ok() ? std::string("ok") : std::string(str(s.error())); }

std::string str(std::optional<ClassId> c) { return c ? pc(*c) : std::string("none"); }

std::string str(ParticipantId p) {
  return "{" + std::to_string(p.place) + "," + std::to_string(p.generation) + "}";
}

std::string str(Ticket t) {
  return "{" + std::to_string(t.index) + "," + std::to_string(t.generation) + "}";
}

std::uint64_t key(ParticipantId p) { return (std::uint64_t{p.place} << 32) | p.generation; }
// Unique while generations stay below 2^32, which no run of this harness approaches.
std::uint64_t key(Ticket t) { return (std::uint64_t{t.index} << 32) ^ t.generation; }

struct Req : RequestHook {
  RequestId id = 0;
};

/// Choices built from the source's integers.
class Dice {
 public:
  explicit Dice(OpSource& source) : source_(source) {}
  std::uint64_t below(std::uint64_t n) { return n <= 1 ? 0 : source_.below(n); }
  bool one_in(std::uint64_t n) { return below(n) == 0; }
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) { return lo + below(hi - lo + 1); }
  double unit() { return static_cast<double>(below(std::uint64_t{1} << 53)) * 0x1p-53; }
  double log_uniform(double lo, double hi) {
    return std::clamp(lo * std::pow(hi / lo, unit()), lo, hi);
  }
  template <class T>
  std::size_t index(const std::vector<T>& v) {
    return static_cast<std::size_t>(below(v.size()));
  }

 private:
  OpSource& source_;
};

class Harness {
 public:
  Harness(const DiffOptions& options, OpSource& source)
      : o_(options), source_(source), dice_(source) {}

  DiffReport run();

 private:
  struct Who {
    ParticipantId core;
    Pid model;
    std::string name;
    bool live = true;
    std::size_t live_pos = 0;
  };
  struct Flight {
    Ticket core;
    TicketId model = 0;
  };

  // ---- bookkeeping ----
  void fail(const std::string& what);
  void note(std::string op);
  Nanos t();  // the `now` passed to the next call: usually the clock, sometimes an earlier one
  void advance(Nanos dt);
  [[nodiscard]] bool room() const { return flights_.size() < slots_; }
  void touch(std::size_t who) { touched_.push_back(who); }
  std::size_t register_who(ParticipantId core, Pid model, std::string name);
  void retire_who(std::size_t i);
  std::optional<std::size_t> pick_who(bool allow_stale);

  // ---- the run's parts ----
  bool start();                       // the configuration, both engines, and their plans compared
  void roll_the_setting();            // the clock's start, the slots, the check cadences, a reserve
  void one_step(std::uint64_t roll);  // `roll` out of 100: each operation's share is its range
  void compare_after_step();
  void explain_divergence();

  // ---- random inputs ----
  Config make_config(int k);
  double gen_rate();
  double gen_burst();
  std::uint32_t gen_shares(bool allow_bad);
  double gen_cost();

  // ---- operations ----
  void op_submit();
  void op_withdraw();
  void op_loop();
  void loop_manual(std::size_t max_visits, bool ticking);
  void loop_run();
  void loop_dispatch();  // the core's batch call, the model's loop
  bool begin_both(Nanos at);
  bool visit_both(Nanos at);
  bool check_dispatch(const std::optional<CoreDispatch>& cd,
                      const std::optional<model::Decision>& md);
  void op_complete();
  void complete_one();
  void complete_both(Ticket ct, TicketId mt, bool nano, double cost, std::int64_t cost_nano,
                     std::optional<std::size_t> flight);
  void op_clock();
  void op_slots();
  void op_add(bool initial);
  void op_remove();
  void op_replan();
  void op_scale();
  void op_probe();
  void op_take_all();
  bool compare_lists(RequestList& core, const std::vector<RequestId>& model, const char* what);

  // ---- comparisons ----
  void compare_who(std::size_t i, bool balances);
  void compare_global();
  void compare_everyone();

  const DiffOptions& o_;
  OpSource& source_;
  Dice dice_;
  DiffReport report_;

  // Requests outlive the core: declared before it, destroyed after it.
  std::deque<Req> requests_;
  std::unordered_map<const RequestHook*, RequestId> queued_hooks_;  // owned by the core now

  Config config_;
  int k_ = 2;
  std::unique_ptr<Core> core_;
  std::unique_ptr<Model> model_;

  Nanos now_ = 0;
  Nanos clock_max_ = kNanosMax;
  std::size_t slots_ = 1;
  std::size_t name_pool_ = 8;
  std::size_t step_ = 0;
  std::size_t full_every_ = 1;
  std::size_t balance_every_ = 1;
  std::string op_;

  std::vector<Who> who_;
  std::vector<std::size_t> live_;
  std::unordered_map<std::uint64_t, std::size_t> by_core_;
  std::vector<std::size_t> touched_;

  std::vector<Flight> flights_;
  std::vector<Flight> done_;  // a sample of completed tickets, to replay
  std::unordered_set<std::uint64_t> issued_;
  std::unordered_map<std::uint32_t, decltype(Ticket::generation)>
      top_generation_;  // per ticket index

  std::deque<std::string> history_;
};

// ---- bookkeeping ------------------------------------------------------------------------------

void Harness::fail(const std::string& what) {
  if (report_.divergence) return;
  report_.divergence = "step " + std::to_string(step_) + " (" + op_ + "): " + what;
}

void Harness::note(std::string op) {
  op_ = std::move(op);
  if (o_.history == 0) return;
  if (history_.size() == o_.history) history_.pop_front();
  history_.push_back(std::to_string(step_) + ": " + op_);
}

Nanos Harness::t() {
  // Time never runs backwards in either: an earlier `now` must be read as the latest.
  if (dice_.one_in(16)) {
    // now_ never goes below -1e12, so this stays far from the end of Nanos.
    return now_ - static_cast<Nanos>(dice_.below(dice_.one_in(2) ? 1000 : kHour));
  }
  return now_;
}

void Harness::advance(Nanos dt) { now_ = dt >= clock_max_ - now_ ? clock_max_ : now_ + dt; }

std::size_t Harness::register_who(ParticipantId core, Pid model, std::string name) {
  if (by_core_.count(key(core)) != 0) {
    fail("core reissued participant id " + str(core));
    return 0;
  }
  const std::size_t i = who_.size();
  who_.push_back(Who{core, model, std::move(name), true, live_.size()});
  live_.push_back(i);
  by_core_.emplace(key(core), i);
  touch(i);
  return i;
}

void Harness::retire_who(std::size_t i) {
  Who& w = who_[i];
  w.live = false;
  const std::size_t last = live_.back();
  live_[w.live_pos] = last;
  who_[last].live_pos = w.live_pos;
  live_.pop_back();
}

std::optional<std::size_t> Harness::pick_who(bool allow_stale) {
  if (who_.empty()) return std::nullopt;
  if (live_.empty() || (allow_stale && dice_.one_in(12))) {
    return static_cast<std::size_t>(dice_.below(who_.size()));
  }
  return live_[dice_.index(live_)];
}

// ---- random inputs ----------------------------------------------------------------------------

double Harness::gen_rate() {
  switch (o_.rates) {
    case RateMix::tiny:
      return dice_.one_in(4) ? 1e-9 : dice_.log_uniform(1e-9, 1e-3);
    case RateMix::huge:
      return dice_.one_in(4) ? kMaxRate : dice_.log_uniform(1e3, kMaxRate);
    case RateMix::mixed:
      break;
  }
  switch (dice_.below(8)) {
    case 0:
      return 1e-9;
    case 1:
      return kMaxRate;
    case 2:
      return static_cast<double>(dice_.between(1, 10));
    case 3:
      return 0.5;
    default:
      return dice_.log_uniform(1e-9, kMaxRate);
  }
}

double Harness::gen_burst() {
  switch (dice_.below(6)) {
    case 0:
      return 1;
    case 1:
      return kMaxBurst;
    case 2:
      return static_cast<double>(dice_.between(1, 10));
    case 3:
      return 1.5;
    default:
      return dice_.log_uniform(1, kMaxBurst);
  }
}

Config Harness::make_config(int k) {
  Config config;
  config.classes = k;
  const std::size_t plans = 1 + dice_.below(5);
  for (std::size_t i = 0; i < plans; ++i) {
    Plan plan;
    plan.name = "plan" + std::to_string(i);
    // The first plan holds every class and the second none; the rest hold a random subset.
    std::uint64_t mask = (std::uint64_t{1} << k) - 1;
    if (i == 1) mask = 0;
    if (i >= 2) mask = dice_.below(std::uint64_t{1} << k);
    for (int c = 0; c < k; ++c) {
      if (((mask >> c) & 1u) != 0) plan.terms[c] = ClassTerms{gen_rate(), gen_burst()};
    }
    config.plans.push_back(plan);
  }
  return config;
}

std::uint32_t Harness::gen_shares(bool allow_bad) {
  if (allow_bad && dice_.one_in(10)) {
    switch (dice_.below(3)) {
      case 0:
        return 0;
      case 1:
        return kMaxShares + 1;
      default:
        return std::numeric_limits<std::uint32_t>::max();
    }
  }
  switch (dice_.below(8)) {
    case 5:
      return static_cast<std::uint32_t>(dice_.between(2, 10));
    case 6:
      return static_cast<std::uint32_t>(dice_.between(1, kMaxShares));
    case 7:
      return kMaxShares;
    default:
      return 1;
  }
}

double Harness::gen_cost() {
  if (o_.costs == CostMix::deep_debt) {
    return dice_.one_in(3) ? kMaxCost : dice_.log_uniform(1e3, kMaxCost);
  }
  if (o_.costs == CostMix::at_limit && !dice_.one_in(4)) return kMaxCost;
  if (o_.costs == CostMix::near_cap && !dice_.one_in(4)) {
    return static_cast<double>(dice_.below(3'000'000'000)) / 1e9;
  }
  switch (dice_.below(11)) {
    case 0:
    case 1:
    case 2:
      return 0;
    case 3:
      return static_cast<double>(dice_.below(3'000'000'000)) / 1e9;
    case 4:
      return static_cast<double>(dice_.between(1, 10));
    case 5:
      return dice_.log_uniform(1e-9, kMaxCost);
    case 6:
      return kMaxCost;
    case 7:
      return dice_.log_uniform(1e3, kMaxCost);
    case 8:
      return 1.5e-9;  // half a unit away from two neighbours: rounding
    case 9:
      return 1e-10;  // below one unit: rounds to 0
    default:
      return -0.0;  // not negative: a cost of 0
  }
}

// ---- the run ----------------------------------------------------------------------------------

DiffReport Harness::run() {
  if (!start()) return report_;
  roll_the_setting();
  for (std::size_t i = 0; i < o_.initial_participants && !report_.divergence; ++i) op_add(true);
  compare_global();
  if (o_.initial_participants > 0) compare_everyone();

  for (step_ = 1; step_ <= o_.steps && source_.more() && !report_.divergence; ++step_) {
    touched_.clear();
    ++report_.steps;
    one_step(dice_.below(100));
    if (report_.divergence) break;
    compare_after_step();
  }
  if (!report_.divergence) {
    // A final look at everything, whatever the cadence of full checks.
    op_ = "final check";
    compare_everyone();
  }
  if (report_.divergence) explain_divergence();
  return report_;
}

bool Harness::start() {
  k_ = o_.classes >= 1 && o_.classes <= kMaxClasses
           ? o_.classes
           : static_cast<int>(1 + dice_.below(kMaxClasses));
  config_ = make_config(k_);
  try {
    core_ = std::make_unique<Core>(config_);
  } catch (const std::exception& e) {
    fail(std::string("core refused a valid configuration: ") + e.what());
    return false;
  }
  model_ = std::make_unique<Model>(config_, o_.flaw);
  note("config k=" + std::to_string(k_) + " plans=" + std::to_string(config_.plans.size()));
  for (std::size_t i = 0; i < config_.plans.size(); ++i) {
    const auto id = static_cast<PlanId>(i);
    if (core_->find_plan(config_.plans[i].name) != std::optional<PlanId>(id)) {
      fail("find_plan(" + config_.plans[i].name + ") is not " + std::to_string(i));
    }
    for (int c = 0; c <= k_; ++c) {
      const auto cls = static_cast<ClassId>(c);
      if (core_->plan_holds(id, cls) != model_->plan_holds(id, cls)) {
        fail("plan_holds(" + std::to_string(i) + ", " + pc(cls) + ")");
      }
    }
  }
  return true;
}

void Harness::roll_the_setting() {
  switch (dice_.below(4)) {
    case 0:
      now_ = 0;
      break;
    case 1:
      now_ = static_cast<Nanos>(dice_.below(kSecond));
      break;
    case 2:
      now_ = static_cast<Nanos>(dice_.between(1, 1'000'000)) * kSecond * 1000;
      break;
    default:
      now_ = -static_cast<Nanos>(dice_.below(1'000'000'000'000));
      break;
  }
  // Keeps every difference of two instants of the run within Nanos. The last instant itself is
  // left out unless asked for (see DiffOptions::clock_reaches_end).
  clock_max_ = (now_ < 0 ? kNanosMax + now_ : kNanosMax) - (o_.clock_reaches_end ? 0 : 1);
  slots_ = 1 + dice_.below(4);
  const std::size_t full_cadence[] = {1, 1, 8, 64};
  const std::size_t balance_cadence[] = {1, 4, 32};
  // Rolled whatever the options say, so that overriding a cadence replays the same operations.
  full_every_ = full_cadence[dice_.below(4)];
  balance_every_ = balance_cadence[dice_.below(3)];
  if (o_.full_check_every != 0) full_every_ = o_.full_check_every;
  if (o_.balance_check_every != 0) balance_every_ = o_.balance_check_every;
  name_pool_ = std::max<std::size_t>(4, o_.max_participants + o_.max_participants / 2);
  if (dice_.one_in(4)) {
    core_->reserve(static_cast<std::size_t>(dice_.below(2 * o_.max_participants + 2)),
                   static_cast<std::size_t>(dice_.below(64)));
  }
}

void Harness::one_step(std::uint64_t roll) {
  if (roll < 19) {
    op_submit();
  } else if (roll < 22) {
    op_withdraw();
  } else if (roll < 42) {
    op_loop();
  } else if (roll < 62) {
    op_complete();
  } else if (roll < 75) {
    op_clock();
  } else if (roll < 80) {
    op_slots();
  } else if (roll < 85) {
    if (o_.churn) op_add(false);
  } else if (roll < 88) {
    if (o_.churn) op_remove();
  } else if (roll < 92) {
    if (o_.churn) op_replan();
  } else if (roll < 95) {
    if (o_.churn) op_scale();
  } else if (roll < 99) {
    op_probe();
  } else {
    op_take_all();
  }
}

void Harness::compare_after_step() {
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  for (const std::size_t i : touched_) compare_who(i, step_ % balance_every_ == 0);
  compare_global();
  if (step_ % full_every_ == 0) compare_everyone();
}

void Harness::explain_divergence() {
  std::string& d = *report_.divergence;
  d += "\nk=" + std::to_string(k_) + "; plans (rate/burst per class, nano):";
  for (const Plan& plan : config_.plans) {
    d += "\n  " + plan.name + ":";
    for (int c = 0; c < k_; ++c) {
      if (plan.terms[c]) {
        d += " P" + std::to_string(c + 1) + "{" + str(plan.terms[c]->rate) + "/" +
             str(plan.terms[c]->burst) + "}";
      }
    }
  }
  d += "\nlast operations:";
  for (const std::string& h : history_) d += "\n  " + h;
}

// ---- operations -------------------------------------------------------------------------------

void Harness::op_submit() {
  if (!live_.empty() && dice_.one_in(6)) {
    // A burst across many participants at once: turns with many visits, cursors that wrap.
    const std::size_t n = std::min<std::size_t>(live_.size(), 1 + dice_.below(64));
    const Nanos at = t();
    note("submit 1 to each of " + std::to_string(n) + " at " + str(at));
    const std::size_t first = dice_.index(live_);
    for (std::size_t j = 0; j < n && !report_.divergence; ++j) {
      const std::size_t i = live_[(first + j) % live_.size()];
      Req& r = requests_.emplace_back();
      r.id = requests_.size();
      const Status cs = core_->submit(who_[i].core, r, at);
      const Status ms = model_->submit(who_[i].model, r.id, at);
      if (cs != ms || !cs.ok()) {
        fail("submit to " + who_[i].name + ": core " + str(cs) + ", model " + str(ms));
      }
      queued_hooks_.emplace(&r, r.id);
      touch(i);
    }
    return;
  }
  const auto pick = pick_who(o_.bad_input);
  if (!pick) return;
  const Who& w = who_[*pick];
  const std::size_t n = dice_.one_in(8) ? 1 + dice_.below(40) : 1 + dice_.below(3);
  const Nanos at = t();
  note("submit " + std::to_string(n) + " to " + w.name + str(w.core) + " at " + str(at));
  for (std::size_t j = 0; j < n && !report_.divergence; ++j) {
    Req& r = requests_.emplace_back();
    r.id = requests_.size();
    const Status cs = core_->submit(w.core, r, at);
    const Status ms = model_->submit(w.model, r.id, at);
    if (cs != ms) fail("submit: core " + str(cs) + ", model " + str(ms));
    if (!cs.ok()) {
      ++report_.refusals;
      break;
    }
    queued_hooks_.emplace(&r, r.id);
  }
  touch(*pick);
}

// Withdraws a request: mostly one still queued (a client gone while it waited), otherwise any
// request of the run, which the core and the model must refuse alike (in flight, completed, handed
// back).
void Harness::op_withdraw() {
  if (requests_.empty()) return;
  Req* r = nullptr;
  if (!queued_hooks_.empty() && !dice_.one_in(4)) {
    auto it = queued_hooks_.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(dice_.below(queued_hooks_.size())));
    r = static_cast<Req*>(const_cast<RequestHook*>(it->first));
  } else {
    r = &requests_[static_cast<std::size_t>(dice_.below(requests_.size()))];
  }
  note("withdraw request " + std::to_string(r->id));
  // Whose queue it is in, if it is queued: the place the hook names (request.hpp).
  const std::optional<ParticipantId> owner =
      core_->at(r->queued_place.load(std::memory_order_relaxed));
  const Status cs = core_->withdraw(*r);
  const Status ms = model_->withdraw(r->id);
  if (cs != ms) {
    fail("withdrawal of request " + std::to_string(r->id) + ": core " + str(cs) + ", model " +
         str(ms));
    return;
  }
  if (!cs.ok()) {
    ++report_.refusals;
    return;
  }
  if (!r->idle()) fail("a withdrawn request is not the caller's again");
  queued_hooks_.erase(r);
  const auto who = owner ? by_core_.find(key(*owner)) : by_core_.end();
  if (who == by_core_.end()) {
    fail("withdrawal took request " + std::to_string(r->id) + " from no participant's queue");
    return;
  }
  touch(who->second);
}

void Harness::op_loop() {
  switch (dice_.below(5)) {
    case 0:
      loop_manual(std::numeric_limits<std::size_t>::max(), false);
      break;
    case 1:
      loop_manual(1 + dice_.below(6), false);
      break;
    case 2:
      loop_manual(std::numeric_limits<std::size_t>::max(), true);
      break;
    case 3:
      loop_run();
      break;
    default:
      loop_dispatch();
      break;
  }
}

bool Harness::begin_both(Nanos at) {
  const std::optional<ClassId> cb = core_->begin_turn(at);
  const std::optional<ClassId> mb = model_->begin_turn(at);
  if (cb != mb) fail("begin_turn at " + str(at) + ": core " + str(cb) + ", model " + str(mb));
  if (cb) ++report_.turns;
  if (o_.history != 0) history_.back() += "\n      pass " + str(cb) + " at " + str(at);
  return cb.has_value() && !report_.divergence;
}

bool Harness::visit_both(Nanos at) {
  const std::optional<CoreDispatch> cd = core_->visit(at);
  const std::optional<model::Decision> md = model_->visit(at);
  return check_dispatch(cd, md);
}

bool Harness::check_dispatch(const std::optional<CoreDispatch>& cd,
                             const std::optional<model::Decision>& md) {
  if (cd.has_value() != md.has_value()) {
    std::string m = "visit: core ";
    m += cd ? "dispatched from " + str(cd->participant) : std::string("ended the turn");
    m += ", model ";
    m += md ? "dispatched from place " + std::to_string(md->participant.place)
            : std::string("ended the turn");
    fail(m);
    return false;
  }
  if (!cd) return false;
  const auto hook = queued_hooks_.find(cd->request);
  if (hook == queued_hooks_.end()) {
    fail("core dispatched a request it does not hold");
    return false;
  }
  const RequestId id = hook->second;
  queued_hooks_.erase(hook);
  const auto who = by_core_.find(key(cd->participant));
  if (who == by_core_.end() || !(who_[who->second].model == md->participant)) {
    fail("dispatch from core " + str(cd->participant) + ", model place " +
         std::to_string(md->participant.place));
    return false;
  }
  if (id != md->request || cd->out != md->out || cd->turn != md->turn) {
    fail("dispatch from " + who_[who->second].name + ": core req " + std::to_string(id) + " out " +
         pc(cd->out) + " turn " + pc(cd->turn) + ", model req " + std::to_string(md->request) +
         " out " + pc(md->out) + " turn " + pc(md->turn));
    return false;
  }
  if (!issued_.insert(key(cd->ticket)).second || cd->ticket.generation == 0) {
    fail("core issued ticket " + str(cd->ticket) + " again");
    return false;
  }
  if (o_.history != 0) {
    history_.back() += "\n      -> " + who_[who->second].name + " req " + std::to_string(id) +
                       " out " + pc(cd->out) + " turn " + pc(cd->turn) + " ticket " +
                       str(cd->ticket);
  }
  auto& top = top_generation_[cd->ticket.index];
  top = std::max(top, cd->ticket.generation);
  flights_.push_back(Flight{cd->ticket, md->ticket});
  touch(who->second);
  ++report_.dispatches;
  if (cd->out < cd->turn) ++report_.out_above_turn;
  if (cd->out == k_) ++report_.unmetered;
  return true;
}

void Harness::loop_manual(std::size_t max_visits, bool ticking) {
  note("loop" +
       (max_visits == std::numeric_limits<std::size_t>::max()
            ? std::string()
            : " up to " + std::to_string(max_visits) + " visits") +
       (ticking ? " ticking" : "") + " slots " + std::to_string(slots_) + " from " + str(now_));
  std::size_t visits = 0;
  std::size_t empty_turns = 0;
  while (room() && visits < max_visits && !report_.divergence) {
    if (core_->in_turn() != model_->in_turn()) {
      fail(std::string("in_turn: core ") + (core_->in_turn() ? "yes" : "no"));
      return;
    }
    if (!core_->in_turn() && !begin_both(t())) break;
    if (ticking) {
      // Credits that land while the cursor walks count when it reaches their owner.
      advance(dice_.one_in(2) ? static_cast<Nanos>(dice_.below(1000))
                              : static_cast<Nanos>(dice_.below(50'000'000)));
    }
    ++visits;
    if (visit_both(t())) {
      empty_turns = 0;
    } else if (!report_.divergence && !core_->in_turn() && ++empty_turns > 3) {
      // Both agree, but turn after turn without a dispatch is a loop that never ends: only the
      // first turn after a partial loop may find nothing left to visit.
      fail("the loop does not terminate: turns without a dispatch");
    }
  }
  if (!room()) {
    core_->end_turn();
    model_->end_turn();
  }
}

void Harness::loop_run() {
  const Nanos at = t();
  note("run slots " + std::to_string(slots_) + " at " + str(at));
  struct Handler {
    Harness& h;
    Nanos at;
    bool room() const { return !h.report_.divergence && h.room(); }
    void on_turn(ClassId c) {
      // The core's previous turn is over; the model's must be too.
      if (h.model_->in_turn()) h.check_dispatch(std::nullopt, h.model_->visit(at));
      if (h.report_.divergence) return;
      const std::optional<ClassId> mb = h.model_->begin_turn(at);
      if (mb != std::optional<ClassId>(c)) {
        h.fail("run: core turns " + pc(c) + ", model " + str(mb));
      }
      ++h.report_.turns;
    }
    void on_dispatch(const CoreDispatch& d) { h.check_dispatch(d, h.model_->visit(at)); }
  };
  Handler handler{*this, at};
  core_->run(at, handler);
  if (report_.divergence) return;
  if (room()) {
    // run() returned because every queue is empty: the model must find nothing either.
    if (model_->in_turn()) check_dispatch(std::nullopt, model_->visit(at));
    if (report_.divergence) return;
    const std::optional<ClassId> mb = model_->begin_turn(at);
    if (mb) fail("run found every queue empty; model turns " + str(mb));
  } else {
    model_->end_turn();
  }
}

void Harness::loop_dispatch() {
  const Nanos at = t();
  if (!room()) {
    core_->end_turn();
    model_->end_turn();
    return;
  }
  // Up to the room left, and sometimes less, so that batches also stop inside a turn.
  const std::size_t room_left = slots_ - flights_.size();
  const std::size_t want = dice_.one_in(2) ? room_left : 1 + dice_.below(room_left);
  note("dispatch up to " + std::to_string(want) + " slots " + std::to_string(slots_) + " at " +
       str(at));
  std::vector<CoreDispatch> out(want);
  const std::size_t got = core_->dispatch(at, out);
  if (got > want) {
    fail("dispatch returned " + std::to_string(got) + " for room for " + std::to_string(want));
    return;
  }
  // The model walks the same loop one call at a time.
  for (std::size_t i = 0; i < got && !report_.divergence;) {
    if (!model_->in_turn()) {
      const std::optional<ClassId> mb = model_->begin_turn(at);
      if (!mb) {
        fail("dispatch sent " + std::to_string(got) + "; the model finds every queue empty after " +
             std::to_string(i));
        return;
      }
      ++report_.turns;
    }
    if (const std::optional<model::Decision> md = model_->visit(at)) {
      check_dispatch(out[i++], md);
    }
  }
  if (report_.divergence) return;
  if (got < want) {
    // It stopped because every queue is empty: the model must find nothing either.
    if (model_->in_turn()) check_dispatch(std::nullopt, model_->visit(at));
    if (report_.divergence) return;
    const std::optional<ClassId> mb = model_->begin_turn(at);
    if (mb) fail("dispatch found every queue empty; model turns " + str(mb));
    return;
  }
  if (core_->in_turn() != model_->in_turn()) {
    fail(std::string("after dispatch, in_turn: core ") + (core_->in_turn() ? "yes" : "no"));
    return;
  }
  if (!room()) {
    core_->end_turn();
    model_->end_turn();
  }
}

void Harness::op_complete() {
  // Often several at once, so that the next loop has room for more than one visit per turn.
  const std::size_t n = dice_.one_in(3) ? 1 + dice_.below(8) : 1;
  for (std::size_t i = 0; i < n && !report_.divergence; ++i) complete_one();
}

void Harness::complete_one() {
  const std::uint64_t kind = o_.bad_input ? dice_.below(12) : 11;
  const bool nano = dice_.one_in(2);
  if (kind == 0 && !done_.empty()) {
    const Flight f = done_[dice_.index(done_)];
    note("complete again " + str(f.core));
    complete_both(f.core, f.model, nano, 0, 0, std::nullopt);
    return;
  }
  if (kind == 1 && !issued_.empty()) {
    Ticket forged;
    const Flight& any = !flights_.empty() ? flights_[dice_.index(flights_)]
                                          : (done_.empty() ? Flight{} : done_[dice_.index(done_)]);
    forged.index = any.core.index;
    forged.issuer = any.core.issuer;
    switch (dice_.below(5)) {
      case 0:
        forged =
            Ticket{0x7fff0000u + static_cast<std::uint32_t>(dice_.below(99)), any.core.issuer, 1};
        break;
      case 4:
        // Another core's: as if a sharded embedder completed on the wrong shard.
        forged = any.core;
        forged.issuer = any.core.issuer + 1 + static_cast<std::uint32_t>(dice_.below(3));
        break;
      case 1:
        forged.generation = 0;
        break;
      case 2:
        forged.generation = top_generation_[forged.index] + 1;
        break;
      default:
        forged.generation = top_generation_[forged.index] + 2;
        break;
    }
    if (forged.issuer == core_->issuer() && issued_.count(key(forged)) != 0) return;
    note("complete forged " + str(forged));
    complete_both(forged, kNeverIssued, nano, 0, 0, std::nullopt);
    return;
  }
  if (flights_.empty()) return;
  const std::size_t i = dice_.index(flights_);
  const Flight f = flights_[i];
  double cost = 0;
  std::int64_t cost_nano = 0;
  if (kind == 2) {
    // Invalid costs: refused alike, and the request stays in flight.
    if (nano) {
      const std::int64_t bad[] = {-1, kMaxCostNano + 1, std::numeric_limits<std::int64_t>::max(),
                                  std::numeric_limits<std::int64_t>::min()};
      cost_nano = bad[dice_.below(4)];
    } else {
      const double bad[] = {-1.0,
                            -1e-12,
                            std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(),
                            std::nextafter(kMaxCost, 2 * kMaxCost),
                            1e300};
      cost = bad[dice_.below(7)];
    }
  } else {
    cost = gen_cost();
    cost_nano = nano_of(cost, kMaxCost).value_or(0);
    if (nano && dice_.one_in(8)) cost_nano = kMaxCostNano;
  }
  note("complete " + str(f.core) + (nano ? " nano " + std::to_string(cost_nano) : " " + str(cost)) +
       " at " + str(now_));
  complete_both(f.core, f.model, nano, cost, cost_nano, i);
}

void Harness::complete_both(Ticket ct, TicketId mt, bool nano, double cost, std::int64_t cost_nano,
                            std::optional<std::size_t> flight) {
  const Nanos at = t();
  const Result<CoreCompletion> cr =
      nano ? core_->complete_nano(ct, cost_nano, at) : core_->complete(ct, cost, at);
  const Result<model::Completion> mr =
      nano ? model_->complete_nano(mt, cost_nano, at) : model_->complete(mt, cost, at);
  if (cr.ok() != mr.ok() || (!cr.ok() && cr.error() != mr.error())) {
    fail("complete: core " + str(cr.status()) + ", model " + str(mr.status()));
    return;
  }
  if (!cr.ok()) {
    ++report_.refusals;
    return;
  }
  const auto who = by_core_.find(key(cr->participant));
  if (who == by_core_.end() || !(who_[who->second].model == mr->participant) ||
      cr->bucket != mr->bucket || cr->charged != mr->charged || cr->registered != mr->registered) {
    fail("complete: core " + str(cr->participant) + " bucket " + pc(cr->bucket) +
         (cr->charged ? " charged" : " not charged") + (cr->registered ? "" : " removed") +
         ", model place " + std::to_string(mr->participant.place) + " bucket " + pc(mr->bucket) +
         (mr->charged ? " charged" : " not charged") + (mr->registered ? "" : " removed"));
    return;
  }
  touch(who->second);
  ++report_.completions;
  ++(cr->charged ? report_.charged : report_.uncharged);
  if (flight) {
    const Flight f = flights_[*flight];
    flights_[*flight] = flights_.back();
    flights_.pop_back();
    if (done_.size() < 256) {
      done_.push_back(f);
    } else {
      done_[dice_.index(done_)] = f;
    }
  } else {
    fail("core accepted a completed or forged ticket " + str(ct));
  }
}

void Harness::op_clock() {
  Nanos dt = 0;
  switch (dice_.below(16)) {
    case 0:
    case 1:
    case 2:
      dt = 0;
      break;
    case 3:
      dt = 1;
      break;
    case 4:
    case 5:
      dt = static_cast<Nanos>(dice_.below(1000));
      break;
    case 6:
    case 7:
      dt = static_cast<Nanos>(dice_.below(1'000'000));
      break;
    case 8:
    case 9:
      dt = static_cast<Nanos>(dice_.below(kSecond));
      break;
    case 10:
      dt = static_cast<Nanos>(dice_.below(60 * kSecond));
      break;
    case 11:
      dt = static_cast<Nanos>(dice_.below(24 * kHour));
      break;
    case 12:
      dt = static_cast<Nanos>(dice_.below(dice_.one_in(8) ? 60 * kYear : kYear));
      break;
    case 15:
      if (dice_.one_in(16)) {
        // The very end of the clock: whatever is due there must not overflow.
        dt = clock_max_ - static_cast<Nanos>(dice_.below(kSecond)) - now_;
        break;
      }
      [[fallthrough]];
    default: {
      // Just before, at, or just after the instant some bucket reaches a credit (or, with costs
      // near the cap, half the time the instant it fills).
      const auto pick = pick_who(false);
      if (!pick || !who_[*pick].live) break;
      const auto c = static_cast<ClassId>(dice_.below(static_cast<std::uint64_t>(k_)));
      const std::optional<Nanos> when = o_.costs == CostMix::near_cap && dice_.one_in(2)
                                            ? model_->full_instant(who_[*pick].model, c)
                                            : model_->credit_instant(who_[*pick].model, c);
      if (!when || *when >= clock_max_ - 1) break;
      const Nanos target = *when + static_cast<Nanos>(dice_.below(3)) - 1;
      if (target > now_) dt = target - now_;
      break;
    }
  }
  advance(std::max<Nanos>(dt, 0));
  note("clock +" + str(dt) + " = " + str(now_));
}

void Harness::op_slots() {
  switch (dice_.below(7)) {
    case 0:
      slots_ = 0;
      break;
    case 1:
      slots_ = 1;
      break;
    case 2:
      slots_ = flights_.size();
      break;  // exactly full
    case 3:
      slots_ = flights_.size() + 1 + dice_.below(4);
      break;
    case 4:
      slots_ = 1000;
      break;
    default:
      slots_ = 1 + dice_.below(16);
      break;
  }
  note("slots " + std::to_string(slots_));
  if (!room()) {
    core_->end_turn();
    model_->end_turn();
  }
}

void Harness::op_add(bool initial) {
  std::string name;
  if (initial) {
    name = "p" + std::to_string(who_.size());
  } else if (o_.bad_input && !live_.empty() && dice_.one_in(6)) {
    name = who_[live_[dice_.index(live_)]].name;  // taken
  } else {
    if (live_.size() >= o_.max_participants) return;
    name = "p" + std::to_string(dice_.below(name_pool_));
  }
  const std::size_t plans = config_.plans.size();
  const bool bad_plan = !initial && o_.bad_input && dice_.one_in(12);
  const bool by_name = dice_.one_in(2);
  const auto plan_id = static_cast<PlanId>(bad_plan ? plans + dice_.below(3) : dice_.below(plans));
  const std::string plan_name = bad_plan ? std::string("nope") : config_.plans[plan_id].name;
  const std::uint32_t shares = gen_shares(!initial && o_.bad_input);
  const Nanos at = initial ? now_ : t();
  note("add " + name + " plan " + (by_name ? plan_name : std::to_string(plan_id)) + " shares " +
       std::to_string(shares) + " at " + str(at));
  const Result<ParticipantId> cr =
      by_name ? core_->add(name, plan_name, shares, at) : core_->add(name, plan_id, shares, at);
  const Result<Pid> mr =
      by_name ? model_->add(name, plan_name, shares, at) : model_->add(name, plan_id, shares, at);
  if (cr.ok() != mr.ok() || (!cr.ok() && cr.error() != mr.error())) {
    fail("add: core " + str(cr.status()) + ", model " + str(mr.status()));
    return;
  }
  if (!cr.ok()) {
    ++report_.refusals;
    return;
  }
  if (cr->place != mr->place) {
    fail("add: core place " + std::to_string(cr->place) + ", model place " +
         std::to_string(mr->place));
    return;
  }
  register_who(*cr, *mr, name);
}

bool Harness::compare_lists(RequestList& core, const std::vector<RequestId>& model,
                            const char* what) {
  std::vector<RequestId> got;
  const std::size_t claimed = core.size();
  while (RequestHook* h = core.pop_front()) {
    const auto it = queued_hooks_.find(h);
    if (it == queued_hooks_.end()) {
      fail(std::string(what) + ": core handed back a request it did not hold");
      return false;
    }
    got.push_back(it->second);
    queued_hooks_.erase(it);
  }
  if (got != model || claimed != got.size()) {
    std::string m = std::string(what) + ": core handed back [";
    for (const RequestId r : got) m += " " + std::to_string(r);
    m += " ] (size " + std::to_string(claimed) + "), model [";
    for (const RequestId r : model) m += " " + std::to_string(r);
    fail(m + " ]");
    return false;
  }
  return true;
}

void Harness::op_remove() {
  const auto pick = pick_who(o_.bad_input);
  if (!pick) return;
  const std::size_t i = *pick;
  note("remove " + who_[i].name + str(who_[i].core));
  Result<RequestList> cr = core_->remove(who_[i].core);
  const Result<std::vector<RequestId>> mr = model_->remove(who_[i].model);
  if (cr.ok() != mr.ok() || (!cr.ok() && cr.error() != mr.error())) {
    fail("remove: core " + str(cr.status()) + ", model " + str(mr.status()));
    return;
  }
  if (!cr.ok()) {
    ++report_.refusals;
    return;
  }
  if (!compare_lists(*cr, *mr, "remove")) return;
  retire_who(i);
  touch(i);
}

void Harness::op_replan() {
  const auto pick = pick_who(o_.bad_input);
  if (!pick) return;
  const std::size_t plans = config_.plans.size();
  const auto plan = static_cast<PlanId>(o_.bad_input && dice_.one_in(12) ? plans + dice_.below(3)
                                                                         : dice_.below(plans));
  const std::uint32_t shares = dice_.one_in(3) && who_[*pick].live ? core_->shares(who_[*pick].core)
                                                                   : gen_shares(o_.bad_input);
  const Nanos at = t();
  note("replan " + who_[*pick].name + str(who_[*pick].core) + " plan " + std::to_string(plan) +
       " shares " + std::to_string(shares) + " at " + str(at));
  const Status cs = core_->replan(who_[*pick].core, plan, shares, at);
  const Status ms = model_->replan(who_[*pick].model, plan, shares, at);
  if (cs != ms) fail("replan: core " + str(cs) + ", model " + str(ms));
  if (!cs.ok()) ++report_.refusals;
  touch(*pick);
}

void Harness::op_scale() {
  const auto pick = pick_who(o_.bad_input);
  if (!pick) return;
  std::uint32_t millionths = 0;
  switch (dice_.below(6)) {
    case 0:
      millionths = kWholePlan;
      break;
    case 1:
      millionths = 0;
      break;
    case 2:  // so small that rates and capacities round to little or nothing
      millionths = static_cast<std::uint32_t>(dice_.between(1, 1000));
      break;
    case 3:
      if (o_.bad_input) {
        millionths =
            dice_.one_in(2)
                ? kWholePlan + 1
                : kWholePlan + 1 + static_cast<std::uint32_t>(dice_.below(std::uint64_t{1} << 31));
        break;
      }
      [[fallthrough]];
    default:
      millionths = static_cast<std::uint32_t>(dice_.below(kWholePlan + 1));
      break;
  }
  const Nanos at = t();
  note("scale " + who_[*pick].name + str(who_[*pick].core) + " to " + std::to_string(millionths) +
       " at " + str(at));
  const Status cs = core_->scale(who_[*pick].core, millionths, at);
  const Status ms = model_->scale(who_[*pick].model, millionths, at);
  if (cs != ms) fail("scale: core " + str(cs) + ", model " + str(ms));
  if (!cs.ok()) ++report_.refusals;
  if (cs.ok()) ++report_.scales;
  touch(*pick);
}

void Harness::op_probe() {
  const auto pick = pick_who(true);
  if (!pick) return;
  const Who& w = who_[*pick];
  ClassId c = static_cast<ClassId>(dice_.below(static_cast<std::uint64_t>(k_) + 2));
  if (dice_.one_in(16)) c = 255;
  const Nanos at = t();
  note("probe " + w.name + str(w.core) + " " + pc(c) + " at " + str(at));
  const Result<Balance> cb = core_->balance(w.core, c, at);
  const Result<Int128> mb = model_->balance(w.model, c, at);
  if (cb.ok() != mb.ok() || (cb.ok() && *cb != *mb) || (!cb.ok() && cb.error() != mb.error())) {
    fail("balance " + pc(c) + ": core " + (cb.ok() ? str(*cb) : str(cb.status())) + ", model " +
         (mb.ok() ? str(*mb) : str(mb.status())));
    return;
  }
  if (core_->qualifies(w.core, c, at) != model_->qualifies(w.model, c, at)) {
    fail("qualifies " + pc(c) + " differs");
    return;
  }
  const auto found = core_->find(w.name);
  const auto mfound = model_->find(w.name);
  if (found.has_value() != mfound.has_value()) {
    fail("find(" + w.name + ") differs");
    return;
  }
  if (found) {
    const auto it = by_core_.find(key(*found));
    if (it == by_core_.end() || !(who_[it->second].model == *mfound)) {
      fail("find(" + w.name + ") names different participants");
    }
  }
  touch(*pick);
}

void Harness::op_take_all() {
  note("take_all_queued");
  RequestList all = core_->take_all_queued();
  compare_lists(all, model_->take_all_queued(), "take_all_queued");
  compare_everyone();
}

// ---- comparisons ------------------------------------------------------------------------------

void Harness::compare_who(std::size_t i, bool balances) {
  if (report_.divergence) return;
  const Who& w = who_[i];
  const bool cc = core_->contains(w.core);
  const bool mc = model_->contains(w.model);
  const std::string who = w.name + str(w.core);
  if (cc != mc || cc != w.live) {
    fail("contains " + who + ": core " + std::to_string(cc) + ", model " + std::to_string(mc));
    return;
  }
  if (core_->queued(w.core) != model_->queued(w.model)) {
    fail("queued " + who + ": core " + std::to_string(core_->queued(w.core)) + ", model " +
         std::to_string(model_->queued(w.model)));
    return;
  }
  if (!cc) return;
  if (core_->name(w.core) != w.name || core_->plan(w.core) != model_->plan(w.model) ||
      core_->shares(w.core) != model_->shares(w.model) ||
      core_->scale_of(w.core) != model_->scale_of(w.model)) {
    fail("name, plan, shares or scale of " + who);
    return;
  }
  for (int c = 0; c <= k_; ++c) {
    const auto cls = static_cast<ClassId>(c);
    const bool held = core_->holds(w.core, cls);
    if (held != model_->holds(w.model, cls)) {
      fail("holds " + pc(cls) + " " + who);
      return;
    }
    if (!held || !balances) continue;
    const Result<Balance> cb = core_->balance(w.core, cls, now_);
    const Result<Int128> mb = model_->balance(w.model, cls, now_);
    if (!cb.ok() || !mb.ok() || *cb != *mb) {
      fail("balance " + pc(cls) + " of " + who + " at " + str(now_) + ": core " +
           (cb.ok() ? str(*cb) : str(cb.status())) + ", model " +
           (mb.ok() ? str(*mb) : str(mb.status())));
      return;
    }
  }
  const ParticipantStats cs = core_->stats(w.core);
  const Stats& ms = model_->stats(w.model);
  for (int c = 0; c <= k_; ++c) {
    if (cs.dispatched[c] != ms.dispatched[c]) {
      fail("stats.dispatched[" + pc(static_cast<ClassId>(c)) + "] of " + who + ": core " +
           std::to_string(cs.dispatched[c]) + ", model " + std::to_string(ms.dispatched[c]));
      return;
    }
  }
  if (cs.completed != ms.completed || cs.cost_charged != ms.cost_charged ||
      cs.cost_uncharged != ms.cost_uncharged) {
    fail("stats of " + who + ": core completed " + std::to_string(cs.completed) + " charged " +
         str(cs.cost_charged) + " uncharged " + str(cs.cost_uncharged) + ", model " +
         std::to_string(ms.completed) + " / " + str(ms.cost_charged) + " / " +
         str(ms.cost_uncharged));
  }
}

void Harness::compare_global() {
  if (report_.divergence) return;
  if (core_->size() != model_->size() || core_->size() != live_.size()) {
    fail("size: core " + std::to_string(core_->size()) + ", model " +
         std::to_string(model_->size()));
  } else if (core_->ring_size() != model_->ring_size()) {
    fail("ring_size: core " + std::to_string(core_->ring_size()) + ", model " +
         std::to_string(model_->ring_size()));
  } else if (core_->waiting() != model_->waiting()) {
    fail("waiting: core " + std::to_string(core_->waiting()) + ", model " +
         std::to_string(model_->waiting()));
  } else if (core_->in_flight() != model_->in_flight() || core_->in_flight() != flights_.size()) {
    fail("in_flight: core " + std::to_string(core_->in_flight()) + ", model " +
         std::to_string(model_->in_flight()));
  } else if (core_->turn_class() != model_->turn_class() || core_->in_turn() != model_->in_turn()) {
    fail("turn: core " + str(core_->turn_class()) + ", model " + str(model_->turn_class()));
  }
}

void Harness::compare_everyone() {
  if (report_.divergence) return;
  compare_global();
  for (std::uint32_t place = 0; place < core_->ring_size() && !report_.divergence; ++place) {
    const std::optional<ParticipantId> c = core_->at(place);
    const std::optional<Pid> m = model_->at(place);
    if (c.has_value() != m.has_value()) {
      fail("at(" + std::to_string(place) + ") differs");
      return;
    }
    if (!c) continue;
    const auto it = by_core_.find(key(*c));
    if (it == by_core_.end() || !(who_[it->second].model == *m)) {
      fail("at(" + std::to_string(place) + "): different participants");
      return;
    }
  }
  // The waiting participants, in ring order: the order `pass` trace lines list them in.
  std::vector<std::uint32_t> core_waiting;
  core_->for_each_waiting([&](ParticipantId p) { core_waiting.push_back(p.place); });
  std::vector<std::uint32_t> model_waiting;
  for (std::uint32_t place = 0; place < model_->ring_size(); ++place) {
    const std::optional<Pid> p = model_->at(place);
    if (p && model_->queued(*p) != 0) model_waiting.push_back(place);
  }
  if (core_waiting != model_waiting) {
    fail("for_each_waiting: core lists " + std::to_string(core_waiting.size()) + " places, model " +
         std::to_string(model_waiting.size()));
    return;
  }
  for (const std::size_t i : live_) compare_who(i, true);
  // A few of the removed, which must stay unknown.
  for (std::size_t n = 0; n < 4 && !who_.empty(); ++n) compare_who(dice_.index(who_), true);
}

}  // namespace

DiffReport run_differential(const DiffOptions& options, OpSource& source) {
  Harness harness(options, source);
  return harness.run();
}

DiffOptions fuzz_options(OpSource& source) {
  Dice dice(source);
  DiffOptions o;
  o.classes = static_cast<int>(1 + dice.below(kMaxClasses));
  o.steps = 100'000;  // the input's length decides
  o.max_participants = 1 + dice.below(24);
  o.initial_participants = dice.below(o.max_participants + 1);
  o.costs = static_cast<CostMix>(dice.below(4));
  o.rates = static_cast<RateMix>(dice.below(3));
  o.churn = !dice.one_in(4);
  o.bad_input = !dice.one_in(4);
  o.clock_reaches_end = dice.one_in(4);
  return o;
}

}  // namespace creditloop::model
