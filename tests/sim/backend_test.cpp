// The simulator's backend model, in-process, read from the trace as a user reads it.
// Expected values follow from the backend's rule (at most `capacity` requests served at once, the
// rest in its FIFO, a step's slowdown on what starts in it) and from the targets of
// docs/design.md, "A room that finds itself", never from a previous run.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>

#include "sim/backend_trace.hpp"

using json = nlohmann::json;

namespace {

using creditloop::test::example;
using creditloop::test::text_of;
using creditloop::test::trace_of;
using creditloop::test::TraceReading;

json two_requests_on(const json& server, int count = 4, double service = 1) {
  return {
      {"plans", {{"p", json::object()}}},
      {"server", server},
      {"participants", json::array({{{"name", "a"}, {"plan", "p"}}})},
      {"arrivals",
       json::array({{{"at", 0}, {"participant", "a"}, {"count", count}, {"service", service}}})}};
}

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

}  // namespace
