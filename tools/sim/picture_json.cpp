// The page's data, as columnar JSON (docs/pictures.md).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/json_text.hpp"
#include "picture_internal.hpp"

namespace creditloop::sim {

using creditloop::ClassId;
using tools::append_int;
using tools::json_string;

namespace {

template <class T>
void append_array(std::string& out, const std::vector<T>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    append_int(out, static_cast<std::int64_t>(v[i]));
  }
  out += ']';
}

// Sorted columns (arrival times, pass numbers) shrink to a few digits a value as differences.
template <class T>
void append_deltas(std::string& out, const std::vector<T>& v) {
  out += '[';
  std::int64_t last = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    const auto x = static_cast<std::int64_t>(v[i]);
    append_int(out, x - last);
    last = x;
  }
  out += ']';
}

}  // namespace

// The page's data: columns per lane and for the passes, sorted columns as differences.
// docs/pictures.md describes every key.
std::string Picture::data_json(const RunReport& report) const {
  const int k = classes_;
  std::string out;
  out.reserve(requests_.size() * 40 + passes_.t.size() * 16 + 4096);
  out += "{\"format\":\"creditloop-picture/1\",\"title\":";
  out += json_string(title_);
  out += ",\"classes\":[";
  for (int c = 0; c <= k; ++c) {
    if (c > 0) out += ',';
    out += json_string(creditloop::class_name(static_cast<ClassId>(c)));
  }
  out += "],\"k\":";
  append_int(out, k);
  out += ",\"slots\":";
  out += std::to_string(scenario_.slots);
  if (scenario_.room_auto) {
    out += ",\"auto\":[" + std::to_string(scenario_.room_auto->least) + "," +
           std::to_string(scenario_.room_auto->most) + "]";
  }
  out += ",\"until\":";
  if (scenario_.until) {
    append_int(out, micro_time(*scenario_.until));
  } else {
    out += "null";
  }
  out += ",\"end\":";
  append_int(out, end_micro(report));
  if (!balances_) out += ",\"balances\":false";
  out += ",\"plans\":";
  append_plans(out);
  out += ",\"participants\":[";
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    if (i > 0) out += ',';
    append_lane(out, i, report);
  }
  out += "],\"passes\":";
  append_passes(out);
  if (!room_.empty() || !scenario_.backend.empty()) {
    // The learned room's slots and the backend's capacity, each from its instant on.
    std::vector<std::int64_t> t, ct;
    std::vector<std::uint64_t> n, c;
    for (const auto& [at, slots] : room_) {
      t.push_back(at);
      n.push_back(slots);
    }
    for (const BackendStep& step : scenario_.backend) {
      ct.push_back(micro_time(step.at));
      c.push_back(step.capacity);
    }
    out += ",\"room\":{\"t\":";
    append_deltas(out, t);
    out += ",\"n\":";
    append_array(out, n);
    out += ",\"ct\":";
    append_deltas(out, ct);
    out += ",\"c\":";
    append_array(out, c);
    out += '}';
  }
  out += '}';
  return out;
}

void Picture::append_plans(std::string& out) const {
  out += '[';
  for (std::size_t i = 0; i < scenario_.config.plans.size(); ++i) {
    const creditloop::Plan& plan = scenario_.config.plans[i];
    if (i > 0) out += ',';
    out += "{\"name\":";
    out += json_string(plan.name);
    out += ",\"terms\":[";
    for (int c = 0; c < classes_; ++c) {
      if (c > 0) out += ',';
      const auto& t = plan.terms[static_cast<std::size_t>(c)];
      if (!t) {
        out += "null";
        continue;
      }
      out += nlohmann::json::array({t->rate, t->burst}).dump();
    }
    out += "]}";
  }
  out += ']';
}

// A lane's requests as the page's columns. The withdrawn ones apart, so that the dispatched
// ones stay a prefix of the lane's: the rest of the lane is still queued, in order.
struct Picture::LaneColumns {
  std::vector<std::int64_t> req;
  std::vector<std::int64_t> arrived;
  std::vector<std::int64_t> wait;
  std::vector<std::int64_t> service;
  std::vector<std::int64_t> cls;
  std::vector<std::int64_t> pass;
  std::vector<std::int64_t> completion_pass;
  std::vector<std::int64_t> withdrawn;
  std::vector<std::int64_t> withdrawn_arrived;
  std::vector<std::int64_t> withdrawn_after;
};

Picture::LaneColumns Picture::lane_columns(const Lane& lane) const {
  LaneColumns out;
  for (const std::uint32_t n : lane.requests) {
    const Request& r = requests_[n];
    if (r.withdrawn >= 0) {
      out.withdrawn.push_back(n);
      out.withdrawn_arrived.push_back(r.arrived);
      out.withdrawn_after.push_back(r.withdrawn - r.arrived);
      continue;
    }
    out.req.push_back(n);
    out.arrived.push_back(r.arrived);
    if (r.dispatched < 0) continue;
    out.wait.push_back(r.dispatched - r.arrived);
    out.cls.push_back(r.cls);
    out.pass.push_back(r.pass);
    out.service.push_back(r.completed < 0 ? -1 : r.completed - r.dispatched);
    out.completion_pass.push_back(
        r.completed < 0 ? -1 : std::int64_t{r.passes_before_completion} - r.pass - 1);
  }
  return out;
}

void Picture::append_lane(std::string& out, std::size_t index, const RunReport& report) const {
  const Lane& lane = lanes_[index];
  const ParticipantSpec& spec = scenario_.participants[index];
  out += "{\"name\":";
  out += json_string(spec.name);
  out += ",\"plan\":";
  out += json_string(spec.plan);
  out += ",\"shares\":";
  append_int(out, spec.shares);
  out += ",\"held\":";
  append_array(out, lane.held);
  out += ",\"rate\":";
  out += nlohmann::json(lane.rate).dump();
  out += ",\"cap\":";
  out += nlohmann::json(lane.cap).dump();
  const LaneColumns columns = lane_columns(lane);
  out += ",\"req\":";
  append_deltas(out, columns.req);
  out += ",\"a\":";
  append_deltas(out, columns.arrived);
  out += ",\"w\":";
  append_array(out, columns.wait);
  out += ",\"s\":";
  append_array(out, columns.service);
  out += ",\"c\":";
  append_array(out, columns.cls);
  out += ",\"dp\":";
  append_deltas(out, columns.pass);
  out += ",\"cp\":";
  append_array(out, columns.completion_pass);
  out += ",\"xreq\":";
  append_deltas(out, columns.withdrawn);
  out += ",\"xa\":";
  append_deltas(out, columns.withdrawn_arrived);
  out += ",\"xw\":";
  append_array(out, columns.withdrawn_after);
  out += ",\"bt\":";
  append_deltas(out, lane.samples.t);
  out += ",\"bk\":";
  append_deltas(out, lane.samples.key);
  out += ",\"b\":[";
  for (std::size_t h = 0; h < lane.samples.value.size(); ++h) {
    if (h > 0) out += ',';
    append_deltas(out, lane.samples.value[h]);
  }
  out += "]";
  const auto rep = std::find_if(report.participants.rbegin(), report.participants.rend(),
                                [&](const ParticipantReport& p) { return p.name == spec.name; });
  if (rep != report.participants.rend()) {
    out += ",\"summary\":{\"dispatched\":[";
    for (int c = 0; c <= classes_; ++c) {
      if (c > 0) out += ',';
      append_int(out, static_cast<std::int64_t>(rep->dispatched[static_cast<std::size_t>(c)]));
    }
    out += "],\"completed\":";
    append_int(out, static_cast<std::int64_t>(rep->completed));
    out += ",\"waiting\":";
    append_int(out, static_cast<std::int64_t>(rep->waiting));
    out += '}';
  }
  out += '}';
}

void Picture::append_passes(std::string& out) const {
  const Passes& p = passes_;
  out += "{\"t\":";
  append_deltas(out, p.t);
  out += ",\"c\":";
  append_array(out, p.cls);
  out += ",\"ne\":";
  append_array(out, p.eligible_count);
  out += ",\"e\":";
  append_array(out, p.eligible);
  out += ",\"ni\":";
  append_array(out, p.ignored_count);
  out += ",\"i\":";
  append_array(out, p.ignored);
  out += ",\"r\":";
  append_array(out, p.why);
  out += ",\"rb\":";
  append_array(out, p.balance);
  out += ",\"rn\":";
  append_array(out, p.next_credit);
  out += '}';
}

}  // namespace creditloop::sim
