// One stopped thread delays only itself: a producer or a completer stopped anywhere inside its
// push onto the runtime's activation or completion list (a preemption, a cgroup quota) holds back
// neither other participants' requests nor other completers' room (docs/design.md, "Progress").
//
// The window is opened by a test hook, not by timing: the dispatcher is held inside its clock
// while another thread's push completes, then a second thread's push is stopped inside, and the
// dispatcher let go. The stopped thread stays stopped until the others' dispatch has come (or the
// deadline has passed), so a design in which it hides their work fails by that deadline; each
// test prints how long the others' dispatch took.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <thread>

#include "creditloop/runtime.hpp"
#include "internal/test_hooks.hpp"
#include "runtime_support.hpp"

namespace creditloop::runtime_tests {
namespace {

using Clock = std::chrono::steady_clock;

Nanos steady_nanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// The runtime's clock, which the dispatcher reads at the top of each loop: once armed, the next
// read holds the dispatcher there until released, so that nothing it could drain is drained.
class DispatcherGate {
 public:
  Nanos now() {
    std::unique_lock lock(mutex_);
    if (armed_) {
      held_ = true;
      changed_.notify_all();
      EXPECT_TRUE(changed_.wait_for(lock, kDeadline, [&] { return !armed_; }));
      held_ = false;
    }
    return steady_nanos();
  }
  // Brings the dispatcher to its clock with a command (a snapshot), which always wakes it and runs
  // in the loop after a clock read: wake() alone is lost on a dispatcher still spinning without a
  // room test. A snapshot that ran without the gate holding (taken in a loop that had read the
  // clock already) is followed by another.
  void hold(Runtime& rt) {
    std::unique_lock lock(mutex_);
    armed_ = true;
    while (!held_) {
      const std::uint64_t poke = ++pokes_;
      lock.unlock();
      if (poker_.joinable()) poker_.join();
      poker_ = std::thread([this, &rt, poke] {
        (void)rt.snapshot();
        std::lock_guard done(mutex_);
        poked_ = poke;
        changed_.notify_all();
      });
      lock.lock();
      ASSERT_TRUE(changed_.wait_for(lock, kDeadline, [&] { return held_ || poked_ == poke; }));
    }
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      armed_ = false;
      changed_.notify_all();
    }
    if (poker_.joinable()) poker_.join();
  }
  ~DispatcherGate() { release(); }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false;
  bool held_ = false;
  std::uint64_t pokes_ = 0;
  std::uint64_t poked_ = 0;
  std::thread poker_;
};

// The stopped thread: inside its push, it stays stopped until the test lets it go (or, should
// the test hang, until the deadline), as a preempted or throttled thread stays off the CPU for as
// long as the scheduler likes. No timing decides the outcome: what others did while it was stopped
// does.
struct StoppedPusher {
  static inline std::mutex mutex;
  static inline std::condition_variable changed;
  static inline bool stopped = false;
  static inline bool go = false;
  static inline std::atomic<bool> resumed{false};

  static void stop() {
    std::unique_lock lock(mutex);
    stopped = true;
    changed.notify_all();
    EXPECT_TRUE(changed.wait_for(lock, kDeadline, [] { return go; }));
    // release: pairs with the test's acquire load once it saw the others' dispatch.
    resumed.store(true, std::memory_order_release);
  }
  static void arm() {
    std::lock_guard lock(mutex);
    stopped = go = false;
    resumed.store(false, std::memory_order_relaxed);  // no pusher yet
    // release: pairs with the acquire load in CREDITLOOP_TEST_HOOK (test_hooks.hpp).
    detail::test_hooks::list_pushing.store(&stop, std::memory_order_release);
  }
  // Once the pusher is stopped, the hook is cleared: no other push stops.
  static void wait_stopped() {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, kDeadline, [] { return stopped; }));
    detail::test_hooks::list_pushing.store(nullptr, std::memory_order_release);
  }
  static void let_go() {
    std::lock_guard lock(mutex);
    go = true;
    changed.notify_all();
  }
};

// With the dispatcher held at `gate` and another thread's push already made, runs `push` on a
// thread of its own, stops it inside its push, lets the dispatcher go and waits for the recorder's
// `dispatches`-th dispatch. Returns whether that dispatch came while the pusher was still stopped;
// prints how long it took. The pusher is let go and joined whatever happened.
template <class Push>
bool dispatched_while_stopped(DispatcherGate& gate, Recorder& recorder, std::size_t dispatches,
                              const char* what, Push push) {
  StoppedPusher::arm();
  std::thread pusher(push);
  StoppedPusher::wait_stopped();
  const Clock::time_point released = Clock::now();
  gate.release();
  const bool dispatched = recorder.wait_for(dispatches);
  const Clock::duration took = Clock::now() - released;
  // acquire: pairs with the release store in StoppedPusher::stop().
  const bool still_stopped = !StoppedPusher::resumed.load(std::memory_order_acquire);
  StoppedPusher::let_go();
  pusher.join();
  std::printf(
      "[ progress ] %s: %lld us while the other thread was stopped\n", what,
      static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(took).count()));
  return dispatched && still_stopped;
}

Ticket ticket_of(Recorder& recorder, ParticipantId p) {
  for (const Decision& d : recorder.seen()) {
    if (d.participant == p) return d.ticket;
  }
  ADD_FAILURE() << "no dispatch for participant " << p.place;
  return {};
}

// Two slots, both in flight (alice's and carol's), bob queued for room. Carol's completion is
// pushed while the dispatcher is held; then alice's completer stops inside its push. Carol's room
// must come back, and bob's request go out, while alice's completer is still stopped.
TEST(RuntimeProgress, ACompleterStoppedInsideItsPushHoldsBackNoOtherCompletersRoom) {
  Recorder recorder;
  DispatcherGate gate;
  RuntimeOptions options = options_with(recorder, 2);
  options.clock = [&gate] { return gate.now(); };
  Runtime rt(std::move(options));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId carol = *rt.add("carol", "pro", 1);
  const ParticipantId bob = *rt.add("bob", "pro", 1);
  Req a;
  Req c;
  Req b;
  ASSERT_TRUE(rt.submit(alice, a).ok());
  ASSERT_TRUE(rt.submit(carol, c).ok());
  ASSERT_TRUE(recorder.wait_for(2));
  ASSERT_TRUE(rt.submit(bob, b).ok());
  (void)rt.snapshot();  // a round trip: bob's request is queued in the core, waiting for room
  EXPECT_EQ(recorder.count(), 2u);

  gate.hold(rt);
  ASSERT_TRUE(rt.complete(ticket_of(recorder, carol), 0).ok());  // pushed; nothing drains it
  const Ticket alices = ticket_of(recorder, alice);
  EXPECT_TRUE(dispatched_while_stopped(gate, recorder, 3, "bob's dispatch on carol's room", [&] {
    EXPECT_TRUE(rt.complete(alices, 0).ok());
  })) << "bob went out only once alice's completer went on";
  ASSERT_EQ(recorder.count(), 3u);
  EXPECT_EQ(recorder.seen()[2].participant, bob);
  ASSERT_TRUE(rt.complete(ticket_of(recorder, bob), 0).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  EXPECT_EQ(rt.counters().completed, 3u);
}

// Carol's submit lists her mailbox while the dispatcher is held; then alice's submitter stops
// inside its own listing. Carol's request must go out while alice's submitter is still stopped;
// alice's, her own participant's, may wait for it.
TEST(RuntimeProgress, ASubmitterStoppedInsideItsListingHoldsBackNoOtherParticipant) {
  Recorder recorder;
  DispatcherGate gate;
  RuntimeOptions options = options_with(recorder, 8);
  options.clock = [&gate] { return gate.now(); };
  Runtime rt(std::move(options));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const ParticipantId carol = *rt.add("carol", "pro", 1);
  Req a;
  Req c;

  gate.hold(rt);
  ASSERT_TRUE(rt.submit(carol, c).ok());  // listed; nothing drains it
  EXPECT_TRUE(dispatched_while_stopped(gate, recorder, 1, "carol's dispatch", [&] {
    EXPECT_TRUE(rt.submit(alice, a).ok());
  })) << "carol went out only once alice's submitter went on";
  ASSERT_GE(recorder.count(), 1u);
  EXPECT_EQ(recorder.seen()[0].participant, carol);
  ASSERT_TRUE(recorder.wait_for(2));
  EXPECT_EQ(recorder.seen()[1].participant, alice);
  for (const Decision& d : recorder.seen()) ASSERT_TRUE(rt.complete(d.ticket, 0).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
}

}  // namespace
}  // namespace creditloop::runtime_tests
