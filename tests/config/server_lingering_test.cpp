// creditloop-server's lingering close: `limits.lingering_time_ms` and `lingering_timeout_ms`,
// nginx's lingering_time and lingering_timeout with their defaults (30 s and 5 s). A lingering
// time of 0 closes at once; a timeout of 0 would end every drain before its first read, and is
// refused with a message naming the field.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "server_config_text.hpp"

namespace {

using namespace std::chrono_literals;
using creditloop::server::Limits;

std::string file_with_limits(const std::string& limits) {
  return R"({"plans": {"pro": {"P1": {"rate": 2, "burst": 4}}}, "slots": 4, "limits": )" + limits +
         "}";
}

Limits accepted(const std::string& limits) {
  return creditloop::server::test::accepted_config(file_with_limits(limits)).limits;
}

std::string refusal(const std::string& limits) {
  return creditloop::server::test::refusal_of(file_with_limits(limits));
}

TEST(ServerLingering, NginxsDefaults) {
  const Limits l = accepted("{}");
  EXPECT_EQ(l.lingering_time, 30s);
  EXPECT_EQ(l.lingering_timeout, 5s);
}

TEST(ServerLingering, GivenInMilliseconds) {
  const Limits l = accepted(R"({"lingering_time_ms": 0, "lingering_timeout_ms": 250})");
  EXPECT_EQ(l.lingering_time, 0ms);
  EXPECT_EQ(l.lingering_timeout, 250ms);
}

TEST(ServerLingering, ATimeoutOfZeroIsRefused) {
  EXPECT_EQ(refusal(R"({"lingering_timeout_ms": 0})"),
            "limits.lingering_timeout_ms: must be from 1 to 86400000, got 0");
  EXPECT_EQ(refusal(R"({"lingering_time_ms": -1})"),
            "limits.lingering_time_ms: must be a whole number from 0 to 86400000");
}

}  // namespace
