// A participant given a fraction of its plan (Core::scale): exact scaled terms, the balance kept
// and clipped, the credit instant re-filed, a later re-plan keeping the fraction, and refusals.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "harness.hpp"

namespace creditloop::test {
namespace {

__extension__ typedef unsigned __int128 U128;

// slow: P1 {1/s, 1000}; pro: P1 {1/s, 10}, P2 {1/s, 10}; odd: P1 {3/s, 7}; trickle: P1 at one
// nano-credit per second, burst 5; free: nothing.
Config plans() {
  return make_config(
      2, {make_plan("slow", {{0, {1, 1000}}}), make_plan("pro", {{0, {1, 10}}, {1, {1, 10}}}),
          make_plan("odd", {{0, {3, 7}}}), make_plan("trickle", {{0, {1e-9, 5}}}),
          make_plan("free", {})});
}

PlanId plan_id(Rig& rig, std::string_view name) { return rig.core.find_plan(name).value(); }

// What the contract says a scaled term is: whole x millionths / 1e6, rounded down, computed here on
// its own rather than by the core's code.
std::int64_t scaled(std::int64_t whole, std::uint32_t millionths) {
  return static_cast<std::int64_t>(static_cast<U128>(whole) * millionths / 1'000'000u);
}

// The first instant at which a balance of `balance` nano-credits, with no fraction carried,
// refilling from `from` at `rate` nano-credits per second, reaches one credit.
Nanos credit_at(Nanos from, std::int64_t balance, std::int64_t rate) {
  const auto missing = static_cast<U128>(kCredit - balance) * 1'000'000'000u;
  return from +
         static_cast<Nanos>((missing + static_cast<U128>(rate) - 1) / static_cast<U128>(rate));
}

TEST(Scale, ANewParticipantHasTheWholePlan) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  EXPECT_EQ(rig.core.scale_of(a), kWholePlan);
  ASSERT_TRUE(rig.core.scale(a, 250'000, 0).ok());
  EXPECT_EQ(rig.core.scale_of(a), 250'000u);
  // A new registration in the same place starts whole again.
  ASSERT_TRUE(rig.core.remove(a).ok());
  const ParticipantId b = rig.add("B", "pro");
  EXPECT_EQ(b.place, a.place);
  EXPECT_EQ(rig.core.scale_of(b), kWholePlan);
  EXPECT_EQ(rig.bal(b, 0, 0), credits(10));
}

TEST(Scale, TheBalanceIsRefilledAtTheOldTermsThenClipped) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "slow");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 999, 0).ok());  // 1000 - 1 - 999 = 0
  // Two seconds at 1/s, then two at a quarter of that: 2 + 0.5.
  ASSERT_TRUE(rig.core.scale(a, 250'000, 2 * kSec).ok());
  EXPECT_EQ(rig.bal(a, 0, 2 * kSec), credits(2));  // kept: below the new capacity of 250
  EXPECT_EQ(rig.bals(a, 0, 4 * kSec), "2500000000");
  // Clipped: a full bucket of 10 at a quarter holds 2.5.
  const ParticipantId b = rig.add("B", "pro", 1, 4 * kSec);
  ASSERT_TRUE(rig.core.scale(b, 250'000, 4 * kSec).ok());
  EXPECT_EQ(rig.bals(b, 0, 4 * kSec), "2500000000");
  EXPECT_EQ(rig.bals(b, 1, 4 * kSec), "2500000000");
  // Scaled up again, it is not refilled by the change: it climbs from 2.5 at the whole rate.
  ASSERT_TRUE(rig.core.scale(b, kWholePlan, 5 * kSec).ok());
  EXPECT_EQ(rig.bals(b, 0, 5 * kSec), "2500000000");
  EXPECT_EQ(rig.bals(b, 0, 6 * kSec), "3500000000");
  EXPECT_EQ(rig.bal(b, 0, 100 * kSec), credits(10));
}

TEST(Scale, RateAndCapacityAreExactFractionsRoundedDown) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "odd", 3);  // 9 credits/s, capacity 21
  constexpr std::uint32_t kThird = 333'333;
  const std::int64_t rate = scaled(9 * kCredit, kThird);
  const std::int64_t cap = scaled(21 * kCredit, kThird);
  ASSERT_TRUE(rig.core.scale(a, kThird, 0).ok());
  EXPECT_EQ(rig.bal(a, 0, 0), cap);  // full, clipped
  // One dispatch and a charge of 7 leave a known debt.
  rig.submit(a, 2);
  EXPECT_EQ(rig.turn(0, 1), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 7, 0).ok());
  const std::int64_t debt = cap - kCredit - 7 * kCredit;
  ASSERT_LT(debt, 0);
  EXPECT_EQ(rig.bal(a, 0, 0), debt);
  // The refill runs at the scaled rate, to the nano-credit.
  EXPECT_EQ(rig.bal(a, 0, kSec / 2), debt + rate / 2);
  // The credit instant is the one the scaled rate gives, and the bucket qualifies exactly then.
  const Nanos at = credit_at(0, debt, rate);
  EXPECT_EQ(rig.core.next_credit(a, 0, kSec / 2), std::optional<Nanos>(at));
  EXPECT_FALSE(rig.core.qualifies(a, 0, at - 1));
  EXPECT_LT(rig.bal(a, 0, at - 1), kCredit);
  EXPECT_TRUE(rig.core.qualifies(a, 0, at));
  EXPECT_GE(rig.bal(a, 0, at), kCredit);
}

TEST(Scale, ToZeroOnlyUnmeteredDispatchRemains) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "slow");
  const ParticipantId b = rig.add("B", "slow");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");  // in flight, admitted by A's P1 bucket
  const Ticket earlier = rig.log[0].ticket;
  ASSERT_TRUE(rig.core.scale(a, 0, 0).ok());
  EXPECT_EQ(rig.bal(a, 0, 0), 0);
  rig.submit(a, 3);
  rig.submit(b, 1);
  // B still has its credits; A goes out unmetered only, whatever the time.
  EXPECT_EQ(rig.drain(0), "P1: B | P3: A | P3: A | P3: A");
  rig.submit(a, 1);
  EXPECT_EQ(rig.drain(1000 * kSec), "P3: A");
  EXPECT_EQ(rig.bal(a, 0, 1000 * kSec), 0);
  EXPECT_EQ(rig.core.next_credit(a, 0, 1000 * kSec), std::nullopt);
  // The request admitted before the change is still charged to its bucket: the debt is kept.
  const Result<Completion> c = rig.core.complete(earlier, 5, 1000 * kSec);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->charged);
  EXPECT_EQ(rig.bal(a, 0, 2000 * kSec), -credits(5));
  // Whole again, it repays the debt at the plan's rate from the change on.
  ASSERT_TRUE(rig.core.scale(a, kWholePlan, 2000 * kSec).ok());
  EXPECT_EQ(rig.core.next_credit(a, 0, 2000 * kSec), std::optional<Nanos>(2006 * kSec));
  rig.submit(a, 1);
  EXPECT_EQ(rig.drain(2006 * kSec - 1), "P3: A");
  rig.submit(a, 1);
  EXPECT_EQ(rig.drain(2006 * kSec), "P1: A");
}

// A rate that rounds to 0 on a capacity that still holds credits: the kept credits are spent,
// then no refill ever comes (and filing the spent bucket divides by nothing).
TEST(Scale, ARateRoundedToZeroSpendsTheKeptCreditsThenNeverRefills) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "trickle");  // 1 nano-credit/s, capacity 5
  ASSERT_TRUE(rig.core.scale(a, 500'000, 0).ok());  // rate 0.5 -> 0; capacity 2.5
  EXPECT_EQ(rig.bals(a, 0, 0), "2500000000");
  rig.submit(a, 3);
  EXPECT_EQ(rig.drain(0), "P1: A | P1: A | P3: A");
  EXPECT_EQ(rig.bals(a, 0, 0), "500000000");
  EXPECT_EQ(rig.core.next_credit(a, 0, 0), std::nullopt);
  rig.submit(a, 1);
  EXPECT_EQ(rig.drain(std::numeric_limits<Nanos>::max() / 2), "P3: A");
  EXPECT_EQ(rig.bals(a, 0, std::numeric_limits<Nanos>::max() / 2), "500000000");
}

TEST(Scale, AReplanKeepsTheScale) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  ASSERT_TRUE(rig.core.scale(a, 500'000, 0).ok());
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "slow"), 4, 0).ok());
  EXPECT_EQ(rig.core.scale_of(a), 500'000u);
  // P1 kept its 5 (half of 10); slow x 4 at a half: 2 credits/s up to 2000.
  EXPECT_EQ(rig.bal(a, 0, 0), credits(5));
  EXPECT_EQ(rig.bal(a, 0, 10 * kSec), credits(25));
  EXPECT_EQ(rig.bal(a, 0, 10'000 * kSec), credits(2000));
  // A newly held bucket starts full at the scaled capacity.
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "pro"), 1, 10'000 * kSec).ok());
  EXPECT_EQ(rig.bal(a, 1, 10'000 * kSec), credits(5));
  EXPECT_EQ(rig.bal(a, 0, 10'000 * kSec), credits(5));
}

TEST(Scale, RefusalsChangeNothing) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId gone = rig.add("G", "pro");
  ASSERT_TRUE(rig.core.remove(gone).ok());
  rig.submit(a, 2);
  EXPECT_EQ(rig.turn(0, 1), "P1: A");
  ASSERT_TRUE(rig.core.scale(a, 600'000, 0).ok());
  const std::string before = snapshot(rig.core, 0);
  for (const std::uint32_t bad : {kWholePlan + 1, std::numeric_limits<std::uint32_t>::max()}) {
    const Status s = rig.core.scale(a, bad, 50 * kSec);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error(), Errc::bad_scale);
  }
  const Status unknown = rig.core.scale(gone, 10, 50 * kSec);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error(), Errc::unknown_participant);
  EXPECT_EQ(rig.core.scale_of(a), 600'000u);
  // Nothing moved, not even the clock: a refused call does not count its `now` as seen.
  EXPECT_EQ(snapshot(rig.core, 0), before);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(6));  // 9 clipped to 6, and no more
  EXPECT_EQ(describe(Errc::bad_scale),
            "scale must be a whole number of millionths from 0 to 1000000");
  EXPECT_EQ(name(Errc::bad_scale), "bad_scale");
}

// A waiting participant without a credit is filed at its credit instant; a scale moves that
// instant, and it must become ready exactly at the new one, not the old.
TEST(Scale, AWaitingParticipantWhoseInstantMovesLaterIsReadyExactlyThen) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "slow");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 999, 0).ok());  // 0 credits
  rig.submit(a, 1);
  EXPECT_EQ(rig.core.next_credit(a, 0, 0), std::optional<Nanos>(kSec));  // filed at 1 s
  // At 0.5 s it has 0.5; at a quarter of the rate the rest takes 2 s more.
  ASSERT_TRUE(rig.core.scale(a, 250'000, kSec / 2).ok());
  const Nanos later = kSec / 2 + 2 * kSec;
  EXPECT_EQ(rig.core.next_credit(a, 0, kSec / 2), std::optional<Nanos>(later));
  EXPECT_EQ(rig.core.begin_turn(kSec), std::optional<ClassId>(rig.core.unmetered()));
  rig.core.end_turn();
  EXPECT_EQ(rig.core.begin_turn(later - 1), std::optional<ClassId>(rig.core.unmetered()));
  rig.core.end_turn();
  EXPECT_FALSE(rig.core.qualifies(a, 0, later - 1));
  EXPECT_EQ(rig.turn(later), "P1: A");
}

TEST(Scale, AWaitingParticipantWhoseInstantMovesEarlierIsReadyExactlyThen) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "slow");
  ASSERT_TRUE(rig.core.scale(a, 250'000, 0).ok());  // 250 credits at 0.25/s
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 249, 0).ok());  // 0 credits
  rig.submit(a, 1);
  EXPECT_EQ(rig.core.next_credit(a, 0, 0), std::optional<Nanos>(4 * kSec));
  // At 1 s it has 0.25; whole again, the rest takes 0.75 s.
  ASSERT_TRUE(rig.core.scale(a, kWholePlan, kSec).ok());
  const Nanos earlier = kSec + 3 * kSec / 4;
  EXPECT_EQ(rig.core.begin_turn(earlier - 1), std::optional<ClassId>(rig.core.unmetered()));
  rig.core.end_turn();
  EXPECT_EQ(rig.core.begin_turn(earlier), std::optional<ClassId>(ClassId{0}));
  rig.core.end_turn();
  EXPECT_TRUE(rig.core.qualifies(a, 0, earlier));
  EXPECT_EQ(rig.turn(earlier), "P1: A");
}

TEST(Scale, AReadyParticipantScaledBelowOneCreditIsReadyNoMore) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "slow");  // 1000 credits
  rig.submit(a, 1);
  ASSERT_TRUE(rig.core.qualifies(a, 0, 0));
  ASSERT_TRUE(rig.core.scale(a, 500, 0).ok());  // capacity 0.5: never a credit
  EXPECT_EQ(rig.bals(a, 0, 0), "500000000");
  EXPECT_EQ(rig.core.next_credit(a, 0, 0), std::nullopt);
  EXPECT_EQ(rig.core.begin_turn(0), std::optional<ClassId>(rig.core.unmetered()));
  rig.core.end_turn();
  EXPECT_FALSE(rig.core.qualifies(a, 0, 1'000'000 * kSec));
  // Whole again at 2,000,000 s: from the kept 0.5 at 1/s, a credit half a second later.
  const Nanos back = 2'000'000 * kSec;
  ASSERT_TRUE(rig.core.scale(a, kWholePlan, back).ok());
  EXPECT_EQ(rig.core.begin_turn(back + kSec / 2 - 1), std::optional<ClassId>(rig.core.unmetered()));
  rig.core.end_turn();
  EXPECT_EQ(rig.turn(back + kSec / 2), "P1: A");
}

// An idle participant keeps its timer filed (a queue emptied by an unmetered dispatch); a scale
// takes it out too, so that its next wait files the new instant rather than the old one.
TEST(Scale, AnIdleParticipantWaitsForItsNewInstant) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "slow");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 999, 0).ok());  // 0 credits
  rig.submit(a, 1);                                                // filed at 1 s
  EXPECT_EQ(rig.turn(0), "P3: A");                  // idle again, its timer still filed
  ASSERT_TRUE(rig.core.scale(a, 100'000, 0).ok());  // a credit at 10 s
  rig.submit(a, 1, kSec / 2);
  EXPECT_EQ(rig.core.begin_turn(kSec), std::optional<ClassId>(rig.core.unmetered()));
  rig.core.end_turn();
  EXPECT_EQ(rig.core.begin_turn(10 * kSec - 1), std::optional<ClassId>(rig.core.unmetered()));
  rig.core.end_turn();
  EXPECT_EQ(rig.turn(10 * kSec), "P1: A");
}

}  // namespace
}  // namespace creditloop::test
