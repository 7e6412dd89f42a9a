#include "admin.hpp"

#include <openssl/crypto.h>

#include <algorithm>
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

double seconds(Nanos ns) { return static_cast<double>(ns) / 1e9; }
double credits(Balance nano) { return static_cast<double>(nano) / 1e9; }

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
bool admitted(const Server& server, const Request& request) {
  const std::string& key = server.directory()->config->admin_key;
  if (key.empty()) return true;
  const auto it = request.find(http::field::authorization);
  if (it == request.end()) return false;
  const std::string expected = "Bearer " + key;
  const std::string_view given(it->value().data(), it->value().size());
  return given.size() == expected.size() &&
         CRYPTO_memcmp(given.data(), expected.data(), expected.size()) == 0;
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

std::string metrics_text(Server& server) {
  const std::shared_ptr<const Directory> dir = server.directory();
  const int k = dir->config->plans.classes;
  const auto snaps = snapshots_by_name(server);
  const bool fifo = server.scheduler().runtime() == nullptr;
  // One round trip for the loop's counters and clock, one for the participants: never one per
  // tenant.
  const RuntimeSnapshot loop = fifo ? RuntimeSnapshot{} : server.scheduler().runtime()->snapshot();

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

  for (const auto& [name, entry] : dir->by_name) {
    const Tenant& t = *entry.tenant;
    for (int c = fifo ? k : 0; c <= k; ++c) {
      add_counter(served,
                  labelled({{"tenant", name}, {"class", class_name(static_cast<ClassId>(c))}}),
                  static_cast<double>(
                      t.served[static_cast<std::size_t>(c)].load(std::memory_order_relaxed)));
    }
    add_gauge(
        queued, labelled({{"tenant", name}}),
        static_cast<double>(std::max<std::int64_t>(0, t.queued.load(std::memory_order_relaxed))));
    add_counter(cost, labelled({{"tenant", name}}),
                credits(static_cast<Balance>(t.cost_charged_nano.load(std::memory_order_relaxed))));
    ClientMetric h = t.wait_seconds->Collect();
    h.label.push_back({"tenant", name});
    wait.metric.push_back(std::move(h));
    const auto s = snaps.find(name);
    if (s == snaps.end()) continue;
    for (int c = 0; c < k; ++c) {
      const auto& b = s->second.balance[static_cast<std::size_t>(c)];
      if (!b) continue;
      const std::string cls = class_name(static_cast<ClassId>(c));
      add_gauge(balance, labelled({{"tenant", name}, {"class", cls}}), credits(*b));
      const auto& n = s->second.next_credit[static_cast<std::size_t>(c)];
      add_gauge(next, labelled({{"tenant", name}, {"class", cls}}),
                n ? std::max(0.0, seconds(*n - loop.at)) : 0.0);
    }
    add_gauge(oldest, labelled({{"tenant", name}}),
              s->second.oldest_queued_age ? seconds(*s->second.oldest_queued_age) : 0.0);
  }

  std::vector<MetricFamily> families{std::move(served), std::move(queued), std::move(cost),
                                     std::move(wait)};
  if (!fifo) {
    families.push_back(std::move(balance));
    families.push_back(std::move(next));
    families.push_back(std::move(oldest));
    MetricFamily passes = family("creditloop_loop_passes_total",
                                 "Turns the dispatcher settled on each class", MetricType::Counter);
    MetricFamily dispatched = family("creditloop_loop_dispatched_total",
                                     "Requests dispatched under each class", MetricType::Counter);
    for (int c = 0; c <= k; ++c) {
      const std::string cls = class_name(static_cast<ClassId>(c));
      const auto& pc = loop.per_class[static_cast<std::size_t>(c)];
      add_counter(passes, labelled({{"class", cls}}), static_cast<double>(pc.passes));
      add_counter(dispatched, labelled({{"class", cls}}), static_cast<double>(pc.dispatched));
    }
    families.push_back(std::move(passes));
    families.push_back(std::move(dispatched));
    MetricFamily parks =
        family("creditloop_loop_parks_total", "Times the dispatcher slept for want of work or room",
               MetricType::Counter);
    add_counter(parks, {}, static_cast<double>(loop.parks));
    families.push_back(std::move(parks));
    MetricFamily wakeups =
        family("creditloop_loop_wakeups_total",
               "Times a submission or completion woke the dispatcher", MetricType::Counter);
    add_counter(wakeups, {}, static_cast<double>(loop.wakeups));
    families.push_back(std::move(wakeups));
    MetricFamily cpu = family("creditloop_loop_cpu_seconds_total",
                              "CPU time of the dispatcher thread", MetricType::Counter);
    add_counter(cpu, {}, seconds(loop.dispatcher_cpu));
    families.push_back(std::move(cpu));
    MetricFamily in_flight = family("creditloop_loop_in_flight",
                                    "Requests dispatched and not yet completed", MetricType::Gauge);
    add_gauge(in_flight, {}, static_cast<double>(loop.in_flight));
    families.push_back(std::move(in_flight));
  }
  MetricFamily conns =
      family("creditloop_server_connections", "Open client connections", MetricType::Gauge);
  add_gauge(conns, {},
            static_cast<double>(server.connections_open.load(std::memory_order_relaxed)));
  families.push_back(std::move(conns));
  MetricFamily bad = family("creditloop_server_bad_requests_total",
                            "Requests refused as malformed or too large", MetricType::Counter);
  add_counter(bad, {}, static_cast<double>(server.bad_requests.load(std::memory_order_relaxed)));
  families.push_back(std::move(bad));
  if (const Fleet* fleet = server.fleet()) add_fleet_metrics(families, *fleet);
  if (const std::optional<CaptureStats> c = server.scheduler().capture_stats()) {
    // An operator's two questions: is it recording everything, and can it write?
    const auto counter = [&families](const char* name, const char* help, std::uint64_t v) {
      MetricFamily f = family(name, help, MetricType::Counter);
      add_counter(f, {}, static_cast<double>(v));
      families.push_back(std::move(f));
    };
    counter("creditloop_capture_requests_total", "Request lines written to the capture",
            c->requests);
    counter("creditloop_capture_dropped_total",
            "Request records lost because the capture's writer fell behind", c->dropped);
    counter("creditloop_capture_errors_total", "Failed opens, writes and renames of capture files",
            c->errors);
    counter("creditloop_capture_lost_lines_total", "Capture lines not written because of an error",
            c->lost);
    counter("creditloop_capture_files_total", "Capture files started (one per rotation)", c->files);
  }
  return prometheus::TextSerializer().Serialize(families);
}

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
    json passes = json::array();
    json dispatched = json::array();
    for (int c = 0; c <= k; ++c) {
      passes.push_back(loop.per_class[static_cast<std::size_t>(c)].passes);
      dispatched.push_back(loop.per_class[static_cast<std::size_t>(c)].dispatched);
    }
    out["loop"] = {{"at_s", seconds(loop.at)},
                   {"participants", loop.participants},
                   {"waiting", loop.waiting},
                   {"in_flight", loop.in_flight},
                   {"dispatched", loop.dispatched},
                   {"completed", loop.completed},
                   {"parks", loop.parks},
                   {"wakeups", loop.wakeups},
                   {"dispatcher_cpu_s", seconds(loop.dispatcher_cpu)},
                   {"passes", passes},
                   {"dispatched_by_class", dispatched}};
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
        credits(static_cast<Balance>(t.cost_charged_nano.load(std::memory_order_relaxed)));
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
        if (b) bal[cls] = credits(*b);
        const auto& n = s->second.next_credit[static_cast<std::size_t>(c)];
        if (n) next[cls] = std::max(0.0, seconds(*n - now));
      }
      if (s->second.oldest_queued_age) {
        j["oldest_queued_age_s"] = seconds(*s->second.oldest_queued_age);
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

bool admin_admitted(const Server& server, const Request& request) {
  return admitted(server, request);
}

Response admin_response(Server& server, const Request& request) {
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (!admitted(server, request)) {
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
