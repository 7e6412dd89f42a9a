// Runtime::withdraw: a queued request withdrawn from any thread, wherever it waits (the core's
// queue or still the participant's inbox), takes no credit and is the caller's again; a dispatched
// one is refused as in flight. The replay test in dispatcher_test.cpp shows that the core sees each
// withdrawal exactly as Core::withdraw, cursor and all.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <deque>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/runtime.hpp"
#include "internal/test_hooks.hpp"
#include "runtime_support.hpp"

namespace creditloop::runtime_tests {
namespace {

std::vector<int> dispatched_ids(Recorder& recorder) {
  std::vector<int> ids;
  for (const Decision& d : recorder.seen()) ids.push_back(id_of(d.request));
  return ids;
}

TEST(RuntimeWithdraw, AQueuedRequestLeavesItsQueueAndTheRestGoOutInOrder) {
  Recorder recorder;
  std::atomic<bool> room{false};
  Runtime rt(options_with_room_flag(recorder, room));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(5);
  for (int i = 0; i < 5; ++i) {
    requests[static_cast<std::size_t>(i)].id = i;
    ASSERT_TRUE(rt.submit(alice, requests[static_cast<std::size_t>(i)]).ok());
  }
  // Some of them may still be in the inbox: withdraw finds them there too.
  ASSERT_TRUE(rt.withdraw(alice, requests[2]).ok());
  ASSERT_TRUE(rt.withdraw(alice, requests[4]).ok());
  EXPECT_TRUE(requests[2].idle());
  EXPECT_TRUE(requests[4].idle());
  EXPECT_EQ(rt.counters(alice)->queued, 3u);
  EXPECT_EQ(rt.counters().queued, 3u);
  EXPECT_EQ(rt.withdraw(alice, requests[2]).error(), Errc::not_queued);  // the caller's already

  room.store(true, std::memory_order_relaxed);  // a test flag: wake() re-tests it
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(3));
  EXPECT_EQ(dispatched_ids(recorder), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(rt.withdraw(alice, requests[0]).error(), Errc::in_flight);
  for (const Decision& d : recorder.seen()) ASSERT_TRUE(rt.complete(d.ticket, 1).ok());
  EXPECT_EQ(rt.snapshot(alice)->stats.completed, 3u);

  // A withdrawn request may be submitted again, and goes out like any other.
  ASSERT_TRUE(rt.submit(alice, requests[4]).ok());
  ASSERT_TRUE(recorder.wait_for(4));
  EXPECT_EQ(id_of(recorder.seen()[3].request), 4);
  ASSERT_TRUE(rt.complete(recorder.seen()[3].ticket, 1).ok());
  // The totals are written once per loop iteration, and are whole when a command returns.
  after_posted_commands(rt);
  EXPECT_EQ(rt.counters().queued, 0u);
}

// A submitter stopped between its push onto the empty inbox and the listing of the mailbox leaves
// the later submits of that participant in the inbox and on no list: withdraw takes them from the
// inbox itself.
TEST(RuntimeWithdraw, ARequestStillInTheInboxBehindAStoppedSubmitterIsWithdrawn) {
  static Latch stopped;
  static Latch go;
  stopped.reset();
  go.reset();
  Recorder recorder;
  Runtime rt(options_with(recorder));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  // release: pairs with the acquire load in CREDITLOOP_TEST_HOOK (test_hooks.hpp).
  detail::test_hooks::submit_pushed_first.store(
      [] {
        stopped.open();
        go.wait();
      },
      std::memory_order_release);
  Req first;
  first.id = 1;
  Req behind;
  behind.id = 2;
  std::thread submitter([&] { EXPECT_TRUE(rt.submit(alice, first).ok()); });
  stopped.wait();
  detail::test_hooks::submit_pushed_first.store(nullptr, std::memory_order_release);
  ASSERT_TRUE(rt.submit(alice, behind).ok());  // onto a non-empty inbox: it lists nothing
  EXPECT_TRUE(rt.withdraw(alice, behind).ok());
  EXPECT_TRUE(behind.idle());
  go.open();
  submitter.join();
  ASSERT_TRUE(recorder.wait_for(1));
  // A round trip drains the activation list first: whatever the submitter listed went out.
  (void)rt.snapshot();
  EXPECT_EQ(dispatched_ids(recorder), std::vector<int>{1});
  for (const Decision& d : recorder.seen()) ASSERT_TRUE(rt.complete(d.ticket, 1).ok());
  EXPECT_EQ(rt.counters(alice)->queued, 0u);
}

TEST(RuntimeWithdraw, ARequestNotWaitingForThatParticipantIsRefusedAndStaysWhereItIs) {
  Recorder recorder;
  std::atomic<bool> room{false};
  Runtime rt(options_with_room_flag(recorder, room));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "pro", 1);
  Req bobs;
  Req never;
  ASSERT_TRUE(rt.submit(bob, bobs).ok());
  EXPECT_EQ(rt.withdraw(alice, bobs).error(), Errc::not_queued);
  EXPECT_EQ(rt.withdraw(alice, never).error(), Errc::not_queued);
  EXPECT_EQ(
      rt.withdraw(ParticipantId{alice.place, alice.generation + 1, alice.issuer}, never).error(),
      Errc::unknown_participant);
  EXPECT_FALSE(bobs.idle());
  EXPECT_EQ(rt.counters(bob)->queued, 1u);
  EXPECT_EQ(rt.counters(alice)->queued, 0u);

  Recorder elsewhere_seen;
  Runtime elsewhere(options_with(elsewhere_seen));
  // bob is another issuer's id here.
  EXPECT_EQ(elsewhere.withdraw(bob, bobs).error(), Errc::unknown_participant);

  ASSERT_TRUE(rt.remove(alice).ok());
  EXPECT_EQ(rt.withdraw(alice, never).error(), Errc::unknown_participant);
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(1));
  EXPECT_EQ(recorder.seen()[0].request, &bobs);
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 1).ok());
  (void)rt.shutdown(ShutdownMode::hand_back);
  EXPECT_EQ(rt.withdraw(bob, bobs).error(), Errc::shut_down);
}

TEST(RuntimeWithdraw, ASinkMayWithdrawARequestInline) {
  Recorder recorder;
  std::deque<Req> requests(3);
  Runtime* runtime = nullptr;
  ParticipantId alice;
  Status inline_result = Errc::shut_down;
  RuntimeOptions o = options_with(recorder, 1);
  o.sink = [&](const Decision& d) {
    if (d.request == &requests[0]) inline_result = runtime->withdraw(alice, requests[1]);
    recorder(d);
  };
  Runtime rt(std::move(o));
  runtime = &rt;
  alice = *rt.add("alice", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "pro", 1);
  // Bob's request holds the one slot while alice's three queue behind it.
  Req bobs;
  bobs.id = 100;
  ASSERT_TRUE(rt.submit(bob, bobs).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  for (int i = 0; i < 3; ++i) {
    requests[static_cast<std::size_t>(i)].id = i;
    ASSERT_TRUE(rt.submit(alice, requests[static_cast<std::size_t>(i)]).ok());
  }
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 1).ok());
  ASSERT_TRUE(recorder.wait_for(2));
  ASSERT_TRUE(rt.complete(recorder.seen()[1].ticket, 1).ok());
  ASSERT_TRUE(recorder.wait_for(3));
  ASSERT_TRUE(rt.complete(recorder.seen()[2].ticket, 1).ok());
  // The sink ran on the dispatcher before the recorder saw request 0: its mutex orders the read.
  EXPECT_TRUE(inline_result.ok());
  EXPECT_EQ(dispatched_ids(recorder), (std::vector<int>{100, 0, 2}));
  EXPECT_TRUE(requests[1].idle());
}

// Producers submit bursts and withdraw half of each while the dispatcher hands out into two slots
// and the sink completes each request at once, so the dispatcher runs through the bursts as they
// come: every request is dispatched once or withdrawn once, never both, and the queue counters end
// at zero. Run under ThreadSanitizer by the tsan preset.
TEST(RuntimeWithdraw, WithdrawalsRacingDispatchesLoseNothingAndCountNothingTwice) {
  constexpr int kProducers = 4;
  constexpr int kBursts = 250;
  constexpr int kBurst = 8;
  Recorder recorder;
  Runtime* runtime = nullptr;
  RuntimeOptions o = options_with(recorder, 2);
  o.sink = [&](const Decision& d) {
    recorder(d);
    EXPECT_TRUE(runtime->complete(d.ticket, 0.01).ok());
  };
  Runtime rt(std::move(o));
  runtime = &rt;
  std::vector<ParticipantId> ids;
  for (int p = 0; p < kProducers; ++p) ids.push_back(*rt.add("p" + std::to_string(p), "pro", 1));
  // Contiguous, so that a burst is a run of them; never resized while the runtime holds one.
  std::vector<Req> requests(static_cast<std::size_t>(kProducers * kBursts * kBurst));
  for (std::size_t i = 0; i < requests.size(); ++i) requests[i].id = static_cast<int>(i);
  std::vector<std::vector<int>> withdrawn(kProducers);
  std::vector<std::size_t> refused_as_sent(kProducers, 0);  // in flight, or completed already
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      const ParticipantId id = ids[static_cast<std::size_t>(p)];
      for (int b = 0; b < kBursts; ++b) {
        Req* const burst = &requests[static_cast<std::size_t>((p * kBursts + b) * kBurst)];
        for (int i = 0; i < kBurst; ++i) ASSERT_TRUE(rt.submit(id, burst[i]).ok());
        for (int i = 0; i < kBurst; i += 2) {
          const Status s = rt.withdraw(id, burst[i]);
          if (s.ok()) {
            EXPECT_TRUE(burst[i].idle());
            withdrawn[static_cast<std::size_t>(p)].push_back(burst[i].id);
          } else {
            EXPECT_TRUE(s.error() == Errc::in_flight || s.error() == Errc::not_queued)
                << describe(s.error());
            ++refused_as_sent[static_cast<std::size_t>(p)];
          }
        }
      }
    });
  }
  for (std::thread& t : producers) t.join();
  std::size_t total_withdrawn = 0;
  for (const std::vector<int>& w : withdrawn) total_withdrawn += w.size();
  const std::size_t expected = requests.size() - total_withdrawn;
  ASSERT_TRUE(recorder.wait_for(expected));
  (void)rt.shutdown(ShutdownMode::drain);

  const std::vector<int> out = dispatched_ids(recorder);
  EXPECT_EQ(out.size(), expected);
  const std::set<int> seen(out.begin(), out.end());
  EXPECT_EQ(seen.size(), out.size()) << "a request dispatched twice";
  for (const std::vector<int>& w : withdrawn) {
    for (const int id : w)
      EXPECT_EQ(seen.count(id), 0u) << "request " << id << " withdrawn and sent";
  }
  EXPECT_EQ(rt.counters().queued, 0u);
  EXPECT_EQ(rt.snapshot().in_flight, 0u);
  // Both outcomes happened, or the race above was not run.
  EXPECT_GT(total_withdrawn, 0u);
  std::size_t sent_first = 0;
  for (const std::size_t n : refused_as_sent) sent_first += n;
  EXPECT_GT(sent_first, 0u);
}

}  // namespace
}  // namespace creditloop::runtime_tests
