// docs/contract.md §2, "Completion": the cost goes to the admitting bucket after its refill to now,
// on top of the credit taken at dispatch; unmetered costs go nowhere; at most once.
#include <gtest/gtest.h>

#include "harness.hpp"

namespace creditloop {
namespace detail {
// The test-only door of core.hpp: moves a ticket record to a generation that billions of uses
// would reach.
struct CoreTestAccess {
  static void set_ticket_generation(Core& core, std::uint32_t index, std::uint64_t generation) {
    auto& record = core.in_flight_records_[index];
    record.generation = static_cast<decltype(record.generation)>(generation);
  }
  // Puts a bucket where 1.6e14 charges of the largest cost would take it.
  static void set_value(Core& core, ParticipantId p, ClassId c, Atto value) {
    core.bucket(p.place, c).value = value;
  }
};
}  // namespace detail

namespace test {
namespace {

// pro1: P1 {1/s, 1}, P2 {1/s, 10}; ten: P1 {1/s, 10}; one: P1 and P2 {1/s, 1}; free: nothing.
Config plans() {
  return make_config(
      2, {make_plan("pro1", {{0, {1, 1}}, {1, {1, 10}}}), make_plan("ten", {{0, {1, 10}}}),
          make_plan("one", {{0, {1, 1}}, {1, {1, 1}}}), make_plan("free", {})});
}

TEST(Completion, ChargesAdmittingBucketWhateverClassNow) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro1");
  rig.submit(a, 3);
  EXPECT_EQ(rig.drain(0, 2), "P1: A | P2: A");  // P1 1 -> 0, P2 10 -> 9
  // A is on P2 now (no P1 credit); the first request was admitted by P1 and is charged there.
  const Result<Completion> c1 = rig.core.complete(rig.log[0].ticket, 2, 0);
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(c1->bucket, 0);
  EXPECT_TRUE(c1->charged);
  EXPECT_EQ(c1->participant, a);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(-2));
  EXPECT_EQ(rig.bal(a, 1, 0), credits(9));
  const Result<Completion> c2 = rig.core.complete(rig.log[1].ticket, 3, 0);
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2->bucket, 1);
  EXPECT_TRUE(c2->charged);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(-2));
  EXPECT_EQ(rig.bal(a, 1, 0), credits(6));
}

TEST(Completion, TotalChargeIsOnePlusCost) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  // 10 - 1 at dispatch; 0.5 s of refill; then 2.5: 10 - 1 + 0.5 - 2.5 = 7.
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 2.5, kSec / 2).ok());
  EXPECT_EQ(rig.bal(a, 0, kSec / 2), credits(7));
  EXPECT_EQ(str(rig.core.stats(a).cost_charged), "2500000000");
  EXPECT_EQ(rig.core.stats(a).completed, 1u);
}

TEST(Completion, ChargedAfterRefillToNow) {
  // 9 after the dispatch at 0; at 5 s the bucket is full (10) before the charge of 3: 7.
  // Charging first (9 - 3 = 6) and refilling after would give 10.
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  rig.submit(a, 1);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 3, 5 * kSec).ok());
  EXPECT_EQ(rig.bal(a, 0, 5 * kSec), credits(7));
}

TEST(Completion, UnmeteredCostChargedNowhereButCounted) {
  Rig rig(plans());
  const ParticipantId f = rig.add("F", "free");
  const ParticipantId a = rig.add("A", "one");
  rig.submit(f, 1);
  rig.submit(a, 3);
  EXPECT_EQ(rig.drain(0), "P1: A | P2: A | P3: F A");
  ASSERT_EQ(rig.log.size(), 4u);
  // F's request and A's third went out P3.
  const Result<Completion> cf = rig.core.complete(rig.log[2].ticket, 7, 0);
  ASSERT_TRUE(cf.ok());
  EXPECT_EQ(cf->bucket, rig.core.unmetered());
  EXPECT_FALSE(cf->charged);
  EXPECT_EQ(rig.core.stats(f).completed, 1u);
  EXPECT_EQ(str(rig.core.stats(f).cost_uncharged), "7000000000");
  EXPECT_EQ(str(rig.core.stats(f).cost_charged), "0");
  const Result<Completion> ca = rig.core.complete(rig.log[3].ticket, 4, 0);
  ASSERT_TRUE(ca.ok());
  EXPECT_EQ(ca->bucket, rig.core.unmetered());
  EXPECT_FALSE(ca->charged);
  EXPECT_EQ(rig.bals(a, 0, 0), "0");
  EXPECT_EQ(rig.bals(a, 1, 0), "0");
  EXPECT_EQ(str(rig.core.stats(a).cost_uncharged), "4000000000");
  EXPECT_EQ(str(rig.core.stats(a).cost_charged), "0");
}

TEST(Completion, AtMostOnce) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  rig.submit(a, 2);
  EXPECT_EQ(rig.drain(0), "P1: A | P1: A");
  ASSERT_EQ(rig.core.in_flight(), 2u);
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 1, 0).ok());
  const std::string before = snapshot(rig.core, 0);
  const Result<Completion> again = rig.core.complete(rig.log[0].ticket, 1, 0);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error(), Errc::stale_ticket);
  const Result<Completion> again_nano = rig.core.complete_nano(rig.log[0].ticket, 0, 0);
  ASSERT_FALSE(again_nano.ok());
  EXPECT_EQ(again_nano.error(), Errc::stale_ticket);
  EXPECT_EQ(snapshot(rig.core, 0), before);
  EXPECT_EQ(rig.core.in_flight(), 1u);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(7));  // 10 - 2 dispatches - cost 1
}

TEST(Completion, ReturnsTheRoom) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  rig.submit(a, 3);
  rig.drain(0);
  EXPECT_EQ(rig.core.in_flight(), 3u);
  ASSERT_TRUE(rig.core.complete(rig.log[1].ticket, 0, 0).ok());
  EXPECT_EQ(rig.core.in_flight(), 2u);
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 0, 0).ok());
  ASSERT_TRUE(rig.core.complete(rig.log[2].ticket, 0, 0).ok());
  EXPECT_EQ(rig.core.in_flight(), 0u);
  EXPECT_EQ(rig.core.stats(a).completed, 3u);
}

TEST(Completion, ZeroCostChargesNothingMore) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  rig.submit(a, 1);
  rig.drain(0);
  const Result<Completion> c = rig.core.complete(rig.log[0].ticket, 0, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bucket, 0);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(9));
}

TEST(Completion, OldTicketStaysStaleWhenItsRecordIsReused) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  rig.submit(a, 2);
  EXPECT_EQ(rig.turn(0), "P1: A");
  const Ticket first = rig.log[0].ticket;
  ASSERT_TRUE(rig.core.complete(first, 0, 0).ok());
  EXPECT_EQ(rig.turn(0), "P1: A");
  const Ticket second = rig.log[1].ticket;
  EXPECT_NE(second, first);
  const Result<Completion> stale = rig.core.complete(first, 1, 0);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error(), Errc::stale_ticket);
  EXPECT_EQ(rig.core.in_flight(), 1u);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(8));
  ASSERT_TRUE(rig.core.complete(second, 1, 0).ok());
  EXPECT_EQ(rig.bal(a, 0, 0), credits(7));
}

// Records are reused latest-retired first, and new ones are taken in order of their index, also
// after a reservation that grows the table while some records are retired and some never used.
TEST(Completion, RetiredRecordsReusedFirstThenNewOnesInOrder) {
  Core core(plans());
  const ParticipantId a = *core.add("A", "ten", 1, 0);
  std::vector<RequestHook> requests(8);
  const auto dispatch_one = [&](RequestHook& r) {
    EXPECT_TRUE(core.submit(a, r, 0).ok());
    Decision d;
    EXPECT_EQ(core.dispatch(0, std::span<Decision>(&d, 1)), 1u);
    return d.ticket;
  };
  const Ticket t0 = dispatch_one(requests[0]);
  const Ticket t1 = dispatch_one(requests[1]);
  const Ticket t2 = dispatch_one(requests[2]);
  EXPECT_EQ(t0.index, 0u);
  EXPECT_EQ(t1.index, 1u);
  EXPECT_EQ(t2.index, 2u);
  const std::size_t before = core.in_flight_capacity();
  ASSERT_TRUE(core.complete(t2, 0, 0).ok());
  ASSERT_TRUE(core.complete(t0, 0, 0).ok());
  core.reserve_in_flight(before + 1);
  ASSERT_GT(core.in_flight_capacity(), before);
  EXPECT_EQ(dispatch_one(requests[3]).index, 0u);  // the latest retired
  EXPECT_EQ(dispatch_one(requests[4]).index, 2u);
  EXPECT_EQ(dispatch_one(requests[5]).index, 3u);  // then the first never used
  EXPECT_EQ(dispatch_one(requests[6]).index, 4u);
}

// A completion delayed across 2^31 reuses of its record (where a 32-bit generation wrapped back
// to the delayed ticket's own) is still refused as stale, and charges nothing.
TEST(Completion, OldTicketStaysStaleAcrossWhereA32BitGenerationWrapped) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  rig.submit(a, 3);
  EXPECT_EQ(rig.turn(0), "P1: A");
  const Ticket delayed = rig.log[0].ticket;
  ASSERT_EQ(delayed.generation, 1u);
  ASSERT_TRUE(rig.core.complete(delayed, 0, 0).ok());
  // As if the record had been used 2^31 - 1 more times: retired, one use short of 2^32.
  detail::CoreTestAccess::set_ticket_generation(rig.core, delayed.index, 0xFFFF'FFFEu);
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_EQ(rig.log[1].ticket.index, delayed.index);
  ASSERT_TRUE(rig.core.complete(rig.log[1].ticket, 0, 0).ok());
  EXPECT_EQ(rig.turn(0), "P1: A");
  const Ticket live = rig.log[2].ticket;
  ASSERT_EQ(live.index, delayed.index);
  EXPECT_NE(live, delayed);
  const Result<Completion> stale = rig.core.complete(delayed, 5, 0);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error(), Errc::stale_ticket);
  EXPECT_EQ(rig.core.in_flight(), 1u);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(7));
  EXPECT_TRUE(rig.core.complete(live, 0, 0).ok());
}

// The next credit's instant is exact: the nanosecond before it, the bucket has none.
TEST(Completion, NextCreditIsTheExactInstantTheBucketReachesOne) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "pro1");  // P1 {1/s, 1}, P2 {1/s, 10}
  rig.submit(a, 3, 0);
  EXPECT_EQ(rig.core.next_credit(a, 0, 0), std::optional<Nanos>(0));  // has one now
  EXPECT_EQ(rig.turn(0), "P1: A");
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 0.25, 0).ok());  // P1 at -0.25
  const std::optional<Nanos> at = rig.core.next_credit(a, 0, kSec / 10);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(*at, kSec + kSec / 4);
  EXPECT_FALSE(rig.core.qualifies(a, 0, *at - 1));
  EXPECT_TRUE(rig.core.qualifies(a, 0, *at));
  EXPECT_FALSE(rig.core.next_credit(a, 2, 0).has_value());  // unmetered: no bucket
  const ParticipantId f = rig.add("F", "free");
  EXPECT_FALSE(rig.core.next_credit(f, 0, 0).has_value());  // not held
}

// The oldest queued request's arrival is the `now` it was submitted at.
TEST(Completion, OldestQueuedAtIsTheOldestRequestsSubmitInstant) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  EXPECT_FALSE(rig.core.oldest_queued_at(a).has_value());
  rig.submit(a, 1, 5);
  rig.submit(a, 1, 7);
  EXPECT_EQ(rig.core.oldest_queued_at(a), std::optional<Nanos>(5));
  EXPECT_EQ(rig.turn(8), "P1: A");
  EXPECT_EQ(rig.core.oldest_queued_at(a), std::optional<Nanos>(7));
  rig.submit(a, 1, 9);
  EXPECT_EQ(rig.turn(10), "P1: A");
  EXPECT_EQ(rig.core.oldest_queued_at(a), std::optional<Nanos>(9));
  EXPECT_EQ(rig.turn(10), "P1: A");
  EXPECT_FALSE(rig.core.oldest_queued_at(a).has_value());
}

TEST(Completion, ForRemovedParticipantAcceptedAndChargedNowhere) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  const ParticipantId b = rig.add("B", "ten");
  rig.submit(a, 2);
  rig.submit(b, 1);
  EXPECT_EQ(rig.turn(0), "P1: A B");
  Result<RequestList> back = rig.core.remove(a);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), 1u);
  const std::string before_b = rig.bals(b, 0, 0);
  const Result<Completion> c = rig.core.complete(rig.log[0].ticket, 3, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->charged);
  EXPECT_FALSE(c->registered);
  EXPECT_EQ(c->participant, a);
  EXPECT_EQ(rig.core.in_flight(), 1u);
  EXPECT_EQ(rig.bals(b, 0, 0), before_b);
  EXPECT_EQ(rig.core.stats(b).completed, 0u);
  // B is still registered, charged or not (a cost of zero changes no balance).
  const Result<Completion> still = rig.core.complete(rig.log[1].ticket, 0, 0);
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(still->registered);
  EXPECT_EQ(still->participant, b);
}

TEST(Completion, ChargeBackCanTakeAParticipantOutOfAClass) {
  Rig rig(reference_config());  // pro: P1 {2/s, 4}, P2 {5/s, 10}
  const ParticipantId a = rig.add("A", "pro");
  rig.submit(a, 2);
  EXPECT_EQ(rig.turn(0), "P1: A");  // P1 4 -> 3
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 2.5, 0).ok());
  // 0.5 left: A waits without a P1 credit, so the next turn is P2's.
  EXPECT_EQ(rig.bals(a, 0, 0), "500000000");
  EXPECT_EQ(rig.turn(0), "P2: A");
}

TEST(Completion, CompleteNanoChargesExactUnits) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "ten");
  rig.submit(a, 1);
  rig.drain(0);
  ASSERT_TRUE(rig.core.complete_nano(rig.log[0].ticket, 1, 0).ok());
  EXPECT_EQ(rig.bals(a, 0, 0), "8999999999");
  EXPECT_EQ(str(rig.core.stats(a).cost_charged), "1");
}

// Debt is held at kDeepestDebt (bucket.hpp): a charge that would take a bucket deeper leaves it
// there, and from there no refill reaches a credit within the clock.
TEST(Completion, DebtStopsAtTheDeepestDebt) {
  Rig rig(plans());
  const ParticipantId a = rig.add("A", "one");
  rig.submit(a, 3);
  EXPECT_EQ(rig.drain(0, 2), "P1: A | P2: A");  // both buckets spent
  detail::CoreTestAccess::set_value(rig.core, a, 0, kDeepestDebt + kAttoPerCredit);
  ASSERT_TRUE(rig.core.complete(rig.log[0].ticket, 5, 0).ok());
  EXPECT_EQ(rig.bals(a, 0, 0), str(nano_of(kDeepestDebt)));
  EXPECT_EQ(rig.core.next_credit(a, 0, 0), std::nullopt);
  // Nothing is lost to the floor but the debt below it: the other bucket, its P2 credit in 1 s,
  // and the request still queued are as they were.
  EXPECT_EQ(rig.core.next_credit(a, 1, 0), std::optional<Nanos>(kSec));
  EXPECT_EQ(rig.drain(kSec, 1), "P2: A");
}

}  // namespace
}  // namespace test
}  // namespace creditloop
