#include "capture_file.hpp"

#include "common/json_field.hpp"
#include "common/json_text.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "creditloop/plan.hpp"

namespace creditloop::sim {

using tools::json_string;
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
using creditloop::Nanos;

// Each check refuses by throwing (tools::refuse); the API's entry points return the Refusal.
using tools::got;
using tools::metered_classes;
using tools::refuse;
using tools::whole;

// One line of a capture: the DOM nlohmann builds, plus the text of each number among the
// line's top-level values, from which times are read exactly.
class Line {
 public:
  using string_t = json::string_t;

  explicit Line(json& root) : dom_(root, false) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) {
    keep_raw(std::to_string(v));
    return dom_.number_integer(v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    keep_raw(std::to_string(v));
    return dom_.number_unsigned(v);
  }
  bool number_float(json::number_float_t v, const string_t& s) {
    keep_raw(s);
    return dom_.number_float(v, s);
  }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    ++depth_;
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    if (depth_ == 1) key_ = k;
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    ++depth_;
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    if (const auto at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    error_ = what;
    return false;
  }

  [[nodiscard]] const std::string& error() const { return error_; }
  [[nodiscard]] const std::map<std::string, std::string, std::less<>>& raw() const { return raw_; }

 private:
  void keep_raw(const std::string& s) {
    if (depth_ == 1) raw_[key_] = s;
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
  std::string key_;
  std::string error_;
  std::map<std::string, std::string, std::less<>> raw_;
};

struct ParsedLine {
  json value;
  std::map<std::string, std::string, std::less<>> raw;
};

ParsedLine parse_line(std::string_view text, const std::string& where) {
  ParsedLine out;
  Line handler(out.value);
  const bool ok =
      json::sax_parse(text.begin(), text.end(), &handler, json::input_format_t::json, true);
  if (!ok) refuse(where, "malformed JSON: " + handler.error());
  if (!out.value.is_object()) refuse(where, "must be a JSON object");
  out.raw = handler.raw();
  return out;
}

const json& field(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) refuse(where + ": " + key, "missing required field");
  return *it;
}

std::string text(const json& v, const std::string& where) {
  if (!v.is_string() || v.get<std::string>().empty())
    refuse(where, "must be a non-empty string" + got(v));
  return v.get<std::string>();
}

// A time: seconds since the origin, read from the number's own text when it is a plain decimal.
Nanos time_of(const ParsedLine& line, const char* key, const std::string& where) {
  const std::string path = where + ": " + key;
  const json& v = field(line.value, key, where);
  const std::string rule = "must be a time in seconds from 0 to 1000000000";
  if (!v.is_number()) refuse(path, rule + got(v));
  const double d = v.get<double>();
  if (!(d >= 0 && d <= kMaxSeconds)) refuse(path, rule + got(v));
  const auto raw = line.raw.find(key);
  if (raw != line.raw.end()) {
    if (const auto exact = decimal_seconds(raw->second)) return *exact;
  }
  return *creditloop::from_seconds(d);  // checked above: within [0, kMaxSeconds]
}

struct Header {
  std::string name;
  std::uint64_t file = 0;
  std::uint64_t origin = 0;
  int classes = 2;
  json plans;
  std::optional<std::uint64_t> slots;
  std::vector<ParticipantSpec> participants;
  std::size_t index = 0;  // in the list given
};

Header parse_header(const std::string& name, std::string_view first_line) {
  const std::string where = name + ":1";
  const ParsedLine line = parse_line(first_line, where);
  const json& h = line.value;
  const auto capture = h.find("capture");
  if (capture == h.end() || *capture != "creditloop") {
    refuse(where,
           "not a creditloop capture (its first line must be a header with \"capture\": "
           "\"creditloop\")");
  }
  const json& version = field(h, "version", where);
  if (!version.is_number_unsigned() || version.get<std::uint64_t>() != 1) {
    refuse(where + ": version",
           "unknown capture version " + version.dump() + " (this simulator reads version 1)");
  }
  Header out;
  out.name = name;
  out.file = whole(field(h, "file", where), where + ": file", 0,
                   std::numeric_limits<std::uint64_t>::max());
  out.origin = whole(field(h, "origin_unix_ns", where), where + ": origin_unix_ns", 0,
                     std::numeric_limits<std::uint64_t>::max());
  out.classes = metered_classes(field(h, "classes", where), where + ": classes");
  out.plans = field(h, "plans", where);
  if (!out.plans.is_object()) refuse(where + ": plans", "must be an object" + got(out.plans));
  const json& server = field(h, "server", where);
  if (!server.is_object()) refuse(where + ": server", "must be an object" + got(server));
  const json& slots = field(server, "slots", where + ": server");
  if (!slots.is_null()) out.slots = whole(slots, where + ": server.slots", 1, kMaxSlots);
  const json& list = field(h, "participants", where);
  if (!list.is_array()) refuse(where + ": participants", "must be an array" + got(list));
  std::set<std::string> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = where + ": participants[" + std::to_string(i) + "]";
    const json& p = list[i];
    if (!p.is_object()) refuse(path, "must be an object" + got(p));
    ParticipantSpec spec;
    spec.name = text(field(p, "name", path), path + ".name");
    if (!seen.insert(spec.name).second) {
      refuse(path + ".name", "duplicate participant name " + json_string(spec.name));
    }
    spec.plan = text(field(p, "plan", path), path + ".plan");
    if (p.contains("shares")) {
      spec.shares = static_cast<std::uint32_t>(
          whole(p["shares"], path + ".shares", 1, creditloop::kMaxShares));
    }
    if (p.contains("scale") && whole(p["scale"], path + ".scale", 0, 1'000'000) != 1'000'000) {
      refuse(path + ".scale",
             "a participant holding part of its plan cannot be replayed (the simulator gives "
             "each participant its whole plan)");
    }
    out.participants.push_back(std::move(spec));
  }
  return out;
}

// Who is registered as the capture goes, in order of addition: what each file's header must say.
struct Members {
  std::map<std::string, std::uint32_t, std::less<>> index;  // every name ever registered
  std::vector<std::uint32_t> active;                        // registered now, in order
  std::optional<std::string> removed;  // a participant removed earlier: adds are refused since

  void add(Capture& out, ParticipantSpec spec) {
    const auto i = static_cast<std::uint32_t>(out.participants.size());
    index.emplace(spec.name, i);
    active.push_back(i);
    out.participants.push_back(std::move(spec));
  }
  [[nodiscard]] bool is_active(std::uint32_t i) const {
    return std::find(active.begin(), active.end(), i) != active.end();
  }
  [[nodiscard]] bool same(const Capture& out, const std::vector<ParticipantSpec>& list) const {
    return std::equal(active.begin(), active.end(), list.begin(), list.end(),
                      [&](std::uint32_t i, const ParticipantSpec& y) {
                        const ParticipantSpec& x = out.participants[i];
                        return x.name == y.name && x.plan == y.plan && x.shares == y.shares;
                      });
  }
};

// A "request" line: one completed request, as recorded.
CapturedRequest read_request(const ParsedLine& parsed, const std::string& where,
                             const Header& header, const Members& members) {
  const json& v = parsed.value;
  CapturedRequest r;
  const std::string name = text(field(v, "participant", where), where + ": participant");
  const auto it = members.index.find(name);
  if (it == members.index.end()) {
    refuse(where + ": participant",
           "unknown participant " + json_string(name) + " (not in the header's participants)");
  }
  r.participant = it->second;
  r.arrive = time_of(parsed, "arrive", where);
  r.dispatch = time_of(parsed, "dispatch", where);
  r.complete = time_of(parsed, "complete", where);
  if (r.dispatch < r.arrive) refuse(where + ": dispatch", "is before arrive");
  if (r.complete < r.dispatch) refuse(where + ": complete", "is before dispatch");
  const json& cls = field(v, "class", where);
  const auto c = cls.is_string()
                     ? creditloop::parse_class_name(cls.get<std::string>(), header.classes)
                     : std::nullopt;
  if (!c) {
    refuse(where + ": class",
           "must be one of P1..P" + std::to_string(header.classes + 1) + got(cls));
  }
  r.cls = *c;
  const json& cost = field(v, "cost", where);
  const auto nano = cost.is_number()
                        ? creditloop::to_nano_credits(cost.get<double>(), creditloop::kMaxCost)
                        : std::nullopt;
  if (!nano) refuse(where + ": cost", "must be a number of credits from 0 to 1000000" + got(cost));
  r.cost_nano = *nano;
  return r;
}

// A "plan" line: an add, or the same plan again; a re-plan cannot be replayed.
void read_plan_event(const ParsedLine& parsed, const std::string& where, const Header& header,
                     Capture& out, Members& members) {
  const json& v = parsed.value;
  const std::string name = text(field(v, "participant", where), where + ": participant");
  const std::string plan = text(field(v, "plan", where), where + ": plan");
  std::uint32_t shares = 1;
  if (v.contains("shares")) {
    shares = static_cast<std::uint32_t>(
        whole(v["shares"], where + ": shares", 1, creditloop::kMaxShares));
  }
  // Every participant holds its whole plan here (headers refuse less): a line giving it
  // part of one adds or changes something the simulator cannot give.
  if (v.contains("scale") && whole(v["scale"], where + ": scale", 0, 1'000'000) != 1'000'000) {
    refuse(where + ": scale",
           "a participant holding part of its plan cannot be replayed (the simulator gives "
           "each participant its whole plan)");
  }
  if (!header.plans.contains(plan)) {
    refuse(where + ": plan", "unknown plan " + json_string(plan) + " (not in the header's plans)");
  }
  const auto it = members.index.find(name);
  if (it == members.index.end()) {
    // An add. The simulator registers every participant at 0, in order of addition: the
    // same ring, and the same buckets from the add on (they start full either way), since
    // no request of it comes before. Not after a removal, whose ring place the core may
    // give to the newcomer.
    if (members.removed) {
      refuse(where + ": ev", "\"plan\": adding participant " + json_string(name) +
                                 " after participant " + json_string(*members.removed) +
                                 " was removed cannot be replayed (the core may give the "
                                 "newcomer the removed one's ring place)");
    }
    ParticipantSpec spec;
    spec.name = name;
    spec.plan = plan;
    spec.shares = shares;
    members.add(out, std::move(spec));
  } else if (!members.is_active(it->second)) {
    refuse(where + ": ev", "\"plan\": adding participant " + json_string(name) +
                               " again after its removal cannot be replayed");
  } else if (out.participants[it->second].plan != plan ||
             out.participants[it->second].shares != shares) {
    // The same plan and shares again changes nothing; a change would need the simulator to
    // re-plan mid-run, which it does not do.
    refuse(where + ": ev", "\"plan\": re-planning participant " + json_string(name) +
                               " during a capture cannot be replayed (the simulator keeps "
                               "each participant's plan and shares for the whole run)");
  }
}

// A "remove" line.
void read_remove(const ParsedLine& parsed, const std::string& where, Members& members) {
  const json& v = parsed.value;
  // A removed participant's queued requests were handed back, so the capture holds none of
  // them; in the replay it stays registered with nothing more to send, which changes no
  // decision. Its requests in flight complete as recorded.
  const std::string name = text(field(v, "participant", where), where + ": participant");
  const auto it = members.index.find(name);
  if (it == members.index.end() || !members.is_active(it->second)) {
    refuse(where + ": participant",
           "unknown participant " + json_string(name) + " (not registered)");
  }
  members.active.erase(std::find(members.active.begin(), members.active.end(), it->second));
  members.removed = name;
}

void read_events(const CaptureText& file, const Header& header, Capture& out, Members& members) {
  std::string_view rest = file.text;
  std::size_t number = 0;
  while (!rest.empty()) {
    const std::size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    ++number;
    if (number == 1) continue;  // the header, read already
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::string where = file.name + ":" + std::to_string(number);
    const ParsedLine parsed = parse_line(line, where);
    const json& v = parsed.value;
    const json& ev = field(v, "ev", where);
    if (!ev.is_string()) refuse(where + ": ev", "must be a string" + got(ev));
    const std::string kind = ev.get<std::string>();
    if (kind == "request") {
      out.requests.push_back(read_request(parsed, where, header, members));
    } else if (kind == "dropped") {
      out.dropped += whole(field(v, "requests", where), where + ": requests", 0,
                           std::numeric_limits<std::uint32_t>::max());
    } else if (kind == "plan") {
      read_plan_event(parsed, where, header, out, members);
    } else if (kind == "remove") {
      read_remove(parsed, where, members);
    }
    // Any other kind is a later version's addition that this reader does not need.
  }
}

}  // namespace

std::optional<Nanos> decimal_seconds(std::string_view s) {
  std::size_t i = 0;
  Nanos whole_part = 0;
  std::size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (++digits > 10) return std::nullopt;
    whole_part = whole_part * 10 + (s[i] - '0');
    ++i;
  }
  if (digits == 0) return std::nullopt;
  Nanos frac = 0;
  int places = 0;
  bool round_up = false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const std::size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (places < 9) {
        frac = frac * 10 + (s[i] - '0');
        ++places;
      } else if (i == start + 9) {
        round_up = s[i] >= '5';  // past the nanosecond: halves away from zero, as elsewhere
      }
      ++i;
    }
    if (i == start) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  for (; places < 9; ++places) frac *= 10;
  return whole_part * 1'000'000'000 + frac + (round_up ? 1 : 0);
}

Parsed<Capture> read_capture(const std::vector<CaptureText>& files) {
  return tools::refusing<Capture>("capture", [&]() -> Parsed<Capture> {
    if (files.empty()) return Refusal{"no capture file given"};
    std::vector<Header> headers;
    for (std::size_t i = 0; i < files.size(); ++i) {
      const std::string_view t = files[i].text;
      if (t.empty()) refuse(files[i].name, "empty file (a capture starts with its header line)");
      std::string_view first = t.substr(0, t.find('\n'));
      if (!first.empty() && first.back() == '\r') first.remove_suffix(1);
      headers.push_back(parse_header(files[i].name, first));
      headers.back().index = i;
    }
    std::sort(headers.begin(), headers.end(), [](const Header& a, const Header& b) {
      return std::tie(a.origin, a.file) < std::tie(b.origin, b.file);
    });
    const Header& first = headers.front();
    for (std::size_t i = 1; i < headers.size(); ++i) {
      const Header& h = headers[i];
      const std::string where = h.name + ":1";
      if (h.origin != first.origin) {
        refuse(where + ": origin_unix_ns",
               "differs from " + first.name +
                   "'s: the files are not of one capture (replay one capture at a time)");
      }
      if (h.file == headers[i - 1].file) {
        refuse(where + ": file", "the same file number as " + headers[i - 1].name + "'s (" +
                                     std::to_string(h.file) + ")");
      }
      if (h.file != headers[i - 1].file + 1) {
        refuse(where + ": file", "file " + std::to_string(headers[i - 1].file + 1) +
                                     " of the capture is missing (this is file " +
                                     std::to_string(h.file) + ", the one before it " +
                                     std::to_string(headers[i - 1].file) + ")");
      }
      if (h.classes != first.classes)
        refuse(where + ": classes", "differ from " + first.name + "'s");
      if (h.plans != first.plans) {
        refuse(where + ": plans", "differ from " + first.name +
                                      "'s: a change of plans during a capture cannot be replayed");
      }
      if (h.slots != first.slots)
        refuse(where + ": server.slots", "differs from " + first.name + "'s");
    }

    Capture out;
    out.classes = first.classes;
    out.plans_json = first.plans.dump();
    out.slots = first.slots;
    out.origin_unix_ns = first.origin;
    out.first_file = first.file;
    Members members;
    for (const ParticipantSpec& p : first.participants) members.add(out, p);
    for (const Header& h : headers) {
      out.files.push_back(h.name);
      // Each file's header lists who is registered as it starts: what the files before said.
      if (!members.same(out, h.participants)) {
        refuse(h.name + ":1: participants", "differ from those registered at the end of " +
                                                out.files[out.files.size() - 2] +
                                                " (a file of the capture is missing or altered)");
      }
      read_events(files[h.index], h, out, members);
      if (out.requests.size() > kMaxRequests) {
        refuse(h.name, "more than " + std::to_string(kMaxRequests) +
                           " requests (the simulator's limit for one run)");
      }
    }
    std::stable_sort(out.requests.begin(), out.requests.end(),
                     [](const CapturedRequest& a, const CapturedRequest& b) {
                       return std::tie(a.arrive, a.dispatch, a.complete) <
                              std::tie(b.arrive, b.dispatch, b.complete);
                     });
    return out;
  });
}

namespace {

ordered_json classes_of(int k) {
  ordered_json classes = ordered_json::array();
  for (int c = 0; c < k; ++c) classes.push_back("P" + std::to_string(c + 1));
  return classes;
}

// The scenario of `participants` under `plans_json` with no arrivals yet, validated by the
// scenario parser itself so that plans and shares obey exactly the scenario's rules.
// `plans_from` names where the plans came from, for messages.
Scenario base_scenario(int k, const std::string& plans_json, const std::string& plans_from,
                       std::vector<ParticipantSpec> participants, std::uint64_t slots,
                       const PlanFile* changes, const std::string& participants_from) {
  if (changes != nullptr) {
    if (changes->classes && *changes->classes != k) {
      refuse(changes->name + ": classes",
             "has " + std::to_string(*changes->classes) +
                 (*changes->classes == 1 ? " metered class" : " metered classes") +
                 "; the run has " + std::to_string(k));
    }
    for (std::size_t i = 0; i < changes->participants.size(); ++i) {
      const PlanFile::Change& change = changes->participants[i];
      const auto it = std::find_if(participants.begin(), participants.end(),
                                   [&](const ParticipantSpec& p) { return p.name == change.name; });
      if (it == participants.end()) {
        refuse(changes->name + ": participants[" + std::to_string(i) + "].name",
               "no participant " + json_string(change.name) + " in " + participants_from);
      }
      if (change.plan) it->plan = *change.plan;
      if (change.shares) it->shares = *change.shares;
    }
  }
  const json plans = json::parse(plans_json);
  for (const ParticipantSpec& p : participants) {
    if (!plans.contains(p.plan)) {
      refuse(plans_from + ": plans", "no plan " + json_string(p.plan) + ", which participant " +
                                         json_string(p.name) + " has");
    }
  }
  ordered_json s = ordered_json::object();
  s["classes"] = classes_of(k);
  s["plans"] = ordered_json::parse(plans_json);
  s["server"] = {{"slots", slots}};
  s["participants"] = ordered_json::array();
  for (const ParticipantSpec& p : participants) {
    s["participants"].push_back({{"name", p.name}, {"plan", p.plan}, {"shares", p.shares}});
  }
  s["arrivals"] = ordered_json::array();
  Parsed<Scenario> parsed = parse_scenario(s.dump());
  if (const auto* bad = std::get_if<Refusal>(&parsed)) {
    // Plans are the only part not checked above: name where they came from.
    refuse(bad->message.starts_with("plans") ? plans_from : participants_from, bad->message);
  }
  return std::get<Scenario>(std::move(parsed));
}

}  // namespace

Parsed<PlanFile> parse_plan_file(std::string_view text_in) {
  return tools::refusing<PlanFile>("plans file", [&]() -> Parsed<PlanFile> {
    json root;
    try {
      root = json::parse(text_in.begin(), text_in.end());
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      if (const auto at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
      refuse("plans file", "malformed JSON: " + what);
    }
    if (!root.is_object()) refuse("plans file", "must be a JSON object with \"plans\"");
    for (const auto& item : root.items()) {
      static const std::set<std::string> known = {"classes", "plans",    "participants",
                                                  "server",  "arrivals", "until"};
      if (known.count(item.key()) == 0) {
        refuse(item.key(), "unknown key (expected one of: plans, participants, classes)");
      }
    }
    PlanFile out;
    const json& plans = field(root, "plans", "plans file");
    if (!plans.is_object()) refuse("plans", "must be an object" + got(plans));
    out.plans_json = plans.dump();
    if (root.contains("classes")) out.classes = metered_classes(root["classes"], "classes");
    if (root.contains("participants")) {
      const json& list = root["participants"];
      if (!list.is_array()) refuse("participants", "must be an array" + got(list));
      std::set<std::string> seen;
      for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string path = "participants[" + std::to_string(i) + "]";
        const json& p = list[i];
        if (!p.is_object()) refuse(path, "must be an object" + got(p));
        for (const auto& item : p.items()) {
          if (item.key() != "name" && item.key() != "plan" && item.key() != "shares") {
            refuse(path + "." + item.key(), "unknown key (expected one of: name, plan, shares)");
          }
        }
        PlanFile::Change change;
        change.name = text(field(p, "name", path), path + ".name");
        if (!seen.insert(change.name).second) {
          refuse(path + ".name", "duplicate participant name " + json_string(change.name));
        }
        if (p.contains("plan")) change.plan = text(p["plan"], path + ".plan");
        if (p.contains("shares")) {
          change.shares = static_cast<std::uint32_t>(
              whole(p["shares"], path + ".shares", 1, creditloop::kMaxShares));
        }
        out.participants.push_back(std::move(change));
      }
    }
    return out;
  });
}

Parsed<Scenario> replay_scenario(const Capture& capture, const PlanFile* plans,
                                 std::optional<std::uint64_t> slots,
                                 const std::string& capture_name) {
  return tools::refusing<Scenario>("replay", [&]() -> Parsed<Scenario> {
    if (!slots) slots = capture.slots;
    if (!slots) {
      refuse(capture_name + ":1: server.slots",
             "is null (the runtime used a room test of its own): give the replay's room with "
             "--slots N");
    }
    const std::string header = capture_name + ":1";
    Scenario s = base_scenario(capture.classes, plans ? plans->plans_json : capture.plans_json,
                               plans ? plans->name : header, capture.participants, *slots, plans,
                               "the capture");
    s.arrivals.reserve(capture.requests.size());
    for (const CapturedRequest& r : capture.requests) {
      ArrivalSpec a;
      a.at = r.arrive;
      a.participant = r.participant;
      a.count = 1;
      a.in_run = 1;
      a.service = r.complete - r.dispatch;
      a.cost_nano = r.cost_nano;
      s.arrivals.push_back(a);
    }
    s.requests = capture.requests.size();
    return s;
  });
}

Parsed<Scenario> with_plans(const Scenario& scenario, const PlanFile& plans) {
  return tools::refusing<Scenario>("plans", [&]() -> Parsed<Scenario> {
    Scenario s = base_scenario(scenario.config.classes, plans.plans_json, plans.name,
                               scenario.participants, scenario.slots, &plans, "the scenario");
    s.arrivals = scenario.arrivals;
    s.until = scenario.until;
    s.requests = scenario.requests;
    return s;
  });
}

}  // namespace creditloop::sim
