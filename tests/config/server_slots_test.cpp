// creditloop-server's `slots`: a number, "auto", or {"auto": {"min": N, "max": N}} (a room
// learned between those bounds); anything else is refused with a message naming the field.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "server_config_text.hpp"

namespace {

using creditloop::RoomBounds;
using creditloop::server::ServerConfig;

std::string file_with_slots(const std::string& slots) {
  return R"({"plans": {"pro": {"P1": {"rate": 2, "burst": 4}}}, "slots": )" + slots + "}";
}

ServerConfig accepted(const std::string& slots) {
  return creditloop::server::test::accepted_config(file_with_slots(slots));
}

std::string refusal(const std::string& slots) {
  return creditloop::server::test::refusal_of(file_with_slots(slots));
}

TEST(ServerSlots, ANumberIsAFixedRoom) {
  const ServerConfig c = accepted("12");
  EXPECT_EQ(c.slots, 12u);
  EXPECT_FALSE(c.learned_room);
}

TEST(ServerSlots, AutoLearnsBetweenTheDefaultBounds) {
  const ServerConfig c = accepted(R"("auto")");
  ASSERT_TRUE(c.learned_room);
  EXPECT_EQ(*c.learned_room, (RoomBounds{1, 256}));
}

TEST(ServerSlots, AutoTakesItsBounds) {
  EXPECT_EQ(accepted(R"({"auto": {"min": 2, "max": 64}})").learned_room, (RoomBounds{2, 64}));
  EXPECT_EQ(accepted(R"({"auto": {}})").learned_room, (RoomBounds{1, 256}));
  // A least above the default most, without a most: the room is that least.
  EXPECT_EQ(accepted(R"({"auto": {"min": 300}})").learned_room, (RoomBounds{300, 300}));
}

TEST(ServerSlots, BadFormsNameTheField) {
  const std::string forms =
      R"(slots: must be a number of slots, "auto", or {"auto": {"min": N, "max": N}})";
  EXPECT_EQ(refusal(R"("automatic")"), forms + R"(, got "automatic")");
  EXPECT_EQ(refusal("true"), forms);
  EXPECT_EQ(refusal("[8]"), forms);
  EXPECT_EQ(refusal("0"), "slots: must be from 1 to 1000000, got 0");
  EXPECT_EQ(refusal("8.5"), "slots: must be a whole number from 1 to 1000000");
  EXPECT_EQ(refusal("{}"), "slots.auto: is required in an object (the learned room's bounds)");
  EXPECT_EQ(refusal(R"({"auto": 8})"), R"(slots.auto: must be an object: {"min": N, "max": N})");
  EXPECT_EQ(refusal(R"({"auto": {}, "max": 8})"), "slots.max: unknown field");
  EXPECT_EQ(refusal(R"({"auto": {"mni": 1}})"), "slots.auto.mni: unknown field");
  EXPECT_EQ(refusal(R"({"auto": {"min": 0}})"), "slots.auto.min: must be from 1 to 1000000, got 0");
  EXPECT_EQ(refusal(R"({"auto": {"min": 9, "max": 8}})"),
            "slots.auto.min: must be at most slots.auto.max (8), got 9");
}

TEST(ServerSlots, ALearnedRoomChangesOnlyAtRestart) {
  const ServerConfig fixed = accepted("8");
  const ServerConfig learned = accepted(R"("auto")");
  const ServerConfig narrower = accepted(R"({"auto": {"max": 16}})");
  EXPECT_EQ(creditloop::server::reload_problem(fixed, learned), "slots: changes only at restart");
  EXPECT_EQ(creditloop::server::reload_problem(learned, narrower),
            "slots: changes only at restart");
  EXPECT_EQ(creditloop::server::reload_problem(learned, learned), std::nullopt);
}

}  // namespace
