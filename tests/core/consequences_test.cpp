// docs/contract.md §3: what follows from the loop. Interleave, shares, descend and climb, bounded
// wait, heavy work. Small scenarios worked out by hand; the longer ones run the slot model of
// docs/contract.md §6 on a manual clock and check the bound the rule states.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness.hpp"

namespace creditloop::test {
namespace {

TEST(Interleave, HundredQueuedCannotHoldAClass) {
  Rig rig(make_config(1, {make_plan("big", {{0, {1, 1000}}})}));
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  const ParticipantId c = rig.add("C", "big");
  rig.submit(a, 100);
  const std::vector<int> ib = rig.submit(b, 1);
  const std::vector<int> ic = rig.submit(c, 1);
  EXPECT_EQ(rig.turn(0), "P1: A B C");
  // B's and C's single requests went out second and third, not 101st and 102nd.
  EXPECT_EQ(rig.log[1].req, ib[0]);
  EXPECT_EQ(rig.log[2].req, ic[0]);
  for (int i = 0; i < 99; ++i) ASSERT_EQ(rig.turn(0), "P1: A");
  EXPECT_EQ(rig.turn(0), "none");
}

TEST(Interleave, LateArrivalGetsItsVisitInTheNextTurn) {
  // A slot model with one slot and 1 ms requests: A has a backlog; B arrives later with one
  // request and goes out at the next turn that reaches it, not behind A's backlog.
  Rig rig(make_config(1, {make_plan("big", {{0, {1000, 1000}}})}));
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  SlotSim sim(rig, 1);
  for (int i = 0; i < 50; ++i) sim.arrive(0, a, kMs, 0);
  sim.arrive(10 * kMs + kMs / 2, b, kMs, 0);
  sim.run(100 * kMs);
  // A goes out at 0, 1, ..., 10 ms; B arrives at 10.5 ms; at 11 ms the turn starts after A: B.
  const int b_req = 50;
  EXPECT_EQ(sim.job(b_req).dispatched, 11 * kMs);
}

TEST(Shares, BuyCreditNotTurns) {
  Rig rig(make_config(1, {make_plan("p", {{0, {1, 2}}})}));
  const ParticipantId a = rig.add("A", "p", 1);
  const ParticipantId b = rig.add("B", "p", 10);
  rig.submit(a, 30);
  rig.submit(b, 30);
  // Ten times the capacity...
  EXPECT_EQ(rig.bal(a, 0, 0), credits(2));
  EXPECT_EQ(rig.bal(b, 0, 0), credits(20));
  // ...but the same visits: one each per turn while both have a credit.
  EXPECT_EQ(rig.turn(0), "P1: A B");
  EXPECT_EQ(rig.turn(0), "P1: A B");
  // A has spent its 2; B's other 18 credits buy it P1 turns alone.
  int b_turns = 0;
  std::string t;
  while ((t = rig.turn(0)) == "P1: B") ++b_turns;
  EXPECT_EQ(b_turns, 18);
  EXPECT_EQ(t, "P2: A B");  // then both unmetered, one visit each
  EXPECT_EQ(rig.bals(a, 0, 0), "0");
  EXPECT_EQ(rig.bals(b, 0, 0), "0");
  // ...and ten times the refill: 0.3 s gives A 0.3 credit and B 3.
  EXPECT_EQ(rig.bals(a, 0, 300 * kMs), "300000000");
  EXPECT_EQ(rig.bals(b, 0, 300 * kMs), "3000000000");
}

TEST(Shares, SameVisitsUnderLoadWhileBothHaveCredit) {
  // One slot, 1 ms requests; A has 1 share and B 10 of a plan that refills far faster than
  // the server: both always have a credit, so they alternate A, B, A, B...
  Rig rig(make_config(1, {make_plan("p", {{0, {10'000, 100}}})}));
  const ParticipantId a = rig.add("A", "p", 1);
  const ParticipantId b = rig.add("B", "p", 10);
  SlotSim sim(rig, 1);
  for (int i = 0; i < 200; ++i) {
    sim.arrive(0, a, kMs, 0);
    sim.arrive(0, b, kMs, 0);
  }
  sim.run(kSec);
  ASSERT_EQ(sim.dispatches.size(), 400u);
  for (std::size_t i = 0; i < sim.dispatches.size(); ++i) {
    ASSERT_EQ(sim.dispatches[i].second.participant, i % 2 == 0 ? a : b) << i;
  }
  EXPECT_EQ(rig.core.stats(a).dispatched[0], 200u);
  EXPECT_EQ(rig.core.stats(b).dispatched[0], 200u);
}

TEST(DescendAndClimb, AreOneMechanism) {
  // P1 {1/s, 2}, P2 {1/s, 3}. Ten requests at 0: two go out P1, three P2, then P3. At 1 s one
  // credit has landed in each bucket: the waiting work climbs back, P1 first, then P2.
  Rig rig(make_config(2, {make_plan("dc", {{0, {1, 2}}, {1, {1, 3}}})}));
  const ParticipantId a = rig.add("A", "dc");
  rig.submit(a, 10);
  EXPECT_EQ(rig.drain(0, 6), "P1: A | P1: A | P2: A | P2: A | P2: A | P3: A");
  EXPECT_EQ(rig.bals(a, 0, 0), "0");
  EXPECT_EQ(rig.bals(a, 1, 0), "0");
  EXPECT_EQ(rig.drain(kSec), "P1: A | P2: A | P3: A | P3: A");
  std::vector<int> order;
  for (const Seen& s : rig.log) order.push_back(s.req);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(DescendAndClimb, UnderABurstWithTheSlotModel) {
  // The same plan, one slot, 100 ms requests, 20 at 0: dispatch i at 0.1*i s.
  //   P1: 2 -> 1 at 0.0, 1.1 -> 0.1 at 0.1; then P1(t) = t, a credit again at 1.0 s.
  //   P2: 3 (full) -> 2 at 0.2, 2.1 -> 1.1 at 0.3, 1.2 -> 0.2 at 0.4; P2(t) = t - 0.2, a credit
  //   again at 1.2 s. P1 after 1.0 s: P1(t) = t - 1, next credit at 2.0 s (after the run).
  // So: P1 P1 P2 P2 P2, P3 x5 (0.5-0.9), P1 (1.0), P3 (1.1), P2 (1.2), P3 x7 (1.3-1.9).
  Rig rig(make_config(2, {make_plan("dc", {{0, {1, 2}}, {1, {1, 3}}})}));
  const ParticipantId a = rig.add("A", "dc");
  SlotSim sim(rig, 1);
  for (int i = 0; i < 20; ++i) sim.arrive(0, a, 100 * kMs, 0);
  sim.run(2 * kSec - 1);
  std::string outs;
  for (const auto& [t, d] : sim.dispatches) outs += class_name(d.out) + " ";
  EXPECT_EQ(outs, "P1 P1 P2 P2 P2 P3 P3 P3 P3 P3 P1 P3 P2 P3 P3 P3 P3 P3 P3 P3 ");
}

TEST(BoundedWait, OwnRefillPlusOneTurn) {
  // A holds P1 {1/s, 1}; B and C hold P1 {1000/s, 1000} and never run out. One slot, 1 ms
  // requests. A's next dispatch after one at t comes no earlier than t + 1 s (its own refill:
  // only P1 turns happen, and A qualifies for none without a credit) and no later than
  // t + 1 s + one P1 turn of the room the server frees (3 participants x 1 ms).
  Rig rig(
      make_config(1, {make_plan("slow", {{0, {1, 1}}}), make_plan("fast", {{0, {1000, 1000}}})}));
  const ParticipantId a = rig.add("A", "slow");
  const ParticipantId b = rig.add("B", "fast");
  const ParticipantId c = rig.add("C", "fast");
  SlotSim sim(rig, 1);
  for (int i = 0; i < 3; ++i) sim.arrive(0, a, kMs, 0);
  for (int i = 0; i < 2000; ++i) {
    sim.arrive(0, b, kMs, 0);
    sim.arrive(0, c, kMs, 0);
  }
  sim.run(3 * kSec);
  std::vector<Nanos> at;
  for (const auto& [t, d] : sim.dispatches) {
    if (d.participant == a) at.push_back(t);
  }
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[0], 0);  // first in the ring, first P1 turn
  for (std::size_t i = 1; i < at.size(); ++i) {
    EXPECT_GE(at[i], at[i - 1] + kSec);
    EXPECT_LE(at[i], at[i - 1] + kSec + 3 * kMs);
  }
  for (const auto& [t, c_] : sim.turns) ASSERT_EQ(c_, 0) << "hogs always hold P1 credit";
}

TEST(BoundedWait, OthersSpendingDoesNotSlowRefill) {
  Rig rig(make_config(1, {make_plan("p", {{0, {1, 1}}})}));
  const ParticipantId a = rig.add("A", "p");
  const ParticipantId b = rig.add("B", "p");
  rig.submit(a, 1);
  rig.submit(b, 5);
  EXPECT_EQ(rig.turn(0), "P1: A B");
  // B's work is enormous: 1000 credits charged back; its later requests go out unmetered (no
  // credit), and their costs are charged nowhere.
  ASSERT_TRUE(rig.core.complete(rig.log[1].ticket, 1000, 0).ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(rig.turn(i * kMs), "P2: B");
    ASSERT_TRUE(rig.core.complete(rig.log.back().ticket, 1000, i * kMs).ok());
  }
  // A's bucket: 0 at 0, 1/s: exactly 0.5 credit at 0.5 s and a credit at 1 s, as if alone.
  EXPECT_EQ(rig.bals(a, 0, kSec / 2), "500000000");
  EXPECT_EQ(rig.bal(a, 0, kSec), credits(1));
  EXPECT_EQ(rig.bal(b, 0, kSec), credits(-999));
}

TEST(BoundedWait, HoldingOnlyP2NeedsP1WorkToRunOut) {
  // A: P1 {1/s, 2}, P2 {1/s, 10}; B holds only P2. One slot, 1 ms requests, A's backlog large.
  // 0: P1 A (1 left). 1 ms: P1 A (0.001 left). 2 ms: no P1 credit: P2's first turn, from A.
  // 3 ms: P2 turn after A: B. The total P1 refill (1/s) is far below 1000/s of throughput.
  Rig rig(make_config(
      2, {make_plan("pro", {{0, {1, 2}}, {1, {1, 10}}}), make_plan("lite", {{1, {1, 10}}})}));
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "lite");
  SlotSim sim(rig, 1);
  for (int i = 0; i < 100; ++i) sim.arrive(0, a, kMs, 0);
  sim.arrive(0, b, kMs, 0);
  sim.run(kSec / 2);
  EXPECT_EQ(sim.job(100).dispatched, 3 * kMs);
  ASSERT_GE(sim.dispatches.size(), 4u);
  EXPECT_EQ(sim.dispatches[2].second.out, 1);
  EXPECT_EQ(sim.dispatches[3].second.participant, b);
}

TEST(HeavyWork, IsNeverBlockedInAdvance) {
  // The core never knows a cost before completion: a participant whose requests will be heavy
  // goes out like anyone, and even deep in debt its queued work goes out unmetered.
  Rig rig(make_config(1, {make_plan("p", {{0, {1, 1}}})}));
  const ParticipantId a = rig.add("A", "p");
  rig.submit(a, 3);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 1'000'000, 0).ok());
  EXPECT_EQ(rig.turn(0), "P2: A");
  EXPECT_EQ(rig.turn(0), "P2: A");
  EXPECT_EQ(rig.core.queued(a), 0u);
}

TEST(HeavyWork, DelaysOnlyItsOwnReturn) {
  Rig rig(make_config(1, {make_plan("p", {{0, {1, 1}}})}));
  const ParticipantId a = rig.add("A", "p");
  const ParticipantId b = rig.add("B", "p");
  rig.submit(a, 2);
  rig.submit(b, 2);
  EXPECT_EQ(rig.turn(0), "P1: A B");
  // A's request cost 5, B's nothing. A: 0 - 5 = -5; B: 0.
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 5, 0).ok());
  ASSERT_TRUE(rig.core.complete(rig.log[1].ticket, 0, 0).ok());
  // B is back to a credit at 1 s, exactly as if A had spent nothing.
  EXPECT_FALSE(rig.core.qualifies(b, 0, kSec - 1));
  EXPECT_TRUE(rig.core.qualifies(b, 0, kSec));
  // A needs 6 s to climb from -5 to 1.
  EXPECT_FALSE(rig.core.qualifies(a, 0, 6 * kSec - 1));
  EXPECT_EQ(rig.bals(a, 0, 6 * kSec - 1), "999999999");
  EXPECT_TRUE(rig.core.qualifies(a, 0, 6 * kSec));
}

TEST(HeavyWork, DebtMovesTheParticipantDownUntilItClimbsBack) {
  // At 1 s in the previous scenario B has a credit and A does not: the P1 turn is B's alone.
  Rig rig(make_config(1, {make_plan("p", {{0, {1, 1}}})}));
  const ParticipantId a = rig.add("A", "p");
  const ParticipantId b = rig.add("B", "p");
  rig.submit(a, 3);
  rig.submit(b, 3);
  EXPECT_EQ(rig.turn(0), "P1: A B");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 5, 0).ok());
  EXPECT_EQ(rig.turn(kSec), "P1: B");
  EXPECT_EQ(rig.turn(kSec), "P2: A B");
  EXPECT_EQ(rig.turn(6 * kSec), "P1: A");
}

}  // namespace
}  // namespace creditloop::test
