#include "snapshot.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace creditloop::top {
namespace {

using nlohmann::json;

// More would make no sense on a terminal; the server itself allows eight.
constexpr std::size_t kMostClasses = 16;

// Each check refuses by throwing; parse_sample returns the Refusal.
using tools::refuse;

const json* field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

double real(const json& value, const std::string& path) {
  if (!value.is_number()) refuse(path, "not a number");
  const auto v = value.get<double>();
  if (!std::isfinite(v)) refuse(path, "not a finite number");
  return v;
}

std::optional<double> real_at(const json& object, const char* key, const std::string& path) {
  const json* v = field(object, key);
  if (v == nullptr) return std::nullopt;
  return real(*v, path + "." + key);
}

// Counters and gauges that cannot be negative; a negative one reads as zero.
std::uint64_t count(const json& value, const std::string& path) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer()) return 0;
  const double v = real(value, path);
  if (v <= 0) return 0;
  if (v >= 0x1p63) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(v);
}

std::uint64_t count_at(const json& object, const char* key, const std::string& path) {
  const json* v = field(object, key);
  return v == nullptr ? 0 : count(*v, path + "." + key);
}

std::string text_at(const json& object, const char* key, const std::string& path) {
  const json* v = field(object, key);
  if (v == nullptr) return {};
  if (!v->is_string()) refuse(path + "." + key, "not a string");
  return printable(v->get<std::string>());
}

// A per-class array, padded or cut to the classes the answer names.
std::vector<std::uint64_t> counts_at(const json& object, const char* key, const std::string& path,
                                     std::size_t classes) {
  std::vector<std::uint64_t> out(classes, 0);
  const json* v = field(object, key);
  if (v == nullptr) return out;
  if (!v->is_array()) refuse(path + "." + key, "not an array");
  for (std::size_t c = 0; c < classes && c < v->size(); ++c) {
    out[c] = count((*v)[c], path + "." + key + "[" + std::to_string(c) + "]");
  }
  return out;
}

// {"P1": 12.5, ...} into a per-class vector; names the answer does not list are ignored.
std::vector<std::optional<double>> by_class_at(const json& object, const char* key,
                                               const std::string& path,
                                               const std::vector<std::string>& names) {
  std::vector<std::optional<double>> out(names.size());
  const json* v = field(object, key);
  if (v == nullptr) return out;
  if (!v->is_object()) refuse(path + "." + key, "not an object");
  for (std::size_t c = 0; c < names.size(); ++c) {
    if (const json* x = field(*v, names[c].c_str())) {
      out[c] = real(*x, path + "." + key + "." + names[c]);
    }
  }
  return out;
}

TenantSample read_tenant(const json& t, const std::string& path,
                         const std::vector<std::string>& names) {
  if (!t.is_object()) refuse(path, "not an object");
  TenantSample s;
  s.name = text_at(t, "name", path);
  s.plan = text_at(t, "plan", path);
  s.shares = count_at(t, "shares", path);
  s.queued = count_at(t, "queued", path);
  if (const json* f = field(t, "fleet")) {
    if (!f->is_object()) refuse(path + ".fleet", "not an object");
    s.fleet_fraction = real_at(*f, "fraction", path + ".fleet");
  }
  s.served = counts_at(t, "served", path, names.size());
  s.cost_charged = real_at(t, "cost_charged", path).value_or(0);
  s.balance = by_class_at(t, "balance", path, names);
  s.next_credit_in_s = by_class_at(t, "next_credit_in_s", path, names);
  s.oldest_queued_age_s = real_at(t, "oldest_queued_age_s", path);
  if (const json* w = field(t, "wait_s")) {
    if (!w->is_object()) refuse(path + ".wait_s", "not an object");
    s.wait_s.count = count_at(*w, "count", path + ".wait_s");
    s.wait_s.p50 = real_at(*w, "p50", path + ".wait_s").value_or(0);
    s.wait_s.p99 = real_at(*w, "p99", path + ".wait_s").value_or(0);
    s.wait_s.p999 = real_at(*w, "p999", path + ".wait_s").value_or(0);
  }
  return s;
}

Sample read_sample(const json& j) {
  if (!j.is_object()) refuse("answer", "not a JSON object");
  Sample s;
  s.scheduler = text_at(j, "scheduler", "answer");
  if (const json* names = field(j, "class_names")) {
    if (!names->is_array()) refuse("class_names", "not an array");
    if (names->size() > kMostClasses) refuse("class_names", "more than 16 classes");
    for (std::size_t c = 0; c < names->size(); ++c) {
      const json& n = (*names)[c];
      if (!n.is_string()) refuse("class_names[" + std::to_string(c) + "]", "not a string");
      s.class_names.push_back(printable(n.get<std::string>()));
    }
  }
  const std::size_t k = s.class_names.size();
  if (const json* l = field(j, "loop")) {
    if (!l->is_object()) refuse("loop", "not an object");
    LoopSample loop;
    loop.waiting = count_at(*l, "waiting", "loop");
    loop.in_flight = count_at(*l, "in_flight", "loop");
    loop.dispatched = count_at(*l, "dispatched", "loop");
    loop.parks = count_at(*l, "parks", "loop");
    loop.dispatcher_cpu_s = real_at(*l, "dispatcher_cpu_s", "loop").value_or(0);
    loop.turns = counts_at(*l, "turns", "loop", k);
    if (const json* room = field(*l, "room_slots"))
      loop.room_slots = count(*room, "loop.room_slots");
    loop.room_latency_s = real_at(*l, "room_latency_s", "loop");
    s.loop = std::move(loop);
  }
  if (const json* ts = field(j, "tenants")) {
    if (!ts->is_array()) refuse("tenants", "not an array");
    for (std::size_t i = 0; i < ts->size(); ++i) {
      s.tenants.push_back(
          read_tenant((*ts)[i], "tenants[" + std::to_string(i) + "]", s.class_names));
    }
  }
  return s;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

tools::Parsed<Sample> parse_sample(std::string_view json_text) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return tools::Refusal{"the answer is not JSON"};
  try {
    return read_sample(j);
  } catch (const tools::Refusal& refusal) {
    return refusal;
  } catch (const json::exception& e) {
    return tools::Refusal{std::string("unexpected answer: ") + e.what()};
  }
}

}  // namespace creditloop::top
