#include "tenant_file.hpp"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <system_error>

#include "given_key.hpp"

namespace creditloop::config_file {
namespace {

using nlohmann::json;

Config plans(Fields& top) {
  Config config;
  config.classes = static_cast<int>(top.integer("classes", 2, 1, kMaxClasses));
  const json* p = top.find("plans");
  if (p == nullptr) refuse("plans", "is required");
  if (!p->is_object() || p->empty()) refuse("plans", "must be an object naming at least one plan");
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

// Each with a name, a key and a plan; no name and no key twice.
std::vector<Tenant> tenants(const json* list, const std::string& base_dir, const Config& plans) {
  std::vector<Tenant> out;
  if (list == nullptr) return out;
  if (!list->is_array()) refuse("tenants", "must be an array");
  std::set<std::string, std::less<>> names;
  std::map<KeyDigest, std::string> keys;  // to the tenant it belongs to
  for (std::size_t i = 0; i < list->size(); ++i) {
    Fields f((*list)[i], "tenants[" + std::to_string(i) + "]");
    Tenant t;
    t.name = f.text("name", "", true);
    if (!valid_name(t.name)) refuse(f.path("name"), "a tenant's name is 1 to 64 of [A-Za-z0-9._-]");
    if (!names.insert(t.name).second) refuse(f.path("name"), "\"" + t.name + "\" is named twice");
    GivenKey key = *given_key(f, base_dir, true);
    const auto [other, added] = keys.emplace(key.digest, t.name);
    if (!added) refuse(key.path, "is the key of tenant \"" + other->second + "\" too");
    t.key = key.digest;
    t.key_path = std::move(key.path);
    t.plan = f.text("plan", "", true);
    bool known = false;
    for (const Plan& p : plans.plans) known = known || p.name == t.plan;
    if (!known) refuse(f.path("plan"), "unknown plan \"" + t.plan + "\"");
    t.shares = static_cast<std::uint32_t>(f.integer("shares", 1, 1, 1'000'000));
    t.queue_limit = static_cast<std::uint32_t>(f.integer("queue_limit", 0, 0, 1u << 30));
    t.queue_timeout_ms = f.integer("queue_timeout_ms", 0, 0, 24ull * 3600 * 1000);
    f.finish();
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

bool valid_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

TenantFile read_tenant_file(Fields& top, const std::string& base_dir) {
  TenantFile file;
  file.plans = plans(top);
  file.tenants = tenants(top.find("tenants"), base_dir, file.plans);
  return file;
}

TenantFile parse_tenant_file(std::string_view text, const std::string& base_dir) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw BadField(std::string("not valid JSON: ") + e.what());
  }
  Fields top(root, "");
  return read_tenant_file(top, base_dir);
}

}  // namespace creditloop::config_file

namespace creditloop::config_file {

std::string read_config_text(const std::string& path) {
  const auto refused = [&path](int error) {
    refuse(path, "cannot be read: " + std::generic_category().message(error));
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) refused(EISDIR);
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(path.c_str(), "rb"),
                                                           &std::fclose);
  if (!in) refused(errno);
  std::string text;
  char chunk[65536];
  std::size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, in.get())) > 0) text.append(chunk, n);
  if (std::ferror(in.get())) refused(errno);
  return text;
}

TenantFile load_tenant_file(const std::string& path) {
  return parse_tenant_file(read_config_text(path),
                           std::filesystem::path(path).parent_path().string());
}

}  // namespace creditloop::config_file
