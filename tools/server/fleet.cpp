#include "fleet.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>

#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <nlohmann/json.hpp>

#include "fleet_lua.hpp"

namespace creditloop::server {
namespace {

using Steady = std::chrono::steady_clock;

void log(const std::string& line) {
  std::fprintf(stderr, "creditloop-server: fleet: %s\n", line.c_str());
  std::fflush(stderr);
}

// Requests per epoch, far beyond any server; the rule clips to it too (fleet.lua), which keeps
// its arithmetic exact in Lua's doubles.
constexpr std::uint64_t kMaxDemand = 1'000'000'000;

// A claim is renewed every epoch and lives 3 epochs, at most 3 s (epoch_ms is at most 1000); one
// that lives longer was not written by a server, and is waited for no longer than that.
constexpr long long kMaxClaimWaitMs = 3000;

std::string hostname() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "server";
  return host;
}

// "<host>/<pid>/<random>": names the holder in a refusal's log line, and differs between two
// processes on one host even when the pid is reused.
std::string make_token() {
  std::random_device entropy;
  const std::uint64_t r = (static_cast<std::uint64_t>(entropy()) << 32) ^ entropy();
  char random[17];
  std::snprintf(random, sizeof random, "%016llx", static_cast<unsigned long long>(r));
  return hostname() + "/" + std::to_string(getpid()) + "/" + random;
}

timeval to_timeval(std::chrono::microseconds d) {
  const auto us = std::max<std::int64_t>(d.count(), 1000);  // a zero timeout would mean "none"
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

std::vector<double> round_trip_buckets() {
  std::vector<double> b;
  for (double s = 100e-6; s < 1.1; s *= 2) b.push_back(s);  // 0.1 ms to 0.8 s
  return b;
}

std::string describe_reply_error(const redisReply* r) {
  return r == nullptr ? std::string("no reply") : std::string(r->str, r->len);
}

bool is_function_missing(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ERROR) return false;
  const std::string text(r->str, r->len);
  return text.find("Function not found") != std::string::npos ||
         text.find("NOSCRIPT") != std::string::npos;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

const char* state_name(FleetState s) noexcept {
  switch (s) {
    case FleetState::connected:
      return "connected";
    case FleetState::grace:
      return "grace";
    case FleetState::fallback:
      return "fallback";
  }
  return "connected";
}

std::string default_server_id(std::uint16_t port) {
  return hostname() + ":" + std::to_string(port);
}

struct Fleet::Track {
  ParticipantId participant;
  std::uint64_t dispatched = 0;  // the counter's value at the last epoch
  bool demand_last_epoch = false;
  /// Whether the fraction in force came from Redis; if not, it is 1/n and follows n.
  bool apportioned = false;
  FleetTenantView view;
};

struct Fleet::Report {
  Track* track;
  std::string key;
  std::uint64_t demand;
  bool answered = false;
  std::uint32_t fraction = 0;  // millionths, when answered
};

// One blocking hiredis connection; the fleet thread's alone.
struct Fleet::Redis {
  redisContext* context = nullptr;
  ~Redis() {
    if (context != nullptr) redisFree(context);
  }
};

Fleet::Fleet(FleetConfig config, std::string server_id, Runtime& runtime, Members members)
    : config_(std::move(config)),
      server_id_(std::move(server_id)),
      servers_key_(config_.prefix + "servers"),
      claim_key_(config_.prefix + "server:" + server_id_),
      token_(make_token()),
      runtime_(runtime),
      members_(std::move(members)),
      round_trip_(std::make_shared<prometheus::Histogram>(round_trip_buckets())) {
  live_servers_ = config_.expected_servers;
  view_.server_id = server_id_;
  view_.redis = config_.redis_text();
  view_.epoch = config_.epoch;
}

Fleet::~Fleet() { stop(); }

std::uint32_t Fleet::even_share() const noexcept {
  return kWholePlan / std::max<std::uint32_t>(1, live_servers_);
}

void Fleet::set_fraction(Track& t, std::uint32_t millionths) {
  if (t.view.fraction == millionths) return;
  const Status s = runtime_.scale(t.participant, millionths);
  // A tenant removed by a reload since this epoch began is dropped at the next one.
  if (s) t.view.fraction = millionths;
}

void Fleet::fail(const std::string& kind, const std::string& why) {
  ++errors_[kind];
  last_error_ = kind + ": " + why;
}

bool Fleet::connect() {
  redis_.reset();
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(config_.epoch / 2);
  const timeval tv = to_timeval(timeout);
  redisContext* c =
      config_.unix_path.empty()
          ? redisConnectWithTimeout(config_.redis.host.c_str(), config_.redis.port, tv)
          : redisConnectUnixWithTimeout(config_.unix_path.c_str(), tv);
  auto redis = std::make_unique<Redis>();
  redis->context = c;
  if (c == nullptr) {
    fail("connect", "cannot allocate a connection");
    return false;
  }
  if (c->err != 0) {
    fail("connect", c->errstr);
    return false;
  }
  if (redisSetTimeout(c, tv) != REDIS_OK) {
    fail("connect", "cannot set the command timeout");
    return false;
  }
  if (!config_.password.empty()) {
    Reply r(static_cast<redisReply*>(
        config_.user.empty()
            ? redisCommand(c, "AUTH %b", config_.password.data(), config_.password.size())
            : redisCommand(c, "AUTH %b %b", config_.user.data(), config_.user.size(),
                           config_.password.data(), config_.password.size())));
    if (!r || r->type == REDIS_REPLY_ERROR) {
      // Redis's own message names no secret.
      fail("connect", "AUTH refused: " + (r ? describe_reply_error(r.get()) : c->errstr));
      return false;
    }
  }
  Reply loaded(static_cast<redisReply*>(
      redisCommand(c, "FUNCTION LOAD REPLACE %b", kFleetLua.data(), kFleetLua.size())));
  if (!loaded || loaded->type == REDIS_REPLY_ERROR) {
    fail("connect",
         "FUNCTION LOAD refused: " + (loaded ? describe_reply_error(loaded.get()) : c->errstr));
    return false;
  }
  redis_ = std::move(redis);
  return true;
}

// One pipeline a try: the claim, the reports and the heartbeat appended, then their replies read
// in that order. In one function so that the order appended and the order read are seen together.
bool Fleet::round_trip(std::vector<Report>& reports, std::uint32_t& live_servers, bool claim_only) {
  const std::string ttl = std::to_string(3 * config_.epoch.count());
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!redis_ && !connect()) return false;
    redisContext* c = redis_->context;
    const auto deadline = Steady::now() + config_.epoch / 2;
    // First, so that Redis renews the claim before this epoch's reports; when it says another
    // server holds the id, they have been written all the same (a pipeline, not a transaction),
    // which happens only to a server whose claim lapsed, once.
    redisAppendCommand(c, "FCALL creditloop_claim 1 %b %b %b", claim_key_.data(), claim_key_.size(),
                       token_.data(), token_.size(), ttl.data(), ttl.size());
    const std::size_t replies = claim_only ? 1 : reports.size() + 2;
    if (!claim_only) {
      for (const Report& r : reports) {
        const std::string demand = std::to_string(r.demand);
        redisAppendCommand(c, "FCALL creditloop_report 1 %b %b %b %b", r.key.data(), r.key.size(),
                           server_id_.data(), server_id_.size(), demand.data(), demand.size(),
                           ttl.data(), ttl.size());
      }
      redisAppendCommand(c, "FCALL creditloop_heartbeat 1 %b %b %b", servers_key_.data(),
                         servers_key_.size(), server_id_.data(), server_id_.size(), ttl.data(),
                         ttl.size());
    }
    bool missing = false;
    bool ok = true;
    bool held = claimed_;
    for (std::size_t i = 0; i < replies; ++i) {
      const auto left =
          std::chrono::duration_cast<std::chrono::microseconds>(deadline - Steady::now());
      void* raw = nullptr;
      if (left.count() <= 0 || redisSetTimeout(c, to_timeval(left)) != REDIS_OK ||
          redisGetReply(c, &raw) != REDIS_OK) {
        // The pipeline's replies are out of step now: only a fresh connection is safe.
        const bool timed_out =
            Steady::now() >= deadline || (c->err == REDIS_ERR_IO && (errno == EAGAIN));
        fail(timed_out ? "timeout" : "connection", c->errstr[0] != '\0' ? c->errstr : "timed out");
        redis_.reset();
        return false;
      }
      Reply reply(static_cast<redisReply*>(raw));
      if (is_function_missing(reply.get())) {
        missing = true;
        continue;
      }
      if (i == 0) {
        ok = read_claim(reply.get(), held) && ok;
      } else if (i == replies - 1) {
        ok = read_heartbeat(reply.get(), live_servers) && ok;
      } else {
        ok = read_report(reply.get(), reports[i - 1]) && ok;
      }
    }
    if (!missing) {
      claimed_ = held;
      if (!held) {
        // Apportioned against an entry another server writes too: worth nothing.
        for (Report& r : reports) r.answered = false;
      }
      return ok;
    }
    // Redis lost the library (a restart without persistence, FUNCTION FLUSH, a fail-over to a
    // replica without it): load it again and send the epoch once more.
    fail("function_missing", "the creditloop library was not loaded");
    log("Redis had lost the creditloop function; loading it again");
    redis_.reset();
  }
  return false;
}

bool Fleet::read_claim(const redisReply* r, bool& held) {
  const auto integer = [r](std::size_t k) { return r->element[k]->type == REDIS_REPLY_INTEGER; };
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && integer(0) &&
      r->element[0]->integer == 1) {
    held = true;
  } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && integer(0) &&
             r->element[0]->integer == 0 && r->element[1]->type == REDIS_REPLY_STRING &&
             integer(2)) {
    held = false;
    holder_.assign(r->element[1]->str, r->element[1]->len);
    holder_ttl_ms_ = r->element[2]->integer;
    fail("duplicate_id", "server id " + server_id_ + " is held by " + holder_);
  } else {
    fail("reply", "claim: " + describe_reply_error(r));
    return false;
  }
  return true;
}

bool Fleet::read_heartbeat(const redisReply* r, std::uint32_t& live_servers) {
  if (r->type != REDIS_REPLY_INTEGER || r->integer < 1) {
    fail("reply", "heartbeat: " + describe_reply_error(r));
    return false;
  }
  live_servers = static_cast<std::uint32_t>(
      std::min<long long>(r->integer, std::numeric_limits<std::uint32_t>::max()));
  return true;
}

bool Fleet::read_report(const redisReply* reply, Report& r) {
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
      reply->element[0]->type != REDIS_REPLY_INTEGER ||
      reply->element[1]->type != REDIS_REPLY_INTEGER ||
      reply->element[2]->type != REDIS_REPLY_INTEGER || reply->element[0]->integer < 0 ||
      reply->element[0]->integer > kWholePlan) {
    fail("reply", describe_reply_error(reply));
    return false;
  }
  r.answered = true;
  r.fraction = static_cast<std::uint32_t>(reply->element[0]->integer);
  // Shown, not applied; clipped as the function clips every entry, so that a reply out of
  // range cannot show as a wrapped-around count.
  const long long live = std::clamp<long long>(reply->element[1]->integer, 1,
                                               std::numeric_limits<std::uint32_t>::max());
  r.track->view.live_entries = static_cast<std::uint32_t>(live);
  r.track->view.fleet_demand = static_cast<std::uint64_t>(std::clamp<long long>(
      reply->element[2]->integer, 0, static_cast<long long>(kMaxDemand) * live));
  return true;
}

std::vector<Fleet::Report> Fleet::gather() {
  const std::vector<Member> members = members_();
  std::map<std::string, Track, std::less<>> kept;
  for (const Member& m : members) {
    auto found = tracks_.find(m.name);
    Track track;
    const bool known = found != tracks_.end() && found->second.participant == m.participant;
    if (known) track = found->second;
    track.participant = m.participant;
    const std::optional<ParticipantCounters> c = runtime_.counters(m.participant);
    if (!c) continue;  // removed by a reload
    std::uint64_t dispatched = 0;
    for (const std::uint64_t d : c->dispatched) dispatched += d;
    if (!known) {
      // New here (at start, or added by a reload): 1/n until Redis says otherwise, and demand
      // counted from now.
      track.view.fraction = kWholePlan;
      track.dispatched = dispatched;
      set_fraction(track, even_share());
    }
    const std::uint64_t demand = std::min(dispatched - track.dispatched + c->queued, kMaxDemand);
    track.dispatched = dispatched;
    const bool active = demand > 0;
    track.view.reported = active || track.demand_last_epoch;
    track.demand_last_epoch = active;
    track.view.demand = demand;
    kept.insert_or_assign(m.name, std::move(track));
  }
  tracks_ = std::move(kept);
  std::vector<Report> reports;
  for (auto& [name, track] : tracks_) {
    if (track.view.reported) {
      reports.push_back({&track, config_.prefix + "{" + name + "}:demand", track.view.demand});
    }
  }
  return reports;
}

void Fleet::epoch() {
  std::vector<Report> reports = gather();
  ++epochs_;
  const auto began = Steady::now();
  std::uint32_t live = live_servers_;
  bool answered = true;
  if (!claimed_) {
    // Asked alone first, so that a server without its id writes nothing under it.
    std::vector<Report> none;
    answered = round_trip(none, live, true);
  }
  if (answered && claimed_) answered = round_trip(reports, live, false);
  const auto now = Steady::now();
  // Applied once every reply is in, so that the dispatcher's round trips do not eat into
  // Redis's deadline; a reply that came before a failure is as good as any.
  for (const Report& r : reports) {
    if (!r.answered) continue;
    r.track->apportioned = true;
    set_fraction(*r.track, r.fraction);
  }
  if (answered && !claimed_) {
    // Another live server has this id: sharing its entries would skew every tenant's fractions
    // on both, so this one takes no part, as in a fallback, until the other gives the id back.
    if (!id_refused_) {
      log("server id \"" + server_id_ + "\" is held by " + holder_ +
          ", another live server; this one takes no part in the fleet (every tenant at 1/" +
          std::to_string(live_servers_) +
          " of its plan, nothing reported) until that one stops: give each server its own "
          "fleet.server_id");
      id_refused_ = true;
    }
    state_ = FleetState::fallback;
  } else if (answered) {
    round_trip_->Observe(std::chrono::duration<double>(now - began).count());
    live_servers_ = live;
    if (id_refused_) {
      log("server id \"" + server_id_ + "\" given back; this server takes part in the fleet now");
      id_refused_ = false;
    } else if (state_ != FleetState::connected) {
      log("Redis answers again after " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(now - failing_since_).count()) +
          " ms; fractions follow demand again");
    }
    state_ = FleetState::connected;
    // A tenant no server has reported yet (or since a fallback) has no share to go by: 1/n,
    // with n as it is now, so that servers which joined one after another agree.
    for (auto& [name, track] : tracks_) {
      if (!track.apportioned) set_fraction(track, even_share());
    }
  } else if (state_ == FleetState::connected) {
    state_ = FleetState::grace;
    failing_since_ = began;
    log("Redis " + config_.redis_text() + " did not answer (" + last_error_ +
        "); keeping the last fractions for " + std::to_string(config_.grace.count()) + " ms");
  }
  if (state_ == FleetState::grace && now - failing_since_ >= config_.grace) {
    state_ = FleetState::fallback;
    log("still no answer after " + std::to_string(config_.grace.count()) +
        " ms; every tenant at 1/" + std::to_string(live_servers_) + " of its plan");
  }
  if (state_ == FleetState::fallback) {
    for (auto& [name, track] : tracks_) {
      set_fraction(track, even_share());
      track.apportioned = false;
    }
  }
  publish();
}

void Fleet::publish() {
  std::lock_guard lock(view_mutex_);
  view_.state = state_;
  view_.live_servers = live_servers_;
  view_.epochs = epochs_;
  view_.errors = errors_;
  view_.tenants.clear();
  for (const auto& [name, track] : tracks_) view_.tenants.emplace(name, track.view);
}

bool Fleet::claim_at_start() {
  std::vector<Report> none;
  std::uint32_t unused = 0;
  if (!round_trip(none, unused, true)) return false;
  if (claimed_) return true;
  // Held by a process that died without giving the id back (this server before a crash, most
  // often): nothing renews that claim, and it expires within its TTL. Or by a live server, which
  // renews it every epoch, so that its time to live goes up again. Refusing a second server at
  // once, rather than renaming it, is what keeps an id naming one server: copied configurations
  // are found when they are deployed, and the same server keeps the same id across restarts.
  const std::string first = holder_;
  long long left = holder_ttl_ms_;
  log("server id \"" + server_id_ + "\" is held by " + holder_ + " for " + std::to_string(left) +
      " ms more; waiting in case a server that died without giving the id back left it");
  const auto deadline =
      Steady::now() + std::chrono::milliseconds(std::min(left, kMaxClaimWaitMs)) + config_.epoch;
  for (;;) {
    std::this_thread::sleep_for(config_.epoch / 4);     // a poll with a deadline, on Redis's answer
    if (!round_trip(none, unused, true)) return false;  // as if unreachable at start
    if (claimed_) {
      log("server id \"" + server_id_ + "\": the previous claim expired; taken");
      return true;
    }
    if (holder_ != first || holder_ttl_ms_ > left || Steady::now() >= deadline) {
      redis_.reset();
      throw std::runtime_error("fleet: server id \"" + server_id_ +
                               "\" is in use by another live server (" + holder_ +
                               " renews its claim in Redis); refusing to start: give each server "
                               "its own fleet.server_id");
    }
    left = holder_ttl_ms_;
  }
}

void Fleet::admit(ParticipantId participant) {
  std::uint32_t n = 1;
  {
    std::lock_guard lock(view_mutex_);
    n = view_.live_servers;
  }
  // The fleet thread meets the tenant at its next epoch and applies 1/n again, with n as it is
  // then; if this fails (the runtime is shutting down), that is all there is to do.
  (void)runtime_.scale(participant, kWholePlan / std::max<std::uint32_t>(1, n));
}

void Fleet::start() {
  std::vector<Report> none;
  std::uint32_t live = live_servers_;
  if (claim_at_start() && round_trip(none, live, false)) {
    live_servers_ = live;
    state_ = FleetState::connected;
    log("server " + server_id_ + " joined through " + config_.redis_text() + ": " +
        std::to_string(live) + " live servers; every tenant at 1/" + std::to_string(live) +
        " until its first epoch");
  } else {
    state_ = FleetState::fallback;
    failing_since_ = Steady::now();
    log("Redis " + config_.redis_text() + " unreachable at start (" + last_error_ +
        "); every tenant at 1/" + std::to_string(live_servers_) + " (expected_servers)");
  }
  // Every tenant to 1/n, and its demand counted from now.
  (void)gather();
  publish();
  thread_ = std::thread([this] { run(); });
}

void Fleet::run() {
  auto next = Steady::now() + config_.epoch;
  std::unique_lock lock(stop_mutex_);
  while (!stop_signal_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    epoch();
    lock.lock();
    next += config_.epoch;
    // A round trip that ran late does not make the next epochs short.
    if (next < Steady::now()) next = Steady::now() + config_.epoch;
  }
}

void Fleet::stop() {
  {
    std::lock_guard lock(stop_mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_signal_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!redis_) return;
  // Without the id, the entries under it are another server's.
  if (!claimed_) {
    redis_.reset();
    return;
  }
  // Leaving at once rather than after the TTL gives the others this server's share sooner.
  redisContext* c = redis_->context;
  (void)redisSetTimeout(
      c, to_timeval(std::chrono::duration_cast<std::chrono::microseconds>(config_.epoch / 2)));
  for (const auto& [name, track] : tracks_) {
    const std::string key = config_.prefix + "{" + name + "}:demand";
    redisAppendCommand(c, "HDEL %b %b", key.data(), key.size(), server_id_.data(),
                       server_id_.size());
  }
  redisAppendCommand(c, "FCALL creditloop_leave 1 %b %b", servers_key_.data(), servers_key_.size(),
                     server_id_.data(), server_id_.size());
  redisAppendCommand(c, "FCALL creditloop_release 1 %b %b", claim_key_.data(), claim_key_.size(),
                     token_.data(), token_.size());
  for (std::size_t i = 0; i < tracks_.size() + 2; ++i) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) break;
    freeReplyObject(raw);
  }
  redis_.reset();
}

FleetView Fleet::view() const {
  std::lock_guard lock(view_mutex_);
  return view_;
}

namespace {

prometheus::ClientMetric with_labels(
    std::initializer_list<std::pair<const char*, std::string>> labels) {
  prometheus::ClientMetric m;
  for (const auto& [name, value] : labels) m.label.push_back({name, value});
  return m;
}

prometheus::MetricFamily gauge_family(const char* name, const char* help) {
  return prometheus::MetricFamily{name, help, prometheus::MetricType::Gauge, {}};
}

void add_gauge(prometheus::MetricFamily& f, prometheus::ClientMetric m, double v) {
  m.gauge.value = v;
  f.metric.push_back(std::move(m));
}

}  // namespace

void add_fleet_metrics(std::vector<prometheus::MetricFamily>& out, const Fleet& fleet) {
  const FleetView v = fleet.view();
  auto fraction = gauge_family("creditloop_fleet_fraction",
                               "Fraction of the tenant's plan in force on this server");
  auto demand = gauge_family("creditloop_fleet_local_demand",
                             "Requests this server last reported for the tenant (one epoch)");
  auto total = gauge_family("creditloop_fleet_demand",
                            "The tenant's demand over every live server, as Redis last answered");
  auto entries = gauge_family("creditloop_fleet_live_entries",
                              "Servers with a live demand entry for the tenant");
  for (const auto& [name, t] : v.tenants) {
    add_gauge(fraction, with_labels({{"tenant", name}}), static_cast<double>(t.fraction) / 1e6);
    add_gauge(demand, with_labels({{"tenant", name}}), static_cast<double>(t.demand));
    add_gauge(total, with_labels({{"tenant", name}}), static_cast<double>(t.fleet_demand));
    add_gauge(entries, with_labels({{"tenant", name}}), static_cast<double>(t.live_entries));
  }
  auto state = gauge_family("creditloop_fleet_state",
                            "1 for the state the fleet client is in: connected, grace, fallback");
  for (const FleetState s : {FleetState::connected, FleetState::grace, FleetState::fallback}) {
    add_gauge(state, with_labels({{"state", state_name(s)}}), v.state == s ? 1 : 0);
  }
  auto live = gauge_family("creditloop_fleet_live_servers",
                           "Servers whose heartbeat Redis last counted, this one included");
  add_gauge(live, {}, static_cast<double>(v.live_servers));
  prometheus::MetricFamily epochs{"creditloop_fleet_epochs_total",
                                  "Round trips to Redis tried",
                                  prometheus::MetricType::Counter,
                                  {}};
  prometheus::ClientMetric e;
  e.counter.value = static_cast<double>(v.epochs);
  epochs.metric.push_back(std::move(e));
  prometheus::MetricFamily errors{"creditloop_fleet_errors_total",
                                  "Failed round trips and connections to Redis, by kind",
                                  prometheus::MetricType::Counter,
                                  {}};
  for (const char* kind :
       {"connect", "timeout", "connection", "reply", "function_missing", "duplicate_id"}) {
    prometheus::ClientMetric m = with_labels({{"kind", kind}});
    const auto it = v.errors.find(kind);
    m.counter.value = it == v.errors.end() ? 0.0 : static_cast<double>(it->second);
    errors.metric.push_back(std::move(m));
  }
  prometheus::MetricFamily rtt{"creditloop_fleet_round_trip_seconds",
                               "An epoch's pipelined round trip to Redis, when answered",
                               prometheus::MetricType::Histogram,
                               {fleet.round_trip_seconds().Collect()}};
  for (auto* f : {&fraction, &demand, &total, &entries, &state, &live, &epochs, &errors, &rtt}) {
    out.push_back(std::move(*f));
  }
}

void describe_fleet(nlohmann::json& participants, const Fleet& fleet) {
  const FleetView v = fleet.view();
  participants["fleet"] = {{"server_id", v.server_id},
                           {"redis", v.redis},
                           {"state", state_name(v.state)},
                           {"live_servers", v.live_servers},
                           {"epoch_ms", v.epoch.count()},
                           {"epochs", v.epochs},
                           {"errors", v.errors}};
  auto& tenants = participants["tenants"];
  if (!tenants.is_array()) return;
  for (auto& t : tenants) {
    const auto it = v.tenants.find(t.value("name", ""));
    if (it == v.tenants.end()) continue;
    const FleetTenantView& f = it->second;
    t["fleet"] = {{"fraction", static_cast<double>(f.fraction) / 1e6},
                  {"fraction_millionths", f.fraction},
                  {"demand", f.demand},
                  {"fleet_demand", f.fleet_demand},
                  {"live_entries", f.live_entries},
                  {"reported", f.reported}};
  }
}

}  // namespace creditloop::server
