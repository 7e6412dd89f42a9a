// Nothing on the dispatcher's path waits for another thread, and nothing one tenant does delays
// every decision: a thread stopped while it posts a command holds up no dispatch; a submitter
// stopped after listing a mailbox whose place is then reused holds up nobody; a flood of one
// tenant is taken in a slice at a time, between decisions (docs/design.md, "Progress").
//
// The windows are opened by test hooks (runtime/internal/test_hooks.hpp), not by timing: the
// stopped thread stays stopped until what it must not hold up has happened, or the deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <semaphore>
#include <thread>
#include <vector>

#include "creditloop/runtime.hpp"
#include "internal/test_hooks.hpp"
#include "runtime_support.hpp"
#include "spin_until.hpp"

namespace creditloop::runtime_tests {
namespace {

// Stops the first thread that reaches a hook until let go (or the deadline), and clears the hook
// so that no other thread stops there.
struct Stopper {
  static inline std::mutex mutex;
  static inline std::condition_variable changed;
  static inline bool stopped = false;
  static inline bool go = false;
  static inline std::atomic<bool> resumed{false};
  static inline std::atomic<void (*)()>* hook = nullptr;

  static void stop() {
    std::unique_lock lock(mutex);
    if (stopped) return;  // only the first
    stopped = true;
    changed.notify_all();
    EXPECT_TRUE(changed.wait_for(lock, kDeadline, [] { return go; }));
    // release: pairs with the test's acquire load in still_stopped().
    resumed.store(true, std::memory_order_release);
  }
  static void arm(std::atomic<void (*)()>& at) {
    std::lock_guard lock(mutex);
    stopped = go = false;
    resumed.store(false, std::memory_order_relaxed);  // no thread stopped yet
    hook = &at;
    // release: pairs with the acquire load in CREDITLOOP_TEST_HOOK (test_hooks.hpp).
    at.store(&stop, std::memory_order_release);
  }
  static void wait_stopped() {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, kDeadline, [] { return stopped; }));
    hook->store(nullptr, std::memory_order_release);
  }
  static bool still_stopped() {
    // acquire: pairs with the release store in stop().
    return !resumed.load(std::memory_order_acquire);
  }
  static void let_go() {
    std::lock_guard lock(mutex);
    go = true;
    changed.notify_all();
  }
};

TEST(DispatcherPath, APosterStoppedAfterPostingACommandHoldsUpNoDispatch) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 8));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Stopper::arm(detail::test_hooks::command_posted);
  std::thread poster([&] { EXPECT_TRUE(rt.find("alice").has_value()); });
  Stopper::wait_stopped();
  Req a;
  ASSERT_TRUE(rt.submit(alice, a).ok());
  EXPECT_TRUE(recorder.wait_for(1)) << "alice's request waited for the stopped poster";
  EXPECT_TRUE(Stopper::still_stopped());
  Stopper::let_go();
  poster.join();
  ASSERT_TRUE(recorder.wait_for(1));
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 0).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
}

TEST(DispatcherPath, ASubmitterStoppedAfterListingHoldsUpNotThePlacesNextTenant) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 8));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req stale;
  Stopper::arm(detail::test_hooks::submit_listed);
  std::thread submitter([&] { EXPECT_TRUE(rt.submit(alice, stale).ok()); });
  Stopper::wait_stopped();
  // Removed with the stopped submitter's request handed back; the place is reused at once.
  Result<RequestList> back = rt.remove(alice);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), 1u);
  *back = RequestList{};
  const ParticipantId bob = *rt.add("bob", "pro", 1);
  ASSERT_EQ(bob.place, alice.place) << "the test needs the place reused";
  Req b;
  ASSERT_TRUE(rt.submit(bob, b).ok());
  EXPECT_TRUE(recorder.wait_for(1)) << "bob's request waited for alice's stopped submitter";
  EXPECT_TRUE(Stopper::still_stopped());
  Stopper::let_go();
  submitter.join();
  ASSERT_TRUE(recorder.wait_for(1));
  EXPECT_EQ(recorder.seen()[0].participant, bob);
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 0).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
}

// Counts what the dispatcher takes into the core, and how much it had taken at its first
// decision. Its on_add holds the dispatcher, once armed, until the test lets it go.
class IntakeObserver : public RuntimeObserver {
 public:
  void on_add(ParticipantId, std::string_view name, PlanId, std::uint32_t, Nanos) override {
    if (name == "gate") {
      held.release();
      go.acquire();
    }
  }
  void on_submit(ParticipantId, const RequestHook&, Nanos) override { ++taken; }
  void on_visit(const Decision* d, Ticket, Nanos) override {
    if (d != nullptr && taken_at_first_decision == 0) taken_at_first_decision = taken;
  }
  std::binary_semaphore held{0};
  std::binary_semaphore go{0};
  std::uint64_t taken = 0;  // dispatcher only, read after shutdown
  std::uint64_t taken_at_first_decision = 0;
};

TEST(DispatcherPath, AFloodOfOneTenantIsTakenInASliceAtATimeBetweenDecisions) {
  constexpr std::size_t kFlood = 200'000;
  Recorder recorder;
  IntakeObserver observer;
  RuntimeOptions options = options_with(recorder, 8);
  options.observer = &observer;
  Runtime rt(std::move(options));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "pro", 1);
  std::thread adder([&] { EXPECT_TRUE(rt.add("gate", "pro", 1).ok()); });
  observer.held.acquire();  // the dispatcher is inside the add: nothing is taken in meanwhile
  auto flood = std::make_unique<Req[]>(kFlood);
  for (std::size_t i = 0; i < kFlood; ++i) ASSERT_TRUE(rt.submit(alice, flood[i]).ok());
  Req b;
  ASSERT_TRUE(rt.submit(bob, b).ok());
  observer.go.release();
  adder.join();
  ASSERT_TRUE(recorder.wait_for(8));
  bool bob_early = false;
  for (const Decision& d : recorder.seen()) bob_early |= d.participant == bob;
  // Shutdown first: the slots the completions free would otherwise send more of the flood out
  // before the shutdown's command runs, and nobody completes those. Once shutdown has begun
  // nothing more is dispatched, so what went out is all the recorder saw.
  EXPECT_FALSE(shutdown_begun(rt, ShutdownMode::hand_back).finished);
  for (const Decision& d : recorder.seen()) ASSERT_TRUE(rt.complete(d.ticket, 0).ok());
  const ShutdownReport report = rt.shutdown(ShutdownMode::hand_back, std::nullopt);
  EXPECT_TRUE(report.finished);
  EXPECT_GT(observer.taken_at_first_decision, 0u);
  EXPECT_LT(observer.taken_at_first_decision, kFlood / 10)
      << "the first decision waited for the flood to be taken in";
  EXPECT_TRUE(bob_early) << "bob's one request waited behind alice's flood";
}

// Under ThreadSanitizer: producers submit to a participant that is removed and added again in
// the same place over and over, while another thread posts commands (snapshots). Every request
// is dispatched, handed back by a removal, or refused, exactly once; the stale listings, the
// command list and the bounded intake are all exercised.
TEST(DispatcherPath, ChurnOfOnePlaceWithProducersAndCommandsAccountsForEveryRequest) {
  constexpr int kProducers = 2;
  constexpr std::size_t kPerProducer = 3000;
  constexpr int kChurns = 1000;
  std::atomic<std::uint64_t> dispatched{0};
  Runtime* runtime = nullptr;
  RuntimeOptions options;
  options.config = reference_config();
  options.slots = 8;
  options.sink = [&](const Decision& d) {
    ASSERT_TRUE(runtime->complete(d.ticket, 0).ok());
    dispatched.fetch_add(1, std::memory_order_relaxed);  // read after shutdown (joined)
  };
  auto requests = std::make_unique<Req[]>(kProducers * kPerProducer);
  Runtime rt(std::move(options));
  runtime = &rt;
  std::mutex id_mutex;
  ParticipantId current = *rt.add("tenant", "pro", 1);
  std::atomic<bool> producing{true};
  std::atomic<std::uint64_t> refused{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (std::size_t i = 0; i < kPerProducer; ++i) {
        ParticipantId id;
        {
          std::lock_guard lock(id_mutex);
          id = current;
        }
        if (!rt.submit(id, requests[p * kPerProducer + i]).ok()) {
          refused.fetch_add(1, std::memory_order_relaxed);  // read after the join
        }
      }
    });
  }
  std::thread poster([&] {
    // relaxed: a stop flag; the snapshots only add commands to the mix.
    while (producing.load(std::memory_order_relaxed)) (void)rt.snapshot();
  });
  std::uint64_t handed_back = 0;
  for (int c = 0; c < kChurns; ++c) {
    ParticipantId old;
    {
      std::lock_guard lock(id_mutex);
      old = current;
    }
    Result<RequestList> back = rt.remove(old);
    ASSERT_TRUE(back.ok());
    while (!back->empty()) {
      (void)back->pop_front();
      ++handed_back;
    }
    const ParticipantId next = *rt.add("tenant", "pro", 1);
    EXPECT_EQ(next.place, old.place);
    std::lock_guard lock(id_mutex);
    current = next;
  }
  for (std::thread& t : producers) t.join();
  producing.store(false, std::memory_order_relaxed);
  poster.join();
  const ShutdownReport report = rt.shutdown(ShutdownMode::drain, std::nullopt);
  ASSERT_TRUE(report.finished);
  EXPECT_EQ(dispatched.load(std::memory_order_relaxed) + handed_back +
                refused.load(std::memory_order_relaxed),
            kProducers * kPerProducer);
}

// Under ThreadSanitizer: a request in flight in another runtime, withdrawn through this one,
// which must refuse it without reading what the other's dispatcher wrote unordered (the queue
// place and issuer it recorded when it queued the request). The test's own signals are relaxed
// on purpose: an acquire there would order the other dispatcher's writes before the withdrawal
// and hide the race.
TEST(DispatcherPath, WithdrawalThroughAnotherRuntimeReadsNothingItsDispatcherWrote) {
  std::atomic<bool> dispatched{false};
  std::atomic<std::uint32_t> ticket_index{0};
  std::atomic<std::uint64_t> ticket_generation{0};
  RuntimeOptions other_options;
  other_options.config = reference_config();
  other_options.sink = [&](const Decision& d) {
    ticket_index.store(d.ticket.index, std::memory_order_relaxed);  // see the comment above
    ticket_generation.store(d.ticket.generation, std::memory_order_relaxed);
    dispatched.store(true, std::memory_order_relaxed);
  };
  Req r;
  Recorder recorder;
  Runtime ours(options_with(recorder));
  Runtime other(std::move(other_options));
  const ParticipantId alice = *ours.add("alice", "pro", 1);
  const ParticipantId bob = *other.add("bob", "pro", 1);
  ASSERT_TRUE(other.submit(bob, r).ok());
  test::spin_until([&] { return dispatched.load(std::memory_order_relaxed); }, "a dispatch");
  EXPECT_EQ(ours.withdraw(alice, r), Status(Errc::not_queued));
  const Ticket t{ticket_index.load(std::memory_order_relaxed), other.issuer(),
                 ticket_generation.load(std::memory_order_relaxed)};
  ASSERT_TRUE(other.complete(t, 0).ok());
  EXPECT_TRUE(other.shutdown(ShutdownMode::drain).empty());
  EXPECT_EQ(recorder.count(), 0u);
}

// A thread that holds an unflushed batch and calls shutdown() would wait for its own
// completions: it is refused with wrong_thread, and succeeds once it has flushed.
TEST(DispatcherPath, AShutdownFromAThreadHoldingAnUnflushedBatchIsRefused) {
  Recorder recorder;
  Runtime rt(options_with(recorder));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req a;
  ASSERT_TRUE(rt.submit(alice, a).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  auto call = std::async(std::launch::async, [&] {
    CompletionBatch batch(rt);
    EXPECT_TRUE(batch.add(recorder.seen()[0].ticket, 0).ok());
    const ShutdownReport refused = rt.shutdown(ShutdownMode::drain, std::nullopt);
    EXPECT_EQ(refused.status, Status(Errc::wrong_thread));
    EXPECT_FALSE(refused.finished);
    batch.flush();
    return rt.shutdown(ShutdownMode::drain, std::nullopt).finished;
  });
  ASSERT_EQ(call.wait_for(kDeadline), std::future_status::ready)
      << "the shutdown waited for the calling thread's own batch";
  EXPECT_TRUE(call.get());
}

// A drain waits for what is in flight; meanwhile another thread's hand_back must go ahead, hand
// back what is still queued, and return at its deadline.
TEST(DispatcherPath, AHandBackGoesAheadWhileAnotherThreadWaitsForADrain) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 1));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req a;
  Req b;
  ASSERT_TRUE(rt.submit(alice, a).ok());
  ASSERT_TRUE(rt.submit(alice, b).ok());
  ASSERT_TRUE(recorder.wait_for(1));  // a in flight, b queued behind the one slot
  std::thread drainer(
      [&] { EXPECT_TRUE(rt.shutdown(ShutdownMode::drain, std::nullopt).finished); });
  // The drain has begun once a command is refused for it.
  test::spin_until([&] { return rt.replan(alice, "pro", 1) == Status(Errc::shut_down); },
                   "the shutdown to begin");
  auto escalation = std::async(std::launch::async, [&] {
    return rt.shutdown(ShutdownMode::hand_back, std::chrono::nanoseconds{0});
  });
  const bool returned = escalation.wait_for(kDeadline) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the hand_back waited for the drain";
  // Its command may still be on its way (a deadline of 0): a's room must not send b out first.
  if (returned) after_posted_commands(rt);
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 0).ok());
  if (!returned) {  // the drain went on and sent b: let it finish
    ASSERT_TRUE(recorder.wait_for(2));
    ASSERT_TRUE(rt.complete(recorder.seen()[1].ticket, 0).ok());
  }
  const ShutdownReport report = escalation.get();
  drainer.join();
  // Answered or not by its deadline of 0, the hand_back took effect: b was handed back, to it or
  // to the next call, and never dispatched.
  const ShutdownReport last = rt.shutdown(ShutdownMode::hand_back, std::nullopt);
  EXPECT_TRUE(last.finished);
  if (returned) {
    EXPECT_EQ(report.handed_back.size() + last.handed_back.size(), 1u);
    EXPECT_EQ(report.handed_back.size(), report.answered ? 1u : 0u);
    EXPECT_FALSE(report.finished);
    EXPECT_EQ(report.in_flight.size(), 1u);
    EXPECT_EQ(recorder.count(), 1u);
  }
}

}  // namespace
}  // namespace creditloop::runtime_tests
