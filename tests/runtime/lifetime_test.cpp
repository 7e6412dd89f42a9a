// The threaded runtime's lifetime: shutdown in each of its modes, destruction with or without
// it, and a thread that cannot start, each checked through the public API (runtime.hpp) and,
// where a thread must be caught at a given instant, the test hooks (internal/test_hooks.hpp).
// The tests synchronise on what the runtime does, never on elapsed time (runtime_support.hpp).
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

TEST(RuntimeLifetime, ShutdownHandsBackWhatIsQueuedRefusesSubmissionsAndWaitsForWhatIsInFlight) {
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
TEST(RuntimeLifetime, ShutdownWithADeadlineReturnsAndReportsWhatIsStillInFlight) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 2));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(3);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(2));
  const std::vector<Decision> seen = recorder.seen();
  ShutdownReport first = rt.shutdown(ShutdownMode::hand_back, std::chrono::milliseconds(20));
  ASSERT_TRUE(first.status.ok());
  EXPECT_FALSE(first.finished);
  ASSERT_EQ(first.in_flight.size(), 2u);
  EXPECT_TRUE((first.in_flight[0] == seen[0].ticket && first.in_flight[1] == seen[1].ticket) ||
              (first.in_flight[0] == seen[1].ticket && first.in_flight[1] == seen[0].ticket));
  // The deadline bounds the round trip too: on a loaded machine the dispatcher may answer after
  // it, and the request it hands back then goes to the next call that is answered.
  after_posted_commands(rt);
  if (first.answered) {
    ASSERT_EQ(first.handed_back.size(), 1u);
    EXPECT_EQ(first.handed_back.pop_front(), &requests[2]);  // the caller's again
    EXPECT_EQ(rt.submit(alice, requests[2]).error(), Errc::shut_down);
  } else {
    EXPECT_EQ(rt.submit(alice, requests[2]).error(), Errc::already_queued) << "still the runtime's";
  }
  ASSERT_TRUE(rt.complete(seen[0].ticket, 0).ok());
  ShutdownReport second = rt.shutdown(ShutdownMode::hand_back, std::chrono::milliseconds(0));
  EXPECT_FALSE(second.finished);
  // The completion may still be on its way to the dispatcher: one or both tickets remain.
  ASSERT_FALSE(second.in_flight.empty());
  EXPECT_EQ(second.in_flight.back(), seen[1].ticket);
  ASSERT_TRUE(rt.complete(seen[1].ticket, 0).ok());
  ShutdownReport last = rt.shutdown(ShutdownMode::hand_back, std::nullopt);
  EXPECT_TRUE(last.finished);
  EXPECT_TRUE(last.answered);
  EXPECT_TRUE(last.in_flight.empty());
  EXPECT_EQ(first.handed_back.size() + second.handed_back.size() + last.handed_back.size(),
            first.answered ? 0u : 1u)
      << "the request is handed back once";
  EXPECT_TRUE(rt.shutdown(ShutdownMode::hand_back, std::chrono::milliseconds(0)).finished);
  EXPECT_EQ(rt.snapshot().completed, 2u);
}

// From the dispatcher thread (a sink) or a pool worker (a handler), shutdown would wait for its
// own thread: it reports wrong_thread and does nothing, and the runtime runs on.
TEST(RuntimeLifetime, ShutdownFromASinkOrAHandlerIsRefusedNotADeadlock) {
  std::atomic<int> refused{0};
  Runtime* self = nullptr;
  RuntimeOptions o;
  o.config = reference_config();
  o.sink = [&](const Decision& d) {
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
  p.handler = [&](const Decision&) {
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

// Producers submit until a submit is refused, so shutdown always lands while every one of them is
// still submitting: each ends with a refusal, and every refusal says shut_down. Every accepted
// request is dispatched or handed back, none lost.
TEST(RuntimeLifetime, ASubmitThatRacesShutdownIsRefusedWithShutDown) {
  constexpr int kProducers = 3;
  constexpr std::size_t kOwn = 64;  // each producer's requests, reused once completed
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 1'000'000;
  std::atomic<int> dispatched{0};
  Runtime* self = nullptr;
  o.sink = [&](const Decision& d) {
    dispatched.fetch_add(1, std::memory_order_relaxed);  // read after the join below
    ASSERT_TRUE(self->complete(d.ticket, 0).ok());
  };
  Runtime rt(std::move(o));
  self = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(kProducers * kOwn);
  std::atomic<int> accepted{0};
  std::atomic<int> refused{0};
  std::atomic<int> wrong{0};
  std::atomic<int> under_way{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < kProducers; ++t) {
    producers.emplace_back([&, t] {
      bool counted = false;
      for (std::size_t i = 0;; ++i) {
        const Status s = rt.submit(alice, requests[t * kOwn + i % kOwn]);
        if (s.ok()) {
          accepted.fetch_add(1, std::memory_order_relaxed);                 // read after the joins
          if (!counted) under_way.fetch_add(1, std::memory_order_relaxed);  // a start gate
          counted = true;
        } else if (s.error() == Errc::shut_down) {
          refused.fetch_add(1, std::memory_order_relaxed);
          return;
        } else if (s.error() != Errc::already_queued) {  // that one is still in flight: next
          wrong.fetch_add(1, std::memory_order_relaxed);
          return;
        }
      }
    });
  }
  test::spin_until([&] { return under_way.load(std::memory_order_relaxed) >= kProducers; },
                   "every producer under way");
  ShutdownReport report = rt.shutdown(ShutdownMode::hand_back, std::nullopt);
  const std::size_t handed_back = report.handed_back.size();
  // Dropping the list hands its requests back: until then a producer whose every request is in
  // it would be refused with already_queued, never reaching shut_down.
  report.handed_back = RequestList{};
  for (std::thread& p : producers) p.join();
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(wrong.load(std::memory_order_relaxed), 0);
  EXPECT_EQ(refused.load(std::memory_order_relaxed), kProducers);
  EXPECT_EQ(static_cast<std::size_t>(dispatched.load(std::memory_order_relaxed)) + handed_back,
            static_cast<std::size_t>(accepted.load(std::memory_order_relaxed)));
}

TEST(RuntimeLifetime, ShutdownCanDrainEverythingQueuedFirst) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder, 4);
  Runtime* self = nullptr;
  o.sink = [&](const Decision& d) { CompletingSink{self, 0.0, &recorder}(d); };
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

// Releases the held handler from inside the destructor, once its hand-back has run: a destructor
// that does not wait for what is in flight returns while the handler still runs.
class ReleaseOnTakeAll : public RuntimeObserver {
 public:
  explicit ReleaseOnTakeAll(std::atomic<bool>& flag) : flag_(flag) {}
  void on_take_all() override { flag_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool>& flag_;
};

TEST(RuntimeLifetime, DestructionWithoutShutdownIsSafe) {
  // The first handler holds its request until the destructor has begun (its hand-back tells the
  // observer): the destructor must wait for it, so every handler that started has finished when
  // it returns.
  std::deque<Req> requests(300);
  std::atomic<bool> destroying{false};
  ReleaseOnTakeAll release(destroying);
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  std::binary_semaphore first_started{0};
  {
    RuntimeOptions o;
    o.config = reference_config();
    o.slots = 4;
    o.workers = 2;
    o.handler = [&](const Decision&) {
      // relaxed counters: read after the destructor joined the workers, which orders them.
      if (started.fetch_add(1, std::memory_order_relaxed) == 0) {
        first_started.release();
        // acquire: pairs with the observer's release store; only a flag, nothing it publishes.
        test::spin_until([&] { return destroying.load(std::memory_order_acquire); },
                         "the destructor to begin");
      }
      finished.fetch_add(1, std::memory_order_relaxed);
      return 1.0;
    };
    o.observer = &release;
    Runtime rt(std::move(o));
    const ParticipantId alice = *rt.add("alice", "pro", 1);
    for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
    ASSERT_TRUE(first_started.try_acquire_for(kDeadline));
    EXPECT_FALSE(destroying.load(std::memory_order_relaxed));  // the handler is still held
  }  // queued requests are dropped (they are ours), in-flight ones complete first
  const int began = started.load(std::memory_order_relaxed);
  EXPECT_GE(began, 1);
  EXPECT_EQ(finished.load(std::memory_order_relaxed), began)
      << "the destructor returned before a handler did";
  EXPECT_LE(began, 300);
}
// ---- lifetime ---------------------------------------------------------------------------------

namespace hooks = detail::test_hooks;

// Holds the completer that reaches the hook between its push and its wake of the dispatcher, as
// a preempted thread would be held, until the test lets it go.
struct HeldCompleter {
  static inline Latch pushed;
  static inline Latch resume;
  static void hold() {
    pushed.open();
    resume.wait();
  }
};

// The dispatcher applies a completion whose completer is still inside the runtime, reaches zero in
// flight, and shutdown() reports finished; the embedder destroys the runtime. The completer then
// goes on: it must touch nothing of the runtime's (under AddressSanitizer, the debug preset, a
// touch of the freed runtime fails the test).
void complete_after_finished(bool batched) {
  HeldCompleter::pushed.reset();
  HeldCompleter::resume.reset();
  Recorder recorder;
  auto rt = std::make_unique<Runtime>(options_with(recorder, 1));
  const ParticipantId alice = *rt->add("alice", "pro", 1);
  Req r;
  ASSERT_TRUE(rt->submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  const Ticket ticket = recorder.seen()[0].ticket;
  // release: pairs with the runtime's acquire load of the hook.
  hooks::completion_pushed.store(&HeldCompleter::hold, std::memory_order_release);
  Runtime* const runtime = rt.get();
  std::thread completer([runtime, ticket, batched] {
    if (batched) {
      CompletionBatch batch(*runtime);
      EXPECT_TRUE(batch.add(ticket, 1).ok());
      batch.flush();
    } else {
      EXPECT_TRUE(runtime->complete(ticket, 1).ok());
    }
  });
  HeldCompleter::pushed.wait();
  hooks::completion_pushed.store(nullptr, std::memory_order_relaxed);  // only this completer
  const ShutdownReport report = rt->shutdown(ShutdownMode::hand_back, kDeadline);
  EXPECT_TRUE(report.finished);
  EXPECT_TRUE(report.in_flight.empty());
  rt.reset();  // finished: the embedder may destroy it
  HeldCompleter::resume.open();
  completer.join();
}

TEST(RuntimeLifetime, FinishedMeansNoCompleterIsInsideTheRuntime) {
  complete_after_finished(false);
}

TEST(RuntimeLifetime, FinishedMeansNoCompletionBatchIsInsideTheRuntime) {
  complete_after_finished(true);
}

// A drain that ran out of time can be escalated: a later shutdown(hand_back) hands back what is
// still queued (the backend here never completes on its own), and the runtime finishes once the
// request in flight completes.
TEST(RuntimeLifetime, AHandBackAfterADrainThatTimedOutHandsBackWhatIsStillQueued) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 1));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::vector<Req> reqs(3);
  for (Req& r : reqs) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  const ShutdownReport drained = rt.shutdown(ShutdownMode::drain, 1ms);
  EXPECT_FALSE(drained.finished);
  if (drained.answered) {
    EXPECT_EQ(drained.still_queued, 2u);
  }
  const ShutdownReport handed = rt.shutdown(ShutdownMode::hand_back, 1ms);
  EXPECT_FALSE(handed.finished);
  EXPECT_EQ(handed.in_flight.size(), 1u);
  if (handed.answered) {
    EXPECT_EQ(handed.handed_back.size(), 2u);
    EXPECT_EQ(handed.still_queued, 0u);
  }
  // Answered by its deadline or not, the hand-back has run once a later command has.
  after_posted_commands(rt);
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 0).ok());
  const ShutdownReport last = rt.shutdown(ShutdownMode::hand_back, kDeadline);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(handed.handed_back.size() + last.handed_back.size(), 2u)
      << "each request is handed back once";
  EXPECT_EQ(recorder.count(), 1u) << "nothing queued was dispatched after the hand-back";
}

// Tells the test when the runtime hands back everything queued.
class TakeAllSignal : public RuntimeObserver {
 public:
  void on_take_all() override { taken.open(); }
  Latch taken;
};

// The destructor after a drain that timed out hands back what is still queued too, instead of
// waiting for a backend that completes only the request in flight.
TEST(RuntimeLifetime, TheDestructorAfterADrainThatTimedOutHandsBackWhatIsStillQueued) {
  TakeAllSignal signal;
  Recorder recorder;
  std::atomic<Runtime*> runtime{nullptr};
  RuntimeOptions o = options_with(recorder, 1);
  o.observer = &signal;
  // The first dispatch stays in flight; any later one would be completed at once, so that a
  // destructor that keeps draining returns (and the test fails) instead of hanging.
  o.sink = [&](const Decision& d) {
    const bool first = recorder.count() == 0;
    recorder(d);
    // acquire: pairs with the release store below; the runtime is constructed.
    if (!first) {
      ASSERT_TRUE(runtime.load(std::memory_order_acquire)->complete(d.ticket, 0).ok());
    }
  };
  std::vector<Req> reqs(3);
  std::thread completer;
  {
    Runtime rt(std::move(o));
    runtime.store(&rt, std::memory_order_release);
    const ParticipantId alice = *rt.add("alice", "pro", 1);
    for (Req& r : reqs) ASSERT_TRUE(rt.submit(alice, r).ok());
    ASSERT_TRUE(recorder.wait_for(1));
    EXPECT_FALSE(rt.shutdown(ShutdownMode::drain, 1ms).finished);
    const Ticket ticket = recorder.seen()[0].ticket;
    completer = std::thread([&signal, &rt, ticket] {
      signal.taken.wait();  // the destructor handed back first
      EXPECT_TRUE(rt.complete(ticket, 0).ok());
    });
  }  // hands back the two queued requests, then waits for the one in flight
  completer.join();
  EXPECT_EQ(recorder.count(), 1u) << "the destructor kept draining";
}

// Fails the start of thread number `fail_at` (the workers from 0, then the dispatcher).
struct FailingThreadStart {
  static inline std::atomic<std::size_t> fail_at{0};
  static void maybe_fail(std::size_t n) {
    if (n == fail_at.load(std::memory_order_relaxed)) {  // set before the runtime starts
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    }
  }
};

// A thread that cannot start fails the constructor with the system's error, every thread it
// started already joined (a joinable std::thread destroyed would end the process).
TEST(RuntimeLifetime, AThreadThatCannotStartFailsTheConstructorWithEveryStartedThreadJoined) {
  constexpr unsigned kWorkers = 3;
  for (std::size_t fail_at = 0; fail_at <= kWorkers; ++fail_at) {
    SCOPED_TRACE("thread " + std::to_string(fail_at));
    std::atomic<int> handled{0};
    RuntimeOptions o;
    o.config = reference_config();
    o.workers = kWorkers;
    o.handler = [&handled](const Decision&) {
      handled.fetch_add(1, std::memory_order_relaxed);  // a count, read after the joins
      return 0.0;
    };
    FailingThreadStart::fail_at.store(fail_at, std::memory_order_relaxed);
    // release: pairs with the runtime's acquire load of the hook.
    hooks::thread_starting.store(&FailingThreadStart::maybe_fail, std::memory_order_release);
    EXPECT_THROW(Runtime rt(std::move(o)), std::system_error);
    hooks::thread_starting.store(nullptr, std::memory_order_relaxed);
    EXPECT_EQ(handled.load(std::memory_order_relaxed), 0);
  }
  // The threads are gone, and a runtime starts as usual afterwards.
  Recorder recorder;
  Runtime rt(options_with(recorder));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req r;
  ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 0).ok());
}

}  // namespace
}  // namespace creditloop
