#include "scenario.hpp"

#include "common/json_field.hpp"
#include "common/json_text.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <initializer_list>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace creditloop::sim {

using tools::json_string;
namespace {

using json = nlohmann::json;
using creditloop::Nanos;

// The checks below read as a straight list of rules: each refuses by throwing (tools::refuse), and
// parse_scenario returns the Refusal.
using tools::got;
using tools::refuse;
using tools::whole;

bool plain_key(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-';
  });
}

std::string child(const std::string& path, std::string_view key) {
  if (path.empty()) return plain_key(key) ? std::string(key) : "[" + json_string(key) + "]";
  return path + path_key(key);
}

std::string child(const std::string& path, std::size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// What the value was, short enough for one line.

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

void expect_object(const json& v, const std::string& path) {
  if (!v.is_object()) refuse(path, std::string("must be an object, got ") + type_name(v));
}

void expect_array(const json& v, const std::string& path) {
  if (!v.is_array()) refuse(path, std::string("must be an array, got ") + type_name(v));
}

// Keys of `obj` must come from `allowed`; `required` ones must be present.
void check_keys(const json& obj, const std::string& path,
                std::initializer_list<const char*> allowed,
                std::initializer_list<const char*> required) {
  for (const auto& item : obj.items()) {
    const bool known =
        std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return item.key() == a; });
    if (!known) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      refuse(child(path, item.key()), "unknown key (expected one of: " + list + ")");
    }
  }
  for (const char* r : required) {
    if (!obj.contains(r)) refuse(child(path, r), "missing required field");
  }
}

double number(const json& v, const std::string& path, const std::string& rule) {
  if (!v.is_number()) refuse(path, rule + got(v));
  return v.get<double>();
}

Nanos time_at(const json& v, const std::string& path) {
  const std::string rule = "must be a time in seconds from 0 to 1000000000";
  const double s = number(v, path, rule);
  if (std::signbit(s) && s != 0) refuse(path, "must not be negative" + got(v));
  if (!(s <= kMaxSeconds)) refuse(path, rule + got(v));
  return *creditloop::from_seconds(s);  // checked above: within [0, kMaxSeconds]
}

std::string text(const json& v, const std::string& path) {
  if (!v.is_string()) refuse(path, std::string("must be a string, got ") + type_name(v));
  std::string s = v.get<std::string>();
  if (s.empty()) refuse(path, "must not be empty");
  return s;
}

int parse_classes(const json& root) {
  return root.contains("classes") ? tools::metered_classes(root["classes"], "classes") : 2;
}

std::vector<creditloop::Plan> parse_plans(const json& root, int k) {
  const std::string path = "plans";
  const json& plans = root["plans"];
  expect_object(plans, path);
  std::vector<creditloop::Plan> out;
  for (const auto& item : plans.items()) {
    const std::string ppath = child(path, item.key());
    if (item.key().empty()) refuse(ppath, "a plan name must not be empty");
    expect_object(item.value(), ppath);
    creditloop::Plan plan;
    plan.name = item.key();
    for (const auto& cls : item.value().items()) {
      const std::string cpath = child(ppath, cls.key());
      std::optional<int> c;
      for (int i = 0; i < k; ++i) {
        if (cls.key() == "P" + std::to_string(i + 1)) c = i;
      }
      if (!c) {
        refuse(cpath, "unknown key (a plan holds metered classes only: P1.." + std::string("P") +
                          std::to_string(k) + ")");
      }
      const json& terms = cls.value();
      expect_object(terms, cpath);
      check_keys(terms, cpath, {"rate", "burst"}, {"rate", "burst"});
      const std::string rpath = child(cpath, "rate");
      const std::string rate_rule =
          "must be a number of credits per second above 0 and at most 1000000";
      const double rate = number(terms["rate"], rpath, rate_rule);
      // The core keeps rates to 9 decimals: a rate that rounds to 0 there refills nothing.
      const auto rate_nano = creditloop::to_nano_credits(rate, creditloop::kMaxRate);
      if (!rate_nano || *rate_nano <= 0) refuse(rpath, rate_rule + got(terms["rate"]));
      const std::string bpath = child(cpath, "burst");
      const std::string burst_rule = "must be a number of credits from 1 to 1000000";
      const double burst = number(terms["burst"], bpath, burst_rule);
      if (!(burst >= 1 && burst <= creditloop::kMaxBurst)) {
        refuse(bpath, burst_rule + got(terms["burst"]));
      }
      plan.terms[static_cast<std::size_t>(*c)] = creditloop::ClassTerms{rate, burst};
    }
    out.push_back(std::move(plan));
  }
  return out;
}

// The default bounds of `"slots": "auto"`, as creditloop-server's.
constexpr creditloop::RoomBounds kAutoBounds{1, 256};

void parse_slots(const json& v, Scenario& s) {
  const std::string path = "server.slots";
  const std::string rule = "must be a whole number from 1 to " + std::to_string(kMaxSlots) +
                           ", \"auto\" or {\"auto\": {\"min\": N, \"max\": M}}";
  if (v.is_string()) {
    if (v.get<std::string>() != "auto") refuse(path, rule + got(v));
    s.room_auto = kAutoBounds;
  } else if (v.is_object()) {
    check_keys(v, path, {"auto"}, {"auto"});
    const std::string apath = path + ".auto";
    const json& bounds = v["auto"];
    expect_object(bounds, apath);
    check_keys(bounds, apath, {"min", "max"}, {});
    creditloop::RoomBounds b = kAutoBounds;
    if (bounds.contains("min")) {
      b.least = static_cast<std::uint32_t>(whole(bounds["min"], apath + ".min", 1, kMaxSlots));
    }
    if (bounds.contains("max")) {
      b.most = static_cast<std::uint32_t>(whole(bounds["max"], apath + ".max", 1, kMaxSlots));
    }
    if (b.most < b.least) {
      refuse(apath + (bounds.contains("max") ? ".max" : ".min"),
             "the most slots (" + std::to_string(b.most) + ") is below the least (" +
                 std::to_string(b.least) + ")");
    }
    s.room_auto = b;
  } else if (!v.is_number()) {
    refuse(path, rule + got(v));
  }
  s.slots = s.room_auto ? s.room_auto->most : whole(v, path, 1, kMaxSlots);
}

std::vector<BackendStep> parse_backend(const json& v) {
  const std::string path = "server.backend";
  expect_object(v, path);
  check_keys(v, path, {"capacity"}, {"capacity"});
  const std::string cpath = path + ".capacity";
  const json& list = v["capacity"];
  expect_array(list, cpath);
  if (list.empty()) refuse(cpath, "must list at least one step, the first at 0");
  std::vector<BackendStep> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string spath = child(cpath, i);
    const json& e = list[i];
    expect_object(e, spath);
    check_keys(e, spath, {"at", "capacity", "slowdown"}, {"at", "capacity"});
    BackendStep step;
    step.at = time_at(e["at"], child(spath, "at"));
    if (i == 0 && step.at != 0)
      refuse(child(spath, "at"), "the first step must be at 0" + got(e["at"]));
    if (i > 0 && step.at <= out.back().at) {
      refuse(child(spath, "at"), "must be later than the step before" + got(e["at"]));
    }
    step.capacity = whole(e["capacity"], child(spath, "capacity"), 1, kMaxSlots);
    if (e.contains("slowdown")) {
      const std::string rule = "must be a number from 0.001 to 1000";
      const double x = number(e["slowdown"], child(spath, "slowdown"), rule);
      if (!(x >= 0.001 && x <= 1000)) refuse(child(spath, "slowdown"), rule + got(e["slowdown"]));
      step.slowdown_milli = std::llround(x * 1000);
    }
    out.push_back(step);
  }
  return out;
}

void parse_server(const json& root, Scenario& s) {
  const json& server = root["server"];
  expect_object(server, "server");
  check_keys(server, "server", {"slots", "backend"}, {"slots"});
  parse_slots(server["slots"], s);
  if (server.contains("backend")) s.backend = parse_backend(server["backend"]);
}

std::vector<ParticipantSpec> parse_participants(const json& root,
                                                const std::vector<creditloop::Plan>& plans) {
  const json& list = root["participants"];
  expect_array(list, "participants");
  if (list.size() > creditloop::kMaxParticipants) {
    refuse("participants", "at most " + std::to_string(creditloop::kMaxParticipants) +
                               " participants, got " + std::to_string(list.size()));
  }
  std::vector<ParticipantSpec> out;
  std::map<std::string, std::size_t, std::less<>> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = child("participants", i);
    const json& p = list[i];
    expect_object(p, path);
    check_keys(p, path, {"name", "plan", "shares"}, {"name", "plan"});
    ParticipantSpec spec;
    spec.name = text(p["name"], child(path, "name"));
    if (auto [it, fresh] = seen.emplace(spec.name, i); !fresh) {
      refuse(child(path, "name"), "duplicate participant name " + json_string(spec.name) +
                                      " (first at participants[" + std::to_string(it->second) +
                                      "])");
    }
    spec.plan = text(p["plan"], child(path, "plan"));
    if (std::none_of(plans.begin(), plans.end(),
                     [&](const creditloop::Plan& pl) { return pl.name == spec.plan; })) {
      refuse(child(path, "plan"), "unknown plan " + json_string(spec.plan));
    }
    if (p.contains("shares")) {
      spec.shares = static_cast<std::uint32_t>(
          whole(p["shares"], child(path, "shares"), 1, creditloop::kMaxShares));
    }
    out.push_back(std::move(spec));
  }
  return out;
}

// One entry of "arrivals": its own fields, before what it adds to the run is bounded.
ArrivalSpec parse_arrival(const json& a, const std::string& path,
                          const std::map<std::string_view, std::size_t, std::less<>>& index) {
  expect_object(a, path);
  check_keys(a, path, {"at", "participant", "count", "every", "service", "cost", "withdraw_after"},
             {"at", "participant"});
  ArrivalSpec spec;
  spec.at = time_at(a["at"], child(path, "at"));
  const std::string name = text(a["participant"], child(path, "participant"));
  const auto it = index.find(name);
  if (it == index.end())
    refuse(child(path, "participant"), "unknown participant " + json_string(name));
  spec.participant = it->second;
  if (a.contains("count")) spec.count = whole(a["count"], child(path, "count"), 0, kMaxCount);
  if (a.contains("every")) spec.every = time_at(a["every"], child(path, "every"));
  if (a.contains("service")) spec.service = time_at(a["service"], child(path, "service"));
  if (a.contains("withdraw_after")) {
    spec.withdraw_after = time_at(a["withdraw_after"], child(path, "withdraw_after"));
  }
  if (a.contains("cost")) {
    const std::string cpath = child(path, "cost");
    const std::string rule = "must be a number of credits from 0 to 1000000";
    const double cost = number(a["cost"], cpath, rule);
    const auto nano = creditloop::to_nano_credits(cost, creditloop::kMaxCost);
    if (!nano) refuse(cpath, rule + got(a["cost"]));
    spec.cost_nano = *nano;
  }
  return spec;
}

std::vector<ArrivalSpec> parse_arrivals(const json& root,
                                        const std::vector<ParticipantSpec>& participants,
                                        std::optional<Nanos> until,
                                        const std::vector<BackendStep>& backend,
                                        std::uint64_t& requests) {
  const json& list = root["arrivals"];
  expect_array(list, "arrivals");
  std::map<std::string_view, std::size_t, std::less<>> index;
  for (std::size_t i = 0; i < participants.size(); ++i) index.emplace(participants[i].name, i);

  std::vector<ArrivalSpec> out;
  requests = 0;
  // Bound on the latest instant of the run: the server never idles while work is queued, so
  // everything is complete by the last arrival plus the sum of all service times. A backend
  // serves at least one request at once whenever one is in flight, so with one the bound is
  // its last step plus that sum at its largest slowdown.
  I128 last_arrival = 0;
  I128 last_step = 0;
  std::int64_t slowest = 1000;
  for (const BackendStep& step : backend) {
    last_step = step.at;
    slowest = std::max(slowest, step.slowdown_milli);
  }
  I128 total_service = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = child("arrivals", i);
    ArrivalSpec spec = parse_arrival(list[i], path, index);
    spec.in_run = spec.count;
    if (until) {
      if (spec.at > *until) {
        spec.in_run = 0;
      } else if (spec.every > 0) {
        spec.in_run = std::min<std::uint64_t>(
            spec.count, static_cast<std::uint64_t>((*until - spec.at) / spec.every) + 1);
      }
    }
    requests += spec.in_run;
    if (requests > kMaxRequests) {
      refuse(child(path, "count"), "more than " + std::to_string(kMaxRequests) +
                                       " requests would arrive in the run (the simulator's limit)");
    }
    const I128 own_last = spec.in_run > 0 ? static_cast<I128>(spec.at) +
                                                static_cast<I128>(spec.in_run - 1) * spec.every
                                          : 0;
    last_arrival = std::max(last_arrival, own_last);
    total_service += static_cast<I128>(spec.in_run) * spec.service;
    if (spec.withdraw_after &&
        own_last + *spec.withdraw_after > std::numeric_limits<Nanos>::max()) {
      refuse(
          child(path, "withdraw_after"),
          "a withdrawal could fall beyond the virtual clock (2^63 nanoseconds, about 292 years)");
    }
    if (last_arrival + last_step + total_service * slowest / 1000 >
        std::numeric_limits<Nanos>::max()) {
      refuse(child(path, own_last > std::numeric_limits<Nanos>::max() / 2 ? "every" : "service"),
             "the run could outlast the virtual clock (2^63 nanoseconds, about 292 years)");
    }
    out.push_back(spec);
  }
  return out;
}

// One pass over the text before the real parse: reports malformed JSON with its position, and
// a key repeated in one object, which a DOM parse would silently resolve to its last value.
class KeyCheck {
 public:
  using string_t = json::string_t;

  bool null() { return element(); }
  bool boolean(bool) { return element(); }
  bool number_integer(json::number_integer_t) { return element(); }
  bool number_unsigned(json::number_unsigned_t) { return element(); }
  bool number_float(json::number_float_t, const string_t&) { return element(); }
  bool string(string_t&) { return element(); }
  bool binary(json::binary_t&) { return element(); }
  bool start_object(std::size_t) {
    element();
    frames_.push_back(Frame{false, 0, 0, {}, {}});
    return true;
  }
  bool key(string_t& k) {
    Frame& top = frames_.back();
    if (!top.keys.insert(k).second && !error_) {
      std::string path;
      for (std::size_t i = 0; i + 1 < frames_.size(); ++i) append(path, frames_[i]);
      error_ = child(path, k) + ": key given twice";
    }
    top.key = k;
    return true;
  }
  bool end_object() {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    element();
    frames_.push_back(Frame{true, 0, 0, {}, {}});
    return true;
  }
  bool end_array() {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> from "parse".
    if (const auto at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    // A number too large for a double (1e999) is well-formed text, so the field is known; for a
    // syntax error the position in the text says more than the path the parser had reached.
    constexpr int kNumberOverflow = 406;
    if (ex.id == kNumberOverflow && !frames_.empty()) {
      std::string path;
      for (std::size_t i = 0; i + 1 < frames_.size(); ++i) append(path, frames_[i]);
      const Frame& top = frames_.back();
      path = top.array ? child(path, top.next) : child(path, top.key);
      error_ = path + ": " + what;
    } else {
      error_ = "scenario: malformed JSON: " + what;
    }
    return false;
  }

  [[nodiscard]] const std::optional<std::string>& error() const { return error_; }

 private:
  struct Frame {
    bool array;
    std::size_t next;
    std::size_t cur;
    std::string key;
    std::set<std::string> keys;
  };
  bool element() {
    if (!frames_.empty() && frames_.back().array) frames_.back().cur = frames_.back().next++;
    return true;
  }
  static void append(std::string& path, const Frame& f) {
    path = f.array ? child(path, f.cur) : child(path, f.key);
  }

  std::vector<Frame> frames_;
  std::optional<std::string> error_;
};

}  // namespace

std::string path_key(std::string_view key) {
  return plain_key(key) ? "." + std::string(key) : "[" + json_string(key) + "]";
}

Parsed<Scenario> parse_scenario(std::string_view text_in) {
  return tools::refusing<Scenario>("scenario", [&]() -> Parsed<Scenario> {
    KeyCheck check;
    json::sax_parse(text_in.begin(), text_in.end(), &check, json::input_format_t::json, true);
    if (check.error()) return Refusal{*check.error()};
    const json root = json::parse(text_in.begin(), text_in.end());

    expect_object(root, "scenario");
    check_keys(root, "", {"classes", "plans", "server", "participants", "arrivals", "until"},
               {"plans", "server", "participants", "arrivals"});

    Scenario s;
    s.config.classes = parse_classes(root);
    s.config.plans = parse_plans(root, s.config.classes);
    parse_server(root, s);
    s.participants = parse_participants(root, s.config.plans);
    if (root.contains("until")) s.until = time_at(root["until"], "until");
    s.arrivals = parse_arrivals(root, s.participants, s.until, s.backend, s.requests);
    s.withdraws = std::any_of(s.arrivals.begin(), s.arrivals.end(),
                              [](const ArrivalSpec& a) { return a.withdraw_after.has_value(); });

    // The core validates the configuration again; anything it still refuses is reported here,
    // before the simulator builds it, so that a refusal never surfaces as an exception later.
    if (auto problem = creditloop::check(s.config)) {
      return Refusal{"plans: " + problem->message};
    }
    return s;
  });
}

}  // namespace creditloop::sim
