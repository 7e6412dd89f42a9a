// docs/contract.md §4 through the core: nine decimal places, an exact credit test, no drift, and
// the documented limits (units.hpp) accepted at the limit, refused above it, and free of overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "harness.hpp"

namespace creditloop::test {
namespace {

// 1/3 credit per second: 0.333333333 at nine decimals, 333333333 units per second.
Config third(double burst = 1) {
  return make_config(1, {make_plan("third", {{0, {1.0 / 3.0, burst}}})});
}

TEST(Numbers, AGapWiderThanHalfTheClockRefills) {
  // Registered long before 0 and read at the clock's end: the gap exceeds INT64_MAX.
  Rig rig(third(2));
  const Nanos start = -4'000'000'000'000;
  const ParticipantId a = rig.core.add("A", "third", 1, start).value();
  Req r;
  ASSERT_TRUE(rig.core.submit(a, r, start).ok());
  ASSERT_TRUE(rig.core.begin_turn(start).has_value());
  const std::optional<Decision> d = rig.core.visit(start);
  ASSERT_TRUE(d.has_value());
  ASSERT_TRUE(rig.core.complete(d->ticket, 1000, start).ok());  // deep debt: -999 credits
  const Nanos end = std::numeric_limits<Nanos>::max() - 1;
  EXPECT_EQ(str(*rig.core.balance(a, 0, end)), "2000000000");  // refilled to the cap
}

TEST(Numbers, NineDecimalPlaces) {
  Rig rig(make_config(1, {make_plan("down", {{0, {0.1234567894, 1.5000000004}}}),
                          make_plan("up", {{0, {0.1234567896, 1.0000000006}}})}));
  const ParticipantId a = rig.add("A", "down");
  const ParticipantId b = rig.add("B", "up");
  EXPECT_EQ(rig.bals(a, 0, 0), "1500000000");
  EXPECT_EQ(rig.bals(b, 0, 0), "1000000001");
  rig.submit(a, 1);
  rig.submit(b, 1);
  EXPECT_EQ(rig.turn(0), "P1: A B");
  EXPECT_EQ(rig.bals(a, 0, kSec), "623456789");  // 0.5 + 0.123456789
  EXPECT_EQ(rig.bals(b, 0, kSec), "123456791");  // 0.000000001 + 0.123456790
}

TEST(Numbers, CostTakenToNineDecimals) {
  Rig rig(make_config(1, {make_plan("p", {{0, {1, 10}}})}));
  const ParticipantId a = rig.add("A", "p");
  rig.submit(a, 2);
  rig.drain(0);
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 2.6e-9, 0).ok());
  EXPECT_EQ(str(rig.core.stats(a).cost_charged), "3");
  ASSERT_TRUE(rig.core.complete(rig.log[1].ticket, 2.4e-9, 0).ok());
  EXPECT_EQ(str(rig.core.stats(a).cost_charged), "5");
  EXPECT_EQ(rig.bals(a, 0, 0), "7999999995");
}

TEST(Numbers, CreditTestIsExact) {
  // From 0 at 1/3 per second the credit needs T*333333333 >= 1e18 units of 1e-18:
  // T = 3000000003 gives 999999999999999999 (no), T = 3000000004 is the first that does.
  Rig rig(third());
  const ParticipantId a = rig.add("A", "third");
  rig.submit(a, 2);
  EXPECT_EQ(rig.turn(0), "P1: A");
  EXPECT_EQ(rig.bals(a, 0, 3'000'000'003), "999999999");
  EXPECT_FALSE(rig.core.qualifies(a, 0, 3'000'000'003));
  EXPECT_EQ(rig.core.begin_turn(3'000'000'003), std::optional<ClassId>(1));
  rig.core.end_turn();
  EXPECT_TRUE(rig.core.qualifies(a, 0, 3'000'000'004));
  EXPECT_EQ(rig.bals(a, 0, 3'000'000'004), "1000000000");
  EXPECT_EQ(rig.core.begin_turn(3'000'000'004), std::optional<ClassId>(0));
}

TEST(Numbers, RateTakenToNineDecimalsBeforeShares) {
  // Three shares of 0.333333333/s refill 0.999999999/s, not 1/s: after 1 s, one unit short;
  // (1e9 + 1) ns give 999999999.999999999 units (floor 999999999), (1e9 + 2) ns 1000000000.99.
  Rig rig(third());
  const ParticipantId a = rig.add("A", "third", 3);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(3));
  rig.submit(a, 4);
  EXPECT_EQ(rig.drain(0, 3), "P1: A | P1: A | P1: A");
  EXPECT_EQ(rig.bals(a, 0, kSec), "999999999");
  EXPECT_FALSE(rig.core.qualifies(a, 0, kSec + 1));
  EXPECT_TRUE(rig.core.qualifies(a, 0, kSec + 2));
}

TEST(Numbers, NoDriftAcrossManyReads) {
  // A read at every nanosecond carries the remainder of each division: after each read the
  // balance is exactly floor(t * 333333333 / 1e9), and the credit still lands at 3000000004.
  Rig rig(third());
  const ParticipantId a = rig.add("A", "third");
  rig.submit(a, 2);
  EXPECT_EQ(rig.turn(0), "P1: A");
  for (std::int64_t t = 1; t <= 300'000; ++t) {
    const Result<Balance> b = rig.core.balance(a, 0, t);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(str(*b), std::to_string(t * 333'333'333 / 1'000'000'000)) << t;
  }
  for (std::int64_t t = 300'000; t < 3'000'000'003; t += 7'777'777) {
    ASSERT_TRUE(rig.core.balance(a, 0, t).ok());
  }
  EXPECT_FALSE(rig.core.qualifies(a, 0, 3'000'000'003));
  EXPECT_TRUE(rig.core.qualifies(a, 0, 3'000'000'004));
}

Config at_limits() {
  return make_config(1, {make_plan("max", {{0, {kMaxRate, kMaxBurst}}}),
                         make_plan("deep", {{0, {1, kMaxBurst}}})});
}

// kMaxShares x kMaxBurst credits, in units.
Balance top_cap() {
  return static_cast<Balance>(kMaxShares) * static_cast<std::int64_t>(kMaxBurst) * kCredit;
}

TEST(Numbers, LimitsAreDocumentedAndEnforced) {
  Rig rig(at_limits());
  // Shares: the limit is accepted, one more is refused, and so is 0.
  const Result<ParticipantId> top = rig.core.add("top", "max", kMaxShares, 0);
  ASSERT_TRUE(top.ok());
  const Result<ParticipantId> over = rig.core.add("over", "max", kMaxShares + 1, 0);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error(), Errc::bad_shares);
  // Cost: the limit is accepted, the next double above it is refused.
  rig.submit(*top, 3);
  rig.drain(0);
  ASSERT_EQ(rig.log.size(), 3u);
  EXPECT_TRUE(rig.core.complete(rig.log[0].ticket, kMaxCost, 0).ok());
  const Result<Completion> too_much =
      rig.core.complete(rig.log[1].ticket, std::nextafter(kMaxCost, 2 * kMaxCost), 0);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.error(), Errc::bad_cost);
  const std::int64_t max_nano = 1'000'000'000'000'000;  // kMaxCost credits
  const Result<Completion> too_much_nano =
      rig.core.complete_nano(rig.log[1].ticket, max_nano + 1, 0);
  ASSERT_FALSE(too_much_nano.ok());
  EXPECT_EQ(too_much_nano.error(), Errc::bad_cost);
  EXPECT_TRUE(rig.core.complete_nano(rig.log[1].ticket, max_nano, 0).ok());
}

TEST(Numbers, NothingOverflowsAtTheLimits) {
  // kMaxShares x kMaxBurst credits of capacity, refilled at kMaxShares x kMaxRate credits/s,
  // that is kMaxShares x kMaxRate units per nanosecond.
  Rig rig(at_limits());
  const ParticipantId a = rig.add("A", "max", kMaxShares);
  const Balance cap = top_cap();
  const Balance per_ns = static_cast<Balance>(kMaxShares) * static_cast<std::int64_t>(kMaxRate);
  EXPECT_EQ(rig.bals(a, 0, 0), str(cap));
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, kMaxCost, 0).ok());
  const Balance after = cap - credits(1) - credits(1'000'000);
  EXPECT_EQ(rig.bals(a, 0, 0), str(after));
  EXPECT_EQ(rig.bals(a, 0, 1), str(after + per_ns));
  EXPECT_EQ(rig.bals(a, 0, 3600 * kSec), str(cap));
  EXPECT_EQ(rig.bals(a, 0, INT64_MAX), str(cap));
}

TEST(Numbers, DebtGrowsPast64Bits) {
  // 2 x kMaxBurst requests admitted by P1 (two shares), each charged back kMaxCost: a debt of
  // 2e4 x 1e15 = 2e19 units, beyond any 64-bit integer, and exact.
  Rig rig(at_limits());
  const ParticipantId a = rig.add("A", "deep", 2);
  const int n = 2 * static_cast<int>(kMaxBurst);
  rig.submit(a, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(rig.turn(0), "P1: A");
  for (const Seen& s : rig.log) {
    ASSERT_TRUE(rig.core.complete_nano(s.ticket, 1'000'000'000'000'000, 0).ok());
  }
  const Balance debt = -static_cast<Balance>(1'000'000'000'000'000) * n;
  EXPECT_TRUE(debt < static_cast<Balance>(INT64_MIN));
  EXPECT_EQ(rig.bals(a, 0, 0), str(debt));
  EXPECT_EQ(rig.bals(a, 0, kSec), str(debt + credits(2)));
  EXPECT_EQ(str(rig.core.stats(a).cost_charged), str(-debt));
}

}  // namespace
}  // namespace creditloop::test
