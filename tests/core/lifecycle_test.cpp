// Participants over time: registration, removal, re-plan, registering a name again, shutdown
// (take_all_queued), and a clock that seems to run backwards. docs/contract.md §1, §5 and §5a.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness.hpp"

namespace creditloop::test {
namespace {

// pro: P1 {1/s, 10}, P2 {1/s, 10}; small: P1 {1/s, 3}, P2 {1/s, 20}; lite: P2 {1/s, 10};
// slow/fast: P1 at 1/s and 100/s, capacity 1000; free: nothing.
Config plans() {
  return make_config(2, {make_plan("pro", {{0, {1, 10}}, {1, {1, 10}}}),
                         make_plan("small", {{0, {1, 3}}, {1, {1, 20}}}),
                         make_plan("lite", {{1, {1, 10}}}), make_plan("slow", {{0, {1, 1000}}}),
                         make_plan("fast", {{0, {100, 1000}}}), make_plan("free", {})});
}

PlanId plan_id(Rig& rig, std::string_view name) { return rig.core.find_plan(name).value(); }

TEST(Register, NewBucketsStartFullAtNow) {
  Rig rig(reference_config());  // pro: P1 {2/s, 4}, P2 {5/s, 10}
  const ParticipantId a = rig.add("A", "pro", 1, 5 * kSec);
  const ParticipantId b = rig.add("B", "pro", 3, 5 * kSec);
  EXPECT_EQ(rig.bal(a, 0, 5 * kSec), credits(4));
  EXPECT_EQ(rig.bal(a, 1, 5 * kSec), credits(10));
  EXPECT_EQ(rig.bal(b, 0, 5 * kSec), credits(12));
  EXPECT_EQ(rig.bal(b, 1, 5 * kSec), credits(30));
  EXPECT_TRUE(rig.core.holds(a, 0));
  EXPECT_TRUE(rig.core.holds(a, 1));
}

TEST(Register, JoinsTheRingInRegistrationOrder) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "lite", 7);
  const ParticipantId c = rig.add("C", "free");
  EXPECT_EQ(rig.core.size(), 3u);
  EXPECT_EQ(rig.core.ring_size(), 3u);
  EXPECT_EQ(rig.core.at(0), std::optional<ParticipantId>(a));
  EXPECT_EQ(rig.core.at(1), std::optional<ParticipantId>(b));
  EXPECT_EQ(rig.core.at(2), std::optional<ParticipantId>(c));
  EXPECT_EQ(rig.core.at(3), std::nullopt);
  EXPECT_EQ(rig.core.find("B"), std::optional<ParticipantId>(b));
  EXPECT_EQ(rig.core.name(b), "B");
  EXPECT_EQ(rig.core.plan(b), plan_id(rig, "lite"));
  EXPECT_EQ(rig.core.shares(b), 7u);
  EXPECT_TRUE(rig.core.contains(c));
  EXPECT_NE(a.generation, 0u);
}

// With nothing reserved, the per-place tables start at a few places and double, through the place
// store's first chunk and past it. Nothing registered or queued before a growth is lost by it, and
// a name's view stays valid.
TEST(Register, GrowingWithNothingReservedKeepsEveryParticipant) {
  Rig rig(reference_config());  // pro: P1 {2/s, 4}, P2 {5/s, 10}
  std::vector<ParticipantId> ids;
  const ParticipantId first = rig.add("first", "pro", 2);
  ids.push_back(first);
  const std::string_view first_name = rig.core.name(first);
  rig.submit(first, 1);
  constexpr std::size_t kCount = 2 * 4096 + 1;
  for (std::size_t i = 1; i < kCount; ++i) {
    // Long names live on the heap, short ones in the string itself.
    const std::string name = i % 2 == 0 ? "p" + std::to_string(i)
                                        : "a participant with a long name " + std::to_string(i);
    ids.push_back(
        rig.add(name, i % 2 == 0 ? "pro" : "lite", static_cast<std::uint32_t>(1 + i % 3)));
  }
  EXPECT_EQ(rig.core.size(), kCount);
  EXPECT_EQ(rig.core.name(first).data(), first_name.data());
  EXPECT_EQ(first_name, "first");
  for (std::size_t i = 1; i < kCount; ++i) {
    const ParticipantId p = ids[i];
    ASSERT_EQ(rig.core.at(static_cast<std::uint32_t>(i)), std::optional<ParticipantId>(p));
    ASSERT_EQ(rig.core.find(rig.core.name(p)), std::optional<ParticipantId>(p));
    ASSERT_EQ(rig.core.shares(p), static_cast<std::uint32_t>(1 + i % 3));
  }
  // The first participant's bucket and queue came through every growth: one request, out in P1
  // from a full bucket (2 shares: 8 credits).
  EXPECT_EQ(rig.bal(first, 0, 0), credits(8));
  EXPECT_EQ(rig.core.waiting(), 1u);
  EXPECT_EQ(rig.turn(0), "P1: first");
  EXPECT_EQ(rig.bal(first, 0, 0), credits(7));
}

TEST(Remove, HandsBackQueuedRequestsOldestFirst) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  const std::vector<int> first = rig.submit(a, 2);
  rig.submit(b, 1);
  const std::vector<int> later = rig.submit(a, 3);
  EXPECT_EQ(rig.turn(0), "P1: A B");  // A's oldest is in flight, not queued
  Result<RequestList> back = rig.core.remove(a);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), 4u);
  EXPECT_EQ(ids(*back), (std::vector<int>{first[1], later[0], later[1], later[2]}));
  EXPECT_FALSE(rig.core.contains(a));
  EXPECT_EQ(rig.core.find("A"), std::nullopt);
  EXPECT_EQ(rig.core.size(), 1u);
  EXPECT_EQ(rig.core.queued(a), 0u);
  EXPECT_EQ(rig.core.waiting(), 0u);
  EXPECT_EQ(rig.core.in_flight(), 2u);
  EXPECT_EQ(rig.core.at(0), std::nullopt);
}

TEST(Remove, WithNothingQueuedHandsBackAnEmptyList) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  Result<RequestList> back = rig.core.remove(a);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->empty());
}

TEST(Remove, RemovedParticipantIsNeverVisited) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  const ParticipantId c = rig.add("C", "pro");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 2);
  ASSERT_TRUE(rig.core.begin_turn(0));
  ASSERT_EQ(who(rig.visit(0)), "A");
  ASSERT_TRUE(rig.core.remove(b).ok());  // mid-turn
  EXPECT_EQ(who(rig.visit(0)), "C");
  EXPECT_FALSE(rig.visit(0));
  EXPECT_EQ(rig.drain(0), "P1: A C");
}

TEST(Remove, HandedBackRequestsCanBeSubmittedElsewhere) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  const std::vector<int> sent = rig.submit(a, 3);
  Result<RequestList> back = rig.core.remove(a);
  ASSERT_TRUE(back.ok());
  while (RequestHook* r = back->pop_front()) ASSERT_TRUE(rig.core.submit(b, *r, 0).ok());
  EXPECT_EQ(rig.drain(0), "P1: B | P1: B | P1: B");
  ASSERT_EQ(rig.log.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(rig.log[i].req, sent[i]);
}

// The list is linked through the requests' own links, so a request the walk has not passed yet
// is not the caller's: submitting it elsewhere would rewrite the link the walk reads next, and
// the walk would end in the other queue (or, in a runtime, in another participant's inbox).
TEST(Remove, ARequestIsTheCallersOnlyOnceTheWalkOfItsListHasPassedIt) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  Req& first = rig.make();
  Req& second = rig.make();
  Req& third = rig.make();
  for (Req* r : {&first, &second, &third}) ASSERT_TRUE(rig.core.submit(a, *r, 0).ok());
  Result<RequestList> back = rig.core.remove(a);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(second.idle());
  EXPECT_EQ(rig.core.submit(b, second, 0).error(), Errc::already_queued);
  EXPECT_EQ(rig.core.withdraw(second).error(), Errc::not_queued);
  EXPECT_EQ(rig.core.queued(b), 0u);
  EXPECT_EQ(back->pop_front(), &first);
  EXPECT_TRUE(first.idle());
  ASSERT_TRUE(rig.core.submit(b, first, 0).ok());  // the caller's: its link is b's queue's now
  EXPECT_EQ(ids(*back), (std::vector<int>{second.id, third.id}));
  EXPECT_TRUE(second.idle());
  EXPECT_TRUE(third.idle());
}

// Whatever a list still holds when it is dropped is handed back, as take_all_queued's is.
TEST(Remove, AListDroppedBeforeItsWalkGivesEveryRequestBack) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  Req& r1 = rig.make();
  Req& r2 = rig.make();
  ASSERT_TRUE(rig.core.submit(a, r1, 0).ok());
  ASSERT_TRUE(rig.core.submit(b, r2, 0).ok());
  {
    Result<RequestList> back = rig.core.remove(a);
    ASSERT_TRUE(back.ok());
    EXPECT_FALSE(r1.idle());
  }
  EXPECT_TRUE(r1.idle());
  {
    RequestList all = rig.core.take_all_queued();
    EXPECT_EQ(all.front(), &r2);
    EXPECT_FALSE(r2.idle());
    EXPECT_EQ(rig.core.submit(b, r2, 0).error(), Errc::already_queued);
    RequestList moved;
    moved = std::move(all);
    EXPECT_FALSE(r2.idle());
  }
  EXPECT_TRUE(r2.idle());
}

TEST(Replan, KeepsBalanceClippedToNewCapacity) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");  // P1 10 -> 9, P2 10
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "small"), 1, 0).ok());
  EXPECT_EQ(rig.core.plan(a), plan_id(rig, "small"));
  EXPECT_EQ(rig.bal(a, 0, 0), credits(3));   // clipped to the new capacity
  EXPECT_EQ(rig.bal(a, 1, 0), credits(10));  // kept, not raised to the new capacity
  // New terms from then on: P2 climbs towards 20.
  EXPECT_EQ(rig.bal(a, 1, 3 * kSec), credits(13));
  EXPECT_EQ(rig.bal(a, 0, 3 * kSec), credits(3));
}

TEST(Replan, RefillsAtTheOldTermsUpToNow) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "slow");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 999, 0).ok());  // 1000 - 1 - 999 = 0
  // Two seconds at 1/s, then one at 100/s: 2 + 100 = 102.
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "fast"), 1, 2 * kSec).ok());
  EXPECT_EQ(rig.bal(a, 0, 3 * kSec), credits(102));
}

TEST(Replan, SharesScaleCapacityAndRate) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro", 2);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(20));
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "pro"), 1, 0).ok());
  EXPECT_EQ(rig.core.shares(a), 1u);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(10));
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");  // 9
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "pro"), 3, 0).ok());
  EXPECT_EQ(rig.bal(a, 0, 0), credits(9));
  EXPECT_EQ(rig.bal(a, 0, kSec), credits(12));  // 3 credits/s now
  EXPECT_EQ(rig.bal(a, 0, 100 * kSec), credits(30));
}

TEST(Replan, NewlyHeldBucketStartsFull) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "lite");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P2: A");  // P2 10 -> 9
  const Result<Balance> none = rig.core.balance(a, 0, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error(), Errc::unknown_class);
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "pro"), 1, kSec / 2).ok());
  EXPECT_TRUE(rig.core.holds(a, 0));
  EXPECT_EQ(rig.bal(a, 0, kSec / 2), credits(10));
  EXPECT_EQ(rig.bals(a, 1, kSec / 2), "9500000000");
}

TEST(Replan, DroppedBucketIsGone) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "lite"), 1, 0).ok());
  EXPECT_FALSE(rig.core.holds(a, 0));
  const Result<Balance> gone = rig.core.balance(a, 0, 0);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error(), Errc::unknown_class);
}

TEST(Replan, DroppedBucketCompletionChargedNowhere) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "lite"), 1, 0).ok());
  const Result<Completion> c = rig.core.complete(rig.log[0].ticket, 3, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->charged);
  EXPECT_EQ(rig.bal(a, 1, 0), credits(10));
  EXPECT_EQ(str(rig.core.stats(a).cost_uncharged), "3000000000");
  EXPECT_EQ(str(rig.core.stats(a).cost_charged), "0");
  EXPECT_EQ(rig.core.stats(a).completed, 1u);
  EXPECT_EQ(rig.core.in_flight(), 0u);
}

TEST(Replan, DroppedThenHeldAgainIsANewBucket) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");  // 9
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "lite"), 1, 0).ok());
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "pro"), 1, 0).ok());
  EXPECT_EQ(rig.bal(a, 0, 0), credits(10));  // new, so full
  // The request was admitted by the old P1 bucket, which is gone.
  const Result<Completion> c = rig.core.complete(rig.log[0].ticket, 3, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->charged);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(10));
}

TEST(Replan, KeptBucketStillTakesItsCompletions) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");                                    // 9
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "small"), 1, 0).ok());  // clipped to 3
  const Result<Completion> c = rig.core.complete(rig.log[0].ticket, 2, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->charged);
  EXPECT_EQ(c->bucket, 0);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(1));
}

TEST(Replan, TakesEffectOnTheNextClassQuestion) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "lite");
  rig.submit(a, 3);
  EXPECT_EQ(rig.turn(0), "P2: A");
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "pro"), 1, 0).ok());
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.replan(a, plan_id(rig, "free"), 1, 0).ok());
  EXPECT_EQ(rig.turn(0), "P3: A");
  EXPECT_EQ(rig.turn(0), "none");
}

TEST(Reregister, SameNameIsANewParticipant) {
  Rig rig(plans());
  const ParticipantId old_a = rig.add("A", "pro");
  rig.submit(old_a, 2);
  EXPECT_EQ(rig.turn(0), "P1: A");  // P1 10 -> 9
  ASSERT_TRUE(rig.core.remove(old_a).ok());
  const ParticipantId a = rig.add("A", "pro");
  EXPECT_NE(a, old_a);
  EXPECT_FALSE(rig.core.contains(old_a));
  EXPECT_TRUE(rig.core.contains(a));
  EXPECT_EQ(rig.core.find("A"), std::optional<ParticipantId>(a));
  EXPECT_EQ(rig.bal(a, 0, 0), credits(10));  // new buckets, full
  EXPECT_EQ(rig.core.stats(a).dispatched[0], 0u);
  EXPECT_EQ(rig.core.queued(a), 0u);
  // The old participant's ticket never charges the new one.
  const Result<Completion> c = rig.core.complete(rig.log[0].ticket, 4, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->charged);
  EXPECT_EQ(c->participant, old_a);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(10));
  EXPECT_EQ(rig.core.stats(a).completed, 0u);
  EXPECT_EQ(str(rig.core.stats(a).cost_uncharged), "0");
  // And the old id stays dead.
  Req r;
  EXPECT_EQ(rig.core.submit(old_a, r, 0), Status(Errc::unknown_participant));
}

TEST(Shutdown, TakeAllQueuedHandsBackEverythingOldestFirstPerParticipant) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "pro");
  const ParticipantId c = rig.add("C", "lite");
  // Interleaved arrivals: A0 C1 A2 C3 A4, then B5.
  std::vector<int> ia, ic;
  for (int i = 0; i < 5; ++i) {
    const std::vector<int> one = rig.submit(i % 2 == 0 ? a : c, 1);
    (i % 2 == 0 ? ia : ic).push_back(one[0]);
  }
  const std::vector<int> ib = rig.submit(b, 1);
  ASSERT_EQ(rig.core.begin_turn(0), std::optional<ClassId>(0));
  ASSERT_EQ(who(rig.visit(0)), "A");
  ASSERT_TRUE(rig.core.in_turn());  // B is still to be visited
  RequestList all = rig.core.take_all_queued();
  EXPECT_FALSE(rig.core.in_turn());
  // Ring order, oldest first within each: A's 2 and 4, B's 5, then C's 1 and 3.
  EXPECT_EQ(ids(all), (std::vector<int>{ia[1], ia[2], ib[0], ic[0], ic[1]}));
  EXPECT_EQ(rig.core.waiting(), 0u);
  EXPECT_EQ(rig.core.queued(a), 0u);
  EXPECT_EQ(rig.core.queued(b), 0u);
  EXPECT_EQ(rig.core.queued(c), 0u);
  EXPECT_EQ(rig.core.size(), 3u);  // still registered
  EXPECT_EQ(rig.core.in_flight(), 1u);
  EXPECT_EQ(rig.turn(0), "none");
}

TEST(Shutdown, KeepsAcceptingAndChargingCompletions) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  rig.submit(a, 3);
  EXPECT_EQ(rig.turn(0), "P1: A");  // 9
  RequestList all = rig.core.take_all_queued();
  EXPECT_EQ(all.size(), 2u);
  const Result<Completion> c = rig.core.complete(rig.log[0].ticket, 2, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->charged);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(7));
  EXPECT_EQ(rig.core.in_flight(), 0u);
}

TEST(Time, NowBackwardsTreatedAsLatest) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro");
  rig.submit(a, 2);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 10, 0).ok());  // 10 - 1 - 10 = -1
  EXPECT_EQ(rig.bal(a, 0, 5 * kSec), credits(4));
  // 3 s after 5 s is read as 5 s: no refill undone, none given twice later.
  EXPECT_EQ(rig.bal(a, 0, 3 * kSec), credits(4));
  EXPECT_EQ(rig.turn(3 * kSec), "P1: A");  // debits at "5 s": 3
  EXPECT_EQ(rig.bal(a, 0, 6 * kSec), credits(4));
}

TEST(Time, NowBackwardsDoesNotStopRefill) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro", 1, 10 * kSec);
  rig.submit(a, 10, 10 * kSec);
  rig.drain(10 * kSec, 10);  // 10 P1 turns: P1 empty at 10 s
  EXPECT_EQ(rig.bals(a, 0, 10 * kSec), "0");
  EXPECT_EQ(rig.bals(a, 0, 0), "0");
  EXPECT_EQ(rig.bals(a, 0, 10 * kSec + 250 * kMs), "250000000");
}

}  // namespace
}  // namespace creditloop::test
