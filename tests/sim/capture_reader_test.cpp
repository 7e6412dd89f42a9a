// The capture reader and the replay's scenario, in-process. Expected values come from the capture
// format (docs/replay.md) and the rules of docs/contract.md §2-3, never from a previous run.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "capture_file.hpp"
#include "replay.hpp"
#include "scenario.hpp"
#include "sim/capture_text.hpp"
#include "simulator.hpp"

namespace sim = creditloop::sim;

namespace {

using creditloop::test::error_of;
using creditloop::test::header_with;
using creditloop::test::kH;
using creditloop::test::kHeader;
using creditloop::test::read_one;
using creditloop::test::request;
using creditloop::test::starts;
using sim::Capture;
using sim::CaptureText;
using sim::Refusal;

TEST(CaptureReader, DecimalSecondsAreExactNanoseconds) {
  EXPECT_EQ(sim::decimal_seconds("0.000001200"), 1200);
  EXPECT_EQ(sim::decimal_seconds("3"), 3'000'000'000);
  EXPECT_EQ(sim::decimal_seconds("3.5"), 3'500'000'000);
  EXPECT_EQ(sim::decimal_seconds("12345678.123456789"), 12'345'678'123'456'789);
  // Past the nanosecond, halves go away from zero as everywhere else.
  EXPECT_EQ(sim::decimal_seconds("0.0000000015"), 2);
  EXPECT_EQ(sim::decimal_seconds("0.0000000014999"), 1);
  EXPECT_EQ(sim::decimal_seconds("1e-6"), std::nullopt);
  EXPECT_EQ(sim::decimal_seconds("-1"), std::nullopt);
  EXPECT_EQ(sim::decimal_seconds("1."), std::nullopt);
  EXPECT_EQ(sim::decimal_seconds(".5"), std::nullopt);
}

TEST(CaptureReader, ReadsTheFormatsExampleAndKeepsEveryNanosecond) {
  // 9,000,000 s is past where a double holds nanoseconds: read as a double, 1 ns would be lost.
  const std::string text =
      std::string(kHeader) + "\n" + request("alice", "0.000001200", "0.000002000", "0.100002000") +
      "\n" +
      request("bob", "9000000.000000001", "9000000.000000003", "9000000.000000007", "P3", "2") +
      "\n" + R"({"ev": "dropped", "t": 3.2, "requests": 17})" + "\n";
  auto r = read_one(text);
  ASSERT_TRUE(std::holds_alternative<Capture>(r)) << std::get<Refusal>(r).message;
  const Capture& c = std::get<Capture>(r);
  EXPECT_EQ(c.classes, 2);
  EXPECT_EQ(c.slots, 64u);
  EXPECT_EQ(c.origin_unix_ns, 1764629000123456789u);
  ASSERT_EQ(c.participants.size(), 2u);
  EXPECT_EQ(c.participants[1].name, "bob");
  EXPECT_EQ(c.dropped, 17u);
  ASSERT_EQ(c.requests.size(), 2u);
  EXPECT_EQ(c.requests[0].arrive, 1200);
  EXPECT_EQ(c.requests[0].dispatch, 2000);
  EXPECT_EQ(c.requests[0].complete, 100'002'000);
  EXPECT_EQ(c.requests[0].cls, 0);
  EXPECT_EQ(c.requests[0].cost_nano, 1'250'000'000);
  EXPECT_EQ(c.requests[1].participant, 1u);
  EXPECT_EQ(c.requests[1].arrive, 9'000'000'000'000'001);
  EXPECT_EQ(c.requests[1].complete - c.requests[1].dispatch, 4);
  EXPECT_EQ(c.requests[1].cls, 2);  // P3: unmetered for k = 2

  // One arrival per request at `arrive`, service complete - dispatch, its cost.
  auto s = sim::replay_scenario(c, nullptr, std::nullopt, "a.cap");
  ASSERT_TRUE(std::holds_alternative<sim::Scenario>(s)) << std::get<sim::Refusal>(s).message;
  const sim::Scenario& scenario = std::get<sim::Scenario>(s);
  EXPECT_EQ(scenario.slots, 64u);
  EXPECT_EQ(scenario.requests, 2u);
  ASSERT_EQ(scenario.arrivals.size(), 2u);
  EXPECT_EQ(scenario.arrivals[0].at, 1200);
  EXPECT_EQ(scenario.arrivals[0].service, 100'000'000);
  EXPECT_EQ(scenario.arrivals[0].cost_nano, 1'250'000'000);
  EXPECT_EQ(scenario.arrivals[1].participant, 1u);
  EXPECT_EQ(scenario.arrivals[1].service, 4);
  EXPECT_EQ(scenario.arrivals[1].cost_nano, 2'000'000'000);
}

TEST(CaptureReader, RequestsComeInArrivalOrderWhateverTheirCompletionOrder) {
  const std::string text = std::string(kHeader) + "\n" + request("alice", "0.5", "0.6", "0.7") +
                           "\n" + request("bob", "0.1", "0.2", "0.9") + "\n" +
                           request("alice", "0.5", "0.5", "0.8") + "\n";
  auto r = read_one(text);
  ASSERT_TRUE(std::holds_alternative<Capture>(r)) << std::get<Refusal>(r).message;
  const auto& q = std::get<Capture>(r).requests;
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].arrive, 100'000'000);
  // Two of alice's at one instant: her queue is FIFO, so the one dispatched first came first.
  EXPECT_EQ(q[1].dispatch, 500'000'000);
  EXPECT_EQ(q[2].dispatch, 600'000'000);
}

// As the runtime's capture has them: the header of file 0 lists nobody, `plan` lines add each
// participant as it registers, and one may be removed with a request still in flight.
TEST(CaptureReader, AddsRegisterInOrderAndARemovedParticipantKeepsItsRequestsInFlight) {
  std::string text = kHeader;
  text.replace(text.find(R"("participants": [)"), std::string::npos, R"("participants": []})");
  const std::string later_header = text;
  text += "\n" +
          std::string(
              R"({"ev": "plan", "t": 0.001, "participant": "zed", "plan": "lite", "shares": 3})") +
          "\n" + R"({"ev": "plan", "t": 0.002, "participant": "amy", "plan": "pro", "shares": 1})" +
          "\n" + R"({"ev": "remove", "t": 0.5, "participant": "zed"})" + "\n" +
          request("zed", "0.2", "0.4", "0.6", "P2") + "\n" + request("amy", "0.3", "0.3", "0.4") +
          "\n";
  auto r = read_one(text);
  ASSERT_TRUE(std::holds_alternative<Capture>(r)) << std::get<Refusal>(r).message;
  const Capture& c = std::get<Capture>(r);
  ASSERT_EQ(c.participants.size(), 2u);
  EXPECT_EQ(c.participants[0].name, "zed");
  EXPECT_EQ(c.participants[0].shares, 3u);
  EXPECT_EQ(c.participants[1].name, "amy");
  ASSERT_EQ(c.requests.size(), 2u);
  EXPECT_EQ(c.requests[0].participant, 0u);
  // A later file's header lists who is registered then: amy alone.
  std::string next = later_header;
  next.replace(next.find(R"("file": 0)"), 9, R"("file": 1)");
  next.replace(next.find(R"("participants": [])"), 18,
               R"("participants": [{"name": "amy", "plan": "pro"}])");
  auto both = sim::read_capture({CaptureText{"a", text}, CaptureText{"b", next + "\n"}});
  EXPECT_TRUE(std::holds_alternative<Capture>(both)) << std::get<Refusal>(both).message;
  auto wrong = sim::read_capture({CaptureText{"a", text}, CaptureText{"b", later_header + "\n"}});
  ASSERT_TRUE(std::holds_alternative<Refusal>(wrong));
  auto s = sim::replay_scenario(c, nullptr, std::nullopt, "a");
  ASSERT_TRUE(std::holds_alternative<sim::Scenario>(s)) << std::get<sim::Refusal>(s).message;
  EXPECT_EQ(std::get<sim::Scenario>(s).participants[0].name, "zed");
}

TEST(CaptureReader, UnknownKeysAndEventKindsAreIgnored) {
  const std::string text =
      header_with(R"("version": 1,)", R"("version": 1, "writer": {"host": "x"},)") + "\n" +
      R"({"ev": "request", "participant": "alice", "arrive": 0, "dispatch": 0, "complete": 1,)"
      R"( "class": "P2", "cost": 0, "trace_id": "abc"})" +
      "\n" + R"({"ev": "heartbeat", "t": 1})" + "\n\n" +
      R"({"ev": "plan", "t": 0.5, "participant": "bob", "plan": "lite", "shares": 1})" + "\n";
  auto r = read_one(text);
  ASSERT_TRUE(std::holds_alternative<Capture>(r)) << std::get<Refusal>(r).message;
  EXPECT_EQ(std::get<Capture>(r).requests.size(), 1u);
}

TEST(CaptureReader, RotatedFilesAreOrderedByOriginAndFileNumber) {
  const std::string file0 = kH + request("alice", "0.1", "0.1", "0.2") + "\n";
  const std::string file1 = header_with(R"("file": 0)", R"("file": 1)") + "\n" +
                            request("bob", "0.05", "0.3", "0.4", "P2") + "\n";
  // Given newest first, as `ls PATH*` lists PATH before PATH.1.
  auto r = sim::read_capture({CaptureText{"cap", file1}, CaptureText{"cap.1", file0}});
  ASSERT_TRUE(std::holds_alternative<Capture>(r)) << std::get<Refusal>(r).message;
  const Capture& c = std::get<Capture>(r);
  EXPECT_EQ(c.files, (std::vector<std::string>{"cap.1", "cap"}));
  ASSERT_EQ(c.requests.size(), 2u);
  EXPECT_EQ(c.requests[0].participant, 1u);  // arrival order across the files

  const std::string file2 = header_with(R"("file": 0)", R"("file": 2)") + "\n";
  EXPECT_TRUE(starts(error_of({CaptureText{"cap", file2}, CaptureText{"cap.2", file0}}),
                     "cap:1: file: file 1 of the capture is missing"));
  EXPECT_TRUE(starts(error_of({CaptureText{"x", file0}, CaptureText{"y", file0}}),
                     "y:1: file: the same file number"));
  const std::string other = header_with("1764629000123456789", "1764629000123456790");
  EXPECT_TRUE(starts(error_of({CaptureText{"x", file0}, CaptureText{"y", other}}),
                     "y:1: origin_unix_ns: differs from x's"));
  std::string replanned = header_with(R"("file": 0)", R"("file": 1)");
  replanned.replace(replanned.find(R"("plan": "lite")"), 14, R"("plan": "pro")");
  EXPECT_TRUE(starts(error_of({CaptureText{"x", file0}, CaptureText{"y", replanned}}),
                     "y:1: participants: differ from those registered at the end of x"));
}

std::string replay_error(const std::string& header, const sim::PlanFile* plans,
                         std::optional<std::uint64_t> slots = std::nullopt) {
  auto r = read_one(header + "\n");
  if (!std::holds_alternative<Capture>(r)) {
    ADD_FAILURE() << std::get<Refusal>(r).message;
    return "";
  }
  auto s = sim::replay_scenario(std::get<Capture>(r), plans, slots, "a.cap");
  if (const auto* bad = std::get_if<sim::Refusal>(&s)) return bad->message;
  ADD_FAILURE() << "accepted";
  return "";
}

sim::PlanFile plan_file(const std::string& text) {
  auto p = sim::parse_plan_file(text);
  if (const auto* bad = std::get_if<sim::Refusal>(&p)) {
    ADD_FAILURE() << bad->message;
    return {};
  }
  sim::PlanFile f = std::get<sim::PlanFile>(std::move(p));
  f.name = "p.json";
  return f;
}

TEST(CaptureReader, PlansAndRoomAreCheckedAsTheScenarioChecksThem) {
  EXPECT_TRUE(starts(replay_error(header_with(R"("rate": 2,)", R"("rate": 0,)"), nullptr),
                     "a.cap:1: plans.pro.P1.rate: must be"));
  EXPECT_TRUE(starts(replay_error(header_with(R"("plan": "lite")", R"("plan": "gold")"), nullptr),
                     "a.cap:1: plans: no plan \"gold\", which participant \"bob\" has"));
  EXPECT_TRUE(starts(replay_error(header_with(R"("slots": 64)", R"("slots": null)"), nullptr),
                     "a.cap:1: server.slots: is null"));
  // --slots gives the room a capture without a slot count lacks.
  auto r = read_one(header_with(R"("slots": 64)", R"("slots": null)") + "\n");
  ASSERT_TRUE(std::holds_alternative<Capture>(r));
  auto s = sim::replay_scenario(std::get<Capture>(r), nullptr, 3, "a.cap");
  ASSERT_TRUE(std::holds_alternative<sim::Scenario>(s));
  EXPECT_EQ(std::get<sim::Scenario>(s).slots, 3u);

  const sim::PlanFile unknown = plan_file(
      R"({"plans": {"pro": {"P1": {"rate": 2, "burst": 4}}, "lite": {}},
          "participants": [{"name": "carol", "shares": 2}]})");
  EXPECT_TRUE(starts(replay_error(kHeader, &unknown),
                     "p.json: participants[0].name: no participant \"carol\" in the capture"));
  const sim::PlanFile missing = plan_file(R"({"plans": {"pro": {"P1": {"rate": 2, "burst": 4}}}})");
  EXPECT_TRUE(starts(replay_error(kHeader, &missing), "p.json: plans: no plan \"lite\""));
  const sim::PlanFile bad_burst =
      plan_file(R"({"plans": {"pro": {"P1": {"rate": 2, "burst": 0}}, "lite": {}}})");
  EXPECT_TRUE(starts(replay_error(kHeader, &bad_burst), "p.json: plans.pro.P1.burst: must be"));
  const sim::PlanFile one_class =
      plan_file(R"({"classes": ["P1"], "plans": {"pro": {}, "lite": {}}})");
  EXPECT_TRUE(starts(replay_error(kHeader, &one_class),
                     "p.json: classes: has 1 metered class; the run has 2"));

  for (const char* text :
       {R"({"plans": {}, "extra": 1})", R"({"participants": []})",
        R"({"plans": {}, "participants": [{"name": "a", "weight": 2}]})",
        R"({"plans": {}, "participants": [{"name": "a", "shares": 0}]})", "[1"}) {
    auto p = sim::parse_plan_file(text);
    EXPECT_TRUE(std::holds_alternative<sim::Refusal>(p)) << text;
  }
}

TEST(CaptureReader, PlansFileChangesOnlyTheParticipantsItNames) {
  auto r = read_one(kH);
  ASSERT_TRUE(std::holds_alternative<Capture>(r));
  const sim::PlanFile more = plan_file(
      R"({"plans": {"pro": {"P1": {"rate": 3, "burst": 4}}, "lite": {"P2": {"rate": 1, "burst": 1}}},
          "participants": [{"name": "bob", "plan": "pro", "shares": 3}]})");
  auto s = sim::replay_scenario(std::get<Capture>(r), &more, std::nullopt, "a.cap");
  ASSERT_TRUE(std::holds_alternative<sim::Scenario>(s)) << std::get<sim::Refusal>(s).message;
  const sim::Scenario& scenario = std::get<sim::Scenario>(s);
  EXPECT_EQ(scenario.participants[0].plan, "pro");
  EXPECT_EQ(scenario.participants[0].shares, 1u);
  EXPECT_EQ(scenario.participants[1].plan, "pro");
  EXPECT_EQ(scenario.participants[1].shares, 3u);
  ASSERT_EQ(scenario.config.plans.size(), 2u);
}

}  // namespace
