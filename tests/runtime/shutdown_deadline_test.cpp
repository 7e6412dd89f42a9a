// A shutdown's deadline bounds all of its waits, the round trip to the dispatcher included, and a
// shutdown(hand_back) from another thread escalates a drain whose round trip the dispatcher has
// not answered yet (runtime.hpp, Runtime::shutdown; docs/design.md, "Shutdown").
//
// The dispatcher is held by a test hook between its take of the posted commands and their run
// (runtime/internal/test_hooks.hpp, commands_taken), as a slow sink or a preemption would hold it:
// no timing decides what the test sees.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "creditloop/runtime.hpp"
#include "first_pass_stops.hpp"
#include "internal/test_hooks.hpp"
#include "runtime_support.hpp"
#include "spin_until.hpp"

namespace creditloop::runtime_tests {
namespace {

using CommandsHeld = FirstPassStops<&detail::test_hooks::commands_taken>;

// One slot: `a` goes out and stays in flight, `b` waits behind it in the core.
struct OneInFlightOneQueued {
  Recorder recorder;
  Runtime rt{options_with(recorder, 1)};
  ParticipantId alice = *rt.add("alice", "pro", 1);
  Req a;
  Req b;

  OneInFlightOneQueued() {
    EXPECT_TRUE(rt.submit(alice, a).ok());
    EXPECT_TRUE(rt.submit(alice, b).ok());
    EXPECT_TRUE(recorder.wait_for(1));
  }
  Ticket a_ticket() { return recorder.seen()[0].ticket; }
};

TEST(ShutdownDeadline, ADrainTheDispatcherCannotAnswerReturnsAtItsDeadline) {
  OneInFlightOneQueued run;
  CommandsHeld::arm();
  auto drain =
      std::async(std::launch::async, [&] { return run.rt.shutdown(ShutdownMode::drain, 10ms); });
  CommandsHeld::stopped.acquire();  // the dispatcher holds the drain's command and runs nothing
  CommandsHeld::disarm();
  const bool returned = drain.wait_for(kDeadline) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the drain waited past its deadline for the held dispatcher";
  CommandsHeld::go.release();
  const ShutdownReport report = drain.get();
  EXPECT_TRUE(report.status.ok());
  EXPECT_FALSE(report.finished);
  if (returned) {
    EXPECT_FALSE(report.answered) << "the dispatcher was held throughout";
    ASSERT_EQ(report.in_flight.size(), 1u) << "told without the dispatcher";
    EXPECT_EQ(report.in_flight[0], run.a_ticket());
    EXPECT_EQ(report.still_queued, 1u);
  }
  // The drain it asked for begins once the dispatcher goes on: commands are refused, and `b` is
  // dispatched after `a` completes.
  test::spin_until([&] { return run.rt.replan(run.alice, "pro", 1) == Status(Errc::shut_down); },
                   "the drain to begin");
  ASSERT_TRUE(run.rt.complete(run.a_ticket(), 0).ok());
  ASSERT_TRUE(run.recorder.wait_for(2));
  ASSERT_TRUE(run.rt.complete(run.recorder.seen()[1].ticket, 0).ok());
  const ShutdownReport last = run.rt.shutdown(ShutdownMode::drain, kDeadline);
  EXPECT_TRUE(last.finished);
  EXPECT_TRUE(last.answered);
}

TEST(ShutdownDeadline, AHandBackFromAnotherThreadEscalatesADrainTheDispatcherHasNotAnswered) {
  OneInFlightOneQueued run;
  CommandsHeld::arm();
  std::thread drainer(
      [&] { EXPECT_TRUE(run.rt.shutdown(ShutdownMode::drain, std::nullopt).finished); });
  CommandsHeld::stopped.acquire();  // the drain's command is taken, and not run
  CommandsHeld::disarm();
  auto escalation = std::async(std::launch::async, [&] {
    return run.rt.shutdown(ShutdownMode::hand_back, std::chrono::nanoseconds{0});
  });
  const bool returned = escalation.wait_for(kDeadline) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the hand_back waited for the drain's round trip";
  CommandsHeld::go.release();
  ShutdownReport escalated = escalation.get();
  EXPECT_FALSE(escalated.finished);
  // The hand_back runs after the drain's begin: `b` is handed back, not dispatched, and the
  // drain finishes as soon as `a` completes.
  ASSERT_TRUE(run.rt.complete(run.a_ticket(), 0).ok());
  drainer.join();
  ShutdownReport last = run.rt.shutdown(ShutdownMode::hand_back, kDeadline);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(escalated.handed_back.size() + last.handed_back.size(), 1u) << "b, handed back once";
  EXPECT_EQ(escalated.handed_back.size(), escalated.answered ? 1u : 0u);
  EXPECT_EQ(run.recorder.count(), 1u) << "the drain dispatched b after the hand_back";
}

// The way to hand back at once without waiting for what is in flight, now that a deadline of 0
// leaves no time for the round trip: wait for the answer alone.
TEST(ShutdownDeadline, AHandBackThatWaitsForTheAnswerAloneLeavesWhatIsInFlight) {
  OneInFlightOneQueued run;
  ShutdownReport report = run.rt.shutdown(ShutdownMode::hand_back, kDeadline,
                                          ShutdownWait::answered);  // `a` never completes here
  EXPECT_TRUE(report.answered);
  EXPECT_FALSE(report.finished);
  ASSERT_EQ(report.handed_back.size(), 1u);
  EXPECT_EQ(report.handed_back.front(), &run.b);
  ASSERT_EQ(report.in_flight.size(), 1u);
  EXPECT_EQ(report.in_flight[0], run.a_ticket());
  EXPECT_EQ(report.still_queued, 0u);
  ASSERT_TRUE(run.rt.complete(run.a_ticket(), 0).ok());
  const ShutdownReport last = run.rt.shutdown(ShutdownMode::hand_back, kDeadline);
  EXPECT_TRUE(last.finished);
  EXPECT_TRUE(last.handed_back.empty());
  EXPECT_EQ(run.recorder.count(), 1u);
}

}  // namespace
}  // namespace creditloop::runtime_tests
