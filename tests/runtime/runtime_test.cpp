// The threaded runtime's commands (remove, replan, scale) and snapshots, each checked through
// the public API (runtime.hpp); its lifetime is lifetime_test.cpp's. The tests synchronise on
// what the runtime does, never on elapsed time (runtime_support.hpp).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/runtime.hpp"
#include "internal/spin.hpp"
#include "internal/test_hooks.hpp"
#include "runtime_support.hpp"
#include "spin_until.hpp"

namespace creditloop {
namespace {

using namespace runtime_tests;

// A snapshot says when each held bucket without a credit gets its next one, and how long the
// oldest queued request has waited; counters say the same as the snapshot without a round trip.
TEST(Runtime, SnapshotsGiveTheNextCreditAndTheOldestWaitAndCountersNeedNoRoundTrip) {
  Recorder recorder;
  std::atomic<Nanos> clock{0};
  RuntimeOptions o = options_with(recorder, 4);
  o.clock = [&clock] { return clock.load(std::memory_order_relaxed); };  // a test knob: no pairing
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);  // P1 {2/s, 4}, P2 {5/s, 10}
  std::deque<Req> requests(6);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(4));
  ASSERT_TRUE(rt.snapshot(alice).has_value());  // every request is in the core, queued at 0
  clock.store(100'000'000, std::memory_order_relaxed);
  const ParticipantSnapshot s = *rt.snapshot(alice);
  EXPECT_EQ(s.queued, 2u);
  ASSERT_TRUE(s.next_credit[0].has_value());
  EXPECT_EQ(*s.next_credit[0], 500'000'000);   // 4 spent at 0, 2 a second: 0.5 s for one
  EXPECT_FALSE(s.next_credit[1].has_value());  // P2 has its credits
  ASSERT_TRUE(s.oldest_queued_age.has_value());
  EXPECT_EQ(*s.oldest_queued_age, 100'000'000);

  std::optional<ParticipantCounters> c = rt.counters(alice);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->queued, 2u);
  EXPECT_EQ(c->dispatched[0], 4u);
  EXPECT_EQ(c->dispatched[1], 0u);
  EXPECT_EQ(c->completed, 0u);
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 1.5).ok());
  ASSERT_TRUE(recorder.wait_for(5));
  (void)rt.snapshot();  // the completion and the fifth dispatch are applied before it returns
  c = rt.counters(alice);
  EXPECT_EQ(c->queued, 1u);
  EXPECT_EQ(c->completed, 1u);
  EXPECT_EQ(c->cost_charged, static_cast<Balance>(1'500'000'000));
  EXPECT_EQ(c->dispatched[0] + c->dispatched[1], 5u);
  const RuntimeCounters totals = rt.counters();
  EXPECT_EQ(totals.queued, 1u);
  EXPECT_EQ(totals.completed, 1u);
  EXPECT_EQ(totals.dispatched, c->dispatched);
  EXPECT_EQ(totals.cost_charged, c->cost_charged);
  Result<RequestList> back = rt.remove(alice);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), 1u);
  EXPECT_FALSE(rt.counters(alice).has_value());
  EXPECT_EQ(rt.counters().queued, 0u);
  EXPECT_FALSE(rt.counters(ParticipantId{12345, 1, rt.issuer()}).has_value());
  for (std::size_t i = 1; i < 5; ++i) ASSERT_TRUE(rt.complete(recorder.seen()[i].ticket, 0).ok());
}

TEST(Runtime, RemovalHandsBackEverythingQueuedOldestFirstAndInFlightStaysCompletable) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 1));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(6);
  for (int i = 0; i < 6; ++i) {
    requests[static_cast<std::size_t>(i)].id = i;
    ASSERT_TRUE(rt.submit(alice, requests[static_cast<std::size_t>(i)]).ok());
  }
  ASSERT_TRUE(recorder.wait_for(1));
  Result<RequestList> back = rt.remove(alice);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 5u);
  for (int expected = 1; RequestHook* r = back->pop_front(); ++expected) {
    EXPECT_EQ(id_of(r), expected);
  }
  EXPECT_EQ(rt.remove(alice).error(), Errc::unknown_participant);
  // Its in-flight request still completes, and its cost is charged nowhere.
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 3.0).ok());
  EXPECT_EQ(rt.snapshot().completed, 1u);
}

TEST(Runtime, SnapshotsReportQueueDepthBalancesAndTheLastClass) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder, 1);
  o.clock = [] { return Nanos{0}; };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 2);
  const ParticipantSnapshot fresh = *rt.snapshot(alice);
  EXPECT_EQ(fresh.name, "alice");
  EXPECT_EQ(fresh.shares, 2u);
  EXPECT_FALSE(fresh.last_class.has_value());
  ASSERT_TRUE(fresh.balance[0].has_value());
  ASSERT_TRUE(fresh.balance[1].has_value());
  EXPECT_FALSE(fresh.balance[2].has_value());
  std::deque<Req> requests(4);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  const ParticipantSnapshot s = *rt.snapshot(alice);
  EXPECT_EQ(s.queued, 3u);
  EXPECT_EQ(s.last_class, std::optional<ClassId>(0));
  EXPECT_EQ(*s.balance[0], *fresh.balance[0] - kNanoPerCredit);
  EXPECT_EQ(s.stats.dispatched[0], 1u);
  EXPECT_FALSE(
      rt.snapshot(ParticipantId{alice.place, alice.generation + 1, alice.issuer}).has_value());
  const RuntimeSnapshot all = rt.snapshot();
  EXPECT_EQ(all.participants, 1u);
  EXPECT_EQ(all.per_class[0].dispatched, 1u);
  EXPECT_GE(all.per_class[0].turns, 1u);
  EXPECT_EQ(all.classes, 2);
  EXPECT_GT(all.dispatcher_cpu, 0);  // read on the dispatcher thread, while it runs
  EXPECT_GE(rt.snapshot().dispatcher_cpu, all.dispatcher_cpu);
  complete_all(rt, recorder, 4);
}

// A scrape of every participant is served in chunks between which the dispatcher decides: after
// the first chunk the test completes the one request in flight, and the dispatcher must send the
// next one before the scrape ends. Each participant comes out whole: the chunk's storage is
// reused, so a participant with nothing queued, in the place another one with a queue held in the
// chunk before, must not inherit its fields.
namespace scrape {
Runtime* runtime = nullptr;
Recorder* recorder = nullptr;
int gaps = 0;                  // the hook's calls: the chunks, less one
bool decided_between = false;  // a decision came between two chunks
void between_chunks() {
  if (gaps++ != 0) return;
  (void)runtime->complete(recorder->seen().front().ticket, 0);
  decided_between = recorder->wait_for(2);
}
}  // namespace scrape
TEST(Runtime, AScrapeOfEveryParticipantComesInChunksBetweenWhichTheDispatcherDecides) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder, 1);
  o.clock = [] { return Nanos{0}; };
  Runtime rt(std::move(o));
  // 2,000 places; the runtime's chunk is 256 places, and any chunk up to 400 needs 5 commands.
  constexpr std::uint32_t kParticipants = 2000;
  std::vector<ParticipantId> ids;
  for (std::uint32_t i = 0; i < kParticipants; ++i) {
    // Every third name is longer than a short string's inline storage.
    const std::string name =
        (i % 3 == 0 ? "a-participant-with-a-long-name-" : "p") + std::to_string(i);
    ids.push_back(*rt.add(name, i % 2 == 0 ? "pro" : "lite", 1));
  }
  for (std::uint32_t i = 1; i < kParticipants; i += 7) ASSERT_TRUE(rt.remove(ids[i]).ok());
  // With one slot, the first request goes out and the rest stay queued: the first chunk's places
  // hold queues, the later chunks' do not.
  auto submitted = [](std::uint32_t i) { return i % 2 == 0 && i % 7 != 1 && i < 200; };
  std::deque<Req> requests;
  for (std::uint32_t i = 0; i < kParticipants; ++i) {
    if (submitted(i)) {
      ASSERT_TRUE(rt.submit(ids[i], requests.emplace_back()).ok());
    }
  }
  ASSERT_TRUE(recorder.wait_for(1));

  scrape::runtime = &rt;
  scrape::recorder = &recorder;
  // release: pairs with the acquire load in CREDITLOOP_TEST_HOOK (test_hooks.hpp).
  detail::test_hooks::snapshot_between_chunks.store(&scrape::between_chunks,
                                                    std::memory_order_release);
  const std::vector<ParticipantSnapshot> all = rt.snapshot_participants();
  detail::test_hooks::snapshot_between_chunks.store(nullptr, std::memory_order_release);
  EXPECT_GE(scrape::gaps, 4) << "the scrape came in fewer chunks than its 2,000 places need";
  EXPECT_TRUE(scrape::decided_between) << "nothing was dispatched between two chunks";

  std::vector<int> seen(kParticipants, 0);
  std::uint64_t queued = 0;
  for (const ParticipantSnapshot& s : all) {
    const auto i =
        static_cast<std::uint32_t>(std::find(ids.begin(), ids.end(), s.id) - ids.begin());
    ASSERT_LT(i, kParticipants);
    ++seen[i];
    EXPECT_NE(i % 7, 1u) << "a removed participant was reported";
    const std::string name =
        (i % 3 == 0 ? "a-participant-with-a-long-name-" : "p") + std::to_string(i);
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(
        s.queued > 0 || s.stats.dispatched[0] + s.stats.dispatched[1] + s.stats.dispatched[2] > 0,
        submitted(i))
        << name;
    EXPECT_EQ(s.oldest_queued_age.has_value(), s.queued > 0) << name;
    EXPECT_EQ(s.balance[0].has_value(), i % 2 == 0) << name;  // lite holds no P1
    if (!submitted(i)) {
      EXPECT_FALSE(s.last_class.has_value()) << name;
    }
    queued += s.queued;
  }
  // The second request may have gone out before or after its place's chunk was described.
  EXPECT_GE(queued, requests.size() - 2);
  EXPECT_LE(queued, requests.size() - 1);
  for (std::uint32_t i = 0; i < kParticipants; ++i) {
    EXPECT_EQ(seen[i], i % 7 == 1 ? 0 : 1) << "participant " << i;
  }
  complete_all(rt, recorder, requests.size());
}

TEST(Runtime, ReplanWhileRunningKeepsTheBalanceClippedAndMayDropABucket) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder, 1);
  o.clock = [] { return Nanos{0}; };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 10);
  EXPECT_EQ(rt.replan(alice, "nope", 1).error(), Errc::unknown_plan);
  EXPECT_EQ(rt.replan(alice, "pro", 0).error(), Errc::bad_shares);
  EXPECT_EQ(rt.replan(ParticipantId{alice.place, 99, alice.issuer}, "pro", 1).error(),
            Errc::unknown_participant);
  const Balance ten_shares = *rt.snapshot(alice)->balance[0];
  ASSERT_TRUE(rt.replan(alice, "pro", 1).ok());
  EXPECT_EQ(*rt.snapshot(alice)->balance[0], ten_shares / 10);  // clipped to the new capacity
  ASSERT_TRUE(rt.replan(alice, "lite", 1).ok());
  EXPECT_FALSE(rt.snapshot(alice)->balance[0].has_value());
}

// A fleet's epoch thread scales participants while producers submit and workers complete: each
// call takes effect before it returns (the next decision uses the new terms) and snapshots report
// the fraction.
TEST(Runtime, ScaleFromAnotherThreadWhileRequestsFlowTakesEffectAtOnceAndSnapshotsReportIt) {
  RuntimeOptions o;
  o.config = reference_config();  // pro: P1 {2/s, 4}, P2 {5/s, 10}
  o.slots = 8;
  o.workers = 2;
  o.handler = [](const Decision&) { return 1.0; };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1000);  // P1 4000 credits, P2 10,000
  const ParticipantId bob = *rt.add("bob", "pro", 1);
  EXPECT_EQ(rt.snapshot(alice)->scale, kWholePlan);
  std::deque<Req> requests(512);
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    // Each request again once its completion made it the caller's (already_queued until then).
    while (!stop.load(std::memory_order_relaxed)) {  // relaxed: no data hangs on the flag
      for (std::size_t i = 0; i < requests.size(); ++i) {
        (void)rt.submit(i % 8 == 0 ? bob : alice, requests[i]);
      }
      std::this_thread::yield();
    }
  });
  const auto dispatched = [&](ParticipantId p, bool metered) {
    const ParticipantCounters c = *rt.counters(p);
    return metered ? c.dispatched[0] + c.dispatched[1] : c.dispatched[2];
  };
  test::spin_until([&] { return dispatched(alice, true) >= 200; }, "alice's metered dispatches");

  // A thousandth: P1 holds at most 4 credits, P2 at most 10.
  ASSERT_TRUE(rt.scale(alice, 1'000).ok());
  ParticipantSnapshot s = *rt.snapshot(alice);
  EXPECT_EQ(s.scale, 1'000u);
  EXPECT_LE(*s.balance[0], 4 * kNanoPerCredit);
  EXPECT_LE(*s.balance[1], 10 * kNanoPerCredit);
  EXPECT_EQ(rt.snapshot(bob)->scale, kWholePlan);

  // Nothing: from the call's return on, alice only goes out unmetered, while requests still flow.
  ASSERT_TRUE(rt.scale(alice, 0).ok());
  const std::uint64_t metered = dispatched(alice, true);
  const std::uint64_t unmetered = dispatched(alice, false);
  test::spin_until([&] { return dispatched(alice, false) >= unmetered + 500; },
                   "alice's unmetered dispatches");
  EXPECT_EQ(dispatched(alice, true), metered);
  s = *rt.snapshot(alice);
  EXPECT_EQ(s.scale, 0u);
  EXPECT_LE(*s.balance[0], 0);
  EXPECT_LE(*s.balance[1], 0);
  EXPECT_FALSE(s.next_credit[0].has_value());  // never, at a scale of 0
  EXPECT_FALSE(s.next_credit[1].has_value());

  // Whole again: metered dispatches resume once the kept debt is repaid.
  ASSERT_TRUE(rt.scale(alice, kWholePlan).ok());
  EXPECT_EQ(rt.snapshot(alice)->scale, kWholePlan);
  test::spin_until([&] { return dispatched(alice, true) > metered; },
                   "alice's metered dispatches to resume");

  EXPECT_EQ(rt.scale(alice, kWholePlan + 1).error(), Errc::bad_scale);
  EXPECT_EQ(rt.scale(ParticipantId{alice.place, 99, alice.issuer}, 1).error(),
            Errc::unknown_participant);
  EXPECT_EQ(rt.snapshot(alice)->scale, kWholePlan);
  stop.store(true, std::memory_order_relaxed);  // the producer's polled flag: no pairing needed
  producer.join();
  (void)rt.shutdown(ShutdownMode::drain);
  EXPECT_EQ(rt.scale(alice, 1).error(), Errc::shut_down);
}

}  // namespace
}  // namespace creditloop
