// detail::TimerHeap (a radix heap on a monotone clock) against a brute-force map under seeded
// random operations: after find_due(now), a place is reported due exactly when some filed place
// has an instant at or before now, and every reported place is one of those.
#include "creditloop/detail/timer_heap.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <utility>

namespace creditloop::detail {
namespace {

constexpr std::uint32_t npos = TimerHeap::npos;

// Expires everything due at `now` from both, checking they agree on what is due.
// With `pop`, through pop_due (which removes as it reports) instead of find_due and erase.
void expire_both(TimerHeap& h, std::map<std::uint32_t, Nanos>& brute, Nanos now, bool pop = false) {
  std::size_t due_in_brute = 0;
  for (const auto& [place, due] : brute) due_in_brute += due <= now ? 1 : 0;
  std::size_t expired = 0;
  for (std::uint32_t p = pop ? h.pop_due(now) : h.find_due(now); p != npos;
       p = pop ? h.pop_due(now) : h.find_due(now)) {
    ASSERT_EQ(brute.count(p), 1u) << "reported a place that is not filed: " << p;
    ASSERT_LE(brute[p], now) << "reported a place not yet due: " << p;
    if (pop) {
      ASSERT_FALSE(h.contains(p)) << "pop_due left it filed: " << p;
    } else {
      h.erase(p);
    }
    brute.erase(p);
    ++expired;
  }
  ASSERT_EQ(expired, due_in_brute);
  for (const auto& [place, due] : brute) ASSERT_GT(due, now);
}

TEST(TimerHeap, EmptyAndOneEntry) {
  TimerHeap h;
  h.reserve(10);
  EXPECT_TRUE(h.empty());
  EXPECT_FALSE(h.contains(3));
  EXPECT_EQ(h.find_due(1000), npos);
  h.set(3, 2000);
  EXPECT_TRUE(h.contains(3));
  EXPECT_EQ(h.due(3), 2000);
  EXPECT_EQ(h.find_due(1999), npos);
  EXPECT_EQ(h.find_due(2000), 3u);
  h.erase(3);
  EXPECT_TRUE(h.empty());
  EXPECT_FALSE(h.contains(3));
  h.erase(3);  // erasing what is not filed does nothing
  EXPECT_TRUE(h.empty());
}

TEST(TimerHeap, MovingAnEntryEarlierAndLater) {
  TimerHeap h;
  h.reserve(10);
  h.set(1, 10);
  h.set(2, 20);
  h.set(3, 30);
  h.set(3, 5);  // earlier: due first
  EXPECT_EQ(h.size(), 3u);
  EXPECT_EQ(h.find_due(5), 3u);
  h.set(3, 25);  // later again
  EXPECT_EQ(h.find_due(9), npos);
  EXPECT_EQ(h.find_due(10), 1u);
  h.set(1, 100);
  EXPECT_EQ(h.find_due(19), npos);
  EXPECT_EQ(h.find_due(20), 2u);
  h.erase(2);
  EXPECT_EQ(h.find_due(24), npos);
  EXPECT_EQ(h.find_due(25), 3u);
}

TEST(TimerHeap, InstantBeforeTheFloorIsDueAtOnce) {
  TimerHeap h;
  h.reserve(4);
  EXPECT_EQ(h.find_due(1000), npos);
  h.set(0, 10);  // earlier than the floor the last find_due set
  EXPECT_EQ(h.find_due(1000), 0u);
}

TEST(TimerHeap, ExtremeInstants) {
  TimerHeap h;
  h.reserve(4);
  constexpr Nanos kMin = std::numeric_limits<Nanos>::min();
  constexpr Nanos kMax = std::numeric_limits<Nanos>::max();
  h.set(0, kMax);
  h.set(1, kMin);
  h.set(2, 0);
  EXPECT_EQ(h.find_due(kMin), 1u);
  h.erase(1);
  EXPECT_EQ(h.find_due(-1), npos);
  EXPECT_EQ(h.find_due(0), 2u);
  h.erase(2);
  EXPECT_EQ(h.find_due(kMax - 1), npos);
  EXPECT_EQ(h.find_due(kMax), 0u);
}

TEST(TimerHeap, MovingWithinOneListTakesTheNewInstant) {
  // 1000..1010 share one list against a floor of 0: a move there only rewrites the key.
  TimerHeap h;
  h.reserve(10);
  h.set(1, 1000);
  h.set(2, 1002);
  h.set(3, 1003);
  h.set(2, 1008);  // the middle of the list, later
  h.set(1, 1001);  // the tail, later
  EXPECT_EQ(h.size(), 3u);
  EXPECT_EQ(h.find_due(1000), npos);
  EXPECT_EQ(h.find_due(1001), 1u);
  h.erase(1);
  EXPECT_EQ(h.find_due(1007), 3u);
  h.erase(3);
  EXPECT_EQ(h.find_due(1007), npos);
  EXPECT_EQ(h.find_due(1008), 2u);
  h.erase(2);
  EXPECT_TRUE(h.empty());
}

void random_against_brute(std::uint32_t places, std::uint64_t seed, int ops, Nanos spread,
                          bool pop = false) {
  std::mt19937_64 rng(seed);
  TimerHeap h;
  h.reserve(places);
  std::map<std::uint32_t, Nanos> brute;
  Nanos now = -spread;
  for (int i = 0; i < ops; ++i) {
    const auto p = static_cast<std::uint32_t>(rng() % places);
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      // Filed instants are never before the present, as in the core.
      const Nanos d = now + static_cast<Nanos>(rng() % static_cast<std::uint64_t>(spread));
      // A place not filed may take file(), which skips the lookup of where it sits.
      if (brute.count(p) == 0 && (rng() & 1) != 0) {
        h.file(p, d);
      } else {
        h.set(p, d);
      }
      brute[p] = d;
    } else if (op < 7) {
      h.erase(p);
      brute.erase(p);
    } else {
      // Time moves by steps small and large, sometimes not at all.
      const std::uint64_t kind = rng() % 4;
      const Nanos step = kind == 0   ? 0
                         : kind == 1 ? 1
                         : kind == 2
                             ? static_cast<Nanos>(rng() % static_cast<std::uint64_t>(spread))
                             : spread * 3;
      now += step;
      expire_both(h, brute, now, pop);
      if (::testing::Test::HasFatalFailure()) return;
    }
    ASSERT_EQ(h.contains(p), brute.count(p) == 1) << "op " << i;
    ASSERT_EQ(h.size(), brute.size()) << "op " << i;
  }
}

TEST(TimerHeap, RandomOperationsAgreeWithBruteForce) {
  random_against_brute(3, 1, 20'000, 64);
  random_against_brute(17, 2, 50'000, 1000);
  random_against_brute(1000, 3, 200'000, 1'000'000'000);
  random_against_brute(5000, 4, 100'000, Nanos{1} << 40);
}

TEST(TimerHeap, PoppingDueEntriesAgreesWithBruteForce) {
  random_against_brute(3, 5, 20'000, 64, true);
  random_against_brute(1000, 6, 200'000, 1'000'000'000, true);
  random_against_brute(5000, 7, 100'000, Nanos{1} << 40, true);
}

// Many entries in one list span many blocks (instants 1000 to 1006 share a list: 2,000 entries
// fill 65 blocks of 31); erasing from the middle fills holes from the front block, and every
// entry still comes due exactly once.
TEST(TimerHeap, ErasingAcrossManyBlocksOfOneList) {
  TimerHeap h;
  h.reserve(2000);
  std::map<std::uint32_t, Nanos> brute;
  for (std::uint32_t p = 0; p < 2000; ++p) {
    h.set(p, 1000 + p % 7);
    brute[p] = 1000 + p % 7;
  }
  for (std::uint32_t p = 0; p < 2000; p += 3) {
    h.erase(p);
    brute.erase(p);
  }
  for (std::uint32_t p = 1; p < 2000; p += 9) {
    h.set(p, 1003);  // within the list: only the key changes
    brute[p] = 1003;
  }
  EXPECT_EQ(h.size(), brute.size());
  expire_both(h, brute, 999);
  expire_both(h, brute, 1002);
  expire_both(h, brute, 1006, true);
  EXPECT_TRUE(h.empty());
}

// A consumer that takes only a few due entries per step leaves the due list full across advances,
// so whole lists are spliced onto a due list that already holds entries and partial blocks.
TEST(TimerHeap, DueEntriesLeftFiledAcrossAdvancesAllComeDue) {
  std::mt19937_64 rng(11);
  TimerHeap h;
  h.reserve(3000);
  std::map<std::uint32_t, Nanos> brute;
  Nanos now = 0;
  for (int step = 0; step < 4000; ++step) {
    for (int i = 0; i < 5; ++i) {
      const auto p = static_cast<std::uint32_t>(rng() % 3000);
      const Nanos d = now + static_cast<Nanos>(rng() % (std::uint64_t{1} << (rng() % 30)));
      h.set(p, d);
      brute[p] = d;
    }
    now += static_cast<Nanos>(rng() % (std::uint64_t{1} << (rng() % 26)));
    for (int taken = 0; taken < 3; ++taken) {
      const std::uint32_t p = (step % 2 == 0) ? h.pop_due(now) : h.find_due(now);
      if (p == npos) break;
      ASSERT_EQ(brute.count(p), 1u) << "step " << step;
      ASSERT_LE(brute[p], now) << "step " << step;
      if (step % 2 != 0) h.erase(p);
      brute.erase(p);
    }
    ASSERT_EQ(h.size(), brute.size()) << "step " << step;
  }
  expire_both(h, brute, now);
  expire_both(h, brute, std::numeric_limits<Nanos>::max());
  EXPECT_TRUE(h.empty());
}

TEST(TimerHeap, ReservingMoreKeepsEntries) {
  TimerHeap h;
  h.reserve(2);
  h.set(1, 7);
  h.reserve(100);
  h.set(99, 3);
  EXPECT_TRUE(h.contains(1));
  EXPECT_EQ(h.find_due(3), 99u);
  h.erase(99);
  EXPECT_EQ(h.find_due(6), npos);
  EXPECT_EQ(h.find_due(7), 1u);
}

// The radix heap's own risks: the floor crossing bit boundaries of every size, instants below
// zero, many places at one instant, and instants filed already past.

// The heap and a model of it, changed together.
struct Checked {
  explicit Checked(std::uint32_t places) { heap.reserve(places); }
  void set(std::uint32_t p, Nanos due) {
    heap.set(p, due);
    model[p] = due;
  }
  int expire(Nanos now) {
    const std::size_t before = model.size();
    expire_both(heap, model, now);
    return static_cast<int>(before - model.size());
  }
  TimerHeap heap;
  std::map<std::uint32_t, Nanos> model;
};

TEST(TimerHeap, NegativeInstantsComeDueInOrder) {
  constexpr Nanos kMin = std::numeric_limits<Nanos>::min();
  constexpr Nanos kMax = std::numeric_limits<Nanos>::max();
  Checked t(8);
  t.set(0, kMin + 1);
  t.set(1, -5);
  t.set(2, 0);
  t.set(3, kMax);
  t.set(4, -1);
  EXPECT_EQ(t.expire(kMin), 0);
  EXPECT_EQ(t.expire(-6), 1);  // kMin + 1
  EXPECT_EQ(t.expire(-2), 1);  // -5
  EXPECT_EQ(t.expire(-1), 1);
  EXPECT_EQ(t.expire(0), 1);
  EXPECT_EQ(t.expire(kMax - 1), 0);
  EXPECT_EQ(t.expire(kMax), 1);
}

TEST(TimerHeap, ManyPlacesAtOneInstantAllComeDue) {
  Checked t(1000);
  for (std::uint32_t p = 0; p < 1000; ++p) t.set(p, Nanos{1} << 20);
  EXPECT_EQ(t.expire((Nanos{1} << 20) - 1), 0);
  EXPECT_EQ(t.expire(Nanos{1} << 20), 1000);
  EXPECT_TRUE(t.heap.empty());
}

TEST(TimerHeap, FloorCrossingEveryBitBoundary) {
  // Entries just before and at each power of two; each step of the floor crosses one more bit.
  Checked t(130);
  std::uint32_t p = 0;
  for (int b = 1; b < 62; ++b) {
    t.set(p++, (Nanos{1} << b) - 1);
    t.set(p++, Nanos{1} << b);
  }
  for (int b = 1; b < 62; ++b) {
    // Due at 2^b - 1: that instant and the previous power of two.
    ASSERT_EQ(t.expire((Nanos{1} << b) - 1), b == 1 ? 1 : 2) << b;
  }
  EXPECT_EQ(t.expire(std::numeric_limits<Nanos>::max()), 1);
}

TEST(TimerHeap, RandomSpansAcrossEveryBitAndPastInstants) {
  for (const auto& [seed, start] : {std::pair<std::uint64_t, Nanos>{11, 0},
                                    {12, -(Nanos{1} << 40)},
                                    {13, (Nanos{1} << 62) - (Nanos{1} << 49)}}) {
    std::mt19937_64 rng(seed);
    Checked t(64);
    Nanos now = start;
    t.expire(now);
    for (int i = 0; i < 30'000; ++i) {
      const auto p = static_cast<std::uint32_t>(rng() % 64);
      const auto span = static_cast<std::uint64_t>(Nanos{1} << (rng() % 50));
      const int op = static_cast<int>(rng() % 10);
      if (op < 5) {
        const auto ahead = static_cast<Nanos>(rng() % span);
        t.set(p, rng() % 16 == 0 ? now - ahead : now + ahead);  // sometimes already past
      } else if (op < 7) {
        t.heap.erase(p);
        t.model.erase(p);
      } else {
        now += static_cast<Nanos>(rng() % span);
        t.expire(now);
        if (::testing::Test::HasFatalFailure()) return;
      }
      ASSERT_EQ(t.heap.size(), t.model.size()) << "op " << i;
      for (const auto& [q, due] : t.model) ASSERT_EQ(t.heap.due(q), due);
    }
  }
}

}  // namespace
}  // namespace creditloop::detail
