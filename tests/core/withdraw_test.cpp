// Withdrawing a queued request (Core::withdraw): it leaves its queue at once, takes no credit, is
// the caller's again, and the participant keeps its place in the cursors; a dispatched one is
// refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness.hpp"

namespace creditloop::test {
namespace {

Req& submit_one(Rig& rig, ParticipantId p, Nanos now = 0) {
  Req& r = rig.make();
  EXPECT_TRUE(rig.core.submit(p, r, now).ok());
  return r;
}

TEST(Withdraw, AMiddleRequestLeavesTheQueueAndTheRestKeepTheirOrder) {
  Rig rig(reference_config());  // pro: P1 {2/s, 4}, P2 {5/s, 10}
  const ParticipantId a = rig.add("A", "pro");
  Req& first = submit_one(rig, a);
  Req& middle = submit_one(rig, a);
  Req& last = submit_one(rig, a);
  ASSERT_TRUE(rig.core.withdraw(middle).ok());
  EXPECT_TRUE(middle.idle());
  EXPECT_EQ(middle.next_in_queue, nullptr);
  EXPECT_EQ(rig.core.queued(a), 2u);
  EXPECT_EQ(rig.drain(0), "P1: A | P1: A");
  ASSERT_EQ(rig.log.size(), 2u);
  EXPECT_EQ(rig.log[0].req, first.id);
  EXPECT_EQ(rig.log[1].req, last.id);
}

TEST(Withdraw, TheHeadAndTheTailLeaveAlike) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  Req& head = submit_one(rig, a);
  Req& kept = submit_one(rig, a);
  Req& tail = submit_one(rig, a);
  ASSERT_TRUE(rig.core.withdraw(head).ok());
  ASSERT_TRUE(rig.core.withdraw(tail).ok());
  EXPECT_EQ(rig.core.oldest_queued_at(a), std::optional<Nanos>(kept.queued_at));
  // The queue links still work both ways: a new tail follows the one left, and withdrawing the
  // one left empties it.
  Req& later = submit_one(rig, a, 5 * kMs);
  ASSERT_TRUE(rig.core.withdraw(kept).ok());
  EXPECT_EQ(rig.core.queued(a), 1u);
  EXPECT_EQ(rig.core.oldest_queued_at(a), std::optional<Nanos>(5 * kMs));
  EXPECT_EQ(rig.turn(5 * kMs), "P1: A");
  EXPECT_EQ(rig.log.back().req, later.id);
  EXPECT_EQ(rig.turn(5 * kMs), "none");
}

// A head that became the head by dispatches has a stale backward link (request.hpp); withdrawing
// it must not follow that link.
TEST(Withdraw, AHeadReachedByDispatchesLeavesCleanly) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  submit_one(rig, a);
  Req& second = submit_one(rig, a);
  Req& third = submit_one(rig, a);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.withdraw(second).ok());
  EXPECT_EQ(rig.core.queued(a), 1u);
  EXPECT_EQ(rig.turn(0), "P1: A");
  EXPECT_EQ(rig.log.back().req, third.id);
  EXPECT_EQ(rig.core.waiting(), 0u);
}

TEST(Withdraw, TakesNoCredit) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  Req& r = submit_one(rig, a);
  const Balance p1 = rig.bal(a, 0, 0);
  const Balance p2 = rig.bal(a, 1, 0);
  ASSERT_TRUE(rig.core.withdraw(r).ok());
  EXPECT_EQ(rig.bal(a, 0, 0), p1);
  EXPECT_EQ(rig.bal(a, 1, 0), p2);
  const ParticipantStats st = rig.core.stats(a);
  for (const std::uint64_t n : st.dispatched) EXPECT_EQ(n, 0u);
  EXPECT_EQ(rig.core.in_flight(), 0u);
}

TEST(Withdraw, TheLastRequestLeavesTheQueueIdle) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  Req& r = submit_one(rig, a);
  EXPECT_EQ(rig.core.waiting(), 1u);
  ASSERT_TRUE(rig.core.withdraw(r).ok());
  EXPECT_EQ(rig.core.waiting(), 0u);
  EXPECT_EQ(rig.core.queued(a), 0u);
  EXPECT_EQ(rig.core.oldest_queued_at(a), std::nullopt);
  EXPECT_FALSE(rig.core.qualifies(a, 0, 0));
  EXPECT_EQ(rig.turn(0), "none");
}

// Cursors move only by dispatches: a participant whose requests were all withdrawn keeps its
// place, so the next turn of that class starts after it as it would have.
TEST(Withdraw, TheParticipantKeepsItsPlaceInTheCursor) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  const ParticipantId c = rig.add("C", "pro");
  rig.submit(a, 1);
  Req& b1 = submit_one(rig, b);
  Req& b2 = submit_one(rig, b);
  rig.submit(c, 1);
  EXPECT_EQ(rig.turn(0, 2), "P1: A B");  // no room after B: the P1 cursor rests on B
  ASSERT_TRUE(rig.core.withdraw(b2).ok());
  EXPECT_EQ(b1.held.load(), RequestHook::kInFlight);
  rig.submit(a, 1);
  // From after B: C first, then A; B has nothing queued.
  EXPECT_EQ(rig.turn(0), "P1: C A");
}

TEST(Withdraw, DuringATurnTheWithdrawnParticipantIsPassedOver) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  const ParticipantId c = rig.add("C", "pro");
  rig.submit(a, 1);
  Req& only = submit_one(rig, b);
  rig.submit(c, 1);
  ASSERT_TRUE(rig.core.begin_turn(0).has_value());
  ASSERT_TRUE(rig.visit(0).has_value());
  EXPECT_EQ(rig.log.back().who, "A");
  ASSERT_TRUE(rig.core.withdraw(only).ok());
  ASSERT_TRUE(rig.visit(0).has_value());
  EXPECT_EQ(rig.log.back().who, "C");
  EXPECT_FALSE(rig.visit(0).has_value());
}

TEST(Withdraw, AWithdrawnRequestMayBeSubmittedAgainAtTheBack) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  Req& r = submit_one(rig, a);
  Req& other = submit_one(rig, a);
  ASSERT_TRUE(rig.core.withdraw(r).ok());
  ASSERT_TRUE(rig.core.submit(a, r, 0).ok());
  ASSERT_TRUE(rig.core.withdraw(r).ok());
  ASSERT_TRUE(rig.core.submit(b, r, 0).ok());
  EXPECT_EQ(rig.drain(0), "P1: A B");
  EXPECT_EQ(rig.log[0].req, other.id);
  EXPECT_EQ(rig.log[1].req, r.id);
}

TEST(Withdraw, ADispatchedRequestIsRefusedAsInFlightAndCompletesAsUsual) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  Req& r = submit_one(rig, a);
  EXPECT_EQ(rig.turn(0), "P1: A");
  const Status s = rig.core.withdraw(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error(), Errc::in_flight);
  EXPECT_EQ(rig.core.in_flight(), 1u);
  ASSERT_TRUE(rig.core.complete(rig.log.back().ticket, 1, 0).ok());
  const Status again = rig.core.withdraw(r);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error(), Errc::not_queued);
}

TEST(Withdraw, ARequestNotQueuedHereIsRefusedAndNothingChanges) {
  Rig rig(reference_config());
  Rig other(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId stranger = other.add("A", "pro");
  Req never;
  Req& handed_back = submit_one(rig, a);
  Req& elsewhere = submit_one(other, stranger);  // same place, same generation, another core
  Req& kept = submit_one(rig, a);
  ASSERT_TRUE(rig.core.remove(a).ok());
  const ParticipantId b = rig.add("B", "pro");
  ASSERT_TRUE(rig.core.submit(b, kept, 0).ok());
  for (RequestHook* r : std::vector<RequestHook*>{&never, &handed_back, &elsewhere}) {
    const Status s = rig.core.withdraw(*r);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error(), Errc::not_queued);
  }
  EXPECT_EQ(rig.core.queued(b), 1u);
  EXPECT_EQ(other.core.queued(stranger), 1u);
  EXPECT_EQ(rig.drain(0), "P1: B");
  EXPECT_EQ(other.drain(0), "P1: A");
}

TEST(Withdraw, ErrorsHaveNames) {
  EXPECT_EQ(name(Errc::not_queued), "not_queued");
  EXPECT_EQ(name(Errc::in_flight), "in_flight");
  EXPECT_EQ(describe(Errc::in_flight), "request already dispatched: complete it");
}

}  // namespace
}  // namespace creditloop::test
