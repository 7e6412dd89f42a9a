#include "config.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "given_key.hpp"
#include "temp_file.hpp"
#include "tenant_file.hpp"

namespace creditloop::server {
namespace {

using nlohmann::json;

// Every refusal names the path of the field being read; parse_config returns it. The fields
// the server shares with the C API (classes, plans, tenants) are read by tenant_file.cpp, and
// every field through the same Fields, so that both refuse alike.
using config_file::Fields;
using config_file::given_key;
using config_file::GivenKey;
using config_file::refuse;

Endpoint endpoint(Fields& f, std::string_view key, Endpoint fallback) {
  const std::string text = f.text(key, fallback.text());
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    refuse(f.path(key), "must be HOST:PORT, got \"" + text + "\"");
  }
  Endpoint e;
  e.host = text.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') {
    e.host = e.host.substr(1, e.host.size() - 2);
  }
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    refuse(f.path(key), "port must be a number, got \"" + text + "\"");
  }
  if (port > 65535) refuse(f.path(key), "port must be at most 65535");
  e.port = static_cast<std::uint16_t>(port);
  return e;
}

std::chrono::milliseconds millis(Fields& f, std::string_view key, std::chrono::milliseconds d,
                                 std::uint64_t min = 1) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(
      f.integer(key, static_cast<std::uint64_t>(d.count()), min, 24ull * 3600 * 1000)));
}

std::vector<HostName> admin_hosts(const json* v, const std::string& path, const Endpoint& listen) {
  std::vector<HostName> out;
  if (v == nullptr) {
    // What a browser on this machine sends, and the address the listener was told to take.
    for (const std::string& name :
         {std::string("localhost"), std::string("127.0.0.1"), std::string("[::1]"), listen.host}) {
      auto parsed = parse_host_name(name);
      if (auto* h = std::get_if<HostName>(&parsed)) out.push_back(std::move(*h));
    }
    return out;
  }
  if (!v->is_array()) refuse(path, "must be a list of host names");
  if (v->empty()) refuse(path, "must name at least one host");
  for (std::size_t i = 0; i < v->size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!(*v)[i].is_string()) refuse(at, "must be a string");
    auto parsed = parse_host_name((*v)[i].get_ref<const std::string&>());
    if (auto* why = std::get_if<tools::Refusal>(&parsed)) refuse(at, why->message);
    out.push_back(std::get<HostName>(std::move(parsed)));
  }
  return out;
}

FleetConfig fleet(const json& body) {
  Fields f(body, "fleet");
  FleetConfig c;
  if (f.find("redis") == nullptr) refuse("fleet.redis", "is required");
  const std::string redis = f.text("redis", "");
  if (redis.rfind("unix:", 0) == 0) {
    c.unix_path = redis.substr(5);
    if (c.unix_path.empty()) refuse("fleet.redis", "unix: needs a socket path");
  } else {
    c.redis = endpoint(f, "redis", {});
  }
  c.user = f.text("user", "");
  c.password = f.text("password", "");
  if (!c.user.empty() && c.password.empty()) refuse("fleet.user", "needs a password");
  c.prefix = f.text("prefix", c.prefix);
  // A brace in the prefix would move the hash tag that keeps a tenant's key on one cluster slot.
  if (c.prefix.find_first_of("{} \t\r\n") != std::string::npos) {
    refuse("fleet.prefix", "must not contain braces or white space");
  }
  c.server_id = f.text("server_id", "");
  if (f.find("server_id") != nullptr &&
      (c.server_id.empty() || c.server_id.size() > 200 ||
       c.server_id.find_first_of(" \t\r\n") != std::string::npos)) {
    refuse("fleet.server_id", "must be 1 to 200 characters without white space");
  }
  c.epoch = std::chrono::milliseconds(static_cast<std::int64_t>(
      f.integer("epoch_ms", static_cast<std::uint64_t>(c.epoch.count()), 100, 1000)));
  c.grace = std::chrono::milliseconds(static_cast<std::int64_t>(
      f.integer("grace_ms", static_cast<std::uint64_t>(c.grace.count()), 0, 3'600'000)));
  c.expected_servers =
      static_cast<std::uint32_t>(f.integer("expected_servers", c.expected_servers, 1, 100'000));
  f.finish();
  return c;
}

ProxyConfig proxy(const json& body) {
  Fields f(body, "proxy");
  ProxyConfig p;
  if (f.find("backend") == nullptr) refuse("proxy.backend", "is required");
  p.backend = endpoint(f, "backend", {});
  p.cost_header = f.text("cost_header", p.cost_header);
  p.timeout = millis(f, "timeout_ms", p.timeout);
  p.idle_timeout = millis(f, "idle_timeout_ms", p.idle_timeout, 0);
  p.host = f.text("host", "");
  if (const json* b = f.find("request_buffering")) {
    if (!b->is_boolean()) refuse(f.path("request_buffering"), "must be true or false");
    p.request_buffering = b->get<bool>();
  }
  if (p.host.find_first_of(" \t\r\n") != std::string::npos) {
    refuse(f.path("host"), "must not contain white space");
  }
  if (f.find("body_temp_dir") != nullptr) {
    p.body_temp_dir = f.text("body_temp_dir", "");
    if (p.body_temp_dir.empty()) refuse(f.path("body_temp_dir"), "must not be empty");
  }
  f.finish();
  return p;
}

CaptureConfig capture(const json& body) {
  Fields f(body, "capture");
  CaptureConfig capture;
  capture.path = f.text("path", "", true);
  if (capture.path.empty()) refuse(f.path("path"), "must not be empty");
  capture.max_bytes = f.integer("max_bytes", capture.max_bytes, 4096, 1ull << 40);
  capture.files = static_cast<std::uint32_t>(f.integer("files", capture.files, 1, 1000));
  f.finish();
  return capture;
}

AccessLogConfig access_log(const json& body) {
  Fields f(body, "access_log");
  AccessLogConfig log;
  log.path = f.text("path", "", true);
  if (log.path.empty()) refuse(f.path("path"), "must not be empty");
  f.finish();
  return log;
}

Limits limits(const json& body) {
  Fields f(body, "limits");
  Limits l;
  l.header_bytes =
      static_cast<std::uint32_t>(f.integer("header_bytes", l.header_bytes, 256, 1 << 20));
  l.body_bytes = f.integer("body_bytes", l.body_bytes, 0, 1ull << 30);
  // Not given, it shrinks to a smaller cap; given, a bound above the cap is a mistake to show.
  l.body_buffer_bytes =
      f.integer("body_buffer_bytes", std::min(l.body_buffer_bytes, l.body_bytes), 0, 1ull << 30);
  if (l.body_buffer_bytes > l.body_bytes) {
    refuse(f.path("body_buffer_bytes"), "must be at most limits.body_bytes (" +
                                            std::to_string(l.body_bytes) + "), got " +
                                            std::to_string(l.body_buffer_bytes));
  }
  l.read_timeout = millis(f, "read_timeout_ms", l.read_timeout);
  l.body_timeout = millis(f, "body_timeout_ms", l.body_timeout);
  l.idle_timeout = millis(f, "idle_timeout_ms", l.idle_timeout);
  l.send_timeout = millis(f, "send_timeout_ms", l.send_timeout);
  l.lingering_time = millis(f, "lingering_time_ms", l.lingering_time, 0);
  l.lingering_timeout = millis(f, "lingering_timeout_ms", l.lingering_timeout);
  l.max_connections =
      static_cast<std::uint32_t>(f.integer("max_connections", l.max_connections, 1, 10'000'000));
  l.max_connections_per_address = static_cast<std::uint32_t>(
      f.integer("max_connections_per_address", l.max_connections_per_address, 0, 10'000'000));
  f.finish();
  return l;
}

// Where buffered bodies past their memory bound go: the directory given (relative: from the
// configuration's), or the system's; refused unless a file can be made there now, so that a
// mistake shows at start rather than as a 500 on the first large body.
std::string body_temp_dir(const std::string& given, const std::string& base_dir) {
  namespace fs = std::filesystem;
  const char* const field = "proxy.body_temp_dir";
  std::error_code ec;
  fs::path dir = given;
  if (given.empty()) {
    dir = fs::temp_directory_path(ec);
    if (ec) {
      const std::string system = "the system's temporary directory ($TMPDIR, else /tmp)";
      refuse(field, "not given, and " + system + " cannot be used: " + ec.message());
    }
  } else if (dir.is_relative() && !base_dir.empty()) {
    dir = fs::path(base_dir) / dir;
  }
  const std::string quoted = "\"" + dir.string() + "\"";
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status)) refuse(field, quoted + " does not exist");
  if (!fs::is_directory(status)) refuse(field, quoted + " is not a directory");
  auto probe = unlinked_temp_file(dir.string());
  if (const auto* why = std::get_if<std::error_code>(&probe)) {
    refuse(field, "cannot make a file in " + quoted + ": " + why->message());
  }
  return dir.string();
}

// `slots`: a number, "auto" (a room learned between RoomBounds' defaults), or
// {"auto": {"min": N, "max": N}}.
void room(Fields& top, ServerConfig& s) {
  constexpr std::uint64_t kMost = 1'000'000;
  const json* v = top.find("slots");
  if (v == nullptr || v->is_number()) {
    s.slots = static_cast<std::uint32_t>(top.integer("slots", s.slots, 1, kMost));
    return;
  }
  const char* const forms =
      R"(must be a number of slots, "auto", or {"auto": {"min": N, "max": N}})";
  if (v->is_string()) {
    if (v->get_ref<const std::string&>() != "auto") {
      refuse("slots", std::string(forms) + ", got \"" + v->get_ref<const std::string&>() + "\"");
    }
    s.learned_room = RoomBounds{};
    return;
  }
  if (!v->is_object()) refuse("slots", forms);
  Fields f(*v, "slots");
  const json* bounds = f.find("auto");
  if (bounds == nullptr)
    refuse("slots.auto", "is required in an object (the learned room's bounds)");
  if (!bounds->is_object()) refuse("slots.auto", R"(must be an object: {"min": N, "max": N})");
  Fields b(*bounds, "slots.auto");
  RoomBounds r;
  r.least = static_cast<std::uint32_t>(b.integer("min", r.least, 1, kMost));
  r.most = static_cast<std::uint32_t>(b.integer("max", std::max(r.most, r.least), 1, kMost));
  b.finish();
  f.finish();
  if (r.least > r.most) {
    refuse("slots.auto.min", "must be at most slots.auto.max (" + std::to_string(r.most) +
                                 "), got " + std::to_string(r.least));
  }
  s.learned_room = r;
}

ServerConfig parse(const json& root, const std::string& base_dir) {
  Fields top(root, "");
  ServerConfig s;
  const std::string mode = top.text("mode", "work");
  if (mode == "work") {
    s.mode = ServeMode::work;
  } else if (mode == "proxy") {
    s.mode = ServeMode::proxy;
  } else {
    refuse("mode", "must be \"work\" or \"proxy\", got \"" + mode + "\"");
  }
  s.listen = endpoint(top, "listen", s.listen);
  std::optional<GivenKey> admin_key;
  if (const json* a = top.find("admin")) {
    Fields f(*a, "admin");
    s.admin_listen = endpoint(f, "listen", s.admin_listen);
    admin_key = given_key(f, base_dir, false);
    s.admin_hosts = admin_hosts(f.find("hosts"), f.path("hosts"), s.admin_listen);
    f.finish();
  } else {
    s.admin_hosts = admin_hosts(nullptr, "admin.hosts", s.admin_listen);
  }
  if (admin_key) s.admin_key = admin_key->digest;
  s.io_threads = static_cast<unsigned>(top.integer("io_threads", s.io_threads, 1, 256));
  s.workers = static_cast<unsigned>(top.integer("workers", s.workers, 1, 1024));
  room(top, s);
  s.cost_unit_ms = top.number("cost_unit_ms", s.cost_unit_ms, 1e-6, 1e9);
  if (s.cost_unit_ms <= 0) refuse("cost_unit_ms", "must be above 0");
  s.shutdown_deadline = millis(top, "shutdown_deadline_ms", s.shutdown_deadline, 0);
  config_file::TenantFile shared = config_file::read_tenant_file(top, base_dir);
  s.plans = std::move(shared.plans);
  std::map<KeyDigest, std::string> keys;  // to the tenant it belongs to
  for (config_file::Tenant& t : shared.tenants) {
    keys.emplace(t.key, t.name);
    s.tenants.push_back(TenantConfig{std::move(t.name), t.key, std::move(t.plan), t.shares,
                                     t.queue_limit, std::chrono::milliseconds(t.queue_timeout_ms)});
  }
  if (const json* w = top.find("work")) {
    Fields f(*w, "work");
    s.work.max_cpu_ms = f.number("max_cpu_ms", s.work.max_cpu_ms, 0, 3.6e6);
    s.work.max_wait_ms = f.number("max_wait_ms", s.work.max_wait_ms, 0, 3.6e6);
    f.finish();
  }
  if (const json* p = top.find("proxy")) {
    s.proxy = proxy(*p);
  } else if (s.mode == ServeMode::proxy) {
    refuse("proxy", "is required in proxy mode");
  }
  if (const json* l = top.find("limits")) s.limits = limits(*l);
  if (s.mode == ServeMode::proxy && s.proxy.request_buffering) {
    s.proxy.body_temp_dir = body_temp_dir(s.proxy.body_temp_dir, base_dir);
  }
  if (const json* c = top.find("capture")) s.capture = capture(*c);
  if (const json* a = top.find("access_log")) s.access_log = access_log(*a);
  if (const json* f = top.find("fleet")) s.fleet = fleet(*f);
  top.finish();
  // Checked here, after the tenants: the admin key would otherwise open a tenant's account and
  // a tenant's key the admin endpoints.
  if (admin_key) {
    if (const auto it = keys.find(admin_key->digest); it != keys.end()) {
      refuse(admin_key->path,
             "is the key of tenant \"" + it->second + "\" too; the admin key must be another");
    }
  }
  return s;
}

}  // namespace

tools::Parsed<HostName> parse_host_name(std::string_view text) {
  const auto bad = [text] {
    return tools::Refusal{"must be a host name, optionally with :PORT, got \"" + std::string(text) +
                          "\""};
  };
  const auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const auto only = [](std::string_view s, std::string_view allowed_punctuation) {
    for (const char c : s) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      allowed_punctuation.find(c) != std::string_view::npos;
      if (!ok) return false;
    }
    return true;
  };
  const auto ipv6 = [](std::string_view s) {
    return !s.empty() && s.size() <= 45 && s.find(':') != std::string_view::npos &&
           s.find_first_not_of("0123456789abcdefABCDEF:.") == std::string_view::npos;
  };
  HostName h;
  std::string_view port;
  bool has_port = false;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos || !ipv6(text.substr(1, close - 1))) return bad();
    h.host = "[" + lower(text.substr(1, close - 1)) + "]";
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad();
      port = rest.substr(1);
      has_port = true;
    }
  } else if (std::count(text.begin(), text.end(), ':') > 1) {
    if (!ipv6(text)) return bad();  // a bare IPv6 address, as `admin.listen` holds one
    h.host = "[" + lower(text) + "]";
  } else {
    const auto colon = text.find(':');
    const std::string_view name = text.substr(0, colon);
    if (name.empty() || name.size() > 253 || !only(name, ".-_")) return bad();
    h.host = lower(name);
    if (colon != std::string_view::npos) {
      port = text.substr(colon + 1);
      has_port = true;
    }
  }
  if (has_port) {
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string_view::npos) {
      return bad();
    }
    const unsigned long p = std::stoul(std::string(port));
    if (p == 0 || p > 65535) return tools::Refusal{"port must be from 1 to 65535"};
    h.port = static_cast<std::uint16_t>(p);
  }
  return h;
}

tools::Parsed<ServerConfig> parse_config(std::string_view json_text, const std::string& base_dir) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    return tools::Refusal{std::string("not valid JSON: ") + e.what()};
  }
  try {
    return parse(root, base_dir);
  } catch (const config_file::BadField& refusal) {
    return tools::Refusal{refusal.what()};
  }
}

tools::Parsed<ServerConfig> load_config(const std::string& path) {
  std::string text;
  try {
    text = config_file::read_config_text(path);
  } catch (const config_file::BadField& refusal) {
    return tools::Refusal{refusal.what()};
  }
  return parse_config(text, std::filesystem::path(path).parent_path().string());
}

std::optional<std::string> reload_problem(const ServerConfig& current, const ServerConfig& next) {
  const auto differ = [](const std::optional<ClassTerms>& a, const std::optional<ClassTerms>& b) {
    return a.has_value() != b.has_value() ||
           (a.has_value() && (a->rate != b->rate || a->burst != b->burst));
  };
  if (next.mode != current.mode) return "mode: changes only at restart";
  if (next.listen.text() != current.listen.text()) return "listen: changes only at restart";
  if (next.admin_listen.text() != current.admin_listen.text()) {
    return "admin.listen: changes only at restart";
  }
  if (next.io_threads != current.io_threads) return "io_threads: changes only at restart";
  if (next.workers != current.workers) return "workers: changes only at restart";
  if (next.slots != current.slots || next.learned_room != current.learned_room) {
    return "slots: changes only at restart";
  }
  if (next.plans.classes != current.plans.classes) return "classes: changes only at restart";
  if (next.plans.plans.size() != current.plans.plans.size()) {
    return "plans: plans are added or removed only at restart";
  }
  for (std::size_t i = 0; i < next.plans.plans.size(); ++i) {
    const Plan& a = current.plans.plans[i];
    const Plan& b = next.plans.plans[i];
    if (a.name != b.name) return "plans: plans are added or removed only at restart";
    for (std::size_t c = 0; c < kMaxClasses; ++c) {
      if (differ(a.terms[c], b.terms[c])) {
        return "plans." + a.name + "." + class_name(static_cast<ClassId>(c)) +
               ": a plan's terms change only at restart";
      }
    }
  }
  if (next.capture != current.capture) return "capture: changes only at restart";
  if (next.fleet != current.fleet) return "fleet: changes only at restart";
  if (next.access_log != current.access_log) return "access_log: changes only at restart";
  if (next.proxy.backend.text() != current.proxy.backend.text()) {
    return "proxy.backend: changes only at restart";
  }
  return std::nullopt;
}

}  // namespace creditloop::server
