// The core's submit, begin_turn, visit, dispatch and complete allocate nothing once capacity is
// reserved, over many rounds of a mixed fleet.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "alloc/counting_new.hpp"
#include "creditloop/core.hpp"

namespace creditloop {
namespace {

using test::g_allocations;
using test::g_counting;

struct Job : RequestHook {
  ParticipantId owner;
};

constexpr int kParticipants = 3000;
constexpr int kDepth = 3;
constexpr std::size_t kInFlight = 32;

struct Flight {
  Ticket ticket;
  Job* job = nullptr;
};

// A fleet (both plans, varied shares) with every queue kDepth deep, whose dispatched requests go
// back into their queues as soon as they are completed (a request is the caller's again only then).
class MixedRun : public ::testing::Test {
 protected:
  void SetUp() override {
    core.reserve(kParticipants, kInFlight + 1);
    jobs.resize(kParticipants * kDepth);
    in_flight.reserve(kInFlight);
    for (int i = 0; i < kParticipants; ++i) {
      const auto id = core.add("t" + std::to_string(i), i % 3 == 0 ? "lite" : "pro", 1 + i % 5, 0);
      ASSERT_TRUE(id.ok());
      for (int d = 0; d < kDepth; ++d) {
        Job& j = jobs[static_cast<std::size_t>(i * kDepth + d)];
        j.owner = *id;
        ASSERT_TRUE(core.submit(*id, j, 0).ok());
      }
    }
  }

  // Counts a dispatch and keeps its ticket.
  void take(const Decision& d) {
    ++dispatched;
    metered += d.out != core.unmetered() ? 1 : 0;
    in_flight.push_back(Flight{d.ticket, static_cast<Job*>(d.request)});
  }
  // Completes the oldest request in flight and submits it again.
  bool complete_oldest(double cost, Nanos now) {
    const Flight f = in_flight.front();
    in_flight.erase(in_flight.begin());
    return core.complete(f.ticket, cost, now).ok() && core.submit(f.job->owner, *f.job, now).ok();
  }

  void expect_no_allocation_in_a_mixed_run() const {
    EXPECT_EQ(g_allocations.load(std::memory_order_relaxed), 0);
    EXPECT_GT(dispatched, 150'000);
    EXPECT_GT(metered, 1000) << "the run must exercise metered classes, not only P3";
    EXPECT_LT(metered, dispatched) << "and the unmetered one";
  }

  Core core{reference_config()};
  std::vector<Job> jobs;
  std::vector<Flight> in_flight;
  long dispatched = 0;
  long metered = 0;
};

TEST_F(MixedRun, SteadyStateDispatchAllocatesNothing) {
  Nanos now = 0;
  g_counting.store(true, std::memory_order_relaxed);
  for (int round = 0; round < 200'000; ++round) {
    if (in_flight.size() == kInFlight && !complete_oldest((round % 4) * 0.5, now)) break;
    if (!core.in_turn() && !core.begin_turn(now)) break;
    if (const auto d = core.visit(now)) take(*d);
    now += 20'000;  // 20 us per step: credits land, classes change
  }
  g_counting.store(false, std::memory_order_relaxed);
  expect_no_allocation_in_a_mixed_run();
}

TEST_F(MixedRun, SteadyStateBatchesAllocateNothing) {
  std::vector<Decision> batch(8);
  Nanos now = 0;
  g_counting.store(true, std::memory_order_relaxed);
  for (int round = 0; round < 50'000; ++round) {
    // Half the slots come back each round, so batches of 1 to 8 alternate with full rounds.
    while (in_flight.size() > kInFlight / 2) {
      if (!complete_oldest((round % 4) * 0.5, now)) break;
    }
    const std::size_t room = std::min(batch.size(), kInFlight - in_flight.size());
    const std::size_t n = core.dispatch(now, std::span<Decision>(batch).first(room));
    for (std::size_t i = 0; i < n; ++i) take(batch[i]);
    now += 80'000;
  }
  g_counting.store(false, std::memory_order_relaxed);
  expect_no_allocation_in_a_mixed_run();
}

}  // namespace
}  // namespace creditloop
