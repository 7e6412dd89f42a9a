// Submit and complete through the public API: each participant's order, what a submit refuses
// and leaves the caller's, what a completion refuses, and completion batches. The tests synchronise
// on what the runtime does, never on elapsed time (runtime_support.hpp).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/runtime.hpp"
#include "internal/spin.hpp"
#include "runtime_support.hpp"
#include "spin_until.hpp"

namespace creditloop {
namespace {

using namespace runtime_tests;

// Submits `r` to `p` as soon as a hand-back has made it the caller's again (already_queued until
// then); any other refusal is counted in `unexpected`.
void submit_once_handed_back(Runtime& rt, ParticipantId p, Req& r,
                             std::atomic<std::size_t>& unexpected) {
  test::spin_until(
      [&] {
        const Status s = rt.submit(p, r);
        if (s.ok()) return true;
        if (s.error() == Errc::already_queued) return false;
        unexpected.fetch_add(1, std::memory_order_relaxed);  // a test count: no pairing
        return true;
      },
      "a handed-back request to be the caller's again");
}

TEST(SubmitComplete, EachParticipantsRequestsAreDispatchedInSubmissionOrder) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 1'000'000));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "lite", 1);
  std::deque<Req> requests(2000);
  for (int i = 0; i < 2000; ++i) {
    requests[static_cast<std::size_t>(i)].id = i;
    ASSERT_TRUE(rt.submit(i % 2 == 0 ? alice : bob, requests[static_cast<std::size_t>(i)]).ok());
  }
  ASSERT_TRUE(recorder.wait_for(2000));
  int last_alice = -1;
  int last_bob = -1;
  for (const Decision& d : recorder.seen()) {
    int& last = d.participant == alice ? last_alice : last_bob;
    EXPECT_GT(id_of(d.request), last);
    last = id_of(d.request);
  }
  EXPECT_EQ(last_alice, 1998);
  EXPECT_EQ(last_bob, 1999);
  complete_all(rt, recorder, 2000);
}

TEST(SubmitComplete,
     SubmissionToAnUnknownOrRemovedParticipantIsRefusedAndTheRequestStaysTheCallers) {
  Recorder recorder;
  Runtime rt(options_with(recorder));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req r;
  EXPECT_EQ(rt.submit(ParticipantId{alice.place, alice.generation + 1, alice.issuer}, r).error(),
            Errc::unknown_participant);
  EXPECT_EQ(rt.submit(ParticipantId{12345, 1, rt.issuer()}, r).error(), Errc::unknown_participant);
  EXPECT_EQ(rt.submit(ParticipantId{alice.place, 0, alice.issuer}, r).error(),
            Errc::unknown_participant);
  ASSERT_TRUE(rt.remove(alice).ok());
  EXPECT_EQ(rt.submit(alice, r).error(), Errc::unknown_participant);
  EXPECT_EQ(r.next_in_queue, nullptr);
  // The place is reused by the next registration; the old id stays refused.
  const ParticipantId again = *rt.add("alice", "pro", 1);
  EXPECT_EQ(again.place, alice.place);
  EXPECT_EQ(rt.submit(alice, r).error(), Errc::unknown_participant);
  ASSERT_TRUE(rt.submit(again, r).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  EXPECT_EQ(recorder.seen()[0].participant, again);
  complete_all(rt, recorder, 1);
}

// The inboxes hold 48-bit addresses (internal/inbox.hpp). A request whose address carries a tag
// above bit 47 (the AArch64 top byte of MTE or HWASan, x86 LAM's bits 57-62 or 48-62) is refused
// with unsupported_address, never masked into another address. The tagged references stand for
// what a tagging allocator hands out; nothing dereferences them.
TEST(SubmitComplete, ARequestWhoseAddressCarriesATagIsRefused) {
  Recorder recorder;
  Runtime rt(options_with(recorder));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req r;
  r.id = 7;
  const auto address = reinterpret_cast<std::uintptr_t>(static_cast<RequestHook*>(&r));
  for (const int bit : {48, 55, 56, 57, 59, 62, 63}) {
    RequestHook& tagged = *reinterpret_cast<RequestHook*>(address | (std::uintptr_t{1} << bit));
    const Status s = rt.submit(alice, tagged);
    ASSERT_FALSE(s.ok()) << "bit " << bit;
    EXPECT_EQ(s.error(), Errc::unsupported_address) << "bit " << bit;
  }
  EXPECT_EQ(r.next_in_queue, nullptr);
  EXPECT_EQ(rt.snapshot().submitted, 0u);
  // The same request, untagged, is dispatched.
  ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  EXPECT_EQ(recorder.seen()[0].request, &r);
  complete_all(rt, recorder, 1);
}

// A second submit before the request is the caller's again is refused whether the request still
// waits in the inbox, in the core's queue or is in flight, and relinks nothing.
TEST(SubmitComplete, ARequestSubmittedTwiceBeforeItsCompletionIsRefused) {
  Recorder recorder;
  std::atomic<bool> room{false};
  Runtime rt(options_with_room_flag(recorder, room));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "lite", 1);
  Req r;
  Req s;
  r.id = 1;
  s.id = 2;
  ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_EQ(rt.submit(alice, r).error(), Errc::already_queued);
  EXPECT_EQ(rt.submit(bob, r).error(), Errc::already_queued);
  ASSERT_TRUE(rt.submit(alice, s).ok());
  EXPECT_EQ(rt.snapshot(alice)->queued, 2u);  // in the core's queue now
  EXPECT_EQ(rt.submit(alice, r).error(), Errc::already_queued);
  EXPECT_EQ(rt.snapshot(alice)->queued, 2u);
  EXPECT_EQ(rt.snapshot(bob)->queued, 0u);
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(2));
  EXPECT_EQ(id_of(recorder.seen()[0].request), 1);
  EXPECT_EQ(id_of(recorder.seen()[1].request), 2);
  EXPECT_EQ(rt.submit(bob, r).error(), Errc::already_queued);  // in flight
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 0).ok());
  ASSERT_TRUE(rt.submit(bob, r).ok());  // the caller's again
  ASSERT_TRUE(recorder.wait_for(3));
  EXPECT_EQ(recorder.seen()[2].participant, bob);
  EXPECT_EQ(rt.snapshot().dispatched, 3u);
  complete_all(rt, recorder, 3);
}

// Requests handed back by a removal (once its list hands them back) or refused by a submit are the
// caller's to submit again.
TEST(SubmitComplete, HandedBackAndRefusedRequestsCanBeSubmittedAgain) {
  Recorder recorder;
  std::atomic<bool> room{false};
  Runtime rt(options_with_room_flag(recorder, room));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "lite", 1);
  std::deque<Req> requests(3);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  Result<RequestList> back = rt.remove(alice);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ(rt.submit(bob, requests[0]).error(), Errc::already_queued);  // the list's still
  while (RequestHook* r = back->pop_front()) {
    EXPECT_EQ(rt.submit(alice, *r).error(), Errc::unknown_participant);
    ASSERT_TRUE(rt.submit(bob, *r).ok());
  }
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(3));
  complete_all(rt, recorder, 3);
}

// A request handed back may be submitted again the moment it is, from any thread: the hand-back
// must not touch it after (creditloop/detail/hand_back.hpp, tests/relacy/hand_back_model.cpp).
// A second thread submits each request to bob the instant a removal of alice hands it back, with
// alice's requests partly in the core and partly still in her inbox; here the list is dropped
// unwalked, and its end hands them back (the next test walks it). ThreadSanitizer reports any
// read or write of a given-back request's link by the removal (the walk that gives the requests
// back, or the splice of the inbox's requests after the core's) as a race with the submit's push.
TEST(SubmitComplete, ARequestSubmittedTheMomentItIsHandedBackIsNotTouchedByTheHandBack) {
  Recorder recorder;
  std::atomic<bool> room{false};
  Runtime rt(options_with_room_flag(recorder, room));
  const ParticipantId bob = *rt.add("bob", "lite", 1);
  constexpr std::size_t kRounds = 300;
  constexpr std::size_t kPerRound = 6;
  std::deque<Req> requests(kRounds * kPerRound);
  // The round whose requests the racer may take (release: pairs with the racer's acquire, so
  // the racer submits only requests this thread submitted first); the rounds the racer finished.
  std::atomic<std::size_t> round{0};
  std::atomic<std::size_t> finished{0};
  std::atomic<std::size_t> unexpected{0};
  std::thread racer([&] {
    for (std::size_t r = 1; r <= kRounds; ++r) {
      test::spin_until([&] { return round.load(std::memory_order_acquire) >= r; },
                       "the next round");
      for (std::size_t i = (r - 1) * kPerRound; i < r * kPerRound; ++i) {
        submit_once_handed_back(rt, bob, requests[i], unexpected);
      }
      finished.store(r, std::memory_order_release);  // pairs with the main thread's acquire
    }
  });
  for (std::size_t r = 1; r <= kRounds; ++r) {
    const ParticipantId alice = *rt.add("alice", "pro", 1);
    for (std::size_t i = (r - 1) * kPerRound; i < r * kPerRound; ++i) {
      ASSERT_TRUE(rt.submit(alice, requests[i]).ok());
    }
    round.store(r, std::memory_order_release);
    {
      Result<RequestList> back = rt.remove(alice);
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(back->size(), kPerRound);
    }
    test::spin_until([&] { return finished.load(std::memory_order_acquire) >= r; },
                     "the racer to finish its round");
  }
  racer.join();
  EXPECT_EQ(unexpected.load(std::memory_order_relaxed), 0u);
  EXPECT_EQ(rt.snapshot(bob)->queued, requests.size())
      << "every request handed back was queued again, for bob";
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  complete_all(rt, recorder, requests.size());
  for (const Req& r : requests) EXPECT_TRUE(r.idle());
}

// The removal's caller walks the list it got while a second thread submits each request to bob
// the moment it is the caller's again. The list is linked through the requests' own links, which
// that submit's inbox push rewrites: a walk that reads a link after its request was handed back
// follows it into bob's inbox, and its unlink cuts that inbox's chain, so the requests behind the
// cut are never queued nor dispatched. Every request must reach bob's queue, and be dispatched.
TEST(SubmitComplete, RequestsSubmittedElsewhereWhileTheRemovalsListIsWalkedAreAllDispatched) {
  Recorder recorder;
  std::atomic<bool> room{false};
  Runtime rt(options_with_room_flag(recorder, room));
  const ParticipantId bob = *rt.add("bob", "lite", 1);
  constexpr std::size_t kRounds = 300;
  constexpr std::size_t kPerRound = 6;
  std::deque<Req> requests(kRounds * kPerRound);
  // As in the test above: the round the racer may take, and the rounds it finished.
  std::atomic<std::size_t> round{0};
  std::atomic<std::size_t> finished{0};
  std::atomic<std::size_t> unexpected{0};
  std::thread racer([&] {
    for (std::size_t r = 1; r <= kRounds; ++r) {
      test::spin_until([&] { return round.load(std::memory_order_acquire) >= r; },
                       "the next round");
      for (std::size_t i = (r - 1) * kPerRound; i < r * kPerRound; ++i) {
        submit_once_handed_back(rt, bob, requests[i], unexpected);
      }
      finished.store(r, std::memory_order_release);  // pairs with the main thread's acquire
    }
  });
  std::size_t walked = 0;
  for (std::size_t r = 1; r <= kRounds; ++r) {
    const ParticipantId alice = *rt.add("alice", "pro", 1);
    for (std::size_t i = (r - 1) * kPerRound; i < r * kPerRound; ++i) {
      ASSERT_TRUE(rt.submit(alice, requests[i]).ok());
    }
    round.store(r, std::memory_order_release);
    Result<RequestList> back = rt.remove(alice);
    ASSERT_TRUE(back.ok());
    while (back->pop_front() != nullptr) ++walked;
    test::spin_until([&] { return finished.load(std::memory_order_acquire) >= r; },
                     "the racer to finish its round");
  }
  racer.join();
  EXPECT_EQ(unexpected.load(std::memory_order_relaxed), 0u);
  EXPECT_EQ(walked, requests.size()) << "each walk passed exactly its own requests";
  ASSERT_EQ(rt.snapshot(bob)->queued, requests.size()) << "every request reached bob's queue";
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(requests.size())) << recorder.count() << " dispatched";
  complete_all(rt, recorder, requests.size());
  for (const Req& r : requests) EXPECT_TRUE(r.idle());
}

// Both runtimes number their places and tickets from 0: without the issuer, a sharded embedder
// that used the wrong shard would queue for, and complete, a stranger's request there.
TEST(SubmitComplete, AnotherRuntimesIdsAndTicketsAreRefused) {
  Recorder mine_seen;
  Recorder theirs_seen;
  Runtime mine(options_with(mine_seen));
  Runtime theirs(options_with(theirs_seen));
  EXPECT_NE(mine.issuer(), theirs.issuer());
  const ParticipantId alice = *mine.add("alice", "pro", 1);
  const ParticipantId stranger = *theirs.add("alice", "pro", 1);
  ASSERT_EQ(alice.place, stranger.place);
  ASSERT_EQ(alice.generation, stranger.generation);
  Req r;
  EXPECT_EQ(mine.submit(stranger, r).error(), Errc::unknown_participant);
  EXPECT_TRUE(r.idle());
  EXPECT_FALSE(mine.counters(stranger).has_value());
  Req theirs_request;
  ASSERT_TRUE(theirs.submit(stranger, theirs_request).ok());
  ASSERT_TRUE(theirs_seen.wait_for(1));
  Req mine_request;
  ASSERT_TRUE(mine.submit(alice, mine_request).ok());
  ASSERT_TRUE(mine_seen.wait_for(1));
  const Ticket foreign = theirs_seen.seen()[0].ticket;
  ASSERT_EQ(foreign.index, mine_seen.seen()[0].ticket.index);
  EXPECT_EQ(mine.complete(foreign, 1).error(), Errc::unknown_ticket);
  EXPECT_EQ(mine.snapshot().in_flight, 1u);
  EXPECT_TRUE(mine.complete(mine_seen.seen()[0].ticket, 1).ok());
  EXPECT_TRUE(theirs.complete(foreign, 1).ok());
}

TEST(SubmitComplete, BadCompletionsAreRefusedInOrderAndChangeNothing) {
  Recorder recorder;
  Runtime rt(options_with(recorder));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req r;
  ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  const Ticket t = recorder.seen()[0].ticket;
  const std::optional<ParticipantSnapshot> before = rt.snapshot(alice);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(rt.complete(t, -1).error(), Errc::bad_cost);
  EXPECT_EQ(rt.complete(t, std::nan("")).error(), Errc::bad_cost);
  EXPECT_EQ(rt.complete(t, std::numeric_limits<double>::infinity()).error(), Errc::bad_cost);
  EXPECT_EQ(rt.complete(t, kMaxCost * 2).error(), Errc::bad_cost);
  EXPECT_EQ(rt.complete(Ticket{t.index, t.issuer, t.generation + 2}, 1).error(),
            Errc::unknown_ticket);
  EXPECT_EQ(rt.complete(Ticket{1u << 30, t.issuer, 1}, 1).error(), Errc::unknown_ticket);
  EXPECT_EQ(rt.complete(Ticket{t.index + 1, t.issuer, 1}, 1).error(), Errc::unknown_ticket);
  // bad_cost is reported before the ticket is looked at.
  EXPECT_EQ(rt.complete(Ticket{1u << 30, t.issuer, 1}, -1).error(), Errc::bad_cost);
  const std::optional<ParticipantSnapshot> unchanged = rt.snapshot(alice);
  EXPECT_EQ(unchanged->stats.completed, before->stats.completed);
  EXPECT_EQ(rt.snapshot().in_flight, 1u);

  ASSERT_TRUE(rt.complete(t, 2.5).ok());
  EXPECT_EQ(rt.complete(t, 2.5).error(), Errc::stale_ticket);
  const std::optional<ParticipantSnapshot> after = rt.snapshot(alice);
  EXPECT_EQ(after->stats.completed, 1u);
  EXPECT_EQ(after->stats.cost_charged, static_cast<Balance>(2'500'000'000));
  EXPECT_EQ(rt.complete(t, 1).error(), Errc::stale_ticket);
  EXPECT_EQ(rt.snapshot(alice)->stats.cost_charged, static_cast<Balance>(2'500'000'000));
}

TEST(SubmitComplete, ACompletionBatchClaimsAtOnceAndPublishesOnFlush) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 8));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(8);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(8));
  const std::vector<Decision> seen = recorder.seen();
  {
    CompletionBatch batch(rt);
    for (const Decision& d : seen) ASSERT_TRUE(batch.add(d.ticket, 0.25).ok());
    EXPECT_EQ(batch.add(seen[0].ticket, 0.25).error(), Errc::stale_ticket);
    EXPECT_EQ(batch.add(seen[0].ticket, -1).error(), Errc::bad_cost);
    EXPECT_EQ(batch.pending(), 8u);
    EXPECT_EQ(rt.snapshot().completed, 0u);  // claimed, not yet published
    batch.flush();
    EXPECT_EQ(batch.pending(), 0u);
  }
  const RuntimeSnapshot s = rt.snapshot();
  EXPECT_EQ(s.completed, 8u);
  EXPECT_EQ(s.in_flight, 0u);
  const ParticipantStats stats = rt.snapshot(alice)->stats;
  EXPECT_EQ(stats.cost_charged + stats.cost_uncharged, static_cast<Balance>(8 * 250'000'000));
}

}  // namespace
}  // namespace creditloop
