// The simulator's learned room (`"slots": "auto"`), in-process: its `room` lines, its recovery
// from a pause, and the picture and page that show it.
// Expected values follow from the backend's rule (at most `capacity` requests served at once, the
// rest in its FIFO, a step's slowdown on what starts in it) and from the targets of
// docs/design.md, "A room that finds itself", never from a previous run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "picture.hpp"
#include "scenario.hpp"
#include "sim/backend_trace.hpp"
#include "simulator.hpp"

namespace sim = creditloop::sim;
using json = nlohmann::json;

namespace {

using creditloop::test::example;
using creditloop::test::text_of;
using creditloop::test::trace_of;
using creditloop::test::TraceReading;

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

// A backend of 8 whose service times spread from 5 to 15 ms (jittered_backend.json): the room
// settles at the capacity (above it at most 15 % of the time), so the light tenant's p99, arrival
// to completion, from 2 s on, is at most 1.25 x its p99 behind a room set by hand to 8 (the slot
// model of 8 slots), and the backend serves at least 0.95 of what it serves behind that room.
TEST(SimLearnedRoom, SettlesAtTheCapacityOfAJitteredBackend) {
  const json scenario = example("jittered_backend.json");
  const TraceReading learned(trace_of(text_of(scenario)));
  json hand_set = scenario;
  hand_set["server"] = {{"slots", 8}};
  const TraceReading fixed(trace_of(text_of(hand_set)));
  EXPECT_EQ(learned.in_band(2.0, 16.0, 8), 1.0);
  // At the capacity, not a slot above it: a room of 9 is a trial, now and then.
  std::uint64_t above = 0, instants = 0;
  for (double t = 2.0; t < 16.0 - 1e-9; t += 0.001, ++instants) {
    if (learned.room_at(t) > 8) ++above;
  }
  EXPECT_LE(above * 100, instants * 15) << above << " of " << instants << " ms above 8 slots";
  EXPECT_GE(static_cast<double>(learned.completed_in(2.0, 16.0)),
            0.95 * static_cast<double>(fixed.completed_in(2.0, 16.0)));
  const double p99 = learned.p99_latency("light", 2.0, 16.0);
  const double reference = fixed.p99_latency("light", 2.0, 16.0);
  EXPECT_GT(reference, 0);
  EXPECT_LE(p99, 1.25 * reference + 1e-9) << p99 << " s against " << reference << " s";
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
