// A capture recording the runtime's steady state allocates nothing either, on any thread: its
// writer thread formats and writes while the count runs.
#include <gtest/gtest.h>

#include "alloc/counting_new.hpp"
#include "alloc/runtime_run.hpp"
#include "creditloop/capture.hpp"

namespace creditloop {
namespace {

using test::g_allocations;
using test::g_counting;

class CapturedRuntimeRun : public test::RuntimeRun {
 protected:
  CapturedRuntimeRun() : RuntimeRun(true) {}
};

TEST_F(CapturedRuntimeRun, ACaptureOfTheSteadyStateAllocatesNothingOnAnyThread) {
  fill();
  ASSERT_EQ(cycle(2'000), 0);
  // The writer has taken in the registrations (each allocates its name's entry) and written
  // their lines: the header and one per participant.
  test::spin_until([&] { return capture_->stats().lines >= 1 + ids_.size(); },
                   "the capture's header and participant lines");
  g_counting.store(true, std::memory_order_relaxed);
  const int refused = cycle(50'000);
  g_counting.store(false, std::memory_order_relaxed);
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(g_allocations.exchange(0, std::memory_order_relaxed), 0);
  drain();
  runtime_->shutdown();
  capture_->close();
  const CaptureStats s = capture_->stats();
  EXPECT_EQ(s.errors, 0u) << s.last_error;
  EXPECT_EQ(s.requests + s.dropped, 52'000u + kSlots);  // the capture saw the counted run
}

}  // namespace
}  // namespace creditloop
