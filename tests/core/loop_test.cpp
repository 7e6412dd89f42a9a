// docs/contract.md §2, steps 2 to 4: the class question, the turn and its cursor, the visit.
// Each expected string is worked out by hand from the rules (in a comment where it is not
// obvious); "P2: A B>P1" reads "a P2 turn visited A (out P2), then B, whose request went out
// as P1".
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness.hpp"

namespace creditloop::test {
namespace {

// pro1 holds P1 with room for a single credit, and a deep P2; lite holds P2 only.
Config pro1_lite() {
  return make_config(2, {make_plan("pro1", {{0, {1, 1}}, {1, {1, 100}}}),
                         make_plan("lite", {{1, {1, 100}}}), make_plan("free", {})});
}

// One metered class with room for ten credits.
Config big() { return make_config(1, {make_plan("big", {{0, {1, 10}}})}); }

TEST(Loop, NoTurnWhenEveryQueueIsEmpty) {
  Rig rig(reference_config());
  rig.add("A", "pro");
  EXPECT_EQ(rig.turn(0), "none");
  EXPECT_FALSE(rig.core.in_turn());
  rig.submit(rig.core.find("A").value(), 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  EXPECT_EQ(rig.turn(0), "none");
}

TEST(Loop, PassClassIsHighestMeteredClassWithACreditedWaitingQueue) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "lite");
  // A has P1 credits but nothing queued: its credits do not count. B waits with P2 credit.
  rig.submit(b, 2);
  EXPECT_EQ(rig.turn(0), "P2: B");
  // Now A waits with a P1 credit: P1, and B (no P1 bucket) is not visited in it.
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  EXPECT_EQ(rig.turn(0), "P2: B");
  EXPECT_EQ(rig.turn(0), "none");
}

TEST(Loop, UnmeteredClassWhenNoCredits) {
  Rig rig(pro1_lite());
  const ParticipantId a = rig.add("A", "pro1");
  const ParticipantId c = rig.add("C", "free");
  rig.submit(a, 2);
  rig.submit(c, 2);
  // A: P1 (1 credit), then P1 is empty and P2 is deep, so P2; C holds nothing and qualifies
  // only for P3, which comes when nobody waiting has a metered credit: after A is done.
  EXPECT_EQ(rig.drain(0), "P1: A | P2: A | P3: C | P3: C");
}

TEST(Loop, EveryWaitingQueueQualifiesForTheUnmeteredClass) {
  Rig rig(make_config(
      2, {make_plan("tiny", {{0, {0.001, 1}}, {1, {0.001, 1}}}), make_plan("free", {})}));
  const ParticipantId a = rig.add("A", "tiny");
  const ParticipantId b = rig.add("B", "free");
  rig.submit(a, 3);
  rig.submit(b, 2);
  // A spends its P1 and P2 credit; then both go out P3, one visit each per turn, from the first.
  EXPECT_EQ(rig.drain(0), "P1: A | P2: A | P3: A B | P3: B");
}

TEST(Loop, PlanHoldingNoClassOnlyGoesOutUnmetered) {
  Config cfg = reference_config();
  cfg.plans.push_back(make_plan("free", {}));
  Rig r2(cfg);
  const ParticipantId f = r2.add("F", "free");
  const ParticipantId p = r2.add("P", "pro");
  r2.submit(f, 2);
  r2.submit(p, 2);
  EXPECT_EQ(r2.drain(0), "P1: P | P1: P | P3: F | P3: F");
  EXPECT_EQ(r2.core.stats(f).dispatched[2], 2u);
  EXPECT_EQ(r2.core.stats(f).dispatched[0] + r2.core.stats(f).dispatched[1], 0u);
}

TEST(Loop, SevenMeteredClasses) {
  Rig rig(make_config(7, {make_plan("p5", {{4, {1, 1}}}), make_plan("p7", {{6, {1, 1}}})}));
  EXPECT_EQ(rig.core.unmetered(), 7);
  const ParticipantId a = rig.add("A", "p7");
  const ParticipantId b = rig.add("B", "p5");
  rig.submit(a, 2);
  rig.submit(b, 2);
  // B's P5 credit outranks A's P7 credit; then A's P7; then both unmetered (P8) from A.
  EXPECT_EQ(rig.drain(0), "P5: B | P7: A | P8: A B");
}

TEST(Turn, FirstTurnStartsAtFirstParticipant) {
  Rig rig(pro1_lite());
  const ParticipantId a = rig.add("A", "pro1");
  const ParticipantId b = rig.add("B", "pro1");
  const ParticipantId c = rig.add("C", "lite");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 3);
  // P1's cursor ends at B. P2 has never dispatched, so its first turn starts at A, not after B.
  EXPECT_EQ(rig.turn(0), "P1: A B");
  EXPECT_EQ(rig.turn(0), "P2: A B C");
}

TEST(Turn, CursorStartsJustAfterLastDispatchOfItsClass) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  const ParticipantId c = rig.add("C", "big");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 5);
  EXPECT_EQ(rig.turn(0, 2), "P1: A B");
  EXPECT_EQ(rig.turn(0), "P1: C A B");
  EXPECT_EQ(rig.turn(0, 1), "P1: C");
  EXPECT_EQ(rig.turn(0), "P1: A B C");
}

TEST(Turn, EachQualifyingParticipantGetsOneVisitThenTheTurnEnds) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  rig.submit(a, 3);
  // Alone, with three queued and ten credits: one visit, and the cursor is back where it began.
  ASSERT_EQ(rig.core.begin_turn(0), std::optional<ClassId>(0));
  ASSERT_TRUE(rig.visit(0));
  EXPECT_FALSE(rig.visit(0));
  EXPECT_FALSE(rig.core.in_turn());
  EXPECT_EQ(rig.core.queued(a), 2u);
}

TEST(Turn, EndsWhenServerHasNoRoom) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  rig.submit(a, 2);
  rig.submit(b, 2);
  ASSERT_EQ(rig.core.begin_turn(0), std::optional<ClassId>(0));
  EXPECT_EQ(rig.core.turn_class(), std::optional<ClassId>(0));
  ASSERT_TRUE(rig.visit(0));
  rig.core.end_turn();
  EXPECT_FALSE(rig.core.in_turn());
  EXPECT_EQ(rig.core.turn_class(), std::nullopt);
  // The next turn asks afresh and starts after A.
  EXPECT_EQ(rig.turn(0), "P1: B A");
}

TEST(Turn, BeginTurnEndsATurnInProgress) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  rig.submit(a, 2);
  rig.submit(b, 2);
  ASSERT_TRUE(rig.core.begin_turn(0));
  ASSERT_EQ(who(rig.visit(0)), "A");
  // A new turn, not the rest of the old one: it starts after A, and goes once round.
  EXPECT_EQ(rig.turn(0), "P1: B A");
}

TEST(Turn, OnlyTheTurnsClassCursorMoves) {
  Rig rig(pro1_lite());
  const ParticipantId a = rig.add("A", "pro1");
  const ParticipantId b = rig.add("B", "pro1");
  const ParticipantId c = rig.add("C", "pro1");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 5);
  // P1 cursor -> C; everyone's P1 is now 0 (refills 1/s, capacity 1).
  EXPECT_EQ(rig.turn(0), "P1: A B C");
  // P2 cursor -> A.
  EXPECT_EQ(rig.turn(0, 1), "P2: A");
  // A P2 turn settled at 0.5 s (no P1 credit yet) whose visits come at 1 s, when every P1
  // bucket holds a credit again: each request goes out P1, but the turn is P2's, so only the
  // P2 cursor moves (B, C, A: it ends at A).
  ASSERT_EQ(rig.core.begin_turn(kSec / 2), std::optional<ClassId>(1));
  std::string seen;
  while (const std::optional<Seen> s = rig.visit(kSec)) {
    seen += rig.token(*s) + " ";
    EXPECT_EQ(s->turn, 1);
  }
  EXPECT_EQ(seen, "B>P1 C>P1 A>P1 ");
  // At 2 s all have a P1 credit again. P1's cursor is still at C: the turn starts at A.
  EXPECT_EQ(rig.turn(2 * kSec), "P1: A B C");
  // And P2's is at A.
  EXPECT_EQ(rig.turn(2 * kSec), "P2: B C A");
}

TEST(Turn, RemovedFirstParticipantStartsAtSuccessor) {
  Rig rig(pro1_lite());
  const ParticipantId a = rig.add("A", "pro1");
  const ParticipantId b = rig.add("B", "pro1");
  const ParticipantId c = rig.add("C", "lite");
  const ParticipantId d = rig.add("D", "lite");
  ASSERT_TRUE(rig.core.remove(a).ok());
  rig.submit(b, 2);
  rig.submit(c, 1);
  rig.submit(d, 1);
  EXPECT_EQ(rig.turn(0), "P1: B");
  // P2's first turn starts at A's successor, B (not after P1's cursor).
  EXPECT_EQ(rig.turn(0), "P2: B C D");
}

TEST(Turn, CursorStaysPutWhenItsParticipantIsRemoved) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  const ParticipantId c = rig.add("C", "big");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 3);
  EXPECT_EQ(rig.turn(0, 2), "P1: A B");
  Result<RequestList> back = rig.core.remove(b);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), 2u);
  // Just after B's place is C.
  EXPECT_EQ(rig.turn(0), "P1: C A");
}

TEST(Turn, ParticipantRegisteredDuringATurnJoinsTheNext) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  rig.submit(a, 3);
  rig.submit(b, 3);
  ASSERT_TRUE(rig.core.begin_turn(0));
  ASSERT_EQ(who(rig.visit(0)), "A");
  const ParticipantId c = rig.add("C", "big");
  rig.submit(c, 3);
  ASSERT_EQ(who(rig.visit(0)), "B");
  EXPECT_FALSE(rig.visit(0)) << "C joined during the turn: it belongs to the next one";
  EXPECT_EQ(rig.turn(0), "P1: C A B");
}

TEST(Turn, ParticipantRegisteredDuringATurnInAFreedPlaceJoinsTheNext) {
  // The runtime may give a new participant a removed one's place: here E takes C's place,
  // ahead of the cursor, during the turn; still it waits for the next turn.
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  const ParticipantId c = rig.add("C", "big");
  const ParticipantId d = rig.add("D", "big");
  ASSERT_TRUE(rig.core.remove(c).ok());
  for (const ParticipantId p : {a, b, d}) rig.submit(p, 3);
  ASSERT_TRUE(rig.core.begin_turn(0));
  ASSERT_EQ(who(rig.visit(0)), "A");
  const ParticipantId e = rig.add("E", "big");
  rig.submit(e, 3);
  EXPECT_EQ(who(rig.visit(0)), "B");
  EXPECT_EQ(who(rig.visit(0)), "D");
  EXPECT_FALSE(rig.visit(0));
  // Whatever place E took, the next turn (after D) visits all four once.
  const std::string next = rig.turn(0);
  EXPECT_EQ(next.size(), std::string("P1: A B E D").size()) << next;
  EXPECT_NE(next.find('E'), std::string::npos) << next;
}

TEST(Turn, QualificationTestedWhenCursorReachesItNotAtTheStart_LostCredit) {
  Rig rig(make_config(1, {make_plan("p", {{0, {1, 2}}})}));
  const ParticipantId a = rig.add("A", "p");
  const ParticipantId b = rig.add("B", "p");
  const ParticipantId c = rig.add("C", "p");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 3);
  EXPECT_EQ(rig.turn(0, 2), "P1: A B");
  const Ticket ta = rig.log[0].ticket;
  // Everyone still has a credit when the turn begins (A and B 1, C 2); it starts at C.
  ASSERT_EQ(rig.core.begin_turn(0), std::optional<ClassId>(0));
  ASSERT_EQ(who(rig.visit(0)), "C");
  // A's heavy request completes mid-turn: 1 - 5 = -4, no credit when the cursor reaches it.
  ASSERT_TRUE(rig.core.complete(ta, 5, 0).ok());
  const std::optional<Seen> next = rig.visit(0);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->who, "B");
  EXPECT_FALSE(rig.visit(0));
  EXPECT_EQ(rig.core.queued(a), 2u);
}

TEST(Turn, QualificationTestedWhenCursorReachesItNotAtTheStart_GainedCredit) {
  Rig rig(make_config(1, {make_plan("fast", {{0, {2, 1}}}), make_plan("slow", {{0, {1, 1}}})}));
  const ParticipantId a = rig.add("A", "fast");
  const ParticipantId b = rig.add("B", "slow");
  const ParticipantId c = rig.add("C", "fast");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 2);
  EXPECT_EQ(rig.turn(0), "P1: A B C");
  // At 0.5 s A and C have a credit, B has half of one: a P1 turn, starting at A.
  ASSERT_EQ(rig.core.begin_turn(kSec / 2), std::optional<ClassId>(0));
  ASSERT_EQ(who(rig.visit(kSec / 2)), "A");
  // When the cursor reaches B it is 1 s and B's credit has landed: B is visited.
  const std::optional<Seen> next = rig.visit(kSec);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->who, "B");
  EXPECT_EQ(next->out, 0);
  ASSERT_EQ(who(rig.visit(kSec)), "C");
  EXPECT_FALSE(rig.visit(kSec));
}

TEST(Visit, GoesOutUnderHighestClassWithCreditAtThatMoment) {
  Rig rig(pro1_lite());
  const ParticipantId a = rig.add("A", "pro1");
  rig.submit(a, 3);
  EXPECT_EQ(rig.turn(0), "P1: A");
  // Settled at 0 as a P2 turn (P1 empty); the visit comes at 1 s, when a P1 credit has landed.
  ASSERT_EQ(rig.core.begin_turn(0), std::optional<ClassId>(1));
  const std::optional<Seen> s = rig.visit(kSec);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->out, 0);
  EXPECT_EQ(s->turn, 1);
  // The P1 credit was the one debited; P2 is untouched and full.
  EXPECT_EQ(rig.bals(a, 0, kSec), "0");
  EXPECT_EQ(rig.bal(a, 1, kSec), credits(100));
  EXPECT_EQ(rig.core.stats(a).dispatched[0], 2u);
  EXPECT_EQ(rig.core.stats(a).dispatched[1], 0u);
}

TEST(Visit, UnmeteredTurnVisitCanGoOutMetered) {
  Rig rig(make_config(2, {make_plan("tiny", {{0, {1, 1}}, {1, {1, 1}}})}));
  const ParticipantId a = rig.add("A", "tiny");
  rig.submit(a, 4);
  EXPECT_EQ(rig.drain(0, 2), "P1: A | P2: A");
  ASSERT_EQ(rig.core.begin_turn(0), std::optional<ClassId>(2));
  // At 1 s both buckets have a credit; the highest wins.
  const std::optional<Seen> s = rig.visit(kSec);
  ASSERT_TRUE(s);
  EXPECT_EQ(rig.token(*s), "A>P1");
  EXPECT_EQ(rig.bals(a, 0, kSec), "0");
  EXPECT_EQ(rig.bal(a, 1, kSec), credits(1));
}

TEST(Visit, UnmeteredTurnSeesACreditLandingOnTheVeryNanosecond) {
  // Both hold only P1 at 1 credit/s, burst 1. Each spends its credit at 0, so the next lands at
  // exactly 1 s. An unmetered turn begins at 0.5 s; A is visited then (P3), B exactly at 1 s:
  // its credit has landed, so it goes out as P1. One nanosecond earlier it would not have.
  for (const Nanos at : {kSec - 1, kSec}) {
    Rig rig(make_config(1, {make_plan("one", {{0, {1, 1}}})}));
    const ParticipantId a = rig.add("A", "one");
    const ParticipantId b = rig.add("B", "one");
    rig.submit(a, 2);
    rig.submit(b, 2);
    ASSERT_EQ(rig.turn(0), "P1: A B");
    ASSERT_EQ(rig.core.begin_turn(kSec / 2), std::optional<ClassId>(1));
    ASSERT_EQ(rig.token(*rig.visit(kSec / 2)), "A");
    const std::optional<Seen> s = rig.visit(at);
    ASSERT_TRUE(s);
    EXPECT_EQ(rig.token(*s), at == kSec ? "B>P1" : "B") << "visit at " << at;
  }
}

TEST(Visit, ACreditSpentAsTheQueueEmptiesIsNotCountedAgain) {
  // A holds only P1 at 1 credit/s, burst 1. It spends its credit at 0; a request at 0.25 s waits
  // for the next, due at 1 s. An unmetered turn begins at 0.5 s and visits A at 1 s, when that
  // credit has landed: it goes out as P1 and the queue is empty again. The next request, at
  // 1.5 s, must wait for the credit after that (2 s), not for the one just spent.
  Rig rig(make_config(1, {make_plan("one", {{0, {1, 1}}})}));
  const ParticipantId a = rig.add("A", "one");
  rig.submit(a, 1);
  ASSERT_EQ(rig.turn(0), "P1: A");
  rig.submit(a, 1, kSec / 4);
  ASSERT_EQ(rig.core.begin_turn(kSec / 2), std::optional<ClassId>(1));
  ASSERT_EQ(rig.token(*rig.visit(kSec)), "A>P1");
  rig.submit(a, 1, kSec + kSec / 2);
  EXPECT_EQ(rig.turn(kSec + kSec / 2), "P2: A");
  rig.submit(a, 1, 2 * kSec);
  EXPECT_EQ(rig.turn(2 * kSec), "P1: A");
}

TEST(Visit, DebitsExactlyOneCredit) {
  Rig rig(reference_config());  // pro: P1 {2/s, 4}, P2 {5/s, 10}
  const ParticipantId a = rig.add("A", "pro");
  rig.submit(a, 5);
  EXPECT_EQ(rig.turn(0), "P1: A");
  EXPECT_EQ(rig.bal(a, 0, 0), credits(3));
  EXPECT_EQ(rig.bal(a, 1, 0), credits(10));
  EXPECT_EQ(rig.drain(0, 3), "P1: A | P1: A | P1: A");
  EXPECT_EQ(rig.bals(a, 0, 0), "0");
  EXPECT_EQ(rig.turn(0), "P2: A");
  EXPECT_EQ(rig.bals(a, 0, 0), "0");
  EXPECT_EQ(rig.bal(a, 1, 0), credits(9));
}

TEST(Visit, UnmeteredDispatchDebitsNothing) {
  Rig rig(make_config(2, {make_plan("tiny", {{0, {0.001, 1}}, {1, {0.001, 1}}})}));
  const ParticipantId a = rig.add("A", "tiny");
  rig.submit(a, 4);
  EXPECT_EQ(rig.drain(0), "P1: A | P2: A | P3: A | P3: A");
  EXPECT_EQ(rig.bals(a, 0, 0), "0");
  EXPECT_EQ(rig.bals(a, 1, 0), "0");
  const ParticipantStats& st = rig.core.stats(a);
  EXPECT_EQ(st.dispatched[0], 1u);
  EXPECT_EQ(st.dispatched[1], 1u);
  EXPECT_EQ(st.dispatched[2], 2u);
}

TEST(Visit, DispatchesTheOldestRequest) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  const std::vector<int> ia = rig.submit(a, 2);
  const std::vector<int> ib = rig.submit(b, 1);
  const std::vector<int> ia2 = rig.submit(a, 2);
  rig.drain(0);
  std::vector<int> got_a;
  for (const Seen& s : rig.log) {
    if (s.who == "A") got_a.push_back(s.req);
  }
  EXPECT_EQ(got_a, (std::vector<int>{ia[0], ia[1], ia2[0], ia2[1]}));
  EXPECT_EQ(rig.log[1].req, ib[0]);
}

TEST(Visit, DispatchNamesParticipantTicketAndRequest) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  Req& r = rig.make();
  ASSERT_TRUE(rig.core.submit(a, r, 0).ok());
  EXPECT_EQ(rig.core.queued(a), 1u);
  EXPECT_EQ(rig.core.waiting(), 1u);
  ASSERT_TRUE(rig.core.begin_turn(0));
  const std::optional<Decision> d = rig.core.visit(0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->request, &r);
  EXPECT_EQ(d->participant, a);
  EXPECT_NE(d->ticket.generation, 0u);
  EXPECT_EQ(rig.core.in_flight(), 1u);
  EXPECT_EQ(rig.core.queued(a), 0u);
  EXPECT_EQ(rig.core.waiting(), 0u);
}

TEST(Visit, QualifiesReadsTheRuleAtNow) {
  Rig rig(pro1_lite());
  const ParticipantId a = rig.add("A", "pro1");
  EXPECT_FALSE(rig.core.qualifies(a, 0, 0)) << "nothing queued";
  rig.submit(a, 2);
  EXPECT_TRUE(rig.core.qualifies(a, 0, 0));
  EXPECT_TRUE(rig.core.qualifies(a, 1, 0));
  EXPECT_TRUE(rig.core.qualifies(a, 2, 0)) << "every waiting queue qualifies for P3";
  EXPECT_EQ(rig.turn(0), "P1: A");
  EXPECT_FALSE(rig.core.qualifies(a, 0, 0));
  EXPECT_FALSE(rig.core.qualifies(a, 0, kSec - 1));
  EXPECT_TRUE(rig.core.qualifies(a, 0, kSec));
}

TEST(Loop, WaitingParticipantsListedInRingOrder) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  const ParticipantId c = rig.add("C", "big");
  rig.submit(c, 1);
  rig.submit(a, 2);
  std::vector<ParticipantId> seen;
  rig.core.for_each_waiting([&](ParticipantId p) { seen.push_back(p); });
  EXPECT_EQ(seen, (std::vector<ParticipantId>{a, c}));
  EXPECT_EQ(rig.core.waiting(), 2u);
  EXPECT_EQ(rig.core.queued(b), 0u);
}

}  // namespace
}  // namespace creditloop::test
