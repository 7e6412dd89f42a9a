// The nginx workers' learned room (integrations/nginx/creditloop_zone.h, the code the module
// calls) under threads standing in for workers that feed its one controller at once, with the
// real RoomController. The `tsan` preset runs it under ThreadSanitizer, which would see the
// controller's state race if the lock did not order the feeds
// (tests/relacy/zone_learned_model.cpp checks that on every interleaving of a small case).
//
// Checked: the room stays within its bounds, every sample is taken or dropped (and a worker drops
// one only while another feeds), and a backend of 4 seats with 10 ms services is learned.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "creditloop_zone.h"

namespace {

constexpr std::int64_t kService = 10'000'000;  // 10 ms, no queue
constexpr std::uint64_t kSeats = 4;

struct Block {
  explicit Block(std::uint32_t least, std::uint32_t most)
      : words(creditloop_learned_bytes() / sizeof(std::uint64_t)) {
    creditloop_learned_start(words.data(), least, most);
  }
  creditloop_zone_learned* learned() {
    return reinterpret_cast<creditloop_zone_learned*>(words.data());
  }
  std::vector<std::uint64_t> words;
};

// A backend of kSeats seats, on a virtual clock the workers share: a request's latency is its
// service plus, past the seats, the services queued ahead of it.
std::int64_t latency(std::uint64_t in_flight) {
  const std::uint64_t rounds = in_flight <= kSeats ? 1 : (in_flight + kSeats - 1) / kSeats;
  return kService * static_cast<std::int64_t>(rounds);
}

TEST(ZoneLearned, StartsAtItsLeastAndPublishesNoLatencyYet) {
  Block block(2, 40);
  EXPECT_EQ(creditloop_learned_slots(block.learned()), 2u);
  EXPECT_EQ(creditloop_learned_latency(block.learned()), 0u);
}

TEST(ZoneLearned, WorkersFeedingAtOnceLearnOneRoomWithinItsBounds) {
  Block block(1, 64);
  constexpr int kWorkers = 4;
  constexpr int kRequests = 20'000;
  std::atomic<std::int64_t> clock{0};  // virtual nanoseconds, shared as CLOCK_MONOTONIC is
  std::atomic<std::uint64_t> taken{0};
  std::atomic<std::uint64_t> dropped{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      for (int i = 0; i < kRequests; ++i) {
        // relaxed, all: counts and a clock; the learned room orders its own state.
        const std::uint64_t slots = creditloop_learned_slots(block.learned());
        const std::int64_t at = clock.fetch_add(kService / 8, std::memory_order_relaxed);
        const int fed = creditloop_learned_dispatched(block.learned(), at, slots) +
                        creditloop_learned_completed(block.learned(), at, at + latency(slots));
        taken.fetch_add(static_cast<std::uint64_t>(fed), std::memory_order_relaxed);
        dropped.fetch_add(static_cast<std::uint64_t>(2 - fed), std::memory_order_relaxed);
        const std::uint64_t now = creditloop_learned_slots(block.learned());
        ASSERT_GE(now, 1u);
        ASSERT_LE(now, 64u);
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(taken.load() + dropped.load(), 2u * kWorkers * kRequests);
  EXPECT_GT(taken.load(), 0u);
  // The samples are those of a backend of 4 seats, whoever fed them.
  const std::uint64_t slots = creditloop_learned_slots(block.learned());
  EXPECT_GE(slots, 3u);
  EXPECT_LE(slots, 6u);
  EXPECT_GE(creditloop_learned_latency(block.learned()), static_cast<std::uint64_t>(kService));
}

}  // namespace
