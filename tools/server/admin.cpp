#include "admin.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <nlohmann/json.hpp>

#include "fleet.hpp"
#include "live.hpp"
#include "server.hpp"

namespace creditloop::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

ClientMetric labelled(std::initializer_list<std::pair<const char*, std::string>> labels) {
  ClientMetric m;
  for (const auto& [name, value] : labels) m.label.push_back({name, value});
  return m;
}

MetricFamily family(const char* name, const char* help, MetricType type) {
  return MetricFamily{name, help, type, {}};
}

void add_counter(MetricFamily& f, ClientMetric m, double v) {
  m.counter.value = v;
  f.metric.push_back(std::move(m));
}

void add_gauge(MetricFamily& f, ClientMetric m, double v) {
  m.gauge.value = v;
  f.metric.push_back(std::move(m));
}

std::map<std::string, ParticipantSnapshot> snapshots_by_name(Server& server) {
  std::map<std::string, ParticipantSnapshot> out;
  if (Runtime* rt = server.scheduler().runtime()) {
    for (ParticipantSnapshot& s : rt->snapshot_participants()) out[s.name] = std::move(s);
  }
  return out;
}

// The admin key, when configured, is compared in constant time like a tenant's.
bool key_admitted(const ServerConfig& config, const Request& request) {
  if (!config.admin_key) return true;
  const std::optional<std::string_view> token = bearer_token(request);
  if (!token) return false;
  const std::optional<KeyDigest> given = key_digest(*token);
  return given && CRYPTO_memcmp(given->data(), config.admin_key->data(), given->size()) == 0;
}

}  // namespace

const std::vector<double>& wait_buckets() {
  static const std::vector<double> bounds = [] {
    std::vector<double> b;
    for (double s = 50e-6; s < 200; s *= 2) b.push_back(s);  // 50 µs to 105 s
    return b;
  }();
  return bounds;
}

double quantile(const prometheus::Histogram& h, double q) {
  const ClientMetric m = h.Collect();
  const auto& buckets = m.histogram.bucket;
  const std::uint64_t total = m.histogram.sample_count;
  if (total == 0) return 0;
  const double rank = q * static_cast<double>(total);
  double lower = 0;
  std::uint64_t below = 0;
  for (const auto& b : buckets) {
    if (static_cast<double>(b.cumulative_count) >= rank) {
      if (std::isinf(b.upper_bound)) return lower;
      const auto in_bucket = static_cast<double>(b.cumulative_count - below);
      const double frac = in_bucket > 0 ? (rank - static_cast<double>(below)) / in_bucket : 1;
      return lower + (b.upper_bound - lower) * std::clamp(frac, 0.0, 1.0);
    }
    lower = b.upper_bound;
    below = b.cumulative_count;
  }
  return lower;
}

namespace {

using Families = std::vector<MetricFamily>;

// A family of one unlabelled sample: most of the loop's and the server's metrics.
void add_single(Families& families, const char* name, const char* help, MetricType type, double v) {
  MetricFamily f = family(name, help, type);
  if (type == MetricType::Counter) {
    add_counter(f, {}, v);
  } else {
    add_gauge(f, {}, v);
  }
  families.push_back(std::move(f));
}

// Statistics, each read alone: relaxed, ordering nothing.
double count(const std::atomic<std::uint64_t>& v) {
  return static_cast<double>(v.load(std::memory_order_relaxed));
}

// Per tenant: what the server counts, and (but in FIFO mode) what the runtime's snapshot says.
void add_tenant_metrics(Families& families, const Directory& dir,
                        const std::map<std::string, ParticipantSnapshot>& snaps,
                        const RuntimeSnapshot& loop, bool fifo) {
  const int k = dir.config->plans.classes;
  MetricFamily served =
      family("creditloop_tenant_requests_total",
             "Requests answered, by the class they went out under", MetricType::Counter);
  MetricFamily queued = family("creditloop_tenant_queue_depth",
                               "Requests accepted and waiting for their turn", MetricType::Gauge);
  MetricFamily balance = family("creditloop_tenant_balance_credits",
                                "Bucket balance per metered class", MetricType::Gauge);
  MetricFamily next =
      family("creditloop_tenant_next_credit_seconds",
             "Time until the next credit lands in an empty bucket", MetricType::Gauge);
  MetricFamily cost = family("creditloop_tenant_cost_charged_credits_total",
                             "Cost charged back to the tenant's buckets", MetricType::Counter);
  MetricFamily oldest = family("creditloop_tenant_oldest_queued_seconds",
                               "Age of the tenant's oldest queued request", MetricType::Gauge);
  MetricFamily wait = family("creditloop_tenant_queue_wait_seconds", "Time from arrival to start",
                             MetricType::Histogram);

  for (const auto& [name, entry] : dir.by_name) {
    const Tenant& t = *entry.tenant;
    for (int c = fifo ? k : 0; c <= k; ++c) {
      add_counter(served,
                  labelled({{"tenant", name}, {"class", class_name(static_cast<ClassId>(c))}}),
                  count(t.served[static_cast<std::size_t>(c)]));
    }
    add_gauge(
        queued, labelled({{"tenant", name}}),
        static_cast<double>(std::max<std::int64_t>(0, t.queued.load(std::memory_order_relaxed))));
    add_counter(
        cost, labelled({{"tenant", name}}),
        to_credits(static_cast<Balance>(t.cost_charged_nano.load(std::memory_order_relaxed))));
    ClientMetric h = t.wait_seconds->Collect();
    h.label.push_back({"tenant", name});
    wait.metric.push_back(std::move(h));
    const auto s = snaps.find(name);
    if (s == snaps.end()) continue;
    for (int c = 0; c < k; ++c) {
      const auto& b = s->second.balance[static_cast<std::size_t>(c)];
      if (!b) continue;
      const std::string cls = class_name(static_cast<ClassId>(c));
      add_gauge(balance, labelled({{"tenant", name}, {"class", cls}}), to_credits(*b));
      const auto& n = s->second.next_credit[static_cast<std::size_t>(c)];
      add_gauge(next, labelled({{"tenant", name}, {"class", cls}}),
                n ? std::max(0.0, to_seconds(*n - loop.at)) : 0.0);
    }
    add_gauge(oldest, labelled({{"tenant", name}}),
              s->second.oldest_queued_age ? to_seconds(*s->second.oldest_queued_age) : 0.0);
  }

  for (MetricFamily* f : {&served, &queued, &cost, &wait}) families.push_back(std::move(*f));
  if (!fifo) {
    for (MetricFamily* f : {&balance, &next, &oldest}) families.push_back(std::move(*f));
  }
}

// The dispatcher's loop, from one runtime snapshot, and its room (named as the nginx module
// names it).
void add_loop_metrics(Families& families, const RuntimeSnapshot& loop, int k, const Runtime& rt,
                      bool learned) {
  MetricFamily turns = family("creditloop_loop_turns_total",
                              "Turns the dispatcher settled on each class", MetricType::Counter);
  MetricFamily dispatched = family("creditloop_loop_dispatched_total",
                                   "Requests dispatched under each class", MetricType::Counter);
  for (int c = 0; c <= k; ++c) {
    const std::string cls = class_name(static_cast<ClassId>(c));
    const auto& pc = loop.per_class[static_cast<std::size_t>(c)];
    add_counter(turns, labelled({{"class", cls}}), static_cast<double>(pc.turns));
    add_counter(dispatched, labelled({{"class", cls}}), static_cast<double>(pc.dispatched));
  }
  families.push_back(std::move(turns));
  families.push_back(std::move(dispatched));
  add_single(families, "creditloop_loop_parks_total",
             "Times the dispatcher slept for want of work or room", MetricType::Counter,
             static_cast<double>(loop.parks));
  add_single(families, "creditloop_loop_wakeups_total",
             "Times a submission or completion woke the dispatcher", MetricType::Counter,
             static_cast<double>(loop.wakeups));
  add_single(families, "creditloop_loop_cpu_seconds_total", "CPU time of the dispatcher thread",
             MetricType::Counter, to_seconds(loop.dispatcher_cpu));
  add_single(families, "creditloop_loop_in_flight", "Requests dispatched and not yet completed",
             MetricType::Gauge, static_cast<double>(loop.in_flight));
  add_single(families, "creditloop_loop_ticket_growth_failures_total",
             "Times the dispatcher could not grow its in-flight records for want of memory (the "
             "room then counted as full)",
             MetricType::Counter, static_cast<double>(loop.ticket_growth_failures));
  add_single(families, "creditloop_loop_room_slots",
             "The room: requests in flight at most (slots); a learned room's slots now",
             MetricType::Gauge, static_cast<double>(rt.room_slots()));
  if (learned) {
    add_single(families, "creditloop_loop_room_latency_seconds",
               "A learned room's latency without a queue in the backend (\"slots\": \"auto\"); 0 "
               "until measured",
               MetricType::Gauge, to_seconds(rt.room_latency()));
  }
}

// The server's own counters: connections, refusals, withdrawals.
void add_server_metrics(Families& families, const Server& server) {
  const auto counter = MetricType::Counter;
  add_single(families, "creditloop_server_connections", "Open client connections",
             MetricType::Gauge, count(server.connections_open));
  add_single(families, "creditloop_server_bad_requests_total",
             "Requests refused as malformed or too large", counter, count(server.bad_requests));
  add_single(families, "creditloop_server_requests_withdrawn_total",
             "Queued requests withdrawn because their client left", counter,
             count(server.departed));
  add_single(families, "creditloop_server_requests_timed_out_total",
             "Queued requests answered 503 at their tenant's queue timeout", counter,
             count(server.timed_out));
  add_single(families, "creditloop_server_request_bodies_spilled_total",
             "Buffered request bodies longer than limits.body_buffer_bytes, kept in a temporary "
             "file",
             counter, count(server.bodies_spilled));
  add_single(families, "creditloop_server_request_body_spill_failures_total",
             "Request bodies answered 500 because their temporary file could not be written",
             counter, count(server.body_spill_failures));
  add_single(families, "creditloop_server_connections_refused_total",
             "Client connections refused at the connection limits", counter,
             count(server.connections_refused));
  add_single(families, "creditloop_server_accept_pauses_total",
             "Times accepting paused for want of file descriptors", counter,
             count(server.accept_pauses));
  // The 401 counters pair with nothing: relaxed increments where a 401 is answered
  // (Server::admit, admin_response), read alone here.
  MetricFamily unauthorized =
      family("creditloop_server_unauthorized_total",
             "Requests refused for want of a valid key, by listener", MetricType::Counter);
  add_counter(unauthorized, labelled({{"listener", "tenants"}}),
              count(server.unauthorized_tenants));
  add_counter(unauthorized, labelled({{"listener", "admin"}}), count(server.unauthorized_admin));
  families.push_back(std::move(unauthorized));
}

// An operator's two questions of a capture: is it recording everything, and can it write?
void add_capture_metrics(Families& families, const CaptureStats& c) {
  const auto add = [&families](const char* name, const char* help, std::uint64_t v) {
    add_single(families, name, help, MetricType::Counter, static_cast<double>(v));
  };
  add("creditloop_capture_requests_total", "Request lines written to the capture", c.requests);
  add("creditloop_capture_dropped_total",
      "Request records lost because the capture's writer fell behind", c.dropped);
  add("creditloop_capture_errors_total", "Failed opens, writes and renames of capture files",
      c.errors);
  add("creditloop_capture_lost_lines_total", "Capture lines not written because of an error",
      c.lost);
  add("creditloop_capture_files_total", "Capture files started (one per rotation)", c.files);
}

// /debug/participants' "loop": the runtime's counters at one instant.
nlohmann::json loop_json(const RuntimeSnapshot& loop, int k, Runtime& rt, bool learned_room) {
  using nlohmann::json;
  json turns = json::array();
  json dispatched = json::array();
  for (int c = 0; c <= k; ++c) {
    turns.push_back(loop.per_class[static_cast<std::size_t>(c)].turns);
    dispatched.push_back(loop.per_class[static_cast<std::size_t>(c)].dispatched);
  }
  json out = {{"at_s", to_seconds(loop.at)},
              {"participants", loop.participants},
              {"waiting", loop.waiting},
              {"in_flight", loop.in_flight},
              {"dispatched", loop.dispatched},
              {"completed", loop.completed},
              {"parks", loop.parks},
              {"wakeups", loop.wakeups},
              {"dispatcher_cpu_s", to_seconds(loop.dispatcher_cpu)},
              {"turns", turns},
              {"dispatched_by_class", dispatched},
              {"room_slots", rt.room_slots()}};
  if (learned_room) out["room_latency_s"] = to_seconds(rt.room_latency());
  return out;
}

}  // namespace

std::string metrics_text(Server& server) {
  const std::shared_ptr<const Directory> dir = server.directory();
  const bool fifo = server.scheduler().runtime() == nullptr;
  // One round trip for the loop's counters and clock, one for the participants: never one per
  // tenant.
  const RuntimeSnapshot loop = fifo ? RuntimeSnapshot{} : server.scheduler().runtime()->snapshot();
  Families families;
  add_tenant_metrics(families, *dir, snapshots_by_name(server), loop, fifo);
  if (!fifo) {
    add_loop_metrics(families, loop, dir->config->plans.classes, *server.scheduler().runtime(),
                     dir->config->learned_room.has_value());
  }
  add_server_metrics(families, server);
  if (const Fleet* fleet = server.fleet()) add_fleet_metrics(families, *fleet);
  if (const std::optional<CaptureStats> c = server.scheduler().capture_stats()) {
    add_capture_metrics(families, *c);
  }
  return prometheus::TextSerializer().Serialize(families);
}

// /debug/participants: one JSON document, its fields in the order docs/server.md lists them.
std::string participants_json(Server& server) {
  using nlohmann::json;
  const std::shared_ptr<const Directory> dir = server.directory();
  const int k = dir->config->plans.classes;
  const auto snaps = snapshots_by_name(server);
  Runtime* rt = server.scheduler().runtime();
  json out;
  out["scheduler"] = server.scheduler().name();
  out["classes"] = k;
  json names = json::array();
  for (int c = 0; c <= k; ++c) names.push_back(class_name(static_cast<ClassId>(c)));
  out["class_names"] = names;
  Nanos now = 0;
  if (rt != nullptr) {
    const RuntimeSnapshot loop = rt->snapshot();
    now = loop.at;
    out["loop"] = loop_json(loop, k, *rt, dir->config->learned_room.has_value());
  }
  json tenants = json::array();
  for (const auto& [name, entry] : dir->by_name) {
    const Tenant& t = *entry.tenant;
    json j;
    j["name"] = name;
    j["plan"] = entry.plan;
    j["shares"] = entry.shares;
    j["queue_limit"] = entry.queue_limit;
    j["queued"] = std::max<std::int64_t>(0, t.queued.load(std::memory_order_relaxed));
    json served = json::array();
    for (int c = 0; c <= k; ++c) {
      served.push_back(t.served[static_cast<std::size_t>(c)].load(std::memory_order_relaxed));
    }
    j["served"] = served;
    j["cost_charged"] =
        to_credits(static_cast<Balance>(t.cost_charged_nano.load(std::memory_order_relaxed)));
    const prometheus::Histogram& h = *t.wait_seconds;
    j["wait_s"] = {{"count", h.Collect().histogram.sample_count},
                   {"p50", quantile(h, 0.50)},
                   {"p99", quantile(h, 0.99)},
                   {"p999", quantile(h, 0.999)}};
    json bal = json::object();
    json next = json::object();
    j["oldest_queued_age_s"] = nullptr;
    j["last_class"] = nullptr;
    if (const auto s = snaps.find(name); s != snaps.end()) {
      for (int c = 0; c < k; ++c) {
        const std::string cls = class_name(static_cast<ClassId>(c));
        const auto& b = s->second.balance[static_cast<std::size_t>(c)];
        if (b) bal[cls] = to_credits(*b);
        const auto& n = s->second.next_credit[static_cast<std::size_t>(c)];
        if (n) next[cls] = std::max(0.0, to_seconds(*n - now));
      }
      if (s->second.oldest_queued_age) {
        j["oldest_queued_age_s"] = to_seconds(*s->second.oldest_queued_age);
      }
      if (s->second.last_class) j["last_class"] = class_name(*s->second.last_class);
      // What the runtime enforces at this instant; the fleet's own "fraction" is what its thread
      // last applied, published once an epoch, so it may lag a tenant just added.
      j["scale_millionths"] = s->second.scale;
    }
    j["balance"] = bal;
    j["next_credit_in_s"] = next;
    tenants.push_back(std::move(j));
  }
  out["tenants"] = std::move(tenants);
  if (const Fleet* fleet = server.fleet()) describe_fleet(out, *fleet);
  return out.dump();
}

std::optional<std::string_view> bearer_token(const RequestHead& request) {
  const auto it = request.find(http::field::authorization);
  if (it == request.end()) return std::nullopt;
  std::string_view v(it->value().data(), it->value().size());
  constexpr std::string_view scheme = "bearer ";
  if (v.size() <= scheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(v[i])) != scheme[i]) return std::nullopt;
  }
  v.remove_prefix(scheme.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  if (v.empty()) return std::nullopt;
  return v;
}

bool admin_host_allowed(const std::vector<HostName>& names, const Request& request) {
  // Two Host fields are two answers to one question: neither is believed.
  const std::size_t fields = request.count(http::field::host);
  if (fields == 0) return request.version() < 11;
  if (fields > 1) return false;
  const auto value = request[http::field::host];
  const auto parsed = parse_host_name(std::string_view(value.data(), value.size()));
  const HostName* given = std::get_if<HostName>(&parsed);
  if (given == nullptr) return false;
  return std::any_of(names.begin(), names.end(), [given](const HostName& name) {
    return name.host == given->host && (!name.port || name.port == given->port);
  });
}

bool admin_admitted(const Server& server, const Request& request) {
  const std::shared_ptr<const Directory> dir = server.directory();
  return admin_host_allowed(dir->config->admin_hosts, request) &&
         key_admitted(*dir->config, request);
}

bool is_report(const Request& request) {
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  return path == "/metrics" || path == "/debug/participants";
}

Response admin_response(Server& server, const Request& request) {
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const std::shared_ptr<const Directory> dir = server.directory();
  // Checked first, before the key: a page that reached this listener by rebinding its own name
  // to this address sends that name, and learns nothing, not even whether a key is wanted.
  // 421 Misdirected Request (RFC 9110, 15.5.20) says exactly this: the authority asked for is
  // not one this server answers for. It is what nginx answers when a request names a host that
  // its connection's server does not serve, and, unlike 403, it does not read as a missing
  // permission that a key would grant, nor set off the alerts operators keep for those.
  if (!admin_host_allowed(dir->config->admin_hosts, request)) {
    Response res =
        make_response(request, http::status::misdirected_request, "unknown Host for this server\n");
    res.keep_alive(false);  // a client at the wrong authority has no business on this connection
    return res;
  }
  if (!key_admitted(*dir->config, request)) {
    // relaxed: a statistic; pairs with the relaxed load in metrics_text(), nothing else.
    server.unauthorized_admin.fetch_add(1, std::memory_order_relaxed);
    Response res = make_response(request, http::status::unauthorized, "admin key required\n");
    res.set(http::field::www_authenticate, "Bearer");
    return res;
  }
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    Response res = make_response(request, http::status::method_not_allowed, "GET only\n");
    res.set(http::field::allow, "GET, HEAD");
    return res;
  }
  if (path == "/metrics") {
    return make_response(request, http::status::ok, metrics_text(server),
                         "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/debug/participants") {
    return make_response(request, http::status::ok, participants_json(server), "application/json");
  }
  if (path == "/ui") {
    return make_response(request, http::status::ok, LiveView::page(), "text/html; charset=utf-8");
  }
  if (path == "/favicon.ico") {  // what a browser showing /ui asks for: none, rather than a 404
    return make_response(request, http::status::no_content, "");
  }
  if (path == "/health") {
    return make_response(request, http::status::ok, server.stopping() ? "stopping\n" : "ok\n");
  }
  return make_response(request, http::status::not_found, "not found\n");
}

}  // namespace creditloop::server
