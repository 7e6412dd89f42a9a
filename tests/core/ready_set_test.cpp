// detail::ReadySet against std::set under seeded random operations, and at the word and level
// boundaries of its 64-ary hierarchy (63/64, 4095/4096, 262143/262144, 2^24 - 1).
#include "creditloop/detail/ready_set.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>

namespace creditloop::detail {
namespace {

constexpr std::uint32_t npos = ReadySet::npos;

std::uint32_t expected_next(const std::set<std::uint32_t>& s, std::uint32_t from) {
  const auto it = s.lower_bound(from);
  return it == s.end() ? npos : *it;
}

// Every find_next answer from 0 to the capacity (a search starts at a place or just after one).
void expect_every_next(const ReadySet& rs, const std::set<std::uint32_t>& s, std::uint32_t cap) {
  for (std::uint32_t from = 0; from <= cap; ++from) {
    ASSERT_EQ(rs.find_next(from), expected_next(s, from)) << "from " << from;
  }
}

TEST(ReadySet, EmptySetHasNoNext) {
  ReadySet rs;
  EXPECT_EQ(rs.find_next(0), npos);
  rs.resize(1000);
  EXPECT_FALSE(rs.any());
  EXPECT_EQ(rs.count(), 0u);
  for (std::uint32_t i = 0; i <= 1000; ++i) ASSERT_EQ(rs.find_next(i), npos);
}

TEST(ReadySet, SetAndClearReportWhetherTheyChangedAnything) {
  ReadySet rs;
  rs.resize(100);
  EXPECT_TRUE(rs.set(5));
  EXPECT_FALSE(rs.set(5));
  EXPECT_EQ(rs.count(), 1u);
  EXPECT_TRUE(rs.test(5));
  EXPECT_TRUE(rs.clear(5));
  EXPECT_FALSE(rs.clear(5));
  EXPECT_FALSE(rs.test(5));
  EXPECT_EQ(rs.count(), 0u);
  EXPECT_FALSE(rs.any());
}

TEST(ReadySet, BoundaryPlacesFromEveryPosition) {
  // Places where a word, a level-1 word and a level-2 word end or begin.
  constexpr std::uint32_t kCap = 262'144 + 70;
  ReadySet rs;
  rs.resize(kCap);
  std::set<std::uint32_t> s;
  for (const std::uint32_t p :
       {0u, 63u, 64u, 127u, 4095u, 4096u, 4097u, 262'143u, 262'144u, kCap - 1}) {
    ASSERT_TRUE(rs.set(p));
    s.insert(p);
  }
  EXPECT_EQ(rs.count(), s.size());
  expect_every_next(rs, s, kCap);
  // Take them away one at a time, largest first, and ask again each time.
  while (!s.empty()) {
    const std::uint32_t p = *s.rbegin();
    ASSERT_TRUE(rs.clear(p));
    s.erase(p);
    for (const std::uint32_t from : {0u, 1u, 63u, 64u, 65u, 4095u, 4096u, 262'143u, 262'144u}) {
      ASSERT_EQ(rs.find_next(from), expected_next(s, from)) << "from " << from;
    }
  }
  EXPECT_EQ(rs.find_next(0), npos);
}

TEST(ReadySet, SingleBitFoundFromEveryPositionBeforeIt) {
  ReadySet rs;
  rs.resize(5000);
  for (const std::uint32_t p : {0u, 1u, 62u, 63u, 64u, 65u, 4095u, 4096u, 4999u}) {
    ASSERT_TRUE(rs.set(p));
    for (std::uint32_t from = 0; from <= 5000; ++from) {
      ASSERT_EQ(rs.find_next(from), from <= p ? p : npos) << "bit " << p << " from " << from;
    }
    ASSERT_TRUE(rs.clear(p));
  }
}

TEST(ReadySet, LargestCapacity) {
  constexpr std::uint32_t kCap = 1u << 24;
  ReadySet rs;
  rs.resize(kCap);
  EXPECT_EQ(rs.capacity(), kCap);
  EXPECT_EQ(rs.find_next(0), npos);
  ASSERT_TRUE(rs.set(kCap - 1));
  EXPECT_EQ(rs.find_next(0), kCap - 1);
  EXPECT_EQ(rs.find_next(kCap - 1), kCap - 1);
  EXPECT_EQ(rs.find_next(kCap), npos);
  ASSERT_TRUE(rs.set(262'144));
  EXPECT_EQ(rs.find_next(1), 262'144u);
  EXPECT_EQ(rs.find_next(262'145), kCap - 1);
  ASSERT_TRUE(rs.clear(kCap - 1));
  EXPECT_EQ(rs.find_next(262'145), npos);
  ASSERT_TRUE(rs.set(0));
  EXPECT_EQ(rs.find_next(0), 0u);
  EXPECT_EQ(rs.count(), 2u);
}

TEST(ReadySet, GrowingKeepsWhatIsSet) {
  ReadySet rs;
  rs.resize(10);
  ASSERT_TRUE(rs.set(9));
  rs.resize(5000);
  EXPECT_TRUE(rs.test(9));
  ASSERT_TRUE(rs.set(4999));
  EXPECT_EQ(rs.find_next(10), 4999u);
  rs.resize(3);  // never shrinks
  EXPECT_EQ(rs.capacity(), 5000u);
  EXPECT_EQ(rs.find_next(0), 9u);
}

TEST(ReadySet, CapacityNotAMultipleOf64) {
  ReadySet rs;
  rs.resize(130);
  ASSERT_TRUE(rs.set(129));
  EXPECT_EQ(rs.find_next(65), 129u);
  EXPECT_EQ(rs.find_next(130), npos);
}

void random_against_set(std::uint32_t cap, std::uint64_t seed, int ops, int density_percent) {
  std::mt19937_64 rng(seed);
  ReadySet rs;
  rs.resize(cap);
  std::set<std::uint32_t> s;
  for (int i = 0; i < ops; ++i) {
    // Places cluster near the interesting boundaries half the time.
    std::uint32_t p = static_cast<std::uint32_t>(rng() % cap);
    if (rng() % 2 == 0) {
      static constexpr std::uint32_t kNear[] = {0, 64, 4096, 262'144};
      const std::uint32_t base = kNear[rng() % 4] % cap;
      p = static_cast<std::uint32_t>((base + cap - 3 + rng() % 7) % cap);
    }
    const bool add = static_cast<int>(rng() % 100) < density_percent;
    if (add) {
      ASSERT_EQ(rs.set(p), s.insert(p).second) << "set " << p;
    } else {
      ASSERT_EQ(rs.clear(p), s.erase(p) == 1) << "clear " << p;
    }
    ASSERT_EQ(rs.count(), s.size());
    ASSERT_EQ(rs.any(), !s.empty());
    const std::uint32_t from = static_cast<std::uint32_t>(rng() % (cap + 1));
    ASSERT_EQ(rs.find_next(from), expected_next(s, from)) << "from " << from;
    ASSERT_EQ(rs.test(p), s.count(p) == 1);
  }
}

TEST(ReadySet, RandomOperationsAgreeWithStdSetSmall) {
  random_against_set(200, 1, 50'000, 50);
  random_against_set(5000, 2, 50'000, 60);
}

TEST(ReadySet, RandomOperationsAgreeWithStdSetLarge) {
  random_against_set(300'000, 3, 100'000, 50);
  random_against_set(1u << 24, 4, 50'000, 70);
}

TEST(ReadySet, RandomContentsFindNextFromEveryPosition) {
  std::mt19937_64 rng(5);
  for (const int per_mille : {1, 20, 500, 990}) {
    constexpr std::uint32_t kCap = 9000;
    ReadySet rs;
    rs.resize(kCap);
    std::set<std::uint32_t> s;
    for (std::uint32_t p = 0; p < kCap; ++p) {
      if (static_cast<int>(rng() % 1000) < per_mille) {
        rs.set(p);
        s.insert(p);
      }
    }
    expect_every_next(rs, s, kCap);
  }
}

}  // namespace
}  // namespace creditloop::detail
