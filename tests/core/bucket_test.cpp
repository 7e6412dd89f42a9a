// The fixed-point arithmetic of one bucket (bucket.hpp), against exact integer arithmetic done
// independently here: the balance after refilling for T ns at R nano-credits/s from (B, r) is
// B + floor((T*R + r) / 1e9) with remainder (T*R + r) mod 1e9, until it reaches capacity.
#include "creditloop/bucket.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "harness.hpp"

namespace creditloop {
namespace {

using test::str;

constexpr Rate128 kThird = 333'333'333;  // 1/3 credit per second, taken to 9 decimals
constexpr Nanos kMaxNanos = std::numeric_limits<Nanos>::max();
// The largest capacity and refill a bucket can have within the documented limits (units.hpp).
const Balance kTopCap =
    static_cast<Balance>(kMaxShares) * static_cast<std::int64_t>(kMaxBurst) * kNanoPerCredit;
const Rate128 kTopRate = static_cast<Rate128>(kMaxShares) * static_cast<std::uint64_t>(kMaxRate) *
                         static_cast<std::uint64_t>(kNanoPerCredit);

Balance big_cap() { return test::credits(1'000'000'000); }

// The exact state after `total` ns of refill from (start, 0), ignoring capacity.
BucketState exact_after(Balance start, Rate128 total_ns, Rate128 rate) {
  const Rate128 product = total_ns * rate;
  return BucketState{start + static_cast<Balance>(product / 1'000'000'000u),
                     static_cast<std::uint64_t>(product % 1'000'000'000u)};
}

TEST(Bucket, HasCreditIsAWholeCreditExactly) {
  EXPECT_FALSE(has_credit(BucketState{kNanoPerCredit - 1, 999'999'999}));
  EXPECT_TRUE(has_credit(BucketState{kNanoPerCredit, 0}));
  EXPECT_FALSE(has_credit(BucketState{-test::credits(5), 0}));
}

TEST(Bucket, ZeroElapsedChangesNothing) {
  BucketState b{123, 456};
  refill(b, 0, kThird, big_cap());
  EXPECT_EQ(str(b.balance), "123");
  EXPECT_EQ(b.remainder, 456u);
}

TEST(Bucket, TinyRefillsEqualOneBigRefillAndTheExactFloor) {
  // 1/3 credit/s one nanosecond at a time: each step adds 0.333333333 units, so almost every
  // step adds nothing and only the carried remainder makes the balance move at all.
  constexpr std::int64_t kSteps = 2'000'000;
  BucketState tiny{0, 0};
  for (std::int64_t t = 1; t <= kSteps; ++t) {
    refill(tiny, 1, kThird, big_cap());
    if (t % 99'991 == 0 || t == kSteps) {
      const BucketState e = exact_after(0, static_cast<Rate128>(t), kThird);
      ASSERT_EQ(str(tiny.balance), str(e.balance)) << "after " << t << " ns";
      ASSERT_EQ(tiny.remainder, e.remainder) << "after " << t << " ns";
    }
  }
  BucketState once{0, 0};
  refill(once, kSteps, kThird, big_cap());
  EXPECT_EQ(str(once.balance), str(tiny.balance));
  EXPECT_EQ(once.remainder, tiny.remainder);
  // floor(2e6 * 333333333 / 1e9) = floor(666666.666) = 666666, remainder 0.666e9.
  EXPECT_EQ(str(once.balance), "666666");
  EXPECT_EQ(once.remainder, 666'000'000u);
}

TEST(Bucket, RandomStepsNeverDriftFromTheExactValue) {
  std::mt19937_64 rng(20240611);
  for (const Rate128 rate : {Rate128{1}, Rate128{7}, kThird, Rate128{999'999'999},
                             Rate128{1'000'000'001}, Rate128{123'456'789'123}}) {
    const Balance start = -test::credits(1'000'000);
    BucketState b{start, 0};
    Rate128 total = 0;
    for (int i = 0; i < 20'000; ++i) {
      const Nanos dt = static_cast<Nanos>(rng() % (i % 10 == 0 ? 5'000'000'000ull : 1'000ull));
      refill(b, dt, rate, big_cap());
      total += static_cast<Rate128>(dt);
      const BucketState e = exact_after(start, total, rate);
      if (e.balance >= big_cap()) break;
      ASSERT_EQ(str(b.balance), str(e.balance)) << "rate " << str(static_cast<Balance>(rate));
      ASSERT_EQ(b.remainder, e.remainder);
    }
  }
}

TEST(Bucket, DebtClimbsAtTheRateThenStopsAtCapacity) {
  // -5 credits at 1 credit/s: -2.5 after 2.5 s, and capacity 3 reached 8 s after the start.
  BucketState b{-test::credits(5), 0};
  refill(b, 2'500'000'000, 1'000'000'000, test::credits(3));
  EXPECT_EQ(str(b.balance), "-2500000000");
  refill(b, 5'499'999'999, 1'000'000'000, test::credits(3));
  EXPECT_EQ(str(b.balance), "2999999999");
  refill(b, 10 * test::kSec, 1'000'000'000, test::credits(3));
  EXPECT_EQ(str(b.balance), str(test::credits(3)));
  EXPECT_EQ(b.remainder, 0u);
}

TEST(Bucket, CappingAtCapacityDropsTheRemainder) {
  // 3 units/s, capacity 10 units. From 9: half a second adds 1.5 units, which reaches the
  // capacity: the exact value is the capacity itself, so the 0.5 unit carried must go.
  BucketState b{9, 0};
  refill(b, 500'000'000, 3, 10);
  EXPECT_EQ(str(b.balance), "10");
  EXPECT_EQ(b.remainder, 0u);
  // A debit of one unit, then 0.2 s adds 0.6 unit: 9 with 0.6 carried. Had the 0.5 survived
  // the cap, 1.1 units would have made it 10.
  b.balance -= 1;
  refill(b, 200'000'000, 3, 10);
  EXPECT_EQ(str(b.balance), "9");
  EXPECT_EQ(b.remainder, 600'000'000u);
}

TEST(Bucket, ExactlyReachingCapacityWithAFractionLeftIsCapacity) {
  // From 8 units with 0.9 carried, 1.3 more units make 10.2 exact: capped at 10, nothing carried.
  BucketState b{8, 900'000'000};
  refill(b, 1'300'000'000, 1, 10);
  EXPECT_EQ(str(b.balance), "10");
  EXPECT_EQ(b.remainder, 0u);
}

TEST(Bucket, TimeToCreditIsExactAtTheBoundary) {
  // 1/3 credit/s from zero: the credit needs T*333333333 >= 1e18, T = ceil(3000000003.000000003).
  const BucketState zero{0, 0};
  EXPECT_EQ(time_to_credit(zero, kThird), 3'000'000'004);
  BucketState before = zero;
  refill(before, 3'000'000'003, kThird, big_cap());
  EXPECT_FALSE(has_credit(before));
  BucketState at = zero;
  refill(at, 3'000'000'004, kThird, big_cap());
  EXPECT_TRUE(has_credit(at));
}

TEST(Bucket, TimeToCreditMatchesTheCeilingFormulaAndRefill) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20'000; ++i) {
    const Balance balance =
        static_cast<Balance>(rng() % 2'000'000'000'000ull) - test::credits(1000) + 1;
    const BucketState b{balance < kNanoPerCredit ? balance : kNanoPerCredit - 1,
                        rng() % 1'000'000'000u};
    const Rate128 rate = 1 + static_cast<Rate128>(rng() % (i % 2 ? 1'000'000'000'000ull : 5000u));
    // Smallest T with b + floor((T*rate + r)/1e9) >= 1e9: T*rate >= (1e9 - b)*1e9 - r.
    const Rate128 need = static_cast<Rate128>(kNanoPerCredit - b.balance) * 1'000'000'000u -
                         static_cast<Rate128>(b.remainder);
    const Rate128 expected = (need + rate - 1) / rate;
    if (expected > static_cast<Rate128>(kMaxNanos)) continue;
    const Nanos t = time_to_credit(b, rate);
    ASSERT_EQ(static_cast<Rate128>(t) == expected, true)
        << "balance " << str(b.balance) << " rem " << b.remainder << " rate "
        << str(static_cast<Balance>(rate)) << " got " << t;
    BucketState early = b;
    refill(early, t - 1, rate, big_cap());
    ASSERT_FALSE(has_credit(early));
    BucketState on_time = b;
    refill(on_time, t, rate, big_cap());
    ASSERT_TRUE(has_credit(on_time));
  }
}

TEST(Bucket, TimeToCreditIsZeroWithACredit) {
  EXPECT_EQ(time_to_credit(BucketState{kNanoPerCredit, 0}, 1), 0);
  EXPECT_EQ(time_to_credit(BucketState{test::credits(7), 5}, kThird), 0);
}

TEST(Bucket, TimeToCreditJustInsideTheClock) {
  // At 1 unit/s, -8 credits need 9e18 ns: it fits in Nanos (max ~9.22e18).
  EXPECT_EQ(time_to_credit(BucketState{-test::credits(8), 0}, 1), 9'000'000'000'000'000'000);
}

TEST(Bucket, TimeToCreditSaturatesForAbsurdDebt) {
  // -8.3 credits at 1 unit/s need 9.3e18 ns, past the largest Nanos.
  EXPECT_EQ(time_to_credit(BucketState{-8'300'000'000, 0}, 1), kMaxNanos);
  const Balance absurd = -test::credits(1'000'000'000) * test::credits(1'000'000'000);
  EXPECT_EQ(time_to_credit(BucketState{absurd, 0}, 1), kMaxNanos);
  EXPECT_EQ(time_to_credit(BucketState{absurd, 0}, kTopRate), kMaxNanos);
}

TEST(Bucket, CreditInstantBeyondTheClockIsNothing) {
  // 0 balance at 1 unit/s: a credit needs 1e18 ns. From 1e18 it lands at 2e18; from the last
  // nanosecond that still reaches it, exactly at the end; one nanosecond later, never.
  const BucketState empty{0, 0};
  EXPECT_EQ(credit_instant(empty, 1, 1'000'000'000'000'000'000), 2'000'000'000'000'000'000);
  const Nanos last_start = kMaxNanos - 1'000'000'000'000'000'000;
  EXPECT_EQ(credit_instant(empty, 1, last_start), kMaxNanos);
  EXPECT_EQ(credit_instant(empty, 1, last_start + 1), std::nullopt);
  // Deep debt through the 128-bit path: the same boundary.
  const BucketState deep{-test::credits(20), 0};  // needs 21e18 ns at 1 unit/s: never
  EXPECT_EQ(credit_instant(deep, 1, 0), std::nullopt);
  // 21 credits at 1e9 units/s = 21 s, from a negative clock.
  EXPECT_EQ(credit_instant(deep, 1'000'000'000, -5), 21'000'000'000 - 5);
  // A credit in hand: the instant is now.
  EXPECT_EQ(credit_instant(BucketState{kNanoPerCredit, 0}, 1, 42), 42);
}

TEST(Bucket, HugeElapsedTimeIsExactOrCapped) {
  // The largest dt at the tiniest rate: 9223372036854775807 units of 1e-9 added.
  const Balance debt = -test::credits(1'000'000'000) * test::credits(1'000'000);  // -1e33
  BucketState slow{debt, 0};
  refill(slow, kMaxNanos, 1, big_cap());
  EXPECT_EQ(str(slow.balance), str(debt + 9'223'372'036));
  EXPECT_EQ(slow.remainder, 854'775'807u);

  // 10 credits/s for the largest dt: 92233720368547758070 units, remainder 0, still in debt.
  BucketState medium{debt, 0};
  refill(medium, kMaxNanos, 10'000'000'000u, big_cap());
  EXPECT_EQ(str(medium.balance), str(debt + static_cast<Balance>(kMaxNanos) * 10));
  EXPECT_EQ(medium.remainder, 0u);

  // The highest refill there is for the largest dt: exact from a deep debt, capped from zero.
  BucketState fast{debt, 0};
  refill(fast, kMaxNanos, kTopRate, kTopCap);
  const Rate128 added = static_cast<Rate128>(kMaxNanos) * kTopRate / 1'000'000'000u;
  EXPECT_EQ(str(fast.balance), str(debt + static_cast<Balance>(added)));
  EXPECT_EQ(fast.remainder, 0u);
  BucketState from_zero{0, 0};
  refill(from_zero, kMaxNanos, kTopRate, kTopCap);
  EXPECT_EQ(str(from_zero.balance), str(kTopCap));
  EXPECT_EQ(from_zero.remainder, 0u);
}

// High rates over gaps of seconds, where rate x elapsed no longer fits 64 bits: the refill splits
// the rate instead of going to 128 bits, and must still be the exact floor with its remainder.
TEST(Bucket, HighRatesOverLongGapsAreExact) {
  std::mt19937_64 rng(20261201);
  for (int i = 0; i < 20'000; ++i) {
    // 10,000 to 10^10 credits per second (the top: kMaxRate x kMaxShares), any nano-credit part.
    const std::uint64_t whole = 10'000 + rng() % (10'000'000'000ull - 10'000);
    const std::uint64_t rate = whole * 1'000'000'000ull + rng() % 1'000'000'000ull;
    const std::uint64_t dt = 1 + rng() % 18'000'000'000ull;  // up to 18 s
    const std::uint64_t remainder = rng() % 1'000'000'000ull;
    const Balance start = -static_cast<Balance>(rng() % 1'000'000'000'000ull);
    BucketState b{start, remainder};
    refill(b, dt, rate, kTopCap * 1000);  // a cap the refill does not reach
    const Rate128 numerator = static_cast<Rate128>(dt) * rate + remainder;
    ASSERT_EQ(str(b.balance), str(start + static_cast<Balance>(numerator / 1'000'000'000u)))
        << "rate " << rate << " dt " << dt;
    ASSERT_EQ(b.remainder, static_cast<std::uint64_t>(numerator % 1'000'000'000u));
  }
}

TEST(Bucket, TopRateOneNanosecondAtATime) {
  // The top refill is a whole number of units per nanosecond: no remainder ever.
  ASSERT_TRUE(kTopRate % 1'000'000'000u == 0);
  const Balance per_ns = static_cast<Balance>(kTopRate / 1'000'000'000u);
  BucketState b{0, 0};
  for (int i = 0; i < 1000; ++i) refill(b, 1, kTopRate, kTopCap);
  EXPECT_EQ(str(b.balance), str(per_ns * 1000));
  EXPECT_EQ(b.remainder, 0u);
}

// docs/contract.md §4, "Charging behind the refill": a debit taken behind the refill, then any
// later refill, gives exactly what refilling first, debiting, then refilling the rest gives, at
// every cap, debt, rate and gap, whether or not the refill reaches the cap; the balance it reports
// for the later instant is the refilled one less the debit.
TEST(Bucket, TakingBehindTheRefillEqualsRefillingFirst) {
  std::mt19937_64 rng(41);
  const Rate128 rates[] = {1, kThird, 2'000'000'000, 30'000'000'000'000, kTopRate};
  int accepted = 0;
  int capped = 0;
  for (int i = 0; i < 200'000; ++i) {
    const Rate128 rate = rates[rng() % 5];
    const Balance cap = test::credits(1 + static_cast<std::int64_t>(rng() % 4)) +
                        static_cast<Balance>(rng() % 1000);
    // From deep debt to the cap itself, with and without a carried fraction.
    Balance balance = cap - static_cast<Balance>(rng() % (rng() % 2 ? 3'000'000'000u : 20u));
    if (rng() % 8 == 0) balance = cap;
    if (rng() % 8 == 0) balance = -test::credits(static_cast<std::int64_t>(rng() % 20));
    const std::uint64_t remainder = balance >= cap ? 0 : rng() % 1'000'000'000;
    const std::uint64_t gaps[] = {0, 1, rng() % 1000, rng() % 2'000'000'000,
                                  rng() % 40'000'000'000};
    const std::uint64_t dt = gaps[rng() % 5];
    const std::uint64_t later = gaps[rng() % 5];
    const auto amount = static_cast<std::int64_t>(rng() % (rng() % 2 ? 3'000'000'000u : 3u));

    BucketState first{balance, remainder};
    refill(first, dt, rate, cap);
    first.balance -= amount;
    const Balance expected_at = first.balance;
    refill(first, later, rate, cap);

    BucketState behind{balance, remainder};
    Balance at = 0;
    const Taken taken = take_behind(behind, dt, rate, cap, amount, at);
    if (taken == Taken::refused) {
      // Only a product beyond 64-bit arithmetic is refused, and it leaves the bucket alone.
      ASSERT_EQ(str(behind.balance), str(balance));
      ASSERT_EQ(behind.remainder, remainder);
      continue;
    }
    ++accepted;
    BucketState probe{balance, remainder};
    refill(probe, dt, rate, cap);
    // At the cap exactly when the refill reaches it, and then with no fraction at that instant.
    ASSERT_EQ(taken == Taken::at_cap, dt != 0 && probe.balance >= cap) << "case " << i;
    if (taken == Taken::at_cap) ++capped;
    ASSERT_LT(behind.remainder, 1'000'000'000u);
    ASSERT_EQ(str(at), str(expected_at)) << "case " << i;
    refill(behind, dt + later, rate, cap);
    ASSERT_EQ(str(behind.balance), str(first.balance)) << "case " << i;
    ASSERT_EQ(behind.remainder, first.remainder) << "case " << i;
  }
  // Both kinds of case were reached, not only the refused ones.
  EXPECT_GT(accepted, 150'000);
  EXPECT_GT(capped, 20'000);
}

TEST(Units, ToNanoCreditsRoundsToNineDecimals) {
  EXPECT_EQ(to_nano_credits(1.0, 10), std::optional<std::int64_t>(1'000'000'000));
  EXPECT_EQ(to_nano_credits(1.0000000004, 10), std::optional<std::int64_t>(1'000'000'000));
  EXPECT_EQ(to_nano_credits(1.0000000006, 10), std::optional<std::int64_t>(1'000'000'001));
  EXPECT_EQ(to_nano_credits(2.4e-9, 10), std::optional<std::int64_t>(2));
  EXPECT_EQ(to_nano_credits(2.6e-9, 10), std::optional<std::int64_t>(3));
  EXPECT_EQ(to_nano_credits(0.0, 10), std::optional<std::int64_t>(0));
  EXPECT_EQ(to_nano_credits(kMaxCost, kMaxCost),
            std::optional<std::int64_t>(1'000'000'000'000'000));
}

// The conversion rounds half away from zero, as std::llround does, including where adding 0.5
// in floating point would round up a value just below one half.
TEST(Units, ToNanoCreditsRoundsLikeLlround) {
  const auto llround_units = [](double credits) {
    return static_cast<std::int64_t>(std::llround(credits * 1e9));
  };
  const double just_below_half = std::nextafter(0.5, 0.0) / 1e9;
  EXPECT_EQ(to_nano_credits(just_below_half, 10), llround_units(just_below_half));
  EXPECT_EQ(to_nano_credits(0.5e-9, 10), std::optional<std::int64_t>(1));
  EXPECT_EQ(to_nano_credits(2.5e-9, 10), llround_units(2.5e-9));
  std::mt19937_64 rng(20261130);
  std::uniform_real_distribution<double> any_cost(0.0, kMaxCost);
  std::uniform_real_distribution<double> small_cost(0.0, 10.0);
  for (int i = 0; i < 100'000; ++i) {
    const double a = any_cost(rng);
    const double b = small_cost(rng);
    // Values whose scaled form sits on a half, and their neighbours.
    const double half = (std::floor(b * 1e9) + 0.5) / 1e9;
    for (const double credits :
         {a, b, half, std::nextafter(half, 0.0), std::nextafter(half, 11.0)}) {
      ASSERT_EQ(to_nano_credits(credits, kMaxCost), llround_units(credits)) << credits;
    }
  }
}

TEST(Units, ToNanoCreditsRefusesWhatIsNotACount) {
  EXPECT_FALSE(to_nano_credits(-1.0, 10));
  EXPECT_FALSE(to_nano_credits(-1e-3, 10));
  EXPECT_FALSE(to_nano_credits(std::nan(""), 10));
  EXPECT_FALSE(to_nano_credits(std::numeric_limits<double>::infinity(), 10));
  EXPECT_FALSE(to_nano_credits(-std::numeric_limits<double>::infinity(), 10));
  EXPECT_FALSE(to_nano_credits(10.5, 10));
  EXPECT_FALSE(to_nano_credits(std::nextafter(kMaxCost, 2 * kMaxCost), kMaxCost));
}

TEST(Units, ToCreditsIsForDisplay) {
  EXPECT_DOUBLE_EQ(to_credits(1'500'000'000), 1.5);
  EXPECT_DOUBLE_EQ(to_credits(-250'000'000), -0.25);
}

TEST(Units, ToSecondsIsForDisplay) {
  EXPECT_DOUBLE_EQ(to_seconds(1'500'000'000), 1.5);
  EXPECT_DOUBLE_EQ(to_seconds(-250'000'000), -0.25);
  EXPECT_NEAR(to_seconds(std::numeric_limits<Nanos>::max()), 9'223'372'036.854775807, 1e-5);
}

TEST(Units, FromSecondsRoundsTheExactValueAndRefusesWhatDoesNotFit) {
  EXPECT_EQ(from_seconds(1.5), Nanos{1'500'000'000});
  EXPECT_EQ(from_seconds(-0.25), Nanos{-250'000'000});
  EXPECT_EQ(from_seconds(2.4e-9), Nanos{2});
  EXPECT_EQ(from_seconds(2.6e-9), Nanos{3});
  // The double nearest 395.5015136935 lies just below the half nanosecond; 395.5015136935 * 1e9
  // rounds up to it in a double, so a plain product would give ...694.
  EXPECT_EQ(from_seconds(395.5015136935), Nanos{395'501'513'693});
  EXPECT_EQ(from_seconds(-395.5015136935), Nanos{-395'501'513'693});
  EXPECT_EQ(from_seconds(9.2e9), Nanos{9'200'000'000'000'000'000});
  EXPECT_EQ(from_seconds(-9.2e9), Nanos{-9'200'000'000'000'000'000});
  EXPECT_EQ(from_seconds(9.3e9), std::nullopt);
  EXPECT_EQ(from_seconds(-9.3e9), std::nullopt);
  EXPECT_EQ(from_seconds(std::numeric_limits<double>::quiet_NaN()), std::nullopt);
  EXPECT_EQ(from_seconds(std::numeric_limits<double>::infinity()), std::nullopt);
}

TEST(Units, LimitsAreAtLeastWhatTheContractAsks) {
  static_assert(kMaxShares >= 1'000'000);
  static_assert(kMaxCost >= 1'000'000.0);
  static_assert(kMaxClasses >= 1);
  SUCCEED();
}

TEST(Classes, NamesAndParsing) {
  EXPECT_EQ(class_name(0), "P1");
  EXPECT_EQ(class_name(2), "P3");
  EXPECT_EQ(class_name(7), "P8");
  EXPECT_EQ(parse_class_name("P1", 2), std::optional<ClassId>(0));
  EXPECT_EQ(parse_class_name("P3", 2), std::optional<ClassId>(2));
  EXPECT_EQ(parse_class_name("P4", 2), std::nullopt);
  EXPECT_EQ(parse_class_name("P0", 2), std::nullopt);
  EXPECT_EQ(parse_class_name("", 2), std::nullopt);
  EXPECT_EQ(parse_class_name("P8", 7), std::optional<ClassId>(7));
}

TEST(Errors, EveryErrcIsDescribed) {
  for (int e = 0; e <= static_cast<int>(Errc::unsupported_address); ++e) {
    EXPECT_FALSE(describe(static_cast<Errc>(e)).empty()) << e;
  }
}

}  // namespace
}  // namespace creditloop
