// Bad scenarios: one line on standard error naming the field, nothing on standard output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim_process.hpp"

namespace creditloop::sim_test {
namespace {

// ---- bad scenarios ----------------------------------------------------------------------------

struct BadCase {
  const char* name;
  std::function<std::string()> text;
  const char* field;  // the path the one stderr line must name, followed by ':'
};

// Names the case in test listings instead of a dump of its bytes.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

std::function<std::string()> edit(std::function<void(json&)> f) {
  return [f] {
    json s = json::parse(kContractExample);
    f(s);
    return s.dump(2);
  };
}

std::function<std::string()> raw(std::string text) {
  return [text] { return text; };
}

// A table of cases, one entry each: long by nature, not by logic.
const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      // keys the format does not define, anywhere
      {"UnknownTopKey", edit([](json& s) { s["colour"] = 1; }), "colour"},
      {"UnknownServerKey", edit([](json& s) { s["server"]["cores"] = 2; }), "server.cores"},
      {"UnknownTermsKey", edit([](json& s) { s["plans"]["pro"]["P1"]["speed"] = 1; }),
       "plans.pro.P1.speed"},
      {"UnknownParticipantKey", edit([](json& s) { s["participants"][0]["weight"] = 1; }),
       "participants[0].weight"},
      {"UnknownArrivalKey", edit([](json& s) { s["arrivals"][1]["size"] = 1; }),
       "arrivals[1].size"},
      {"UnmeteredClassInPlan",
       edit([](json& s) { s["plans"]["lite"]["P3"] = s["plans"]["lite"]["P2"]; }), "plans.lite.P3"},
      // negative times
      {"NegativeAt", edit([](json& s) { s["arrivals"][0]["at"] = -1; }), "arrivals[0].at"},
      {"NegativeEvery", edit([](json& s) { s["arrivals"][1]["every"] = -0.5; }),
       "arrivals[1].every"},
      {"NegativeService", edit([](json& s) { s["arrivals"][1]["service"] = -0.1; }),
       "arrivals[1].service"},
      {"NegativeUntil", edit([](json& s) { s["until"] = -5; }), "until"},
      // whole numbers
      {"FractionalCount", edit([](json& s) { s["arrivals"][1]["count"] = 2.5; }),
       "arrivals[1].count"},
      {"NegativeCount", edit([](json& s) { s["arrivals"][1]["count"] = -1; }), "arrivals[1].count"},
      {"FractionalSlots", edit([](json& s) { s["server"]["slots"] = 1.5; }), "server.slots"},
      {"ZeroSlots", edit([](json& s) { s["server"]["slots"] = 0; }), "server.slots"},
      {"FractionalShares", edit([](json& s) { s["participants"][0]["shares"] = 2.5; }),
       "participants[0].shares"},
      // classes
      {"ClassesSkipOne", edit([](json& s) { s["classes"] = json::parse(R"(["P1", "P3"])"); }),
       "classes[1]"},
      {"ClassesLowercase", edit([](json& s) { s["classes"] = json::parse(R"(["p1"])"); }),
       "classes[0]"},
      {"ClassesEmpty", edit([](json& s) { s["classes"] = json::array(); }), "classes"},
      {"ClassesEight", edit([](json& s) {
         s["classes"] = seven_classes();
         s["classes"].push_back("P8");
       }),
       "classes"},
      {"ClassesNotArray", edit([](json& s) { s["classes"] = "P1"; }), "classes"},
      // names
      {"UnknownPlan", edit([](json& s) { s["participants"][1]["plan"] = "gold"; }),
       "participants[1].plan"},
      {"UnknownParticipant", edit([](json& s) { s["arrivals"][0]["participant"] = "carol"; }),
       "arrivals[0].participant"},
      {"DuplicateParticipant", edit([](json& s) { s["participants"][1]["name"] = "alice"; }),
       "participants[1].name"},
      // shares, rate, burst, cost, slots
      {"ZeroShares", edit([](json& s) { s["participants"][0]["shares"] = 0; }),
       "participants[0].shares"},
      {"SharesAboveLimit", edit([](json& s) { s["participants"][1]["shares"] = 1000001; }),
       "participants[1].shares"},
      {"ZeroRate", edit([](json& s) { s["plans"]["pro"]["P1"]["rate"] = 0; }), "plans.pro.P1.rate"},
      {"NegativeRate", edit([](json& s) { s["plans"]["lite"]["P2"]["rate"] = -2; }),
       "plans.lite.P2.rate"},
      {"RateRoundsToZero", edit([](json& s) { s["plans"]["pro"]["P2"]["rate"] = 1e-12; }),
       "plans.pro.P2.rate"},
      {"InfiniteRate",
       raw(R"({"plans": {"pro": {"P1": {"rate": 1e999, "burst": 4}}}, "server": {"slots": 1},
               "participants": [], "arrivals": []})"),
       "plans.pro.P1.rate"},
      {"BurstBelowOne", edit([](json& s) { s["plans"]["pro"]["P1"]["burst"] = 0.5; }),
       "plans.pro.P1.burst"},
      {"NegativeCost", edit([](json& s) { s["arrivals"][1]["cost"] = -1; }), "arrivals[1].cost"},
      {"CostAboveLimit", edit([](json& s) { s["arrivals"][0]["cost"] = 2e6; }), "arrivals[0].cost"},
      {"NegativeWithdrawAfter", edit([](json& s) { s["arrivals"][1]["withdraw_after"] = -0.5; }),
       "arrivals[1].withdraw_after"},
      {"WithdrawAfterString", edit([](json& s) { s["arrivals"][0]["withdraw_after"] = "1"; }),
       "arrivals[0].withdraw_after"},
      {"WithdrawAfterBeyondTheClock", edit([](json& s) {
         s["arrivals"][0]["count"] = 10;
         s["arrivals"][0]["every"] = 1e9;  // the tenth arrives at 9e18 ns, within the clock
         s["arrivals"][0]["withdraw_after"] = 1e9;
         s.erase("until");
       }),
       "arrivals[0].withdraw_after"},
      // wrong JSON types
      {"PlansArray", edit([](json& s) { s["plans"] = json::array(); }), "plans"},
      {"ParticipantsObject", edit([](json& s) { s["participants"] = json::object(); }),
       "participants"},
      {"ArrivalNumber", edit([](json& s) { s["arrivals"][0] = 3; }), "arrivals[0]"},
      {"NameNumber", edit([](json& s) { s["participants"][0]["name"] = 7; }),
       "participants[0].name"},
      {"SlotsBoolean", edit([](json& s) { s["server"]["slots"] = true; }), "server.slots"},
      {"CountString", edit([](json& s) { s["arrivals"][1]["count"] = "3"; }), "arrivals[1].count"},
      {"UntilString", edit([](json& s) { s["until"] = "5"; }), "until"},
      {"TermsNumber", edit([](json& s) { s["plans"]["pro"]["P2"] = 5; }), "plans.pro.P2"},
      {"TopLevelArray", raw("[1, 2]"), "scenario"},
      // missing required fields
      {"MissingAt", edit([](json& s) { s["arrivals"][0].erase("at"); }), "arrivals[0].at"},
      {"MissingServer", edit([](json& s) { s.erase("server"); }), "server"},
      {"MissingSlots", edit([](json& s) { s["server"].erase("slots"); }), "server.slots"},
      // the learned room and the backend (an extension of contract §6)
      {"SlotsNeitherNumberNorAuto", edit([](json& s) { s["server"]["slots"] = "many"; }),
       "server.slots"},
      {"AutoUnknownBound",
       edit([](json& s) { s["server"]["slots"] = json::parse(R"({"auto": {"least": 2}})"); }),
       "server.slots.auto.least"},
      {"AutoMaxBelowMin", edit([](json& s) {
         s["server"]["slots"] = json::parse(R"({"auto": {"min": 8, "max": 4}})");
       }),
       "server.slots.auto.max"},
      {"AutoMinZero",
       edit([](json& s) { s["server"]["slots"] = json::parse(R"({"auto": {"min": 0}})"); }),
       "server.slots.auto.min"},
      {"BackendUnknownKey",
       edit([](json& s) { s["server"]["backend"] = json::parse(R"({"latency": 1})"); }),
       "server.backend.latency"},
      {"BackendNoSteps",
       edit([](json& s) { s["server"]["backend"] = json::parse(R"({"capacity": []})"); }),
       "server.backend.capacity"},
      {"BackendFirstStepLate", edit([](json& s) {
         s["server"]["backend"] = json::parse(R"({"capacity": [{"at": 1, "capacity": 2}]})");
       }),
       "server.backend.capacity[0].at"},
      {"BackendStepsOutOfOrder", edit([](json& s) {
         s["server"]["backend"] =
             json::parse(R"({"capacity": [{"at": 0, "capacity": 2}, {"at": 0, "capacity": 3}]})");
       }),
       "server.backend.capacity[1].at"},
      {"BackendCapacityZero", edit([](json& s) {
         s["server"]["backend"] = json::parse(R"({"capacity": [{"at": 0, "capacity": 0}]})");
       }),
       "server.backend.capacity[0].capacity"},
      {"BackendSlowdownZero", edit([](json& s) {
         s["server"]["backend"] =
             json::parse(R"({"capacity": [{"at": 0, "capacity": 1, "slowdown": 0}]})");
       }),
       "server.backend.capacity[0].slowdown"},
      {"MissingPlan", edit([](json& s) { s["participants"][1].erase("plan"); }),
       "participants[1].plan"},
      {"MissingBurst", edit([](json& s) { s["plans"]["lite"]["P2"].erase("burst"); }),
       "plans.lite.P2.burst"},
      {"MissingArrivalParticipant", edit([](json& s) { s["arrivals"][1].erase("participant"); }),
       "arrivals[1].participant"},
      // malformed JSON, and a key given twice (which a plain parse would hide)
      {"Truncated", raw(R"({"plans": {}, "server": {"slots": 1)"), "scenario"},
      {"TrailingComma", raw(R"({"plans": {}, "server": {"slots": 1},})"), "scenario"},
      {"Empty", raw(""), "scenario"},
      {"DuplicateKey", raw(R"({"plans": {}, "server": {"slots": 1, "slots": 2}, "participants": [],
               "arrivals": []})"),
       "server.slots"},
      {"DuplicateKeyInArray",
       raw(R"({"plans": {"p": {}}, "server": {"slots": 1}, "participants": [{"name": "a", "plan": "p"}],
               "arrivals": [{"at": 0, "participant": "a"},
                            {"at": 1, "participant": "a", "cost": 2, "cost": 3}]})"),
       "arrivals[1].cost"},
  };
  return cases;
}

class BadScenario : public SimTest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(BadScenario, OneStderrLineNamingTheFieldAndNoStdout) {
  const BadCase& c = GetParam();
  const Output o = run_sim({write("bad.json", c.text())});
  EXPECT_NE(o.status, 0);
  EXPECT_EQ(o.out, "") << "stdout must stay empty";
  ASSERT_FALSE(o.err.empty());
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_EQ(o.err.back(), '\n');
  EXPECT_NE(o.err.find(std::string(" ") + c.field + ":"), std::string::npos)
      << "stderr does not name " << c.field << ": " << o.err;
}

INSTANTIATE_TEST_SUITE_P(Sim, BadScenario, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& param) {
                           return std::string(param.param.name);
                         });

}  // namespace
}  // namespace creditloop::sim_test
