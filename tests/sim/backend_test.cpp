// The simulator's backend model and its learned room (`"slots": "auto"`), in-process, read from
// the trace as a user reads it. Expected values follow from the backend's rule (at most
// `capacity` requests served at once, the rest in its FIFO, a step's slowdown on what starts in
// it) and from the targets of docs/design.md, "A room that finds itself", never from a previous
// run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "picture.hpp"
#include "scenario.hpp"
#include "simulator.hpp"

namespace sim = creditloop::sim;
using json = nlohmann::json;

namespace {

// Runs scenario text and returns its trace, one JSON object a line.
std::vector<json> trace_of(const std::string& text) {
  auto parsed = sim::parse_scenario(text);
  if (const auto* bad = std::get_if<sim::Refusal>(&parsed)) {
    ADD_FAILURE() << bad->message;
    return {};
  }
  auto built = sim::Simulator::create(std::get<sim::Scenario>(std::move(parsed)));
  if (const auto* bad = std::get_if<sim::Refusal>(&built)) {
    ADD_FAILURE() << bad->message;
    return {};
  }
  char* data = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&data, &size);
  {
    sim::LineWriter writer(out);
    const sim::RunReport report = std::get<0>(built)->run(&writer);
    sim::append_summary(writer.buffer(), report);
    writer.end_line();
  }
  std::fclose(out);
  std::istringstream lines(std::string(data, size));
  std::free(data);  // NOLINT(cppcoreguidelines-no-malloc): open_memstream's buffer
  std::vector<json> trace;
  for (std::string line; std::getline(lines, line);) trace.push_back(json::parse(line));
  return trace;
}

std::string text_of(const json& scenario) { return scenario.dump(); }

json example(const std::string& name) {
  const char* dir = std::getenv("CREDITLOOP_SCENARIOS");
  EXPECT_NE(dir, nullptr);
  std::ifstream in(std::filesystem::path(dir == nullptr ? "." : dir) / name);
  EXPECT_TRUE(in) << name;
  return json::parse(in);
}

// What a reader of the trace learns about each request and about the room.
struct TraceReading {
  std::map<std::uint64_t, double> arrive, dispatch, complete;
  std::map<std::uint64_t, std::string> who;
  std::vector<std::pair<double, std::uint64_t>> room;  // (t, slots), in trace order
  std::string text;                                    // the trace as written

  explicit TraceReading(const std::vector<json>& trace) {
    for (const json& l : trace) {
      text += l.dump() + "\n";
      const std::string ev = l.value("ev", "");
      if (ev == "room") room.emplace_back(l["t"].get<double>(), l["slots"].get<std::uint64_t>());
      if (ev == "arrive") {
        arrive[l["req"]] = l["t"];
        who[l["req"]] = l["participant"];
      }
      if (ev == "dispatch") dispatch[l["req"]] = l["t"];
      if (ev == "complete") complete[l["req"]] = l["t"];
    }
  }

  // The room at `t`: the last room line at or before it.
  [[nodiscard]] std::uint64_t room_at(double t) const {
    std::uint64_t slots = 0;
    for (const auto& [at, n] : room) {
      if (at > t + 1e-9) break;
      slots = n;
    }
    return slots;
  }

  // Share of the instants of [from, to), every millisecond, where the room is within 25 % of
  // `capacity`.
  [[nodiscard]] double in_band(double from, double to, double capacity) const {
    std::uint64_t in = 0, all = 0;
    for (double t = from; t < to - 1e-9; t += 0.001) {
      const auto slots = static_cast<double>(room_at(t));
      ++all;
      if (slots >= 0.75 * capacity && slots <= 1.25 * capacity) ++in;
    }
    return all == 0 ? 0 : static_cast<double>(in) / static_cast<double>(all);
  }

  [[nodiscard]] std::uint64_t completed_in(double from, double to) const {
    return static_cast<std::uint64_t>(std::count_if(complete.begin(), complete.end(), [&](auto& c) {
      return c.second >= from - 1e-9 && c.second < to - 1e-9;
    }));
  }

  // The p99 of arrival to completion of `participant`'s requests arrived in [from, to): what
  // its client sees, the wait in creditloop and in the backend's own FIFO, and the service.
  [[nodiscard]] double p99_latency(const std::string& participant, double from, double to) const {
    std::vector<double> l;
    for (const auto& [req, done] : complete) {
      const double at = arrive.at(req);
      if (who.at(req) == participant && at >= from - 1e-9 && at < to - 1e-9) l.push_back(done - at);
    }
    if (l.empty()) return 0;
    std::sort(l.begin(), l.end());
    const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(l.size())));
    return l[std::max<std::size_t>(rank, 1) - 1];
  }
};

json two_requests_on(const json& server, int count = 4, double service = 1) {
  return {
      {"plans", {{"p", json::object()}}},
      {"server", server},
      {"participants", json::array({{{"name", "a"}, {"plan", "p"}}})},
      {"arrivals",
       json::array({{{"at", 0}, {"participant", "a"}, {"count", count}, {"service", service}}})}};
}

// ---- the backend ------------------------------------------------------------------------------

// A backend that never fills (capacity at least the room) changes nothing: the trace is the slot
// model's, byte for byte.
TEST(SimBackend, RoomyBackendIsTheSlotModel) {
  json plain = example("heavy_work.json");
  json roomy = plain;
  roomy["server"]["backend"] = json::parse(R"({"capacity": [{"at": 0, "capacity": 1},
                                                            {"at": 3, "capacity": 5}]})");
  EXPECT_EQ(TraceReading(trace_of(text_of(plain))).text,
            TraceReading(trace_of(text_of(roomy))).text);
}

// Four requests through a room of 4 to a backend of 2, each served for 1 s: two start at once,
// two wait in the backend's FIFO and complete a service later.
TEST(SimBackend, BeyondCapacityWaitsInTheBackendsFifo) {
  const TraceReading r(trace_of(text_of(two_requests_on(
      json::parse(R"({"slots": 4, "backend": {"capacity": [{"at": 0, "capacity": 2}]}})")))));
  for (std::uint64_t req = 0; req < 4; ++req) EXPECT_EQ(r.dispatch.at(req), 0.0) << req;
  EXPECT_EQ(r.complete.at(0), 1.0);
  EXPECT_EQ(r.complete.at(1), 1.0);
  EXPECT_EQ(r.complete.at(2), 2.0);
  EXPECT_EQ(r.complete.at(3), 2.0);
  EXPECT_TRUE(r.room.empty()) << "a fixed room writes no room line";
}

// A step that raises the capacity starts what waits at once; one that lowers it preempts
// nothing; a slowdown stretches what starts while it holds.
TEST(SimBackend, StepsStartWaitingRequestsAndSlowWhatStartsUnderThem) {
  const TraceReading r(
      trace_of(text_of(two_requests_on(json::parse(R"({"slots": 4, "backend": {"capacity": [
          {"at": 0, "capacity": 1}, {"at": 0.5, "capacity": 2, "slowdown": 3},
          {"at": 1.5, "capacity": 1}]}})")))));
  EXPECT_EQ(r.complete.at(0), 1.0);  // started at 0, before the slowdown
  EXPECT_EQ(r.complete.at(1), 3.5);  // started at 0.5 under a slowdown of 3
  // req 2 starts when req 0 completes at 1 (2 served at once), slowed: 1 + 3.
  EXPECT_EQ(r.complete.at(2), 4.0);
  // From 1.5 the backend serves 1: req 3 waits until both are done, then 1 s.
  EXPECT_EQ(r.complete.at(3), 5.0);
}

// ---- the learned room -------------------------------------------------------------------------

TEST(SimLearnedRoom, RoomLinesStartAtTheLeastAndBoundTheRequestsInFlight) {
  json s = example("capacity_steps.json");
  s["server"]["slots"] = json::parse(R"({"auto": {"min": 2, "max": 12}})");
  s["until"] = 12;
  const std::vector<json> trace = trace_of(text_of(s));
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace.front(), json::parse(R"({"t": 0.0, "ev": "room", "slots": 2})"));
  std::uint64_t room = 0, in_flight = 0, lines = 0;
  std::uint64_t most = 0;
  for (const json& l : trace) {
    const std::string ev = l.value("ev", "");
    if (ev == "room") {
      EXPECT_EQ(l.size(), 3u) << l;
      room = l["slots"];
      ++lines;
      EXPECT_GE(room, 2u);
      EXPECT_LE(room, 12u);
      most = std::max(most, room);
    }
    if (ev == "complete") --in_flight;
    if (ev == "dispatch") {
      ++in_flight;
      // The room before this dispatch let it out: its line, if any, follows the dispatch.
      EXPECT_LE(in_flight, std::max<std::uint64_t>(room, 1)) << l;
    }
  }
  EXPECT_GT(lines, 3u);
  EXPECT_EQ(most, 12u) << "a backend of 16 lets the room reach its most";
}

// The target of docs/design.md: a backend of 8, 16, 4 and 8 (8 s each) under a heavy tenant that
// always has work and a light one at 20 requests a second.
class CapacitySteps : public ::testing::Test {
 protected:
  static constexpr double kStep = 8;
  static constexpr double kSettle = 2;
  static constexpr double kService = 0.010;  // the mean service time of both tenants
  static constexpr std::array<double, 4> kCapacity{8, 16, 4, 8};
};

TEST_F(CapacitySteps, RoomWithinAQuarterOfCapacityFromTwoSecondsAfterEachStep) {
  const TraceReading r(trace_of(text_of(example("capacity_steps.json"))));
  for (std::size_t i = 0; i < kCapacity.size(); ++i) {
    const double from = static_cast<double>(i) * kStep;
    EXPECT_EQ(r.in_band(from + kSettle, from + kStep, kCapacity[i]), 1.0)
        << "step " << i << " (capacity " << kCapacity[i] << ")";
  }
}

TEST_F(CapacitySteps, ThroughputAtLeast95PerCentOfCapacityOutsideTheSettling) {
  const TraceReading r(trace_of(text_of(example("capacity_steps.json"))));
  for (std::size_t i = 0; i < kCapacity.size(); ++i) {
    const double from = static_cast<double>(i) * kStep + kSettle;
    const double to = static_cast<double>(i + 1) * kStep;
    const double served = static_cast<double>(r.completed_in(from, to));
    EXPECT_GE(served, 0.95 * (to - from) * kCapacity[i] / kService)
        << "step " << i << " (capacity " << kCapacity[i] << ")";
  }
}

// The light tenant's p99, arrival to completion, against the same arrivals through a hand-set
// room of the step's capacity (the slot model of that many slots), outside the settling.
TEST_F(CapacitySteps, LightTenantsP99WithinAQuarterOfAHandSetRoom) {
  const json scenario = example("capacity_steps.json");
  const TraceReading learned(trace_of(text_of(scenario)));
  for (std::size_t i = 0; i < kCapacity.size(); ++i) {
    json hand_set = scenario;
    hand_set["server"] = {{"slots", static_cast<int>(kCapacity[i])}};
    const TraceReading fixed(trace_of(text_of(hand_set)));
    const double from = static_cast<double>(i) * kStep + kSettle;
    const double to = static_cast<double>(i + 1) * kStep;
    const double p99 = learned.p99_latency("light", from, to);
    const double reference = fixed.p99_latency("light", from, to);
    EXPECT_GT(reference, 0);
    EXPECT_LE(p99, 1.25 * reference + 1e-9)
        << "step " << i << ": " << p99 << " s against " << reference << " s";
  }
}

// A backend slow for everyone for a second (every service five times as long: a GC pause):
// the room is back within a quarter of the capacity 1 s after the pause ends and stays there,
// and the backend serves 0.95 of its capacity again.
TEST(SimLearnedRoom, RecoversWithinASecondOfAPause) {
  const TraceReading r(trace_of(text_of(example("backend_pause.json"))));
  // It is a pause the room sees: it falls while it lasts.
  std::uint64_t least = 1000;
  for (double t = 6.5; t < 7.0; t += 0.001) least = std::min(least, r.room_at(t));
  EXPECT_LE(least, 4u);
  EXPECT_EQ(r.in_band(8.0, 16.0, 8), 1.0);
  EXPECT_GE(static_cast<double>(r.completed_in(8.0, 16.0)), 0.95 * 8.0 * 8 / 0.010);
}

// The picture draws the room as the trace gives it, and the backend's capacity; a run with
// neither has no room band.
TEST(SimLearnedRoom, PictureDrawsTheRoomAndTheCapacity) {
  const auto svg_of = [](const json& scenario) {
    auto parsed = sim::parse_scenario(scenario.dump());
    const auto& s = std::get<sim::Scenario>(parsed);
    sim::Picture picture(s, "run");
    auto built = sim::Simulator::create(s);
    sim::Simulator& simulator = *std::get<0>(built);
    simulator.observe(&picture);
    return picture.svg(simulator.run(nullptr));
  };
  json s = example("capacity_steps.json");
  s["until"] = 4;
  const std::string svg = svg_of(s);
  EXPECT_NE(svg.find("<g id=\"room\">"), std::string::npos);
  EXPECT_NE(svg.find("a learned room of 1..256 slots, a backend of capacity 8, 16 at 8 s"),
            std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray=\"4,3\""), std::string::npos) << "the capacity";
  const std::vector<json> trace = trace_of(s.dump());
  // One vertical step of the room line per room line of the trace, after the first.
  const std::size_t rooms = static_cast<std::size_t>(std::count_if(
      trace.begin(), trace.end(), [](const json& l) { return l.value("ev", "") == "room"; }));
  const std::size_t at = svg.find("stroke=\"#1a5fb4\"");
  ASSERT_NE(at, std::string::npos);
  const std::string path = svg.substr(at, svg.find("/>", at) - at);
  EXPECT_GT(rooms, 3u);
  EXPECT_LE(static_cast<std::size_t>(std::count(path.begin(), path.end(), 'V')), rooms - 1);
  EXPECT_GT(static_cast<std::size_t>(std::count(path.begin(), path.end(), 'V')), 1u);
  EXPECT_EQ(svg_of(example("quickstart.json")).find("<g id=\"room\">"), std::string::npos);
}

// The page's data carries the room as the trace has it, and the bounds and the capacity steps.
TEST(SimLearnedRoom, PageCarriesTheRoomAndTheCapacity) {
  json s = example("capacity_steps.json");
  s["until"] = 4;
  auto parsed = sim::parse_scenario(s.dump());
  const auto& scenario = std::get<sim::Scenario>(parsed);
  sim::Picture picture(scenario, "run");
  auto built = sim::Simulator::create(scenario);
  std::get<0>(built)->observe(&picture);
  const std::string html = picture.html(std::get<0>(built)->run(nullptr));
  const std::string tag = "<script id=\"creditloop-data\" type=\"application/json\">";
  const std::size_t at = html.find(tag);
  ASSERT_NE(at, std::string::npos);
  const json data =
      json::parse(html.substr(at + tag.size(), html.find("</script>", at) - at - tag.size()));
  EXPECT_EQ(data["auto"], json::parse("[1, 256]"));
  EXPECT_EQ(data["room"]["c"], json::parse("[8, 16, 4, 8]"));
  EXPECT_EQ(data["room"]["ct"], json::parse("[0, 8000000, 8000000, 8000000]"));
  std::vector<std::pair<double, std::uint64_t>> rooms;
  for (const json& l : trace_of(s.dump())) {
    if (l.value("ev", "") == "room") rooms.emplace_back(l["t"].get<double>(), l["slots"]);
  }
  ASSERT_EQ(data["room"]["n"].size(), rooms.size());
  std::int64_t t = 0;
  for (std::size_t i = 0; i < rooms.size(); ++i) {
    t += data["room"]["t"][i].get<std::int64_t>();
    EXPECT_EQ(t, std::llround(rooms[i].first * 1e6)) << i;
    EXPECT_EQ(data["room"]["n"][i], rooms[i].second) << i;
  }
}

}  // namespace
