// The nginx workers' zone entries (integrations/nginx/creditloop_zone.h, the code the module
// calls) under threads standing in for workers on one shared buffer: two writers republish their
// own entries as fast as they can, each from a stale configuration's state; two readers read both
// entries all the while, as other workers' epochs and the metrics handler do. The `tsan` preset
// runs it under ThreadSanitizer.
//
// Checked, as tests/relacy/zone_entry_model.cpp checks it on every interleaving of a small case: a
// reader that finds an entry live on a stamp of round r or later counts only values of round r or
// later, never the stale state's; and once the writers are done, each entry holds its last round.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <latch>
#include <thread>
#include <vector>

#include "creditloop_zone.h"

namespace {

constexpr std::size_t kWriters = 2;  // the readers' loop names both
constexpr std::size_t kReaders = 2;
constexpr std::size_t kValues = 6;  // the last one is a counter, added to once a round
constexpr std::uint64_t kRounds = 200'000;
constexpr std::uint64_t kStaleGeneration = 1;
constexpr std::uint64_t kGeneration = 2;
// Round r is stamped r + 1, the stale state 1: a reader asking for a stamp of at least r + 1
// with r >= 1 never takes the stale state's stamp as fresh enough.
constexpr std::uint64_t stamp_of(std::uint64_t round) { return round + 1; }
// A reader's clock, after every stamp: live(kGeneration, kNow, kNow - s) says the stamp is >= s.
constexpr std::uint64_t kNow = stamp_of(kRounds) + 1;

// Value i of round r (0: the stale state's) names its round.
constexpr std::uint64_t value(std::uint64_t round, std::size_t i) { return round * kValues + i; }

class Zone {
 public:
  Zone() : bytes_(creditloop_zone_entry_size(kValues)), block_(kWriters * bytes_ / 8) {
    creditloop_zone_clear(block_.data(), kWriters * bytes_);
  }
  creditloop_zone_entry* entry(std::size_t w) {
    return reinterpret_cast<creditloop_zone_entry*>(
        reinterpret_cast<unsigned char*>(block_.data()) + w * bytes_);
  }

 private:
  std::size_t bytes_;
  std::vector<std::uint64_t> block_;  // 8-byte aligned, as nginx's slab gives it
};

void publish_round(creditloop_zone_entry* e, std::uint64_t round, std::uint64_t generation,
                   std::uint64_t stamp) {
  for (std::size_t i = 0; i + 1 < kValues; ++i) creditloop_zone_store(e, i, value(round, i));
  // The counter: round * kValues + (kValues - 1) at round `round`, by one add a round from the
  // stale state's value(0, kValues - 1).
  creditloop_zone_add(e, kValues - 1, round == 0 ? value(0, kValues - 1) : kValues);
  creditloop_zone_publish(e, generation, stamp);
}

TEST(ZoneEntryStress, ReaderOfAFreshStampCountsThatPublishOrLaterNeverTheStaleState) {
  Zone zone;
  for (std::size_t w = 0; w < kWriters; ++w) {
    publish_round(zone.entry(w), 0, kStaleGeneration, stamp_of(0));
  }
  std::latch start(kWriters + kReaders);
  std::array<std::uint64_t, kReaders> failures{};
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      for (std::uint64_t r = 1; r <= kRounds; ++r) {
        publish_round(zone.entry(w), r, kGeneration, stamp_of(r));
      }
    });
  }
  for (std::size_t k = 0; k < kReaders; ++k) {
    threads.emplace_back([&, k] {
      // Per entry, the round whose stamp the next read waits for: past the latest round read,
      // so that each read follows its writer closely, until both entries' last round is read.
      std::array<std::uint64_t, kWriters> next{};
      next.fill(1);
      start.arrive_and_wait();
      while (next[0] <= kRounds || next[1] <= kRounds) {
        for (std::size_t w = 0; w < kWriters; ++w) {
          const creditloop_zone_entry* e = zone.entry(w);
          const std::uint64_t round = next[w];
          if (round > kRounds) continue;
          if (creditloop_zone_live(e, kGeneration, kNow, kNow - stamp_of(round)) == 0) continue;
          std::uint64_t oldest = kRounds;
          for (std::size_t i = 0; i < kValues; ++i) {
            const std::uint64_t v = creditloop_zone_load(e, i);
            if (v % kValues != i || v / kValues < round) ++failures[k];
            oldest = std::min(oldest, v / kValues);
          }
          next[w] = std::max(round, oldest) + 1;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();

  for (std::size_t k = 0; k < kReaders; ++k) {
    EXPECT_EQ(failures[k], 0u) << "reader " << k << " counted values older than the stamp it saw";
  }
  for (std::size_t w = 0; w < kWriters; ++w) {
    const creditloop_zone_entry* e = zone.entry(w);
    EXPECT_EQ(creditloop_zone_live(e, kStaleGeneration, kNow, kNow), 0);
    ASSERT_EQ(creditloop_zone_live(e, kGeneration, kNow, kNow - stamp_of(kRounds)), 1);
    for (std::size_t i = 0; i < kValues; ++i) {
      EXPECT_EQ(creditloop_zone_load(e, i), value(kRounds, i)) << "entry " << w << " value " << i;
    }
  }
}

// Each worker's clock is its event loop's last look at the time: another worker's entry published
// a few milliseconds "later" than the reader's clock is fresh, and one older than the time-to-live
// is gone.
TEST(ZoneEntry, AStampAheadOfTheReadersClockIsFreshAndAnOldOneIsGone) {
  Zone zone;
  creditloop_zone_entry* e = zone.entry(0);
  creditloop_zone_publish(e, kGeneration, 10'005);
  EXPECT_EQ(creditloop_zone_live(e, kGeneration, 10'000, 750), 1);
  EXPECT_EQ(creditloop_zone_live(e, kGeneration, 10'005 + 750, 750), 1);
  EXPECT_EQ(creditloop_zone_live(e, kGeneration, 10'005 + 751, 750), 0);
  EXPECT_EQ(creditloop_zone_live(zone.entry(1), kGeneration, 10'000, 750), 0);  // never published
}

}  // namespace
