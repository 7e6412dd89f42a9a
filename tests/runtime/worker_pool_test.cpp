// The built-in worker pool: its handler, its tickets, its errors and its completions. The tests
// synchronise on what the runtime does, never on elapsed time (runtime_support.hpp).
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
#include "internal/test_hooks.hpp"
#include "runtime_support.hpp"

namespace creditloop {
namespace {

using namespace runtime_tests;

// The pool's handler learns the class its request went out under and its ticket.
TEST(WorkerPool, ThePoolHandlerSeesTheClassOutAndTheTicket) {
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 1;
  o.workers = 1;
  o.clock = [] { return Nanos{0}; };  // frozen: pro's 4 P1 credits, then P2
  std::mutex mutex;
  std::vector<Decision> seen;
  o.handler = [&](const Decision& d) {
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

// A handler that throws: its request is completed at cost 0, and on_error hears of it, with the
// request and its ticket.
TEST(WorkerPool, AHandlerThatThrowsIsReportedThroughOnError) {
  Errors errors;
  RuntimeOptions o;
  o.config = reference_config();
  o.workers = 2;
  o.handler = [](const Decision& d) -> double {
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

TEST(WorkerPool, TheWorkerPoolCompletesEachRequestWithTheCostItsHandlerReturns) {
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 16;
  o.workers = 2;
  std::atomic<int> handled{0};
  o.handler = [&handled](const Decision& d) {
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

// The pool's worker owns the tickets it is handed, so a completion from anyone else is refused.
// And while the dispatcher is slow to give a worker's completion blocks back (here it is held in
// the observer's first on_complete until every request has been handled), the worker completes
// through the ticket records instead: nothing waits and nothing is lost.
TEST(WorkerPool, PoolTicketsAreTheirWorkersAndNoCompletionIsLostWhileTheDispatcherLags) {
  // More completions than a worker has completion blocks (8, one completion each): the blocks
  // run out.
  constexpr std::size_t kRequests = 1000;
  class Watch : public RuntimeObserver {
   public:
    Counter dispatched;
    Latch apply;
    std::vector<Ticket> tickets;      // guarded by mutex
    std::vector<std::int64_t> costs;  // dispatcher thread; read after shutdown
    std::mutex mutex;
    void on_visit(const Decision* d, Ticket t, Nanos) override {
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
  o.handler = [&](const Decision& d) {
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

// Refuses the pool's first hand-overs, as moodycamel's enqueue_bulk does when it cannot allocate.
struct RefusingPool {
  static inline std::atomic<int> refusals{0};
  static bool accepts() { return refusals.fetch_sub(1, std::memory_order_relaxed) <= 0; }
};

// A hand-over to the pool that fails loses no job: the dispatcher keeps the batch and hands it
// over again, so every request is handled and the runtime finishes.
TEST(WorkerPool, APoolHandOverThatFailsLosesNoJob) {
  constexpr int kRequests = 40;
  Counter handled;
  RuntimeOptions o;
  o.config = reference_config();
  o.workers = 1;
  o.batch = 4;
  o.handler = [&handled](const Decision&) {
    handled.add();
    return 0.0;
  };
  RefusingPool::refusals.store(3, std::memory_order_relaxed);  // before any thread reads it
  // release: pairs with the runtime's acquire load of the hook.
  detail::test_hooks::pool_accepts.store(&RefusingPool::accepts, std::memory_order_release);
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::vector<Req> reqs(kRequests);
  for (Req& r : reqs) ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_TRUE(handled.wait_for(kRequests));
  const ShutdownReport report = rt.shutdown(ShutdownMode::hand_back, kDeadline);
  detail::test_hooks::pool_accepts.store(nullptr, std::memory_order_relaxed);
  EXPECT_TRUE(report.finished) << report.in_flight.size() << " tickets lost in flight";
  EXPECT_LT(RefusingPool::refusals.load(std::memory_order_relaxed), 0) << "no hand-over failed";
}

// Counts the dispatcher's decisions.
class DispatchCount : public RuntimeObserver {
 public:
  Counter dispatched;
  void on_visit(const Decision* d, Ticket, Nanos) override {
    if (d != nullptr) dispatched.add();
  }
};

// A job that blocks holds its own worker and nothing else. Alice's job and bob's go to the pool
// in one hand-over, hers first (pro holds P1 credits, lite none); while her handler waits for the
// test, the other three workers must start and complete all of bob's. A worker once took up to 32
// jobs at a time and held the rest of its bulk behind hers, and published a bulk's completions
// only after its last job.
TEST(WorkerPool, JobsHandedOverBehindABlockedJobRunAndCompleteOnTheIdleWorkers) {
  constexpr std::size_t kOthers = 40;
  Latch started;
  Latch release;
  Counter handled;
  std::atomic<bool> room{false};
  RuntimeOptions o;
  o.config = reference_config();
  o.workers = 4;
  o.room = [&room] { return room.load(std::memory_order_relaxed); };  // a test flag: no pairing
  o.handler = [&](const Decision& d) {
    if (id_of(d.request) == 0) {
      started.open();
      release.wait();
    } else {
      handled.add();
    }
    return 0.0;
  };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "lite", 1);
  std::deque<Req> requests(kOthers + 1);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].id = static_cast<int>(i);
    ASSERT_TRUE(rt.submit(i == 0 ? alice : bob, requests[i]).ok());
  }
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  started.wait();
  const bool all_ran = handled.wait_for(kOthers);
  EXPECT_TRUE(all_ran) << "bob's jobs waited behind alice's blocked one";
  if (all_ran) {
    // Each completion is published as its job ends; a snapshot's round trip applies what was
    // published before it.
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (rt.snapshot().completed < kOthers && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    EXPECT_EQ(rt.snapshot().completed, kOthers) << "completions held back behind alice's job";
  }
  release.open();
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  EXPECT_EQ(rt.snapshot().completed, kOthers + 1);
}

// Eight workers run eight jobs at once, whatever the queue holds when they come for work. The
// eight jobs are handed over while all eight workers are held in earlier jobs, so that the first
// worker set free finds them all in the queue: it must take one and leave the rest to the others.
// Each of the eight handlers waits until all eight are running.
TEST(WorkerPool, EightWorkersRunEightJobsAtOnce) {
  constexpr std::size_t kWorkers = 8;
  DispatchCount watch;
  Counter holding;
  Latch hold;
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t arrived = 0;  // guarded by mutex
  bool give_up = false;     // guarded by mutex
  RuntimeOptions o;
  o.config = reference_config();
  o.workers = kWorkers;
  o.slots = 64;
  o.observer = &watch;
  o.handler = [&](const Decision& d) {
    if (id_of(d.request) < static_cast<int>(kWorkers)) {
      holding.add();
      hold.wait();
      return 0.0;
    }
    std::unique_lock lock(mutex);
    ++arrived;
    changed.notify_all();
    changed.wait_for(lock, kDeadline, [&] { return arrived == kWorkers || give_up; });
    return 0.0;
  };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(2 * kWorkers);
  for (std::size_t i = 0; i < requests.size(); ++i) requests[i].id = static_cast<int>(i);
  for (std::size_t i = 0; i < kWorkers; ++i) ASSERT_TRUE(rt.submit(alice, requests[i]).ok());
  const bool all_held = holding.wait_for(kWorkers);
  EXPECT_TRUE(all_held) << "the first eight jobs did not run at once";
  for (std::size_t i = kWorkers; i < requests.size(); ++i) {
    ASSERT_TRUE(rt.submit(alice, requests[i]).ok());
  }
  ASSERT_TRUE(watch.dispatched.wait_for(requests.size()));
  (void)rt.snapshot();  // a round trip: the dispatcher has handed its last batch to the pool
  hold.open();
  bool together = false;
  {
    std::unique_lock lock(mutex);
    together = changed.wait_for(lock, kDeadline, [&] { return arrived == kWorkers; });
    give_up = true;
    changed.notify_all();
  }
  EXPECT_TRUE(together) << "the last eight jobs did not run at once";
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  EXPECT_EQ(rt.snapshot().completed, requests.size());
}

}  // namespace
}  // namespace creditloop
