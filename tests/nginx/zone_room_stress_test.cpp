// The nginx workers' shared room (integrations/nginx/creditloop_zone.h, the code the module
// calls) under threads standing in for workers: each takes a slot, uses what it guards, and gives
// it back, over and over; some borrow, one marks itself owed now and then. The `tsan` preset runs
// it under ThreadSanitizer, which would see the guarded use race if a slot's hand-off did not
// order it (tests/relacy/zone_room_model.cpp checks that on every interleaving of a small case).
//
// Checked: never more holders than slots, every take given back, the room empty at the end.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "creditloop_zone.h"
#include "spin_until.hpp"

namespace {

constexpr int kWorkers = 4;
constexpr std::uint64_t kRounds = 50'000;

// The rule, on one thread: an urgent worker's mark keeps every slot for urgent requests, an owed
// worker's keeps borrowers out, and either makes a slot given back worth a wake-up.
TEST(ZoneRoom, UrgentRequestsTakeTheNextSlotFirst) {
  std::vector<std::uint64_t> words(creditloop_room_words());
  creditloop_zone_clear(words.data(), words.size() * sizeof(std::uint64_t));
  auto* room = reinterpret_cast<creditloop_zone_room*>(words.data());
  EXPECT_EQ(creditloop_room_awaited(room), 0);
  creditloop_room_urge(room, 1);
  EXPECT_EQ(creditloop_room_awaited(room), 1);
  EXPECT_EQ(creditloop_room_take(room, 2, 0, 0), 0) << "a worker within its share yields";
  EXPECT_EQ(creditloop_room_take(room, 2, 1, 1), 1) << "an urgent request takes a slot";
  creditloop_room_urge(room, -1);
  creditloop_room_owe(room, 1);
  EXPECT_EQ(creditloop_room_take(room, 2, 1, 0), 0) << "a borrower yields to an owed worker";
  EXPECT_EQ(creditloop_room_take(room, 2, 0, 0), 1);
  EXPECT_EQ(creditloop_room_take(room, 2, 0, 1), 0) << "the room is full";
  creditloop_room_owe(room, -1);
  EXPECT_EQ(creditloop_room_awaited(room), 0);
  creditloop_room_give(room, 2);
  EXPECT_EQ(creditloop_room_used(room), 0u);
}

TEST(ZoneRoom, OneSlotIsHeldByOneWorkerAtATime) {
  std::vector<std::uint64_t> words(creditloop_room_words());
  creditloop_zone_clear(words.data(), words.size() * sizeof(std::uint64_t));
  auto* room = reinterpret_cast<creditloop_zone_room*>(words.data());
  int holders = 0;  // plain: the slot's hand-off orders every access to it
  std::uint64_t uses = 0;
  int most = 0;
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      for (std::uint64_t round = 0; round < kRounds; ++round) {
        const bool owes = w == 0 && round % 64 == 0;
        const bool urgent = w == 1 && round % 64 == 32;
        if (owes) creditloop_room_owe(room, 1);
        if (urgent) creditloop_room_urge(room, 1);
        creditloop::test::spin_until(
            [&] { return creditloop_room_take(room, 1, w >= 2 ? 1 : 0, urgent ? 1 : 0) != 0; },
            "a slot");
        if (urgent) creditloop_room_urge(room, -1);
        if (owes) creditloop_room_owe(room, -1);
        ++holders;
        most = std::max(most, holders);
        ++uses;
        --holders;
        creditloop_room_give(room, 1);
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(most, 1);
  EXPECT_EQ(uses, kWorkers * kRounds);
  EXPECT_EQ(creditloop_room_used(room), 0u);
}

TEST(ZoneRoom, SeveralSlotsAreNeverExceeded) {
  constexpr std::uint64_t kSlots = 3;
  std::vector<std::uint64_t> words(creditloop_room_words());
  creditloop_zone_clear(words.data(), words.size() * sizeof(std::uint64_t));
  auto* room = reinterpret_cast<creditloop_zone_room*>(words.data());
  std::atomic<std::uint64_t> holders{0};
  std::atomic<std::uint64_t> most{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers + 2; ++w) {
    workers.emplace_back([&, w] {
      for (std::uint64_t round = 0; round < kRounds / 4; ++round) {
        creditloop::test::spin_until(
            [&] { return creditloop_room_take(room, kSlots, w % 2, 0) != 0; }, "a slot");
        // seq_cst: a count for the check alone, after the take that admitted it.
        const std::uint64_t now = holders.fetch_add(1) + 1;
        std::uint64_t seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        holders.fetch_sub(1);
        creditloop_room_give(room, 1);
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_LE(most.load(), kSlots);
  EXPECT_EQ(creditloop_room_used(room), 0u);
}

}  // namespace
