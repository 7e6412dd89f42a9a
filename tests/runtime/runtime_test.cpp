// Unit tests of the threaded runtime: what runtime.hpp promises, each checked through the public
// API. The tests synchronise on what the runtime does (a sink that signals each dispatch, a
// snapshot that round-trips through the dispatcher), never on elapsed time; a deadline only turns
// a hang into a failure.
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

namespace creditloop {
namespace {

using namespace std::chrono_literals;
constexpr auto kDeadline = 60s;  // a hang fails the test instead of stalling CI

struct Req : RequestHook {
  int id = 0;
};
int id_of(const RequestHook* r) { return static_cast<const Req*>(r)->id; }

// Collects what the sink receives, on the dispatcher thread, and lets the test wait for it.
class Recorder {
 public:
  void operator()(const Dispatched& d) {
    std::lock_guard lock(mutex_);
    seen_.push_back(d);
    changed_.notify_all();
  }
  // Waits until at least n dispatches were seen; false at the deadline.
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kDeadline, [&] { return seen_.size() >= n; });
  }
  std::vector<Dispatched> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  std::size_t count() {
    std::lock_guard lock(mutex_);
    return seen_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Dispatched> seen_;
};

// Completes every request dispatched so far and, as room returns, every later one, until `total`
// were dispatched: a runtime is destroyed only with nothing in flight.
void complete_all(Runtime& rt, Recorder& recorder, std::size_t total) {
  std::size_t done = 0;
  while (done < total) {
    ASSERT_TRUE(recorder.wait_for(done + 1));
    const std::vector<Dispatched> seen = recorder.seen();
    for (; done < seen.size(); ++done) (void)rt.complete(seen[done].ticket, 0);  // may be done
  }
}

RuntimeOptions options_with(Recorder& recorder, std::uint32_t slots = 64) {
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = slots;
  o.sink = [&recorder](const Dispatched& d) { recorder(d); };
  return o;
}

// The same, with room only once the test sets `room` (and calls wake()).
RuntimeOptions options_with_room_flag(Recorder& recorder, std::atomic<bool>& room) {
  RuntimeOptions o = options_with(recorder);
  o.room = [&room] { return room.load(std::memory_order_relaxed); };  // a test flag: no pairing
  return o;
}

// A sink that completes every request at once with `cost`, from the dispatcher thread.
struct CompletingSink {
  Runtime* runtime = nullptr;
  double cost = 0;
  Recorder* recorder = nullptr;
  void operator()(const Dispatched& d) const {
    ASSERT_TRUE(runtime->complete(d.ticket, cost).ok());
    if (recorder != nullptr) (*recorder)(d);
  }
};

TEST(Runtime, EachParticipantsRequestsAreDispatchedInSubmissionOrder) {
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
  for (const Dispatched& d : recorder.seen()) {
    int& last = d.participant == alice ? last_alice : last_bob;
    EXPECT_GT(id_of(d.request), last);
    last = id_of(d.request);
  }
  EXPECT_EQ(last_alice, 1998);
  EXPECT_EQ(last_bob, 1999);
  complete_all(rt, recorder, 2000);
}

TEST(Runtime, SubmissionToAnUnknownOrRemovedParticipantIsRefusedAndTheRequestStaysTheCallers) {
  Recorder recorder;
  Runtime rt(options_with(recorder));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req r;
  EXPECT_EQ(rt.submit(ParticipantId{alice.slot, alice.generation + 1, alice.issuer}, r).error(),
            Errc::unknown_participant);
  EXPECT_EQ(rt.submit(ParticipantId{12345, 1, rt.issuer()}, r).error(), Errc::unknown_participant);
  EXPECT_EQ(rt.submit(ParticipantId{alice.slot, 0, alice.issuer}, r).error(),
            Errc::unknown_participant);
  ASSERT_TRUE(rt.remove(alice).ok());
  EXPECT_EQ(rt.submit(alice, r).error(), Errc::unknown_participant);
  EXPECT_EQ(r.next_in_queue, nullptr);
  // The place is reused by the next registration; the old id stays refused.
  const ParticipantId again = *rt.add("alice", "pro", 1);
  EXPECT_EQ(again.slot, alice.slot);
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
TEST(Runtime, ARequestWhoseAddressCarriesATagIsRefused) {
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
TEST(Runtime, ARequestSubmittedTwiceBeforeItsCompletionIsRefused) {
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

// Requests handed back by a removal or refused by a submit are the caller's to submit again.
TEST(Runtime, HandedBackAndRefusedRequestsCanBeSubmittedAgain) {
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
  EXPECT_EQ(rt.submit(alice, requests[0]).error(), Errc::unknown_participant);
  while (RequestHook* r = back->pop_front()) ASSERT_TRUE(rt.submit(bob, *r).ok());
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(3));
  complete_all(rt, recorder, 3);
}

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

// A scrape on another thread reads counters while the dispatcher writes them: each read is a
// consistent cut of one participant, never goes backwards, and ends at the exact totals.
TEST(Runtime, CountersReadFromAnotherThreadAreMonotonicAndEndExact) {
  constexpr int kRequests = 3000;
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 8;
  CompletingSink sink{nullptr, 0.25, nullptr};
  o.sink = [&sink](const Dispatched& d) { sink(d); };
  Runtime rt(std::move(o));
  sink.runtime = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    std::uint64_t last_dispatched = 0;
    std::uint64_t last_completed = 0;
    // acquire: pairs with the release store below; a last read after it sees the final values.
    while (!done.load(std::memory_order_acquire)) {
      const std::optional<ParticipantCounters> c = rt.counters(alice);
      ASSERT_TRUE(c.has_value());
      const std::uint64_t dispatched = c->dispatched[0] + c->dispatched[1] + c->dispatched[2];
      EXPECT_GE(dispatched, last_dispatched);
      EXPECT_GE(c->completed, last_completed);
      EXPECT_LE(c->completed, dispatched);
      // One cut: every completion so far was charged 0.25 credit, unless the bucket was P3's.
      EXPECT_LE(c->cost_charged, static_cast<Balance>(c->completed) * 250'000'000);
      last_dispatched = dispatched;
      last_completed = c->completed;
    }
  });
  std::deque<Req> requests(kRequests);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  done.store(true, std::memory_order_release);
  scraper.join();
  const ParticipantCounters c = *rt.counters(alice);
  EXPECT_EQ(c.dispatched[0] + c.dispatched[1] + c.dispatched[2], std::uint64_t{kRequests});
  EXPECT_EQ(c.completed, std::uint64_t{kRequests});
  EXPECT_EQ(c.queued, 0u);
  EXPECT_EQ(c.cost_charged, rt.snapshot(alice)->stats.cost_charged);
  EXPECT_EQ(rt.counters().completed, std::uint64_t{kRequests});
}

// The pool's handler learns the class its request went out under and its ticket.
TEST(Runtime, ThePoolHandlerSeesTheClassOutAndTheTicket) {
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 1;
  o.workers = 1;
  o.clock = [] { return Nanos{0}; };  // frozen: pro's 4 P1 credits, then P2
  std::mutex mutex;
  std::vector<Dispatched> seen;
  o.handler = [&](const Dispatched& d) {
    std::lock_guard lock(mutex);
    seen.push_back(d);
    return 0.0;
  };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(6);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  ASSERT_EQ(seen.size(), 6u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].request, &requests[i]);
    EXPECT_EQ(seen[i].participant, alice);
    EXPECT_EQ(seen[i].out, i < 4 ? 0 : 1) << i;
    EXPECT_NE(seen[i].ticket.generation, 0u);
    if (i > 0) {
      EXPECT_NE(seen[i].ticket, seen[i - 1].ticket);  // one slot: one record, reused
    }
  }
}

// Collects what on_error is told, from whichever thread.
class Errors {
 public:
  void operator()(const CallbackError& e) {
    std::lock_guard lock(mutex_);
    seen_.push_back(e);
  }
  std::vector<CallbackError> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::vector<CallbackError> seen_;
};

std::string what(const CallbackError& e) {
  try {
    std::rethrow_exception(e.error);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// A sink that throws did not take its request: it is completed at cost 0 and handed back
// through on_error, the caller's again; the runtime runs on.
TEST(Runtime, ASinkThatThrowsHandsItsRequestBackThroughOnError) {
  Recorder recorder;
  Errors errors;
  RuntimeOptions o = options_with(recorder);
  o.sink = [&](const Dispatched& d) {
    if (id_of(d.request) == 0) throw std::runtime_error("sink failure");
    recorder(d);
  };
  o.on_error = [&errors](const CallbackError& e) { errors(e); };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(3);
  for (int i = 0; i < 3; ++i) {
    requests[static_cast<std::size_t>(i)].id = i;
    ASSERT_TRUE(rt.submit(alice, requests[static_cast<std::size_t>(i)]).ok());
  }
  ASSERT_TRUE(recorder.wait_for(2));
  const RuntimeSnapshot s = rt.snapshot();
  EXPECT_EQ(s.dispatched, 3u);
  EXPECT_EQ(s.in_flight, 2u);  // the refused one was completed at once
  const std::vector<CallbackError> seen = errors.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, CallbackKind::sink);
  EXPECT_EQ(seen[0].request, &requests[0]);
  EXPECT_EQ(seen[0].participant, alice);
  EXPECT_EQ(what(seen[0]), "sink failure");
  EXPECT_TRUE(requests[0].idle());
  EXPECT_EQ(rt.complete(seen[0].ticket, 0).error(), Errc::stale_ticket);
  requests[0].id = 10;  // the caller's again: it can go out once more
  ASSERT_TRUE(rt.submit(alice, requests[0]).ok());
  ASSERT_TRUE(recorder.wait_for(3));
  complete_all(rt, recorder, 3);
}

// A room test, a clock and an observer that throw are reported and change nothing else: every
// request still goes out and comes back.
TEST(Runtime, ARoomTestClockOrObserverThatThrowsIsReportedAndTheRuntimeRunsOn) {
  struct ThrowingObserver : RuntimeObserver {
    std::atomic<int> submits{0};
    void on_submit(ParticipantId, const RequestHook&, Nanos) override {
      // relaxed: a count on the dispatcher thread, read after shutdown joins it.
      if (submits.fetch_add(1, std::memory_order_relaxed) % 2 == 0) {
        throw std::runtime_error("observer failure");
      }
    }
  } observer;
  Recorder recorder;
  Errors errors;
  std::atomic<int> room_calls{0};
  std::atomic<int> clock_calls{0};
  std::atomic<Runtime*> self{nullptr};
  RuntimeOptions o = options_with(recorder);
  o.room = [&] {
    // relaxed: counts on the dispatcher thread alone.
    if (room_calls.fetch_add(1, std::memory_order_relaxed) % 3 == 0) {
      throw std::runtime_error("room failure");
    }
    // acquire: pairs with the release store below; the runtime is constructed.
    Runtime* const rt = self.load(std::memory_order_acquire);
    return rt != nullptr && rt->snapshot().in_flight < 64;  // inline on the dispatcher
  };
  o.clock = [&] {
    const int n = clock_calls.fetch_add(1, std::memory_order_relaxed);
    if (n % 5 == 4) throw std::runtime_error("clock failure");
    return Nanos{n} * 1000;
  };
  o.observer = &observer;
  o.on_error = [&errors](const CallbackError& e) { errors(e); };
  Runtime rt(std::move(o));
  self.store(&rt, std::memory_order_release);
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(20);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(20));
  complete_all(rt, recorder, 20);
  EXPECT_TRUE(rt.shutdown(ShutdownMode::hand_back, std::nullopt).finished);
  int room = 0, clock = 0, observed = 0;
  for (const CallbackError& e : errors.seen()) {
    EXPECT_EQ(e.request, nullptr);
    room += e.kind == CallbackKind::room ? 1 : 0;
    clock += e.kind == CallbackKind::clock ? 1 : 0;
    observed += e.kind == CallbackKind::observer ? 1 : 0;
  }
  EXPECT_GT(room, 0);
  EXPECT_GT(clock, 0);
  EXPECT_EQ(observed, 10);  // every other of the 20 submits
}

// A handler that throws: its request is completed at cost 0, and on_error hears of it, with the
// request and its ticket.
TEST(Runtime, AHandlerThatThrowsIsReportedThroughOnError) {
  Errors errors;
  RuntimeOptions o;
  o.config = reference_config();
  o.workers = 2;
  o.handler = [](const Dispatched& d) -> double {
    if (id_of(d.request) % 2 == 1) throw std::runtime_error("handler failure");
    return 0.5;
  };
  o.on_error = [&errors](const CallbackError& e) { errors(e); };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(10);
  for (int i = 0; i < 10; ++i) {
    requests[static_cast<std::size_t>(i)].id = i;
    ASSERT_TRUE(rt.submit(alice, requests[static_cast<std::size_t>(i)]).ok());
  }
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain, std::nullopt).finished);
  EXPECT_EQ(rt.handler_errors(), 5u);
  const std::vector<CallbackError> seen = errors.seen();
  ASSERT_EQ(seen.size(), 5u);
  for (const CallbackError& e : seen) {
    EXPECT_EQ(e.kind, CallbackKind::handler);
    ASSERT_NE(e.request, nullptr);
    EXPECT_EQ(id_of(e.request) % 2, 1);
    EXPECT_NE(e.ticket.generation, 0u);
    EXPECT_EQ(what(e), "handler failure");
  }
  EXPECT_EQ(rt.snapshot().completed, 10u);
}

TEST(Runtime, TheSlotModelKeepsAtMostSlotsInFlightAndACompletionReturnsOne) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 2));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(10);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(2));
  // The snapshot runs on the dispatcher after the batch that dispatched those two, so a third
  // dispatch without room would already show.
  RuntimeSnapshot s = rt.snapshot();
  EXPECT_EQ(s.dispatched, 2u);
  EXPECT_EQ(s.in_flight, 2u);
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 0).ok());
  ASSERT_TRUE(recorder.wait_for(3));
  s = rt.snapshot();
  EXPECT_EQ(s.dispatched, 3u);
  EXPECT_EQ(s.in_flight, 2u);
  EXPECT_EQ(s.completed, 1u);
  complete_all(rt, recorder, 10);
}

TEST(Runtime, ACustomRoomTestIsObeyedAndWakeReTestsIt) {
  Recorder recorder;
  std::atomic<bool> room{false};
  RuntimeOptions o = options_with_room_flag(recorder, room);
  // No re-test on a timer within the test's deadline: only wake() can make the dispatcher see
  // the room, so the test fails if wake() does nothing.
  o.room_recheck = std::chrono::hours(1);
  o.spin = std::chrono::nanoseconds{0};  // asleep at once, not spinning on the room test
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(3);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_EQ(rt.snapshot().dispatched, 0u);
  while (!rt.dispatcher_sleeping()) std::this_thread::yield();  // it sleeps until woken
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(3));
  for (const Dispatched& d : recorder.seen()) ASSERT_TRUE(rt.complete(d.ticket, 0).ok());
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

// Both runtimes number their places and tickets from 0: without the issuer, a sharded embedder
// that used the wrong shard would queue for, and complete, a stranger's request there.
TEST(Runtime, AnotherRuntimesIdsAndTicketsAreRefused) {
  Recorder mine_seen;
  Recorder theirs_seen;
  Runtime mine(options_with(mine_seen));
  Runtime theirs(options_with(theirs_seen));
  EXPECT_NE(mine.issuer(), theirs.issuer());
  const ParticipantId alice = *mine.add("alice", "pro", 1);
  const ParticipantId stranger = *theirs.add("alice", "pro", 1);
  ASSERT_EQ(alice.slot, stranger.slot);
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

TEST(Runtime, BadCompletionsAreRefusedInOrderAndChangeNothing) {
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

TEST(Runtime, TheChargeLandsInTheAdmittingBucketBeforeTheNextDecision) {
  // A manual clock that never moves: the P1 bucket changes only by debits and charges.
  Recorder recorder;
  RuntimeOptions o = options_with(recorder, 1);
  o.clock = [] { return Nanos{0}; };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const Balance full = *rt.snapshot(alice)->balance[0];
  Req first;
  Req second;
  ASSERT_TRUE(rt.submit(alice, first).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  EXPECT_EQ(recorder.seen()[0].out, 0);
  ASSERT_TRUE(rt.submit(alice, second).ok());
  // Charging the whole remaining balance leaves P1 without a credit, so the second request,
  // dispatched after the charge was applied, must go out under a lower class.
  const Balance left = full - kNanoPerCredit;
  ASSERT_TRUE(rt.complete_nano(recorder.seen()[0].ticket, static_cast<std::int64_t>(left)).ok());
  ASSERT_TRUE(recorder.wait_for(2));
  EXPECT_NE(recorder.seen()[1].out, 0);
  EXPECT_EQ(*rt.snapshot(alice)->balance[0], Balance{0});
  ASSERT_TRUE(rt.complete(recorder.seen()[1].ticket, 0).ok());
}

TEST(Runtime, ACompletionBatchClaimsAtOnceAndPublishesOnFlush) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 8));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(8);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(8));
  const std::vector<Dispatched> seen = recorder.seen();
  {
    CompletionBatch batch(rt);
    for (const Dispatched& d : seen) ASSERT_TRUE(batch.add(d.ticket, 0.25).ok());
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

TEST(Runtime, TheWorkerPoolCompletesEachRequestWithTheCostItsHandlerReturns) {
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 16;
  o.workers = 2;
  std::atomic<int> handled{0};
  o.handler = [&handled](const Dispatched& d) {
    handled.fetch_add(1, std::memory_order_relaxed);  // a count read after shutdown joins
    const int id = id_of(d.request);
    if (id % 10 == 7) return std::nan("");  // refused: completes at 0, counted as an error
    if (id % 10 == 8) throw std::runtime_error("handler failure");
    return 0.5;
  };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 4);
  const ParticipantId bob = *rt.add("bob", "lite", 1);
  std::deque<Req> requests(1000);
  for (int i = 0; i < 1000; ++i) {
    requests[static_cast<std::size_t>(i)].id = i;
    ASSERT_TRUE(rt.submit(i % 2 == 0 ? alice : bob, requests[static_cast<std::size_t>(i)]).ok());
  }
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  EXPECT_EQ(handled.load(std::memory_order_relaxed), 1000);
  EXPECT_EQ(rt.handler_errors(), 200u);
  const RuntimeSnapshot s = rt.snapshot();
  EXPECT_EQ(s.dispatched, 1000u);
  EXPECT_EQ(s.completed, 1000u);
  EXPECT_GT(s.dispatcher_cpu, 0);  // its final figure: the thread has exited
  EXPECT_EQ(rt.snapshot().dispatcher_cpu, s.dispatcher_cpu);
  Balance costs = 0;
  for (const ParticipantSnapshot& p : rt.snapshot_participants()) {
    costs += p.stats.cost_charged + p.stats.cost_uncharged;
    EXPECT_EQ(p.stats.completed, 500u);
  }
  EXPECT_EQ(costs, static_cast<Balance>(800) * 500'000'000);
}

// A latch the test opens; waiting past the deadline fails instead of hanging.
class Latch {
 public:
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(changed_.wait_for(lock, kDeadline, [&] { return open_; }));
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
};

// Counts toward a target that another thread waits for.
class Counter {
 public:
  void add() {
    std::lock_guard lock(mutex_);
    ++count_;
    changed_.notify_all();
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kDeadline, [&] { return count_ >= n; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t count_ = 0;
};

// The pool's worker owns the tickets it is handed, so a completion from anyone else is refused.
// And while the dispatcher is slow to give a worker's completion blocks back (here it is held in
// the observer's first on_complete until every request has been handled), the worker completes
// through the ticket records instead: nothing waits and nothing is lost.
TEST(Runtime, PoolTicketsAreTheirWorkersAndNoCompletionIsLostWhileTheDispatcherLags) {
  // More bulks of at most 32 than a worker has completion blocks (8): the blocks run out.
  constexpr std::size_t kRequests = 1000;
  class Watch : public RuntimeObserver {
   public:
    Counter dispatched;
    Latch apply;
    std::vector<Ticket> tickets;      // guarded by mutex
    std::vector<std::int64_t> costs;  // dispatcher thread; read after shutdown
    std::mutex mutex;
    void on_visit(const Dispatch* d, Ticket t, Nanos) override {
      if (d == nullptr) return;
      {
        std::lock_guard lock(mutex);
        tickets.push_back(t);
      }
      dispatched.add();
    }
    void on_complete(Ticket, std::int64_t cost, Nanos) override {
      if (costs.empty()) apply.wait();
      costs.push_back(cost);
    }
  } watch;
  Latch handle;
  Counter handled;
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 1024;  // every request is dispatched while the worker is held in its first
  o.workers = 1;
  o.observer = &watch;
  o.handler = [&](const Dispatched& d) {
    if (id_of(d.request) == 0) handle.wait();
    handled.add();
    return 0.25;
  };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(kRequests);
  for (std::size_t i = 0; i < kRequests; ++i) {
    requests[i].id = static_cast<int>(i);
    ASSERT_TRUE(rt.submit(alice, requests[i]).ok());
  }
  ASSERT_TRUE(watch.dispatched.wait_for(kRequests));
  {
    std::lock_guard lock(watch.mutex);
    for (const Ticket& t : watch.tickets)
      EXPECT_EQ(rt.complete(t, 5.0).error(), Errc::stale_ticket);
  }
  handle.open();
  ASSERT_TRUE(handled.wait_for(kRequests));
  watch.apply.open();
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  ASSERT_EQ(watch.costs.size(), kRequests);
  for (const std::int64_t cost : watch.costs) EXPECT_EQ(cost, 250'000'000);
  const RuntimeSnapshot s = rt.snapshot();
  EXPECT_EQ(s.completed, kRequests);
  const ParticipantSnapshot a = *rt.snapshot(alice);
  EXPECT_EQ(a.stats.cost_charged + a.stats.cost_uncharged,
            static_cast<Balance>(kRequests) * 250'000'000);
}

TEST(Runtime, ShutdownHandsBackWhatIsQueuedRefusesSubmissionsAndWaitsForWhatIsInFlight) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 1));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "lite", 1);
  std::deque<Req> requests(7);
  for (int i = 0; i < 7; ++i) requests[static_cast<std::size_t>(i)].id = i;
  ASSERT_TRUE(rt.submit(alice, requests[0]).ok());
  ASSERT_TRUE(recorder.wait_for(1));  // requests[0] holds the only slot
  for (int i = 1; i < 7; ++i) {
    ASSERT_TRUE(rt.submit(i % 2 == 0 ? alice : bob, requests[static_cast<std::size_t>(i)]).ok());
  }
  RequestList back;
  std::thread stopper([&] { back = rt.shutdown(ShutdownMode::hand_back); });
  // Submissions succeed until shutdown closes the inboxes; those that got in are handed back
  // with the rest, behind bob's earlier requests.
  std::vector<int> bob_expected{1, 3, 5};
  for (int probe = 100;; ++probe) {
    requests.emplace_back().id = probe;
    const Status s = rt.submit(bob, requests.back());
    if (!s) {
      EXPECT_EQ(s.error(), Errc::shut_down);
      break;
    }
    bob_expected.push_back(probe);
  }
  // Completions stay accepted during shutdown, which waits for this one.
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 1.0).ok());
  stopper.join();
  EXPECT_EQ(recorder.count(), 1u);
  std::vector<int> alice_back;
  std::vector<int> bob_back;
  while (RequestHook* r = back.pop_front()) {
    const int id = id_of(r);
    (id % 2 == 0 && id < 100 ? alice_back : bob_back).push_back(id);
  }
  EXPECT_EQ(alice_back, (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(bob_back, bob_expected);
  Req late;
  EXPECT_EQ(rt.submit(alice, late).error(), Errc::shut_down);
  EXPECT_EQ(rt.add("carol", "pro", 1).error(), Errc::shut_down);
  EXPECT_EQ(rt.complete(recorder.seen()[0].ticket, 1.0).error(), Errc::stale_ticket);
  EXPECT_EQ(rt.snapshot().completed, 1u);
  EXPECT_TRUE(rt.shutdown().empty());  // a second shutdown has nothing left to do
}

// Shutdown returns at its deadline with what is still in flight, goes on accepting those
// completions, and finishes on a later call once they came.
TEST(Runtime, ShutdownWithADeadlineReturnsAndReportsWhatIsStillInFlight) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 2));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(3);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(2));
  const std::vector<Dispatched> seen = recorder.seen();
  ShutdownReport first = rt.shutdown(ShutdownMode::hand_back, std::chrono::milliseconds(20));
  ASSERT_TRUE(first.status.ok());
  EXPECT_FALSE(first.finished);
  EXPECT_EQ(first.handed_back.size(), 1u);
  ASSERT_EQ(first.in_flight.size(), 2u);
  EXPECT_TRUE((first.in_flight[0] == seen[0].ticket && first.in_flight[1] == seen[1].ticket) ||
              (first.in_flight[0] == seen[1].ticket && first.in_flight[1] == seen[0].ticket));
  EXPECT_EQ(rt.submit(alice, requests[2]).error(), Errc::shut_down);
  ASSERT_TRUE(rt.complete(seen[0].ticket, 0).ok());
  ShutdownReport second = rt.shutdown(ShutdownMode::hand_back, std::chrono::milliseconds(0));
  EXPECT_FALSE(second.finished);
  EXPECT_TRUE(second.handed_back.empty());  // only the first call hands back
  // The completion may still be on its way to the dispatcher: one or both tickets remain.
  ASSERT_FALSE(second.in_flight.empty());
  EXPECT_EQ(second.in_flight.back(), seen[1].ticket);
  ASSERT_TRUE(rt.complete(seen[1].ticket, 0).ok());
  const ShutdownReport last = rt.shutdown(ShutdownMode::hand_back, std::nullopt);
  EXPECT_TRUE(last.finished);
  EXPECT_TRUE(last.in_flight.empty());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::hand_back, std::chrono::milliseconds(0)).finished);
  EXPECT_EQ(rt.snapshot().completed, 2u);
}

// From the dispatcher thread (a sink) or a pool worker (a handler), shutdown would wait for its
// own thread: it reports wrong_thread and does nothing, and the runtime runs on.
TEST(Runtime, ShutdownFromASinkOrAHandlerIsRefusedNotADeadlock) {
  std::atomic<int> refused{0};
  Runtime* self = nullptr;
  RuntimeOptions o;
  o.config = reference_config();
  o.sink = [&](const Dispatched& d) {
    if (self->shutdown().empty() &&
        self->shutdown(ShutdownMode::drain, std::nullopt).status == Status{Errc::wrong_thread}) {
      refused.fetch_add(1, std::memory_order_relaxed);  // read after the join below
    }
    ASSERT_TRUE(self->complete(d.ticket, 0).ok());
  };
  Runtime rt(std::move(o));
  self = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req r;
  ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain, std::nullopt).finished);
  EXPECT_EQ(refused.load(std::memory_order_relaxed), 1);

  std::atomic<int> handler_refused{0};
  Runtime* pool_self = nullptr;
  RuntimeOptions p;
  p.config = reference_config();
  p.workers = 2;
  p.handler = [&](const Dispatched&) {
    if (pool_self->shutdown(ShutdownMode::hand_back, std::chrono::seconds(0)).status ==
        Status{Errc::wrong_thread}) {
      handler_refused.fetch_add(1, std::memory_order_relaxed);  // read after the join below
    }
    return 0.0;
  };
  Runtime pool(std::move(p));
  pool_self = &pool;
  const ParticipantId bob = *pool.add("bob", "pro", 1);
  std::deque<Req> requests(4);
  for (Req& q : requests) ASSERT_TRUE(pool.submit(bob, q).ok());
  EXPECT_TRUE(pool.shutdown(ShutdownMode::drain, std::nullopt).finished);
  EXPECT_EQ(handler_refused.load(std::memory_order_relaxed), 4);
}

// Producers racing shutdown: a refused submit always says shut_down (the participant is never
// removed), and every accepted request is dispatched or handed back exactly once.
TEST(Runtime, ASubmitThatRacesShutdownIsRefusedWithShutDown) {
  constexpr int kProducers = 3;
  constexpr int kEach = 2000;
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 1'000'000;
  std::atomic<int> dispatched{0};
  Runtime* self = nullptr;
  o.sink = [&](const Dispatched& d) {
    dispatched.fetch_add(1, std::memory_order_relaxed);  // read after the join below
    ASSERT_TRUE(self->complete(d.ticket, 0).ok());
  };
  Runtime rt(std::move(o));
  self = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(kProducers * kEach);
  std::atomic<int> accepted{0};
  std::atomic<int> wrong{0};
  std::atomic<int> started{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < kProducers; ++t) {
    producers.emplace_back([&, t] {
      started.fetch_add(1, std::memory_order_relaxed);  // a start gate: no pairing
      for (int i = 0; i < kEach; ++i) {
        const Status s = rt.submit(alice, requests[static_cast<std::size_t>(t * kEach + i)]);
        if (s.ok()) {
          accepted.fetch_add(1, std::memory_order_relaxed);
        } else if (s.error() != Errc::shut_down) {
          wrong.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  while (started.load(std::memory_order_relaxed) < kProducers) std::this_thread::yield();
  ShutdownReport report = rt.shutdown(ShutdownMode::hand_back, std::nullopt);
  for (std::thread& p : producers) p.join();
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(wrong.load(std::memory_order_relaxed), 0);
  EXPECT_EQ(static_cast<std::size_t>(dispatched.load(std::memory_order_relaxed)) +
                report.handed_back.size(),
            static_cast<std::size_t>(accepted.load(std::memory_order_relaxed)));
}

TEST(Runtime, ShutdownCanDrainEverythingQueuedFirst) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder, 4);
  Runtime* self = nullptr;
  o.sink = [&](const Dispatched& d) { CompletingSink{self, 0.0, &recorder}(d); };
  Runtime rt(std::move(o));
  self = &rt;
  std::vector<ParticipantId> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(*rt.add("p" + std::to_string(i), "pro", 1));
  std::deque<Req> requests(500);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(rt.submit(ids[i % ids.size()], requests[i]).ok());
  }
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  EXPECT_EQ(recorder.count(), 500u);
  EXPECT_EQ(rt.snapshot().completed, 500u);
}

TEST(Runtime, DestructionWithoutShutdownIsSafe) {
  // The first handler holds its request until the runtime's destruction has been asked for: the
  // destructor must wait for it, so every handler that started has finished when it returns.
  std::deque<Req> requests(300);
  std::atomic<bool> destroying{false};
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  std::binary_semaphore first_started{0};
  {
    RuntimeOptions o;
    o.config = reference_config();
    o.slots = 4;
    o.workers = 2;
    o.handler = [&](const Dispatched&) {
      // relaxed counters: read after the destructor joined the workers, which orders them.
      if (started.fetch_add(1, std::memory_order_relaxed) == 0) {
        first_started.release();
        // acquire: pairs with the test's release store below; only a flag, nothing it publishes.
        while (!destroying.load(std::memory_order_acquire)) std::this_thread::yield();
      }
      finished.fetch_add(1, std::memory_order_relaxed);
      return 1.0;
    };
    Runtime rt(std::move(o));
    const ParticipantId alice = *rt.add("alice", "pro", 1);
    for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
    ASSERT_TRUE(first_started.try_acquire_for(kDeadline));
    destroying.store(true, std::memory_order_release);  // pairs with the handler's acquire
  }  // queued requests are dropped (they are ours), in-flight ones complete first
  const int began = started.load(std::memory_order_relaxed);
  EXPECT_GE(began, 1);
  EXPECT_EQ(finished.load(std::memory_order_relaxed), began)
      << "the destructor returned before a handler did";
  EXPECT_LE(began, 300);
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
      rt.snapshot(ParticipantId{alice.slot, alice.generation + 1, alice.issuer}).has_value());
  const RuntimeSnapshot all = rt.snapshot();
  EXPECT_EQ(all.participants, 1u);
  EXPECT_EQ(all.per_class[0].dispatched, 1u);
  EXPECT_GE(all.per_class[0].passes, 1u);
  EXPECT_EQ(all.classes, 2);
  EXPECT_GT(all.dispatcher_cpu, 0);  // read on the dispatcher thread, while it runs
  EXPECT_GE(rt.snapshot().dispatcher_cpu, all.dispatcher_cpu);
  complete_all(rt, recorder, 4);
}

TEST(Runtime, ReplanWhileRunningKeepsTheBalanceClippedAndMayDropABucket) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder, 1);
  o.clock = [] { return Nanos{0}; };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 10);
  EXPECT_EQ(rt.replan(alice, "nope", 1).error(), Errc::unknown_plan);
  EXPECT_EQ(rt.replan(alice, "pro", 0).error(), Errc::bad_shares);
  EXPECT_EQ(rt.replan(ParticipantId{alice.slot, 99, alice.issuer}, "pro", 1).error(),
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
  o.handler = [](const Dispatched&) { return 1.0; };
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
  const auto wait_until = [&](auto condition) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  };
  ASSERT_TRUE(wait_until([&] { return dispatched(alice, true) >= 200; }));

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
  ASSERT_TRUE(wait_until([&] { return dispatched(alice, false) >= unmetered + 500; }));
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
  ASSERT_TRUE(wait_until([&] { return dispatched(alice, true) > metered; }));

  EXPECT_EQ(rt.scale(alice, kWholePlan + 1).error(), Errc::bad_scale);
  EXPECT_EQ(rt.scale(ParticipantId{alice.slot, 99, alice.issuer}, 1).error(),
            Errc::unknown_participant);
  EXPECT_EQ(rt.snapshot(alice)->scale, kWholePlan);
  stop.store(true, std::memory_order_relaxed);  // the producer's polled flag: no pairing needed
  producer.join();
  (void)rt.shutdown(ShutdownMode::drain);
  EXPECT_EQ(rt.scale(alice, 1).error(), Errc::shut_down);
}

TEST(Runtime, TheDispatcherThreadIsNamedAndPinned) {
  // Pinned to the last CPU this process may use, whichever that is; the dispatcher's own
  // affinity must then be that CPU alone, which it is not unless the runtime pinned it.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "one CPU: pinned and unpinned look the same";
  int target = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) target = c;
  }
  std::mutex m;
  std::string name;
  cpu_set_t seen_affinity;
  CPU_ZERO(&seen_affinity);
  std::binary_semaphore seen{0};
  RuntimeOptions o;
  o.config = reference_config();
  o.thread_name = "cl-dispatch-test-long-name";
  o.cpu = target;
  Runtime* self = nullptr;
  o.sink = [&](const Dispatched& d) {
    char buffer[32] = {};
    pthread_getname_np(pthread_self(), buffer, sizeof buffer);
    {
      std::lock_guard lock(m);
      name = buffer;
      pthread_getaffinity_np(pthread_self(), sizeof seen_affinity, &seen_affinity);
    }
    (void)self->complete(d.ticket, 0);
    seen.release();
  };
  Runtime rt(std::move(o));
  self = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req r;
  ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(seen.try_acquire_for(kDeadline));
  std::lock_guard lock(m);
  EXPECT_EQ(name, "cl-dispatch-tes");  // the kernel keeps 15 characters
  EXPECT_EQ(CPU_COUNT(&seen_affinity), 1);
  EXPECT_TRUE(CPU_ISSET(target, &seen_affinity));
}

TEST(Runtime, BadOptionsAreRefusedAtConstruction) {
  auto make = [](auto change) {
    RuntimeOptions o;
    o.config = reference_config();
    o.sink = [](const Dispatched&) {};
    change(o);
    return o;
  };
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.slots = 0; })), std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.sink = nullptr; })), std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.workers = 2; })), std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.batch = 0; })), std::invalid_argument);
  EXPECT_THROW(
      Runtime(make([](RuntimeOptions& o) { o.room_recheck = std::chrono::nanoseconds{0}; })),
      std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.cpu = CPU_SETSIZE + 1; })),
               std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.config.classes = 0; })),
               std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.spin = std::chrono::nanoseconds{-1}; })),
               std::invalid_argument);
}

// Unless told, the dispatcher spins only when a CPU is left over for it beyond itself and the
// workers; otherwise its spin would take the CPU from the threads it waits on.
TEST(Runtime, TheDispatcherSpinsByDefaultOnlyWithACpuToSpare) {
  using creditloop::detail::default_spin;
  const std::chrono::nanoseconds none{0};
  EXPECT_EQ(default_spin(2, 1), none);
  EXPECT_EQ(default_spin(8, 7), none);
  EXPECT_EQ(default_spin(1, 0), none);
  EXPECT_GT(default_spin(2, 0), none);
  EXPECT_GT(default_spin(64, 8), none);
  EXPECT_GT(default_spin(0, 8), none);  // unknown CPU count: spin, as a dedicated server would
}

TEST(Runtime, AnIdleDispatcherSleepsAndASubmissionWakesIt) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder);
  o.spin = std::chrono::nanoseconds{0};
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  for (int round = 1; round <= 20; ++round) {
    // Wait until the dispatcher has gone to sleep, then submit: only a wake-up gets that request
    // dispatched.
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!rt.dispatcher_sleeping()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::yield();
    }
    Req r;
    ASSERT_TRUE(rt.submit(alice, r).ok());
    ASSERT_TRUE(recorder.wait_for(static_cast<std::size_t>(round)));
    ASSERT_TRUE(rt.complete(recorder.seen().back().ticket, 0).ok());
  }
  EXPECT_GE(rt.snapshot().parks, 1u);  // it did sleep; each round above proves it woke
}

// Replays what the observer saw through a fresh core: the runtime's decisions must be the core's.
class Journal : public RuntimeObserver {
 public:
  struct Event {
    enum Kind {
      add,
      remove,
      replan,
      scale,
      submit,
      begin,
      batch,
      visit,
      end,
      complete,
      take_all
    } kind = add;
    ParticipantId p;
    std::string name;
    PlanId plan = 0;
    std::uint32_t shares = 0;
    const RequestHook* request = nullptr;
    std::optional<ClassId> pass;
    std::optional<Dispatch> dispatch;
    Ticket ticket;
    std::int64_t cost = 0;
    std::size_t asked = 0;  // a batch's span, and what it got
    std::size_t got = 0;
    Nanos now = 0;
  };
  explicit Journal(bool batches) : batches_(batches) {}
  [[nodiscard]] bool follows_batches() const override { return batches_; }
  void on_dispatch(std::size_t asked, std::size_t got, Nanos now) override {
    Event& e = record(Event::batch, now);
    e.asked = asked;
    e.got = got;
  }
  void on_add(ParticipantId p, std::string_view name, PlanId plan, std::uint32_t shares,
              Nanos now) override {
    Event& e = record(Event::add, now);
    e.p = p;
    e.name = std::string(name);
    e.plan = plan;
    e.shares = shares;
  }
  void on_remove(ParticipantId p) override { record(Event::remove, 0).p = p; }
  void on_replan(ParticipantId p, PlanId plan, std::uint32_t shares, Nanos now) override {
    Event& e = record(Event::replan, now);
    e.p = p;
    e.plan = plan;
    e.shares = shares;
  }
  void on_scale(ParticipantId p, std::uint32_t millionths, Nanos now) override {
    Event& e = record(Event::scale, now);
    e.p = p;
    e.shares = millionths;
  }
  void on_submit(ParticipantId p, const RequestHook& r, Nanos now) override {
    Event& e = record(Event::submit, now);
    e.p = p;
    e.request = &r;
  }
  void on_begin_turn(std::optional<ClassId> pass, Nanos now) override {
    record(Event::begin, now).pass = pass;
  }
  void on_visit(const Dispatch* d, Ticket t, Nanos now) override {
    Event& e = record(Event::visit, now);
    if (d != nullptr) e.dispatch = *d;
    e.ticket = t;
  }
  void on_end_turn() override { record(Event::end, 0); }
  void on_complete(Ticket t, std::int64_t cost, Nanos now) override {
    Event& e = record(Event::complete, now);
    e.ticket = t;
    e.cost = cost;
  }
  void on_take_all() override { record(Event::take_all, 0); }
  Event& record(Event::Kind kind, Nanos now) {
    Event& e = events.emplace_back();
    e.kind = kind;
    e.now = now;
    return e;
  }
  std::vector<Event> events;  // written on the dispatcher thread, read after shutdown joins it

 private:
  bool batches_;
};

// With `batches`, the observer follows batches: the replay decides each with Core::dispatch().
void replay_what_the_observer_saw(bool batches) {
  Journal journal(batches);
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 3;
  o.workers = 2;
  o.handler = [](const Dispatched& d) { return (id_of(d.request) % 5) * 0.7; };
  o.observer = &journal;
  Runtime rt(std::move(o));
  std::vector<ParticipantId> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(*rt.add("p" + std::to_string(i), i % 3 == 0 ? "lite" : "pro", 1 + i));
  }
  std::deque<Req> requests(3000);
  std::thread producer([&] {
    for (std::size_t i = 0; i < requests.size(); i += 2) {
      requests[i].id = static_cast<int>(i);
      (void)rt.submit(ids[i % ids.size()], requests[i]);
    }
  });
  for (std::size_t i = 1; i < requests.size(); i += 2) {
    requests[i].id = static_cast<int>(i);
    (void)rt.submit(ids[(i * 7) % ids.size()], requests[i]);
    if (i == 1201) {
      ASSERT_TRUE(rt.scale(ids[1], 300'000).ok());
      ASSERT_TRUE(rt.scale(ids[4], 0).ok());
    }
    if (i == 1501) {
      ASSERT_TRUE(rt.replan(ids[1], "lite", 3).ok());  // keeps the scale
    }
    if (i == 1801) {
      ASSERT_TRUE(rt.scale(ids[4], 123'457).ok());
    }
    if (i == 2001) {
      ASSERT_TRUE(rt.remove(ids[2]).ok());
    }
  }
  producer.join();
  (void)rt.shutdown(ShutdownMode::drain);

  Core core(reference_config());
  // The replaying core is another issuer: the same place and generation, in its own name.
  const auto here = [&core](ParticipantId p) {
    p.issuer = core.issuer();
    return p;
  };
  std::vector<std::optional<Ticket>> core_ticket_of;  // by runtime ticket index
  std::size_t visits = 0;
  std::size_t batch_events = 0;
  std::size_t scales = 0;
  std::vector<Dispatch> decided;  // the batch in progress: its dispatches not yet reported
  std::size_t reported = 0;
  for (const Journal::Event& e : journal.events) {
    switch (e.kind) {
      case Journal::Event::add: {
        const Result<ParticipantId> id = core.add(e.name, e.plan, e.shares, e.now);
        ASSERT_TRUE(id.ok());
        ASSERT_EQ(*id, here(e.p));
        break;
      }
      case Journal::Event::remove:
        ASSERT_TRUE(core.remove(here(e.p)).ok());
        break;
      case Journal::Event::replan:
        ASSERT_TRUE(core.replan(here(e.p), e.plan, e.shares, e.now).ok());
        break;
      case Journal::Event::scale:
        ++scales;
        ASSERT_TRUE(core.scale(here(e.p), e.shares, e.now).ok());
        break;
      case Journal::Event::submit:
        // The replay core links the same request objects: they sit idle after the run.
        ASSERT_TRUE(core.submit(here(e.p), const_cast<RequestHook&>(*e.request), e.now).ok());
        break;
      case Journal::Event::begin:
        ASSERT_FALSE(batches) << "an observer of batches sees no turn begin";
        ASSERT_EQ(core.begin_turn(e.now), e.pass);
        break;
      case Journal::Event::batch: {
        ASSERT_TRUE(batches) << "a batch reported to an observer of visits";
        ASSERT_EQ(reported, decided.size()) << "a batch began before the last one was reported";
        ++batch_events;
        decided.resize(e.asked);
        ASSERT_EQ(core.dispatch(e.now, decided), e.got);
        decided.resize(e.got);
        reported = 0;
        break;
      }
      case Journal::Event::visit: {
        std::optional<Dispatch> d;
        if (reported < decided.size()) {
          d = decided[reported++];
        } else {
          ASSERT_FALSE(batches) << "a dispatch outside a batch";
          d = core.visit(e.now);
        }
        ASSERT_EQ(d.has_value(), e.dispatch.has_value()) << "visit " << visits;
        if (d) {
          ++visits;
          ASSERT_EQ(d->participant, here(e.dispatch->participant));
          ASSERT_EQ(d->request, e.dispatch->request);
          ASSERT_EQ(d->out, e.dispatch->out);
          ASSERT_EQ(d->turn, e.dispatch->turn);
          if (core_ticket_of.size() <= e.ticket.index) core_ticket_of.resize(e.ticket.index + 1);
          core_ticket_of[e.ticket.index] = d->ticket;
        }
        break;
      }
      case Journal::Event::end:
        core.end_turn();
        break;
      case Journal::Event::complete:
        ASSERT_TRUE(core.complete_nano(*core_ticket_of[e.ticket.index], e.cost, e.now).ok());
        break;
      case Journal::Event::take_all:
        (void)core.take_all_queued();
        break;
    }
  }
  EXPECT_GT(visits, 2000u);
  EXPECT_EQ(batch_events > 0, batches);
  EXPECT_EQ(scales, 3u);
  for (const ParticipantSnapshot& p : rt.snapshot_participants()) {
    const ParticipantStats replayed = core.stats(here(p.id));
    EXPECT_EQ(core.scale_of(here(p.id)), p.scale);
    EXPECT_EQ(p.scale, p.id == ids[1] ? 300'000u : p.id == ids[4] ? 123'457u : kWholePlan);
    EXPECT_EQ(replayed.dispatched, p.stats.dispatched);
    EXPECT_EQ(replayed.cost_charged, p.stats.cost_charged);
  }
  const RuntimeSnapshot s = rt.snapshot();
  for (int c = 0; c <= core.classes(); ++c) {
    EXPECT_EQ(core.passes(static_cast<ClassId>(c)), s.per_class[static_cast<ClassId>(c)].passes)
        << "class " << c;
  }
}

TEST(Runtime, TheObserverSeesEveryCoreInputAndReplayingItReproducesEveryDecision) {
  replay_what_the_observer_saw(false);
}

TEST(Runtime, AnObserverOfBatchesSeesEveryCoreInputAndReplayingItReproducesEveryDecision) {
  replay_what_the_observer_saw(true);
}

}  // namespace
}  // namespace creditloop
