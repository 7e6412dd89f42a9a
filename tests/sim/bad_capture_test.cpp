// A capture the reader refuses: one line naming the file, the line and the field.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "capture_file.hpp"
#include "sim/capture_text.hpp"

namespace sim = creditloop::sim;

namespace {

using creditloop::test::error_of;
using creditloop::test::header_with;
using creditloop::test::kH;
using creditloop::test::request;
using creditloop::test::starts;
using sim::CaptureText;

struct BadCapture {
  const char* name;
  std::string text;
  const char* starts;  // the one line's beginning: file, line, field
};

void PrintTo(const BadCapture& c, std::ostream* os) { *os << c.name; }

class BadCaptureTest : public ::testing::TestWithParam<BadCapture> {};

TEST_P(BadCaptureTest, OneLineNamingFileLineAndField) {
  const BadCapture& c = GetParam();
  const std::string message = error_of({CaptureText{"a.cap", c.text}});
  EXPECT_TRUE(starts(message, c.starts));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadCaptureTest,
    ::testing::Values(
        BadCapture{"empty", "", "a.cap: empty file"},
        BadCapture{"not_a_capture", "{\"classes\": [\"P1\"]}\n",
                   "a.cap:1: not a creditloop capture"},
        BadCapture{"version_2", header_with(R"("version": 1)", R"("version": 2)"),
                   "a.cap:1: version: unknown capture version 2"},
        BadCapture{"header_malformed", "{\"capture\": \"creditloop\",\n",
                   "a.cap:1: malformed JSON"},
        BadCapture{"no_classes", header_with(R"( "classes": ["P1", "P2"],)", ""),
                   "a.cap:1: classes: missing required field"},
        BadCapture{"bad_slots", header_with(R"("slots": 64)", R"("slots": 0)"),
                   "a.cap:1: server.slots: must be a whole number"},
        BadCapture{"scale", header_with(R"("shares": 1},)", R"("shares": 1, "scale": 500000},)"),
                   "a.cap:1: participants[0].scale: a participant holding part of its plan"},
        BadCapture{"line_malformed", kH + request("alice", "0", "0", "1") + "\n{\"ev\": \n",
                   "a.cap:3: malformed JSON"},
        BadCapture{"unknown_participant", kH + request("carol", "0", "0", "1"),
                   "a.cap:2: participant: unknown participant \"carol\""},
        BadCapture{"no_complete",
                   kH + R"({"ev": "request", "participant": "alice", "arrive": 0, "dispatch": 0,)"
                        R"( "class": "P1", "cost": 0})",
                   "a.cap:2: complete: missing required field"},
        BadCapture{"negative_time", kH + request("alice", "-0.5", "0", "1"),
                   "a.cap:2: arrive: must be a time in seconds"},
        BadCapture{"string_time", kH + request("alice", "\"0\"", "0", "1"),
                   "a.cap:2: arrive: must be a time in seconds"},
        BadCapture{"dispatch_first", kH + request("alice", "1", "0.5", "2"),
                   "a.cap:2: dispatch: is before arrive"},
        BadCapture{"complete_first", kH + request("alice", "0", "1", "0.5"),
                   "a.cap:2: complete: is before dispatch"},
        BadCapture{"class_p4", kH + request("alice", "0", "0", "1", "P4"),
                   "a.cap:2: class: must be one of P1..P3"},
        BadCapture{"negative_cost", kH + request("alice", "0", "0", "1", "P1", "-1"),
                   "a.cap:2: cost: must be a number of credits"},
        BadCapture{"replan",
                   kH + R"({"ev": "plan", "t": 0.5, "participant": "bob", "plan": "pro"})",
                   "a.cap:2: ev: \"plan\": re-planning participant \"bob\""},
        BadCapture{"add_after_remove",
                   kH + R"({"ev": "remove", "t": 0.5, "participant": "bob"})" + "\n" +
                       R"({"ev": "plan", "t": 0.6, "participant": "carol", "plan": "pro"})",
                   "a.cap:3: ev: \"plan\": adding participant \"carol\" after participant "
                   "\"bob\" was removed"},
        BadCapture{"add_again",
                   kH + R"({"ev": "remove", "t": 0.5, "participant": "bob"})" + "\n" +
                       R"({"ev": "plan", "t": 0.6, "participant": "bob", "plan": "lite"})",
                   "a.cap:3: ev: \"plan\": adding participant \"bob\" again"},
        BadCapture{"scaled",
                   kH + R"({"ev": "plan", "t": 0.5, "participant": "bob", "plan": "lite",)"
                        R"( "shares": 1, "scale": 250000})",
                   "a.cap:2: scale: a participant holding part of its plan"},
        BadCapture{"add_unknown_plan",
                   kH + R"({"ev": "plan", "t": 0.5, "participant": "carol", "plan": "gold"})",
                   "a.cap:2: plan: unknown plan \"gold\""},
        BadCapture{"remove_unknown", kH + R"({"ev": "remove", "t": 0.9, "participant": "carol"})",
                   "a.cap:2: participant: unknown participant \"carol\""},
        BadCapture{"dropped_count", kH + R"({"ev": "dropped", "t": 1, "requests": -3})",
                   "a.cap:2: requests: must be a whole number"}),
    [](const ::testing::TestParamInfo<BadCapture>& param) {
      return std::string(param.param.name);
    });

}  // namespace
