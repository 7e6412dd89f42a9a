// docs/contract.md §5: every bad input is refused with the error that names it, and nothing
// changes. "Nothing changes" is checked against a twin: two worlds are built by the same steps;
// only one receives the bad call; then both must show the same snapshot (balances, queues,
// counters, in_flight, turn) and make the same decisions for seconds afterwards, through the same
// completions, turns and shutdown.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness.hpp"

namespace creditloop::test {
namespace {

constexpr Nanos kT = 30 * kMs;  // when the bad calls come

// pro: P1 {2/s, 4}, P2 {5/s, 10}; lite: P2 {5/s, 10}; free: nothing.
Config world_config() {
  Config c = reference_config();
  c.plans.push_back(make_plan("free", {}));
  return c;
}

// a (pro), b (lite), c (free) and a removed "gone" (a stale id); work queued and in flight, one
// ticket completed already, and a turn in progress at kT.
struct World {
  World() : rig(world_config()) {
    a = rig.add("a", "pro");
    b = rig.add("b", "lite");
    c = rig.add("c", "free");
    gone = rig.add("gone", "pro");
    rig.submit(gone, 2);
    Result<RequestList> back = rig.core.remove(gone);
    EXPECT_TRUE(back.ok());
    rig.submit(a, 6);
    rig.submit(b, 3);
    rig.submit(c, 2);
    rig.turn(0);
    rig.turn(0);
    rig.turn(0, 1);
    for (const Seen& s : rig.log) live.push_back(s.ticket);
    EXPECT_TRUE(rig.core.complete(live.front(), 1.5, 10 * kMs).ok());
    completed = live.front();
    live.erase(live.begin());
    EXPECT_TRUE(rig.core.begin_turn(20 * kMs).has_value());
    if (const std::optional<Seen> s = rig.visit(20 * kMs)) live.push_back(s->ticket);
    EXPECT_TRUE(rig.core.in_turn());
  }

  // Seconds of decisions from kT: at each step the completions first, then the loop with room
  // for two; at the end a shutdown.
  std::string future() {
    std::string out;
    for (int step = 0; step < 16; ++step) {
      const Nanos now = kT + step * 250 * kMs;
      for (const Ticket t : live) {
        const Result<Completion> r = rig.core.complete(t, 0.75, now);
        out += r.ok() ? (r->charged ? "c" : "u") : "x";
      }
      live.clear();
      struct Run {
        World* w;
        std::string* out;
        int left;
        int turns = 0;
        bool room() const { return left > 0 && turns < 100; }  // no hang if no turn dispatches
        void on_turn(ClassId pass) {
          ++turns;
          *out += " " + class_name(pass) + ":";
        }
        void on_dispatch(const Decision& d) {
          --left;
          *out += std::string(w->rig.core.name(d.participant)) + "#" +
                  std::to_string(id_of(d.request)) + ">" + class_name(d.out) + ",";
          w->live.push_back(d.ticket);
        }
      };
      Run h{this, &out, 2};
      rig.core.run(now, h);
      out += " |";
    }
    const Nanos end = kT + 16 * 250 * kMs;
    out += "\n" + snapshot(rig.core, end) + "\nhanded back:";
    RequestList rest = rig.core.take_all_queued();
    for (const int id : ids(rest)) out += " " + std::to_string(id);
    for (const Ticket t : live) out += rig.core.complete(t, 0, end).ok() ? " c" : " x";
    return out;
  }

  Rig rig;
  ParticipantId a, b, c, gone;
  std::vector<Ticket> live;
  Ticket completed;
};

// The twin check, after the bad call was made on `bad` only.
void expect_unchanged(World& bad, World& twin) {
  EXPECT_EQ(snapshot(bad.rig.core, kT), snapshot(twin.rig.core, kT));
  EXPECT_EQ(bad.future(), twin.future());
}

template <class T>
void expect_error(const Result<T>& r, Errc e) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), e) << describe(r.error());
}
void expect_error(Status s, Errc e) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error(), e) << describe(s.error());
}

TEST(BadInput, TheTwinSeesDifferencesWhenThereAreAny) {
  // The check itself must be able to fail: a real change (one more request) shows.
  World changed, twin;
  changed.rig.submit(changed.a, 1, kT);
  twin.rig.make();  // keep request ids aligned
  EXPECT_NE(snapshot(changed.rig.core, kT), snapshot(twin.rig.core, kT));
  EXPECT_NE(changed.future(), twin.future());
}

TEST(BadInput, UnknownPlan) {
  World bad, twin;
  expect_error(bad.rig.core.add("new", "gold", 1, kT), Errc::unknown_plan);
  expect_error(bad.rig.core.add("new", "", 1, kT), Errc::unknown_plan);
  expect_error(bad.rig.core.add("new", PlanId{3}, 1, kT), Errc::unknown_plan);
  expect_error(bad.rig.core.add("new", PlanId{0xffffffffu}, 1, kT), Errc::unknown_plan);
  expect_error(bad.rig.core.replan(bad.a, PlanId{3}, 1, kT), Errc::unknown_plan);
  EXPECT_EQ(bad.rig.core.find("new"), std::nullopt);
  EXPECT_EQ(bad.rig.core.find_plan("gold"), std::nullopt);
  expect_unchanged(bad, twin);
}

TEST(BadInput, UnknownClass) {
  World bad, twin;
  // Not metered (P3 is the unmetered class for k = 2), out of range, or not held by the plan.
  expect_error(bad.rig.core.balance(bad.a, 2, kT), Errc::unknown_class);
  expect_error(bad.rig.core.balance(bad.a, 7, kT), Errc::unknown_class);
  expect_error(bad.rig.core.balance(bad.a, 255, kT), Errc::unknown_class);
  expect_error(bad.rig.core.balance(bad.b, 0, kT), Errc::unknown_class);
  expect_error(bad.rig.core.balance(bad.c, 0, kT), Errc::unknown_class);
  expect_error(bad.rig.core.balance(bad.c, 1, kT), Errc::unknown_class);
  EXPECT_FALSE(bad.rig.core.holds(bad.b, 0));
  expect_unchanged(bad, twin);
}

TEST(BadInput, UnknownParticipantStaleAfterRemove) {
  World bad, twin;
  Core& core = bad.rig.core;
  Req& r = bad.rig.make();
  twin.rig.make();
  expect_error(core.submit(bad.gone, r, kT), Errc::unknown_participant);
  EXPECT_EQ(r.next_in_queue, nullptr);
  expect_error(core.remove(bad.gone), Errc::unknown_participant);
  expect_error(core.replan(bad.gone, 0, 1, kT), Errc::unknown_participant);
  expect_error(core.balance(bad.gone, 0, kT), Errc::unknown_participant);
  EXPECT_FALSE(core.contains(bad.gone));
  EXPECT_EQ(core.queued(bad.gone), 0u);
  EXPECT_FALSE(core.qualifies(bad.gone, 2, kT));
  expect_unchanged(bad, twin);
}

TEST(BadInput, UnknownParticipantNeverIssued) {
  World bad, twin;
  Core& core = bad.rig.core;
  Req& r = bad.rig.make();
  twin.rig.make();
  const std::uint32_t me = core.issuer();
  for (const ParticipantId p :
       {ParticipantId{999, 1, me}, ParticipantId{0, 77, me}, ParticipantId{},
        ParticipantId{1u << 24, 1, me}, ParticipantId{0xffffffffu, 1, me}}) {
    expect_error(core.submit(p, r, kT), Errc::unknown_participant);
    EXPECT_EQ(r.next_in_queue, nullptr);
    expect_error(core.remove(p), Errc::unknown_participant);
    expect_error(core.replan(p, 0, 1, kT), Errc::unknown_participant);
    expect_error(core.balance(p, 0, kT), Errc::unknown_participant);
    EXPECT_FALSE(core.contains(p));
    EXPECT_EQ(core.queued(p), 0u);
    EXPECT_FALSE(core.qualifies(p, 0, kT));
  }
  expect_unchanged(bad, twin);
}

// Every core numbers its places and records from 0, so another core's ids and tickets match this
// one's in everything but their issuer: a sharded embedder that used the wrong shard would
// otherwise queue for, complete and charge a stranger.
TEST(BadInput, AnotherCoresIdsAndTicketsAreRefused) {
  World bad, twin, other;
  Core& core = bad.rig.core;
  Req& r = bad.rig.make();
  twin.rig.make();
  for (const ParticipantId p : {other.a, other.b, other.c}) {
    expect_error(core.submit(p, r, kT), Errc::unknown_participant);
    expect_error(core.remove(p), Errc::unknown_participant);
    expect_error(core.replan(p, 0, 1, kT), Errc::unknown_participant);
    expect_error(core.scale(p, 1, kT), Errc::unknown_participant);
    EXPECT_FALSE(core.contains(p));
  }
  for (const Ticket t : other.live) {
    expect_error(core.complete(t, 1, kT), Errc::unknown_ticket);
  }
  expect_unchanged(bad, twin);
}

TEST(BadInput, DuplicateName) {
  World bad, twin;
  expect_error(bad.rig.core.add("a", "lite", 1, kT), Errc::duplicate_name);
  expect_error(bad.rig.core.add("c", "pro", 3, kT), Errc::duplicate_name);
  EXPECT_EQ(bad.rig.core.find("a"), std::optional<ParticipantId>(bad.a));
  expect_unchanged(bad, twin);
}

TEST(BadInput, RemovedNameIsNotADuplicate) {
  World w;
  EXPECT_TRUE(w.rig.core.add("gone", "lite", 1, kT).ok());
}

TEST(BadInput, SharesZeroAndAboveLimit) {
  World bad, twin;
  Core& core = bad.rig.core;
  expect_error(core.add("new", "pro", 0, kT), Errc::bad_shares);
  expect_error(core.add("new", "pro", kMaxShares + 1, kT), Errc::bad_shares);
  expect_error(core.add("new", "pro", 0xffffffffu, kT), Errc::bad_shares);
  expect_error(core.replan(bad.a, 0, 0, kT), Errc::bad_shares);
  expect_error(core.replan(bad.a, 1, kMaxShares + 1, kT), Errc::bad_shares);
  EXPECT_EQ(core.find("new"), std::nullopt);
  EXPECT_EQ(core.shares(bad.a), 1u);
  expect_unchanged(bad, twin);
}

TEST(BadInput, CostNegativeNaNInfiniteOrAboveLimit) {
  World bad, twin;
  Core& core = bad.rig.core;
  const Ticket t = bad.live.front();  // in flight: it stays so, and completes later as usual
  const double kInf = std::numeric_limits<double>::infinity();
  for (const double cost :
       {-1.0, -1e-9, std::nan(""), kInf, -kInf, std::nextafter(kMaxCost, kInf), 2 * kMaxCost}) {
    expect_error(core.complete(t, cost, kT), Errc::bad_cost);
  }
  expect_error(core.complete_nano(t, -1, kT), Errc::bad_cost);
  expect_error(core.complete_nano(t, 1'000'000'000'000'001, kT), Errc::bad_cost);
  expect_error(core.complete_nano(t, std::numeric_limits<std::int64_t>::max(), kT), Errc::bad_cost);
  expect_error(core.complete_nano(t, std::numeric_limits<std::int64_t>::min(), kT), Errc::bad_cost);
  // A bad cost on a bad ticket is a bad cost first (core.hpp: tested in that order).
  expect_error(core.complete(bad.completed, -1, kT), Errc::bad_cost);
  expect_error(core.complete_nano(bad.completed, -1, kT), Errc::bad_cost);
  expect_error(core.complete(Ticket{}, kInf, kT), Errc::bad_cost);
  expect_error(core.complete_nano(Ticket{}, -1, kT), Errc::bad_cost);
  EXPECT_EQ(core.in_flight(), twin.rig.core.in_flight());
  expect_unchanged(bad, twin);
}

TEST(BadInput, CompletionForAnUnknownTicket) {
  World bad, twin;
  Core& core = bad.rig.core;
  const std::uint32_t me = core.issuer();
  for (const Ticket t : {Ticket{}, Ticket{1u << 30, me, 1}, Ticket{0xffffffffu, me, 0xffffffffu},
                         Ticket{12345, me, 3}}) {
    expect_error(core.complete(t, 1, kT), Errc::unknown_ticket);
    expect_error(core.complete_nano(t, 1, kT), Errc::unknown_ticket);
  }
  expect_unchanged(bad, twin);
}

TEST(BadInput, NoTicketIsKnownToAFreshCore) {
  Core core(world_config());
  expect_error(core.complete(Ticket{0, core.issuer(), 1}, 0, 0), Errc::unknown_ticket);
  expect_error(core.complete(Ticket{0, core.issuer(), 0}, 0, 0), Errc::unknown_ticket);
  EXPECT_EQ(core.in_flight(), 0u);
}

TEST(BadInput, CompletionForAStaleTicket) {
  World bad, twin;
  expect_error(bad.rig.core.complete(bad.completed, 1, kT), Errc::stale_ticket);
  expect_error(bad.rig.core.complete_nano(bad.completed, 0, kT), Errc::stale_ticket);
  expect_unchanged(bad, twin);
}

TEST(BadInput, CompletionForAnAlreadyCompletedTicket) {
  World bad, twin;
  const Ticket t = bad.live.front();
  ASSERT_TRUE(bad.rig.core.complete(t, 0.75, kT).ok());
  ASSERT_TRUE(twin.rig.core.complete(twin.live.front(), 0.75, kT).ok());
  expect_error(bad.rig.core.complete(t, 0.75, kT), Errc::stale_ticket);
  expect_error(bad.rig.core.complete(t, 0, kT), Errc::stale_ticket);
  bad.live.erase(bad.live.begin());
  twin.live.erase(twin.live.begin());
  expect_unchanged(bad, twin);
}

TEST(BadInput, SubmissionToARemovedParticipantHandsTheRequestBack) {
  World bad, twin;
  Req& r = bad.rig.make();
  Req& twin_r = twin.rig.make();
  expect_error(bad.rig.core.submit(bad.gone, r, kT), Errc::unknown_participant);
  EXPECT_EQ(r.next_in_queue, nullptr);
  // Still the caller's: it can go to a live participant, and then it is like any other.
  ASSERT_TRUE(bad.rig.core.submit(bad.b, r, kT).ok());
  ASSERT_TRUE(twin.rig.core.submit(twin.b, twin_r, kT).ok());
  const std::string future = bad.future();
  EXPECT_NE(future.find("b#" + std::to_string(r.id) + ">"), std::string::npos) << future;
  EXPECT_EQ(future, twin.future());
}

TEST(BadInput, ARequestSubmittedTwiceWhileQueuedIsRefusedAndNotRelinked) {
  World bad, twin;
  Req& r = bad.rig.make();
  Req& twin_r = twin.rig.make();
  ASSERT_TRUE(bad.rig.core.submit(bad.a, r, kT).ok());
  ASSERT_TRUE(twin.rig.core.submit(twin.a, twin_r, kT).ok());
  expect_error(bad.rig.core.submit(bad.a, r, kT), Errc::already_queued);
  expect_error(bad.rig.core.submit(bad.b, r, kT), Errc::already_queued);
  EXPECT_EQ(bad.rig.core.queued(bad.a), twin.rig.core.queued(twin.a));
  EXPECT_EQ(bad.rig.core.queued(bad.b), twin.rig.core.queued(twin.b));
  expect_unchanged(bad, twin);
}

// A request is the core's from submit until its completion or until its handed-back list hands it
// back, and the caller's again after either.
TEST(BadInput, ARequestInFlightIsRefusedUntilCompletedAndAHandedBackOneIsTheCallersAgain) {
  Rig rig(world_config());
  const ParticipantId a = rig.add("a", "pro");
  const ParticipantId b = rig.add("b", "lite");
  Req& r = rig.make();
  Req& s = rig.make();
  ASSERT_TRUE(rig.core.submit(a, r, 0).ok());
  ASSERT_TRUE(rig.core.submit(a, s, 0).ok());
  EXPECT_FALSE(r.idle());
  ASSERT_TRUE(rig.core.begin_turn(0).has_value());
  const std::optional<Seen> first = rig.visit(0);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->req, r.id);
  expect_error(rig.core.submit(b, r, 0), Errc::already_queued);  // in flight
  EXPECT_EQ(rig.core.queued(b), 0u);
  ASSERT_TRUE(rig.core.complete(first->ticket, 0, 0).ok());
  EXPECT_TRUE(r.idle());
  ASSERT_TRUE(rig.core.submit(b, r, 0).ok());
  Result<RequestList> back = rig.core.remove(a);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->front(), &s);
  EXPECT_FALSE(s.idle());  // the list's until its walk passes it
  ASSERT_EQ(back->pop_front(), &s);
  EXPECT_TRUE(s.idle());
  ASSERT_TRUE(rig.core.submit(b, s, 0).ok());
  {
    RequestList all = rig.core.take_all_queued();
    EXPECT_EQ(all.size(), 2u);
    expect_error(rig.core.submit(b, r, 0), Errc::already_queued);
  }
  EXPECT_TRUE(r.idle());
  EXPECT_TRUE(s.idle());
  ASSERT_TRUE(rig.core.submit(b, r, 0).ok());
}

TEST(Errors, EveryErrcIsDescribed) {
  for (int e = 0; e <= static_cast<int>(Errc::unsupported_address); ++e) {
    EXPECT_FALSE(describe(static_cast<Errc>(e)).empty()) << e;
  }
}

}  // namespace
}  // namespace creditloop::test
