// The runtime's submit, dispatch and complete allocate nothing in steady state.
#include <gtest/gtest.h>

#include "alloc/counting_new.hpp"
#include "alloc/runtime_run.hpp"

namespace creditloop {
namespace {

using test::g_allocations;
using test::g_counting;

using test::RuntimeRun;

TEST_F(RuntimeRun, SteadyStateSubmitDispatchAndCompleteAllocateNothing) {
  fill();
  ASSERT_EQ(cycle(2'000), 0);  // warm up: every record and list has reached its size
  g_counting.store(true, std::memory_order_relaxed);
  const int refused = cycle(50'000);
  g_counting.store(false, std::memory_order_relaxed);
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(g_allocations.exchange(0, std::memory_order_relaxed), 0);
  drain();
  EXPECT_EQ(runtime_->snapshot().dispatched, 52'000u + kSlots);
}

}  // namespace
}  // namespace creditloop
