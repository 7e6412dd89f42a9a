#include "config.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

namespace creditloop::server {
namespace {

using nlohmann::json;

// Every refusal names the path of the field being read; parse_config returns it.
using tools::refuse;

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

// An object whose every key must be read: whatever is left is a misspelling.
class Fields {
 public:
  Fields(const json& object, std::string path) : object_(object), path_(std::move(path)) {
    if (!object_.is_object()) refuse(path_.empty() ? "(top level)" : path_, "must be an object");
  }

  const json* find(std::string_view key) {
    read_.emplace(key);
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  [[nodiscard]] std::string path(std::string_view key) const { return join(path_, key); }

  double number(std::string_view key, double fallback, double min, double max) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) refuse(path(key), "must be a number");
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < min || x > max) {
      std::ostringstream why;
      why << "must be between " << min << " and " << max << ", got " << x;
      refuse(path(key), why.str());
    }
    return x;
  }

  std::uint64_t integer(std::string_view key, std::uint64_t fallback, std::uint64_t min,
                        std::uint64_t max) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer() ||
        (v->is_number_integer() && !v->is_number_unsigned() && v->get<std::int64_t>() < 0)) {
      refuse(path(key),
             "must be a whole number from " + std::to_string(min) + " to " + std::to_string(max));
    }
    const std::uint64_t x = v->get<std::uint64_t>();
    if (x < min || x > max) {
      refuse(path(key), "must be from " + std::to_string(min) + " to " + std::to_string(max) +
                            ", got " + std::to_string(x));
    }
    return x;
  }

  std::string text(std::string_view key, std::string fallback, bool required = false) {
    const json* v = find(key);
    if (v == nullptr) {
      if (required) refuse(path(key), "is required");
      return fallback;
    }
    if (!v->is_string()) refuse(path(key), "must be a string");
    return v->get<std::string>();
  }

  void finish() const {
    for (const auto& [key, value] : object_.items()) {
      if (read_.count(key) == 0) refuse(join(path_, key), "unknown field");
    }
  }

 private:
  const json& object_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

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

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// A key as the file gives it: its digest, and the path of the field it came from, for the
// messages that must name it.
struct GivenKey {
  KeyDigest digest{};
  std::string path;
};

// Far above any token, far below what would hurt: a key_file naming /dev/zero or a log file is
// refused rather than read whole.
constexpr std::size_t kMaxKeyFile = 4096;

std::string read_key_file(const std::string& field, const std::string& file) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(file.c_str(), "rb"),
                                                           &std::fclose);
  if (!in) refuse(field, "cannot read \"" + file + "\": " + std::generic_category().message(errno));
  std::string content(kMaxKeyFile + 1, '\0');
  const std::size_t n = std::fread(content.data(), 1, content.size(), in.get());
  if (std::ferror(in.get())) {
    refuse(field, "cannot read \"" + file + "\": " + std::generic_category().message(errno));
  }
  if (n > kMaxKeyFile) {
    refuse(field, "\"" + file + "\" is larger than " + std::to_string(kMaxKeyFile) +
                      " bytes: not a key file");
  }
  content.resize(n);
  // What `echo KEY > file` and editors leave; anything more is refused below as white space.
  if (!content.empty() && content.back() == '\n') content.pop_back();
  return content;
}

std::optional<KeyDigest> hex_digest(std::string_view text) {
  KeyDigest d{};
  if (text.size() != 2 * d.size()) return std::nullopt;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < d.size(); ++i) {
    const int hi = nibble(text[2 * i]);
    const int lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    d[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return d;
}

// Exactly one of `key`, `key_sha256`, `key_file`, `key_env`. No message ever holds a key or a
// digest: they end up in logs, and a key pasted into key_sha256 by mistake is still a key.
std::optional<GivenKey> given_key(Fields& f, const std::string& base_dir, bool required) {
  constexpr std::array<std::string_view, 4> kinds{"key", "key_sha256", "key_file", "key_env"};
  const json* value = nullptr;
  std::string_view kind;
  for (const std::string_view k : kinds) {
    const json* v = f.find(k);
    if (v == nullptr) continue;
    if (value != nullptr) {
      refuse(f.path(k), "give one of key, key_sha256, key_file, key_env, not two (" +
                            std::string(kind) + " is given too)");
    }
    value = v;
    kind = k;
  }
  if (value == nullptr) {
    if (required) refuse(f.path("key"), "is required (or key_sha256, key_file, key_env)");
    return std::nullopt;
  }
  GivenKey given;
  given.path = f.path(kind);
  if (!value->is_string()) refuse(given.path, "must be a string");
  const std::string& text = value->get_ref<const std::string&>();
  if (kind == "key_sha256") {
    const std::optional<KeyDigest> d = hex_digest(text);
    if (!d) {
      refuse(given.path, "must be 64 hex digits (the SHA-256 of the key), got " +
                             std::to_string(text.size()) + " characters");
    }
    given.digest = *d;
    return given;
  }
  std::string key;
  if (kind == "key") {
    key = text;
  } else if (kind == "key_file") {
    if (text.empty()) refuse(given.path, "must name a file");
    const std::filesystem::path file(text);
    key = read_key_file(given.path, file.is_relative() && !base_dir.empty()
                                        ? (std::filesystem::path(base_dir) / file).string()
                                        : text);
  } else {
    if (text.empty()) refuse(given.path, "must name an environment variable");
    // Nothing in the server sets variables, so reading them from the reloading thread is safe.
    const char* v = std::getenv(text.c_str());
    if (v == nullptr) refuse(given.path, text + " is not set");
    key = v;
    if (key.empty()) refuse(given.path, text + " is empty");
  }
  if (key.empty()) refuse(given.path, "the key is empty");
  if (key.size() < 8) refuse(given.path, "the key must be at least 8 characters");
  // A bearer token is one word: a key with white space could never be presented.
  if (key.find_first_of(" \t\r\n\v\f") != std::string::npos) {
    refuse(given.path, "the key must not contain white space");
  }
  const std::optional<KeyDigest> d = key_digest(key);
  if (!d) refuse(given.path, "SHA-256 is unavailable (libcrypto)");
  given.digest = *d;
  return given;
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

Config plans(const json& root, Fields& top) {
  Config config;
  config.classes = static_cast<int>(top.integer("classes", 2, 1, kMaxClasses));
  const json* p = top.find("plans");
  if (p == nullptr) refuse("plans", "is required");
  if (!p->is_object() || p->empty()) refuse("plans", "must be an object naming at least one plan");
  (void)root;
  for (const auto& [name, body] : p->items()) {
    const std::string path = "plans." + name;
    if (!valid_name(name)) refuse(path, "a plan's name is 1 to 64 of [A-Za-z0-9._-]");
    Fields f(body, path);
    Plan plan;
    plan.name = name;
    for (int c = 0; c < config.classes; ++c) {
      const std::string cls = class_name(static_cast<ClassId>(c));
      const json* t = f.find(cls);
      if (t == nullptr) continue;
      Fields ct(*t, f.path(cls));
      ClassTerms terms;
      terms.rate = ct.number("rate", 0, 0, 1e9);
      terms.burst = ct.number("burst", 0, 0, 1e9);
      if (ct.find("rate") == nullptr) refuse(ct.path("rate"), "is required");
      if (ct.find("burst") == nullptr) refuse(ct.path("burst"), "is required");
      ct.finish();
      plan.terms[static_cast<std::size_t>(c)] = terms;
    }
    f.finish();
    config.plans.push_back(std::move(plan));
  }
  if (const auto problem = check(config)) refuse("plans", problem->message);
  return config;
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

// The tenants, each with a name, a key and a plan no other has; `keys` maps each key to its
// tenant, for the admin key's check.
std::vector<TenantConfig> tenants(const json* list, const std::string& base_dir,
                                  const Config& plans, std::map<KeyDigest, std::string>& keys) {
  std::vector<TenantConfig> out;
  if (list == nullptr) return out;
  if (!list->is_array()) refuse("tenants", "must be an array");
  std::set<std::string, std::less<>> names;
  for (std::size_t i = 0; i < list->size(); ++i) {
    Fields f((*list)[i], "tenants[" + std::to_string(i) + "]");
    TenantConfig t;
    t.name = f.text("name", "", true);
    if (!valid_name(t.name)) refuse(f.path("name"), "a tenant's name is 1 to 64 of [A-Za-z0-9._-]");
    if (!names.insert(t.name).second) refuse(f.path("name"), "\"" + t.name + "\" is named twice");
    const GivenKey key = *given_key(f, base_dir, true);
    const auto [other, added] = keys.emplace(key.digest, t.name);
    if (!added) refuse(key.path, "is the key of tenant \"" + other->second + "\" too");
    t.key = key.digest;
    t.plan = f.text("plan", "", true);
    bool known = false;
    for (const Plan& p : plans.plans) known = known || p.name == t.plan;
    if (!known) refuse(f.path("plan"), "unknown plan \"" + t.plan + "\"");
    t.shares = static_cast<std::uint32_t>(f.integer("shares", 1, 1, 1'000'000));
    t.queue_limit = static_cast<std::uint32_t>(f.integer("queue_limit", 0, 0, 1u << 30));
    t.queue_timeout = millis(f, "queue_timeout_ms", t.queue_timeout, 0);
    f.finish();
    out.push_back(std::move(t));
  }
  return out;
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
  if (p.host.find_first_of(" \t\r\n") != std::string::npos) {
    refuse(f.path("host"), "must not contain white space");
  }
  f.finish();
  return p;
}

Limits limits(const json& body) {
  Fields f(body, "limits");
  Limits l;
  l.header_bytes =
      static_cast<std::uint32_t>(f.integer("header_bytes", l.header_bytes, 256, 1 << 20));
  l.body_bytes = f.integer("body_bytes", l.body_bytes, 0, 1ull << 30);
  l.read_timeout = millis(f, "read_timeout_ms", l.read_timeout);
  l.idle_timeout = millis(f, "idle_timeout_ms", l.idle_timeout);
  l.send_timeout = millis(f, "send_timeout_ms", l.send_timeout);
  l.max_connections =
      static_cast<std::uint32_t>(f.integer("max_connections", l.max_connections, 1, 10'000'000));
  l.max_connections_per_address = static_cast<std::uint32_t>(
      f.integer("max_connections_per_address", l.max_connections_per_address, 0, 10'000'000));
  f.finish();
  return l;
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
  s.slots = static_cast<std::uint32_t>(top.integer("slots", s.slots, 1, 1'000'000));
  s.cost_unit_ms = top.number("cost_unit_ms", s.cost_unit_ms, 1e-6, 1e9);
  if (s.cost_unit_ms <= 0) refuse("cost_unit_ms", "must be above 0");
  s.shutdown_deadline = millis(top, "shutdown_deadline_ms", s.shutdown_deadline, 0);
  s.plans = plans(root, top);

  std::map<KeyDigest, std::string> keys;  // to the tenant it belongs to
  s.tenants = tenants(top.find("tenants"), base_dir, s.plans, keys);
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
  if (const json* c = top.find("capture")) {
    Fields f(*c, "capture");
    CaptureConfig capture;
    capture.path = f.text("path", "", true);
    if (capture.path.empty()) refuse(f.path("path"), "must not be empty");
    capture.max_bytes = f.integer("max_bytes", capture.max_bytes, 4096, 1ull << 40);
    capture.files = static_cast<std::uint32_t>(f.integer("files", capture.files, 1, 1000));
    f.finish();
    s.capture = std::move(capture);
  }
  if (const json* a = top.find("access_log")) {
    Fields f(*a, "access_log");
    AccessLogConfig log;
    log.path = f.text("path", "", true);
    if (log.path.empty()) refuse(f.path("path"), "must not be empty");
    f.finish();
    s.access_log = std::move(log);
  }
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

std::optional<KeyDigest> key_digest(std::string_view key) noexcept {
  KeyDigest d{};
  unsigned length = 0;
  if (EVP_Digest(key.data(), key.size(), d.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != d.size()) {
    return std::nullopt;
  }
  return d;
}

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
  } catch (const tools::Refusal& refusal) {
    return refusal;
  }
}

tools::Parsed<ServerConfig> load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return tools::Refusal{path + ": cannot be read"};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return tools::Refusal{path + ": cannot be read"};
  return parse_config(text.str(), std::filesystem::path(path).parent_path().string());
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
  if (next.slots != current.slots) return "slots: changes only at restart";
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
