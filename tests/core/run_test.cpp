// Core::run with a handler (room, on_turn, on_dispatch), and the slot model of docs/contract.md §6,
// including the worked example of the contract whose summary the contract itself states.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness.hpp"

namespace creditloop::test {
namespace {

// A dispatch as the tests below spell it: the participant's name, and ">P1" and the like when it
// went out above its turn's class.
std::string token(const Core& core, const Decision& d) {
  std::string t(core.name(d.participant));
  if (d.out != d.turn) t += ">" + class_name(d.out);
  return t;
}

// Room as a plain budget of dispatches, as an embedder-supplied room test might be. A run that
// keeps starting turns without dispatching is cut short, so that it fails instead of hanging.
struct Budget {
  Budget(Core* c, int room_for) : core(c), left(room_for) {}
  Core* core;
  int left;
  int pass_count = 0;
  std::string turns;
  std::string sent;
  std::vector<Ticket> tickets;
  bool room() const { return left > 0 && pass_count < 10'000; }
  void on_turn(ClassId c) {
    if (++pass_count == 10'000) ADD_FAILURE() << "10000 turns in one run";
    turns += class_name(c) + " ";
  }
  void on_dispatch(const Decision& d) {
    --left;
    sent += token(*core, d) + " ";
    tickets.push_back(d.ticket);
  }
};

Config big() { return make_config(1, {make_plan("big", {{0, {1, 10}}})}); }

TEST(Run, DispatchesWhileThereIsRoomAndEndsTheTurnWhenThereIsNone) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  const ParticipantId c = rig.add("C", "big");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 2);
  Budget h{&rig.core, 2};
  EXPECT_EQ(rig.core.run(0, h), 2u);
  EXPECT_EQ(h.turns, "P1 ");
  EXPECT_EQ(h.sent, "A B ");
  EXPECT_FALSE(rig.core.in_turn());
  EXPECT_EQ(rig.core.in_flight(), 2u);
  // Room for one more (a completion): a new turn, from after B.
  ASSERT_TRUE(rig.core.complete(h.tickets[0], 0, 0).ok());
  h.left = 1;
  EXPECT_EQ(rig.core.run(0, h), 1u);
  EXPECT_EQ(h.turns, "P1 P1 ");
  EXPECT_EQ(h.sent, "A B C ");
}

TEST(Run, WithoutRoomNothingIsDecided) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  rig.submit(a, 2);
  Budget h{&rig.core, 0};
  EXPECT_EQ(rig.core.run(0, h), 0u);
  EXPECT_EQ(h.turns, "");
  EXPECT_EQ(rig.core.queued(a), 2u);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(10));
}

TEST(Run, ReturnsWhenEveryQueueIsEmpty) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  rig.submit(a, 3);
  Budget h{&rig.core, 100};
  // Alone in the ring: one visit per turn, so three turns.
  EXPECT_EQ(rig.core.run(0, h), 3u);
  EXPECT_EQ(h.turns, "P1 P1 P1 ");
  EXPECT_EQ(h.left, 97);
  EXPECT_EQ(rig.core.run(0, h), 0u);
  EXPECT_EQ(h.turns, "P1 P1 P1 ");
}

TEST(Run, RoomRunningOutMidTurnMakesTheNextRunAskTheClassAfresh) {
  // pro1: P1 {1/s, 1}, P2 {1/s, 10}; lite: P2 only. One slot.
  // 0 s: P1 (B has its credit): B. 0.1 s: B's P1 is 0.1: P2, whose first turn starts at A: A.
  // 1 s: B's credit has landed: the class question is asked again and P1 wins; carrying on
  // with the P2 turn would have visited B without a pass.
  Rig rig(make_config(
      2, {make_plan("pro1", {{0, {1, 1}}, {1, {1, 10}}}), make_plan("lite", {{1, {1, 10}}})}));
  const ParticipantId a = rig.add("A", "lite");
  const ParticipantId b = rig.add("B", "pro1");
  rig.submit(a, 3);
  rig.submit(b, 3);
  Budget h{&rig.core, 1};
  EXPECT_EQ(rig.core.run(0, h), 1u);
  ASSERT_TRUE(rig.core.complete(h.tickets.back(), 0, 100 * kMs).ok());
  h.left = 1;
  EXPECT_EQ(rig.core.run(100 * kMs, h), 1u);
  ASSERT_TRUE(rig.core.complete(h.tickets.back(), 0, kSec).ok());
  h.left = 1;
  EXPECT_EQ(rig.core.run(kSec, h), 1u);
  EXPECT_EQ(h.turns, "P1 P2 P1 ");
  EXPECT_EQ(h.sent, "B A B ");
}

// Core::dispatch: the same loop, a batch per call.
std::string names(const Rig& rig, const std::vector<Decision>& out, std::size_t n) {
  std::string sent;
  for (std::size_t i = 0; i < n; ++i) sent += token(rig.core, out[i]) + " ";
  return sent;
}

TEST(Decision, DecidesWhatTheLoopOfVisitsDecidesAcrossTurnsAndClasses) {
  // Room for everything at one instant: a P1 turn for B, two P2 turns until both P2 buckets (2
  // credits each) are spent, then P3 turns for what is left.
  const Config config = make_config(
      2, {make_plan("pro1", {{0, {1, 1}}, {1, {1, 2}}}), make_plan("lite", {{1, {1, 2}}})});
  Rig by_visit(config);
  Rig by_batch(config);
  for (Rig* rig : {&by_visit, &by_batch}) {
    const ParticipantId a = rig->add("A", "lite");
    const ParticipantId b = rig->add("B", "pro1");
    rig->submit(a, 4);
    rig->submit(b, 4);
  }
  Budget h{&by_visit.core, 100};
  EXPECT_EQ(by_visit.core.run(0, h), 8u);

  std::vector<Decision> out(100);
  const std::size_t n = by_batch.core.dispatch(0, out);
  EXPECT_EQ(n, 8u);
  EXPECT_EQ(names(by_batch, out, n), h.sent);
  EXPECT_EQ(h.sent, "B A B A B A B A ");
  EXPECT_EQ(h.turns, "P1 P2 P2 P3 P3 ");
  for (int c = 0; c <= 2; ++c) {
    EXPECT_EQ(by_batch.core.turns(static_cast<ClassId>(c)),
              by_visit.core.turns(static_cast<ClassId>(c)))
        << "class " << c;
  }
  EXPECT_EQ(by_batch.core.in_flight(), 8u);
}

TEST(Decision, StopsAtTheSpanLeavingTheTurnOpenAndAtEmptyQueues) {
  Rig rig(big());
  const ParticipantId a = rig.add("A", "big");
  const ParticipantId b = rig.add("B", "big");
  const ParticipantId c = rig.add("C", "big");
  for (const ParticipantId p : {a, b, c}) rig.submit(p, 1);
  std::vector<Decision> out(2);
  EXPECT_EQ(rig.core.dispatch(0, out), 2u);
  EXPECT_EQ(names(rig, out, 2), "A B ");
  // The turn goes on: the next call visits C in the same pass.
  EXPECT_TRUE(rig.core.in_turn());
  EXPECT_EQ(rig.core.turns(0), 1u);
  out.assign(5, Decision{});
  EXPECT_EQ(rig.core.dispatch(0, out), 1u);
  EXPECT_EQ(names(rig, out, 1), "C ");
  EXPECT_EQ(rig.core.turns(0), 1u);
  EXPECT_EQ(rig.core.dispatch(0, out), 0u);
  EXPECT_EQ(rig.core.dispatch(0, std::span<Decision>()), 0u);
}

TEST(Run, SlotModelKeepsTheServerFullAndCompletesEverything) {
  Rig rig(reference_config());
  const ParticipantId a = rig.add("A", "pro");
  const ParticipantId b = rig.add("B", "lite");
  SlotSim sim(rig, 3);
  for (int i = 0; i < 30; ++i) sim.arrive(i * 10 * kMs, i % 3 == 0 ? b : a, 25 * kMs, 0.5);
  sim.run(INT64_MAX);
  EXPECT_EQ(sim.dispatches.size(), 30u);
  EXPECT_EQ(rig.core.in_flight(), 0u);
  EXPECT_EQ(rig.core.waiting(), 0u);
  EXPECT_EQ(rig.core.stats(a).completed + rig.core.stats(b).completed, 30u);
  // Never more than three in flight: each dispatch's instant is at least 25 ms after the
  // dispatch three before it.
  for (std::size_t i = 3; i < sim.dispatches.size(); ++i) {
    EXPECT_GE(sim.dispatches[i].first, sim.dispatches[i - 3].first + 25 * kMs) << i;
  }
}

TEST(Run, ZeroServiceCompletionsWaitForTheLoopThenTheInstantRunsAgain) {
  // Service 0, one slot: every request completes at the instant it went out, after the loop
  // stops; then the instant is handled again. All five go out at 0, one at a time.
  Rig rig(make_config(1, {make_plan("big", {{0, {1, 10}}})}));
  const ParticipantId a = rig.add("A", "big");
  SlotSim sim(rig, 1);
  for (int i = 0; i < 5; ++i) sim.arrive(0, a, 0, 0);
  sim.run(0);
  ASSERT_EQ(sim.dispatches.size(), 5u);
  for (const auto& [t, d] : sim.dispatches) EXPECT_EQ(t, 0);
  EXPECT_EQ(rig.core.in_flight(), 0u);
  EXPECT_EQ(rig.bal(a, 0, 0), credits(5));
}

TEST(Run, ContractExampleScenario) {
  // docs/contract.md §6: pro {P1 2/s burst 4, P2 5/s burst 10}, lite {P2 5/s burst 10}, one slot;
  // alice (pro): 40 requests at 0, service 0.1 s, cost 0; bob (lite): 3 requests at 0.55 s every
  // 0.5 s, service 0.1 s, cost 2; until 5 s. The contract gives the first dispatch (alice P1,
  // balances P1 3.0 and P2 10.0), the first completion (0.1 s, P1 3.2) and the summary.
  Rig rig(reference_config());
  const ParticipantId alice = rig.add("alice", "pro");
  const ParticipantId bob = rig.add("bob", "lite");
  SlotSim sim(rig, 1);
  for (int i = 0; i < 40; ++i) sim.arrive(0, alice, 100 * kMs, 0);
  for (int i = 0; i < 3; ++i) sim.arrive(550 * kMs + i * 500 * kMs, bob, 100 * kMs, 2);
  std::vector<std::string> completions;
  sim.on_complete = [&](Nanos t, const Completion& c) {
    if (completions.empty()) {
      completions.push_back(std::to_string(t) + " " + class_name(c.bucket) + " " +
                            rig.bals(c.participant, 0, t) + " " + rig.bals(c.participant, 1, t));
    }
  };
  sim.run(5 * kSec);

  ASSERT_FALSE(sim.dispatches.empty());
  EXPECT_EQ(sim.dispatches[0].first, 0);
  EXPECT_EQ(sim.dispatches[0].second.participant, alice);
  EXPECT_EQ(sim.dispatches[0].second.out, 0);
  ASSERT_FALSE(sim.turns.empty());
  EXPECT_EQ(sim.turns[0].second, 0);
  ASSERT_EQ(completions.size(), 1u);
  EXPECT_EQ(completions[0], "100000000 P1 3200000000 10000000000");

  const ParticipantStats sa = rig.core.stats(alice);
  const ParticipantStats sb = rig.core.stats(bob);
  EXPECT_EQ(sa.dispatched[0], 12u);
  EXPECT_EQ(sa.dispatched[1], 28u);
  EXPECT_EQ(sa.dispatched[2], 0u);
  EXPECT_EQ(sa.completed, 40u);
  EXPECT_EQ(sb.dispatched[0], 0u);
  EXPECT_EQ(sb.dispatched[1], 3u);
  EXPECT_EQ(sb.dispatched[2], 0u);
  EXPECT_EQ(sb.completed, 3u);
  EXPECT_EQ(rig.core.queued(alice) + rig.core.queued(bob), 0u);

  Nanos wait_alice = 0;
  Nanos wait_bob = 0;
  for (int id = 0; id < 43; ++id) {
    const SlotSim::Job& j = sim.job(id);
    ASSERT_GE(j.dispatched, 0) << id;
    Nanos& w = id < 40 ? wait_alice : wait_bob;
    w = std::max(w, j.dispatched - j.arrived);
  }
  EXPECT_EQ(wait_alice, 4200 * kMs);
  EXPECT_EQ(wait_bob, 50 * kMs);
}

}  // namespace
}  // namespace creditloop::test
