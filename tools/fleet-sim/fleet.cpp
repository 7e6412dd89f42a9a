#include "fleet.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "apportion.hpp"
#include "common/splitmix64.hpp"
#include "creditloop/core.hpp"

namespace creditloop::fleet {
namespace {

constexpr Nanos kNever = std::numeric_limits<Nanos>::max();
constexpr Nanos kNanosPerMs = 1'000'000;

// The configuration's checks keep every duration within Nanos.
Nanos to_nanos(double seconds) { return creditloop::from_seconds(seconds).value(); }

/// splitmix64: one 8-byte state per stream, so that each stream's draws do not depend on the
/// order in which servers are advanced.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() noexcept { return tools::splitmix64_next(state); }
  /// Uniform in (0, 1].
  double unit() noexcept { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }
  std::uint32_t below(std::uint32_t n) noexcept {
    return static_cast<std::uint32_t>(unit() * n) % n;
  }
};

/// An index drawn with probability in proportion to its weight.
std::uint32_t pick(Rng& rng, const std::vector<double>& weights) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  double u = rng.unit() * total;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (u <= weights[i]) return static_cast<std::uint32_t>(i);
    u -= weights[i];
  }
  return static_cast<std::uint32_t>(weights.size() - 1);
}

/// n shares of a whole, each drawn within a factor of four of the others.
std::vector<double> split(Rng& rng, std::uint32_t n) {
  std::vector<double> w(n);
  for (double& x : w) x = 0.25 + 0.75 * rng.unit();
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= total;
  return w;
}

struct Tenant {
  std::uint32_t plan = 0;
  bool saturating = false;
  bool moved = false;
  double offered = 0;  // requests per second, fleet-wide
};

/// One tenant's traffic at one server: its arrival stream and its participant there.
struct Local {
  std::uint32_t tenant = 0;
  double rate_before = 0;  // requests per second before the change, and from it on
  double rate_after = 0;
  Rng rng{0};
  Nanos next_arrival = kNever;
  bool registered = false;
  ParticipantId id{};
  std::uint64_t dispatched_epoch = 0;  // since the last report
  std::uint64_t arrived_epoch = 0;
  std::uint64_t arrived_before = 0;  // in the epoch before
};

struct Request : RequestHook {
  std::uint32_t local = 0;
};

struct Completion {
  Nanos at;
  Ticket ticket;
  Request* request;
};

struct Server {
  std::unique_ptr<Core> core;
  std::vector<Local> locals;
  std::vector<std::pair<Nanos, std::uint32_t>> arrivals;  // min-heap of (next arrival, local)
  std::deque<Completion> completions;  // constant service time: completion order = dispatch order
  std::deque<Request> pool;
  std::vector<Request*> free_requests;
  std::uint32_t free_slots = 0;
  Nanos phase = 0;
  bool dead = false;
  // The store round trip in progress: what was reported, then what came back.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> report;  // (local, demand)
  std::vector<std::uint32_t> fractions;
  std::uint32_t live_count = 0;
  Nanos call_sent = 0;
  std::uint32_t known_servers = 0;  // n: the last heartbeat's answer
  std::uint32_t idle_fraction = 0;  // what a tenant it has never reported gets
  bool failing = false;
  Nanos failing_since = 0;
  bool fallen_back = false;
};

struct Event {
  enum Kind : std::uint8_t { tick, at_store, reply, failure };
  Nanos at;
  std::uint64_t seq;
  Kind kind;
  std::uint32_t server;
  bool operator>(const Event& o) const noexcept { return at != o.at ? at > o.at : seq > o.seq; }
};

class Simulation {
 public:
  explicit Simulation(const SimConfig& c) : c_(c) {
    build_config();  // validates before anything below divides by a field
    epoch_ = to_nanos(c.epoch_ms / 1000);
    ttl_ms_ = static_cast<std::int64_t>(3 * c.epoch_ms);
    service_ = to_nanos(c.service_ms / 1000);
    rtt_ = to_nanos(c.store_rtt_ms / 1000);
    end_ = to_nanos(c.duration_s);
    change_at_ = c.change == Change::none ? kNever : to_nanos(c.change_at_s);
    outage_from_ = c.outage_at_s >= 0 ? to_nanos(c.outage_at_s) : kNever;
    outage_to_ = c.outage_at_s >= 0 ? to_nanos(c.outage_at_s + c.outage_s) : kNever;
    bin_ = to_nanos(c.bin_ms / 1000);
    bins_ = static_cast<std::size_t>((end_ + bin_ - 1) / bin_);
    p1_bins_.assign(static_cast<std::size_t>(c.tenants) * bins_, 0);
    arrived_.assign(c.tenants, 0);
    p1_total_.assign(c.tenants, 0);
    build_traffic();
  }

  SimResult run();

 private:
  void build_config();
  void build_traffic();
  // build_traffic()'s steps; the draws stay in its order.
  [[nodiscard]] std::vector<std::uint32_t> choose_servers(Rng& rng, std::uint32_t count,
                                                          const std::vector<std::uint32_t>& avoid,
                                                          bool live_only) const;
  void add_local(std::uint32_t server, std::uint32_t tenant, double before, double after);
  // Each stream's first arrival, from its own generator.
  void start_arrivals();
  void schedule(Nanos at, Event::Kind kind, std::uint32_t server) {
    events_.push(Event{at, seq_++, kind, server});
  }
  Nanos next_arrival(Local& l, Nanos from) const;
  void advance(Server& s, Nanos to);
  void dispatch_loop(Server& s, Nanos now);
  void arrive(Server& s, std::uint32_t local, Nanos now);
  void set_scale(Server& s, Local& l, std::uint32_t millionths, Nanos now);
  void on_tick(std::uint32_t server, Nanos now);
  void on_store(std::uint32_t server, Nanos now);
  void on_reply(std::uint32_t server, Nanos now);
  void on_failure(std::uint32_t server, Nanos now);
  [[nodiscard]] OverGrant over_grant(Nanos from, Nanos to) const;
  struct WindowsOut {
    std::optional<std::size_t> last;  // the first bin of the last window out of the band
    bool final_out = false;           // the last window of the range is out of it
  };
  /// Tenant t's P1 rate over each window of window_s starting at a bin in [from, to - window].
  [[nodiscard]] WindowsOut windows_out(std::uint32_t t, std::size_t from, std::size_t to) const;
  void measure(SimResult& r) const;

  SimConfig c_;
  Config core_config_;
  Nanos epoch_ = 0, service_ = 0, rtt_ = 0, end_ = 0, change_at_ = kNever;
  Nanos outage_from_ = kNever, outage_to_ = kNever, bin_ = 0;
  std::int64_t ttl_ms_ = 0;
  std::size_t bins_ = 0;
  std::vector<Tenant> tenants_;
  std::vector<Server> servers_;
  std::vector<std::uint32_t> dead_;     // the servers that die at the change
  std::vector<std::uint16_t> p1_bins_;  // tenant x bin: P1 dispatches
  std::vector<std::uint64_t> arrived_;
  std::vector<std::uint64_t> p1_total_;
  // The store.
  std::vector<std::vector<DemandEntry>> demands_;  // by tenant
  std::vector<Heartbeat> live_;
  Rng store_rng_{0};
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t seq_ = 0;
  SimResult result_;
};

void Simulation::build_config() {
  auto bad = [](const std::string& field, const std::string& why) {
    throw std::invalid_argument(field + ": " + why);
  };
  if (c_.servers == 0) bad("servers", "must be at least 1");
  if (c_.tenants == 0) bad("tenants", "must be at least 1");
  if (!(c_.epoch_ms >= 1)) bad("epoch_ms", "must be at least 1");
  if (!(c_.duration_s > 0) || c_.duration_s > 3600) bad("duration_s", "must be in (0, 3600]");
  if (!(c_.warmup_s >= 0) || c_.warmup_s >= c_.duration_s)
    bad("warmup_s", "must be in [0, duration_s)");
  if (c_.slots == 0) bad("slots", "must be at least 1");
  if (!(c_.service_ms > 0)) bad("service_ms", "must be positive");
  if (!(c_.store_rtt_ms >= 0)) bad("store_rtt_ms", "must be 0 or more");
  if (!(c_.store_failure_rate >= 0 && c_.store_failure_rate <= 1))
    bad("store_failure_rate", "must be in [0, 1]");
  if (!(c_.outage_s >= 0)) bad("outage_s", "must be 0 or more");
  if (!(c_.grace_s >= 0)) bad("grace_s", "must be 0 or more");
  if (c_.plans.empty()) bad("plans", "must name at least one plan");
  if (!(c_.saturating_fraction >= 0 && c_.saturating_fraction <= 1))
    bad("saturating_fraction", "must be in [0, 1]");
  if (!(c_.saturating_load > 1)) bad("saturating_load", "must be above 1 (it saturates the plan)");
  if (!(c_.light_load > 0 && c_.light_load <= 1)) bad("light_load", "must be in (0, 1]");
  if (c_.spread.empty()) bad("spread", "must give at least one weight");
  for (double w : c_.spread) {
    if (!(w >= 0)) bad("spread", "weights must be 0 or more");
  }
  if (!(c_.shift_fraction >= 0 && c_.shift_fraction <= 1))
    bad("shift_fraction", "must be in [0, 1]");
  if (c_.change == Change::death && c_.deaths >= c_.servers)
    bad("deaths", "must leave at least one server alive");
  if (c_.change == Change::shift && c_.spread.size() * 2 > c_.servers)
    bad("spread", "a shift needs twice as many servers as a tenant is spread over");
  if (!(c_.bin_ms >= 1)) bad("bin_ms", "must be at least 1");
  if (!(c_.window_s * 1000 >= c_.bin_ms)) bad("window_s", "must hold at least one bin (bin_ms)");
  if (!(c_.over_grant_window_s * 1000 >= c_.bin_ms))
    bad("over_grant_window_s", "must hold at least one bin (bin_ms)");
  if (!(c_.band > 0 && c_.band < 1)) bad("band", "must be in (0, 1)");
  core_config_.classes = 1;
  for (std::size_t i = 0; i < c_.plans.size(); ++i) {
    const PlanSpec& p = c_.plans[i];
    if (!(p.weight >= 0)) bad("plans[" + std::to_string(i) + "].weight", "must be 0 or more");
    Plan plan;
    plan.name = p.name;
    plan.terms[0] = ClassTerms{p.rate, p.burst};
    core_config_.plans.push_back(plan);
  }
  if (const auto problem = check(core_config_)) bad("plans", problem->message);
}

// Every server's core and every tenant's traffic, drawn from the seed in one fixed order: the
// order of the draws is what makes a run repeatable, so they stay in one function.
void Simulation::build_traffic() {
  Rng rng{c_.seed};
  std::vector<double> plan_weights;
  for (const PlanSpec& p : c_.plans) plan_weights.push_back(p.weight);
  servers_.resize(c_.servers);
  for (std::uint32_t i = 0; i < c_.servers; ++i) {
    Server& s = servers_[i];
    s.core = std::make_unique<Core>(core_config_);
    s.free_slots = c_.slots;
    s.phase = static_cast<Nanos>(rng.unit() * static_cast<double>(epoch_));
    s.known_servers = c_.servers;  // expected_servers until the first heartbeat
    s.idle_fraction = even_fraction(c_.servers);
  }
  const auto spread_max = static_cast<std::uint32_t>(c_.spread.size());
  std::vector<std::uint32_t> dead;
  if (c_.change == Change::death) {
    dead = choose_servers(rng, c_.deaths, {}, false);
    for (std::uint32_t d : dead) servers_[d].dead = true;  // for choosing only; reset below
  }
  tenants_.resize(c_.tenants);
  for (std::uint32_t t = 0; t < c_.tenants; ++t) {
    Tenant& tenant = tenants_[t];
    tenant.plan = pick(rng, plan_weights);
    tenant.saturating = rng.unit() <= c_.saturating_fraction;
    tenant.offered =
        c_.plans[tenant.plan].rate * (tenant.saturating ? c_.saturating_load : c_.light_load);
    const std::uint32_t n = std::min(pick(rng, c_.spread) + 1, std::min(spread_max, c_.servers));
    const std::vector<std::uint32_t> on = choose_servers(rng, n, {}, false);
    const std::vector<double> w = split(rng, n);
    const bool shifts = c_.change == Change::shift && rng.unit() <= c_.shift_fraction;
    if (shifts) {
      tenant.moved = true;
      const std::vector<std::uint32_t> to = choose_servers(rng, n, on, false);
      const std::vector<double> w2 = split(rng, n);
      for (std::uint32_t i = 0; i < n; ++i) add_local(on[i], t, tenant.offered * w[i], 0);
      for (std::uint32_t i = 0; i < n; ++i) add_local(to[i], t, 0, tenant.offered * w2[i]);
      continue;
    }
    if (c_.change == Change::death) {
      double surviving = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        if (!servers_[on[i]].dead) surviving += w[i];
      }
      tenant.moved = surviving < 1 - 1e-12;
      for (std::uint32_t i = 0; i < n; ++i) {
        const double before = tenant.offered * w[i];
        const double after = servers_[on[i]].dead ? 0 : (surviving > 0 ? before / surviving : 0);
        add_local(on[i], t, before, after);
      }
      if (tenant.moved && surviving <= 0) {
        add_local(choose_servers(rng, 1, on, true)[0], t, 0, tenant.offered);
      }
      continue;
    }
    for (std::uint32_t i = 0; i < n; ++i)
      add_local(on[i], t, tenant.offered * w[i], tenant.offered * w[i]);
  }
  for (std::uint32_t d : dead) servers_[d].dead = false;
  dead_ = std::move(dead);
  demands_.resize(c_.tenants);
  store_rng_ = Rng{c_.seed * 0x9e3779b97f4a7c15ULL + 7};
  start_arrivals();
}

std::vector<std::uint32_t> Simulation::choose_servers(Rng& rng, std::uint32_t count,
                                                      const std::vector<std::uint32_t>& avoid,
                                                      bool live_only) const {
  std::vector<std::uint32_t> chosen;
  while (chosen.size() < count) {
    const std::uint32_t s = rng.below(c_.servers);
    if (std::find(chosen.begin(), chosen.end(), s) != chosen.end()) continue;
    if (std::find(avoid.begin(), avoid.end(), s) != avoid.end()) continue;
    if (live_only && servers_[s].dead) continue;
    chosen.push_back(s);
  }
  return chosen;
}

void Simulation::add_local(std::uint32_t server, std::uint32_t tenant, double before,
                           double after) {
  Local l;
  l.tenant = tenant;
  l.rate_before = before;
  l.rate_after = after;
  l.rng = Rng{c_.seed ^ (0x5851f42d4c957f2dULL * (servers_[server].locals.size() + 1)) ^
              (static_cast<std::uint64_t>(server) << 40)};
  servers_[server].locals.push_back(l);
}

void Simulation::start_arrivals() {
  for (std::uint32_t i = 0; i < c_.servers; ++i) {
    Server& s = servers_[i];
    s.core->reserve(s.locals.size(), c_.slots);
    for (std::uint32_t li = 0; li < s.locals.size(); ++li) {
      Local& l = s.locals[li];
      // Periodic streams start at a random phase of their period.
      const bool phased = !c_.poisson && l.rate_before > 0;
      l.next_arrival = next_arrival(l, phased ? -to_nanos(l.rng.unit() / l.rate_before) : 0);
      if (l.next_arrival != kNever) s.arrivals.emplace_back(l.next_arrival, li);
    }
    std::make_heap(s.arrivals.begin(), s.arrivals.end(), std::greater<>());
  }
}

Nanos Simulation::next_arrival(Local& l, Nanos from) const {
  const double rate = from < change_at_ ? l.rate_before : l.rate_after;
  Nanos next = kNever;
  if (rate > 0) {
    const double gap = c_.poisson ? -std::log(l.rng.unit()) / rate : 1 / rate;
    next = from + std::max<Nanos>(1, to_nanos(gap));
  }
  // The rate changes at the change: a Poisson stream is memoryless, so it starts afresh there.
  if (from < change_at_ && next >= change_at_) {
    if (l.rate_after <= 0) return kNever;
    const double gap =
        c_.poisson ? -std::log(l.rng.unit()) / l.rate_after : l.rng.unit() / l.rate_after;
    return change_at_ + to_nanos(gap);
  }
  return next;
}

void Simulation::set_scale(Server& s, Local& l, std::uint32_t millionths, Nanos now) {
  if (!l.registered) return;  // registered later at the server's idle fraction
  if (!s.core->scale(l.id, millionths, now))
    throw std::runtime_error("Core::scale refused a fraction");
}

void Simulation::arrive(Server& s, std::uint32_t local, Nanos now) {
  Local& l = s.locals[local];
  if (!l.registered) {
    const auto id = s.core->add("t" + std::to_string(l.tenant), tenants_[l.tenant].plan, 1, now);
    if (!id) throw std::runtime_error("Core::add refused a tenant");
    l.id = *id;
    l.registered = true;
    if (!s.core->scale(l.id, s.idle_fraction, now)) throw std::runtime_error("Core::scale refused");
  }
  Request* r;
  if (s.free_requests.empty()) {
    r = &s.pool.emplace_back();
  } else {
    r = s.free_requests.back();
    s.free_requests.pop_back();
  }
  r->local = local;
  if (!s.core->submit(l.id, *r, now)) throw std::runtime_error("Core::submit refused a request");
  ++l.arrived_epoch;
  ++arrived_[l.tenant];
  ++result_.arrivals;
}

void Simulation::dispatch_loop(Server& s, Nanos now) {
  struct Handler {
    Simulation& sim;
    Server& s;
    Nanos now;
    bool room() const noexcept { return s.free_slots > 0; }
    void on_turn(ClassId /*c*/) noexcept {}
    void on_dispatch(const Decision& d) {
      --s.free_slots;
      auto* r = static_cast<Request*>(d.request);
      Local& l = s.locals[r->local];
      ++l.dispatched_epoch;
      ++sim.result_.dispatches;
      if (d.out == 0) {
        ++sim.result_.p1_dispatches;
        ++sim.p1_total_[l.tenant];
        const auto bin = static_cast<std::size_t>(now / sim.bin_);
        if (bin < sim.bins_) ++sim.p1_bins_[l.tenant * sim.bins_ + bin];
      }
      s.completions.push_back(Completion{now + sim.service_, d.ticket, r});
    }
  };
  if (s.free_slots == 0 || s.core->waiting() == 0) return;
  s.core->run(now, Handler{*this, s, now});
}

void Simulation::advance(Server& s, Nanos to) {
  while (true) {
    const Nanos completion = s.completions.empty() ? kNever : s.completions.front().at;
    const Nanos arrival = s.arrivals.empty() ? kNever : s.arrivals.front().first;
    const Nanos now = std::min(completion, arrival);
    if (now > to || now == kNever) break;
    // One instant: completions first, then arrivals, then the loop (docs/contract.md §6's order).
    while (!s.completions.empty() && s.completions.front().at == now) {
      const Completion done = s.completions.front();
      s.completions.pop_front();
      if (!s.core->complete_nano(done.ticket, 0, now))
        throw std::runtime_error("Core::complete refused");
      s.free_requests.push_back(done.request);
      ++s.free_slots;
    }
    while (!s.arrivals.empty() && s.arrivals.front().first == now) {
      std::pop_heap(s.arrivals.begin(), s.arrivals.end(), std::greater<>());
      const std::uint32_t li = s.arrivals.back().second;
      arrive(s, li, now);
      Local& l = s.locals[li];
      l.next_arrival = next_arrival(l, now);
      if (l.next_arrival == kNever) {
        s.arrivals.pop_back();
      } else {
        s.arrivals.back().first = l.next_arrival;
        std::push_heap(s.arrivals.begin(), s.arrivals.end(), std::greater<>());
      }
    }
    dispatch_loop(s, now);
  }
}

void Simulation::on_tick(std::uint32_t server, Nanos now) {
  Server& s = servers_[server];
  if (s.dead) return;
  if (now >= change_at_ && std::find(dead_.begin(), dead_.end(), server) != dead_.end()) {
    // It died at the change: it served nothing more and stopped renewing its store entries.
    advance(s, change_at_);
    s.dead = true;
    return;
  }
  advance(s, now);
  schedule(now + epoch_, Event::tick, server);
  s.report.clear();
  for (std::uint32_t li = 0; li < s.locals.size(); ++li) {
    Local& l = s.locals[li];
    if (l.arrived_epoch + l.arrived_before > 0) {
      const std::uint64_t queued = l.registered ? s.core->queued(l.id) : 0;
      s.report.emplace_back(li, l.dispatched_epoch + queued);
    }
    l.arrived_before = l.arrived_epoch;
    l.arrived_epoch = 0;
    l.dispatched_epoch = 0;
  }
  s.call_sent = now;
  ++result_.store_calls;
  schedule(now + rtt_ / 2, Event::at_store, server);
}

void Simulation::on_store(std::uint32_t server, Nanos now) {
  Server& s = servers_[server];
  const bool down = now >= outage_from_ && now < outage_to_;
  const bool lost = c_.store_failure_rate > 0 && store_rng_.unit() <= c_.store_failure_rate;
  const bool late = rtt_ > epoch_ / 2;  // the round trip's timeout is E/2
  if (down || lost || late) {
    schedule(s.call_sent + epoch_ / 2, Event::failure, server);
    return;
  }
  const std::int64_t ms = now / kNanosPerMs;
  s.fractions.clear();
  for (const auto& [li, demand] : s.report) {
    const Apportioned a = report(demands_[s.locals[li].tenant], server, demand, ms, ttl_ms_);
    s.fractions.push_back(a.millionths);
  }
  s.live_count = heartbeat(live_, server, ms, ttl_ms_);
  result_.store_ops += s.report.size() + 1;
  schedule(s.call_sent + rtt_, Event::reply, server);
}

void Simulation::on_reply(std::uint32_t server, Nanos now) {
  Server& s = servers_[server];
  if (s.dead) return;
  advance(s, now);
  for (std::size_t i = 0; i < s.report.size(); ++i) {
    set_scale(s, s.locals[s.report[i].first], s.fractions[i], now);
  }
  s.known_servers = s.live_count;
  s.failing = false;
  s.fallen_back = false;
}

void Simulation::on_failure(std::uint32_t server, Nanos now) {
  Server& s = servers_[server];
  if (s.dead) return;
  ++result_.failed_calls;
  advance(s, now);
  if (!s.failing) {
    s.failing = true;
    s.failing_since = s.call_sent;
  }
  if (!s.fallen_back && now - s.failing_since >= to_nanos(c_.grace_s)) {
    s.fallen_back = true;
    ++result_.fallbacks;
    s.idle_fraction = even_fraction(s.known_servers);
    for (Local& l : s.locals) set_scale(s, l, s.idle_fraction, now);
  }
}

SimResult Simulation::run() {
  for (std::uint32_t i = 0; i < c_.servers; ++i) schedule(servers_[i].phase, Event::tick, i);
  while (!events_.empty() && events_.top().at <= end_) {
    const Event e = events_.top();
    events_.pop();
    switch (e.kind) {
      case Event::tick:
        on_tick(e.server, e.at);
        break;
      case Event::at_store:
        on_store(e.server, e.at);
        break;
      case Event::reply:
        on_reply(e.server, e.at);
        break;
      case Event::failure:
        on_failure(e.server, e.at);
        break;
    }
  }
  for (Server& s : servers_) {
    if (!s.dead) advance(s, end_);
  }
  SimResult r = std::move(result_);
  measure(r);
  return r;
}

Spread spread_of(std::vector<double> v) {
  Spread s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
  };
  s.min = v.front();
  s.p01 = q(0.01);
  s.p05 = q(0.05);
  s.p50 = q(0.5);
  s.p95 = q(0.95);
  s.p99 = q(0.99);
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

OverGrant Simulation::over_grant(Nanos from, Nanos to) const {
  OverGrant g;
  const auto window =
      static_cast<std::size_t>((to_nanos(c_.over_grant_window_s) + bin_ / 2) / bin_);
  const auto b0 = static_cast<std::size_t>(from / bin_);
  const auto b1 = std::min(bins_, static_cast<std::size_t>(to / bin_));
  g.from_s = creditloop::to_seconds(static_cast<Nanos>(b0) * bin_);
  g.to_s = creditloop::to_seconds(static_cast<Nanos>(b1) * bin_);
  const double window_seconds = creditloop::to_seconds(static_cast<Nanos>(window) * bin_);
  for (std::uint32_t t = 0; t < c_.tenants; ++t) {
    const PlanSpec& plan = c_.plans[tenants_[t].plan];
    const std::uint16_t* counts = &p1_bins_[t * bins_];
    double total = 0;
    bool over = false;
    // Consecutive windows: a tenant over its plan in one window and under it in the next was
    // over-granted in the first, whatever the sum.
    for (std::size_t w = b0; w + window <= b1; w += window) {
      double p1 = 0;
      for (std::size_t b = w; b < w + window; ++b) p1 += counts[b];
      total += p1;
      const double planned = plan.rate * window_seconds;
      g.planned += planned;
      if (p1 > planned) {
        g.excess += p1 - planned;
        over = true;
      }
      g.excess_beyond_burst += std::max(0.0, p1 - planned - plan.burst);
    }
    if (over) ++g.tenants_over;
    if (tenants_[t].saturating) {
      const double planned = plan.rate * window_seconds * static_cast<double>((b1 - b0) / window);
      g.saturating_planned += planned;
      g.shortfall += std::max(0.0, planned - total);
    }
  }
  return g;
}

Simulation::WindowsOut Simulation::windows_out(std::uint32_t t, std::size_t from,
                                               std::size_t to) const {
  const auto window = static_cast<std::size_t>((to_nanos(c_.window_s) + bin_ / 2) / bin_);
  const double expected =
      c_.plans[tenants_[t].plan].rate * creditloop::to_seconds(static_cast<Nanos>(window) * bin_);
  const std::uint16_t* counts = &p1_bins_[t * bins_];
  WindowsOut out;
  if (to < from + window) return out;
  double sum = 0;
  for (std::size_t b = from; b < from + window; ++b) sum += counts[b];
  for (std::size_t start = from; start + window <= to; ++start) {
    out.final_out = std::abs(sum - expected) > c_.band * expected;
    if (out.final_out) out.last = start;
    sum -= counts[start];
    if (start + window < to) sum += counts[start + window];
  }
  return out;
}

void Simulation::measure(SimResult& r) const {
  Nanos steady_end = end_;
  if (change_at_ != kNever) steady_end = std::min(steady_end, change_at_);
  if (outage_from_ != kNever) steady_end = std::min(steady_end, outage_from_);
  const Nanos warmup = to_nanos(c_.warmup_s);
  const auto b0 = static_cast<std::size_t>(warmup / bin_);
  const auto b1 = std::min(bins_, static_cast<std::size_t>(steady_end / bin_));
  const double seconds = creditloop::to_seconds(static_cast<Nanos>(b1 - b0) * bin_);
  std::vector<double> sat;
  std::vector<double> light;
  if (b1 > b0) {
    for (std::uint32_t t = 0; t < c_.tenants; ++t) {
      if (tenants_[t].moved) continue;
      double p1 = 0;
      for (std::size_t b = b0; b < b1; ++b) p1 += p1_bins_[t * bins_ + b];
      if (tenants_[t].saturating) {
        sat.push_back(p1 / (c_.plans[tenants_[t].plan].rate * seconds));
        if (!windows_out(t, b0, b1).last) ++r.saturating_in_band;
      } else if (arrived_[t] > 0) {
        light.push_back(static_cast<double>(p1_total_[t]) / static_cast<double>(arrived_[t]));
      }
    }
    r.steady = over_grant(warmup, steady_end);
  }
  std::sort(sat.begin(), sat.end());
  r.saturating_share = spread_of(sat);
  r.light_p1_share = spread_of(light);
  r.saturating_ratios = std::move(sat);

  if (change_at_ != kNever && change_at_ < end_) {
    const auto change_bin = static_cast<std::size_t>(change_at_ / bin_);
    std::vector<double> times;
    for (std::uint32_t t = 0; t < c_.tenants; ++t) {
      if (!tenants_[t].moved || !tenants_[t].saturating) continue;
      ++r.moved;
      // Converging *again*: only a tenant whose rate was in the band before the change counts.
      if (b1 > b0 && windows_out(t, b0, change_bin).last) continue;
      ++r.eligible;
      const WindowsOut after = windows_out(t, change_bin, bins_);
      if (after.final_out) continue;
      ++r.converged;
      const std::size_t from = after.last ? *after.last + 1 : change_bin;
      times.push_back(creditloop::to_seconds(static_cast<Nanos>(from - change_bin) * bin_));
    }
    r.convergence_s = spread_of(times);
    r.after_change = over_grant(change_at_, std::min(end_, change_at_ + to_nanos(5)));
  }
  if (outage_from_ != kNever && outage_from_ < end_) {
    r.outage = over_grant(outage_from_, std::min(end_, outage_to_ + to_nanos(5)));
  }
}

}  // namespace

SimResult simulate(const SimConfig& config) {
  Simulation sim(config);
  return sim.run();
}

}  // namespace creditloop::fleet
