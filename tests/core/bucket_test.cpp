// The fixed-point arithmetic of one bucket (bucket.hpp), against exact integer arithmetic done
// independently here: the value after refilling for T ns at R nano-credits/s from (B, r) is
// B + floor((T*R + r) / 1e9) nano-credits with (T*R + r) mod 1e9 carried, until it reaches
// capacity; bucket.hpp holds both as one number, B x 1e9 + r atto-credits.
#include "creditloop/bucket.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>

#include "harness.hpp"

namespace creditloop {
namespace {

using test::str;

constexpr std::uint64_t kThird = 333'333'333;  // 1/3 credit per second, taken to 9 decimals
constexpr Nanos kMaxNanos = std::numeric_limits<Nanos>::max();
// The largest capacity and refill a bucket can have within the documented limits (units.hpp).
const Balance kTopCap =
    static_cast<Balance>(kMaxShares) * static_cast<std::int64_t>(kMaxBurst) * kNanoPerCredit;
const std::uint64_t kTopRate = std::uint64_t{kMaxShares} * static_cast<std::uint64_t>(kMaxRate) *
                               static_cast<std::uint64_t>(kNanoPerCredit);

Atto big_cap() { return to_atto(test::credits(1'000'000'000)); }

// The nano-credits and the carried fraction of a value, as the arithmetic above states them.
struct Split {
  Balance nano;
  std::uint64_t fraction;
};

// The exact split after `total_ns` ns of refill from `start` nano-credits, ignoring capacity.
Split exact_after(Balance start, Rate128 total_ns, std::uint64_t rate) {
  const Rate128 product = total_ns * rate;
  return {start + static_cast<Balance>(product / 1'000'000'000u),
          static_cast<std::uint64_t>(product % 1'000'000'000u)};
}

TEST(Bucket, TheValueSplitsIntoNanoCreditsRoundedDownAndAFraction) {
  EXPECT_EQ(str(nano_of(to_atto(-3, 999'999'999))), "-3");
  EXPECT_EQ(fraction_of(to_atto(-3, 999'999'999)), 999'999'999u);
  EXPECT_EQ(str(nano_of(to_atto(-1, 0))), "-1");
  EXPECT_EQ(fraction_of(to_atto(-1, 0)), 0u);
  EXPECT_EQ(str(nano_of(-1)), "-1");  // one atto-credit of debt is a whole nano-credit short
  EXPECT_EQ(fraction_of(-1), 999'999'999u);
  EXPECT_EQ(str(nano_of(to_atto(7, 5))), "7");
  EXPECT_EQ(to_atto_unsigned(7), to_atto(7));
}

TEST(Bucket, HasCreditIsAWholeCreditExactly) {
  EXPECT_FALSE(has_credit(to_atto(kNanoPerCredit - 1, 999'999'999)));
  EXPECT_TRUE(has_credit(to_atto(kNanoPerCredit)));
  EXPECT_FALSE(has_credit(to_atto(-test::credits(5))));
}

TEST(Bucket, ZeroElapsedChangesNothing) {
  Atto b = to_atto(123, 456);
  refill(b, 0, kThird, big_cap());
  EXPECT_EQ(str(nano_of(b)), "123");
  EXPECT_EQ(fraction_of(b), 456u);
}

TEST(Bucket, TinyRefillsEqualOneBigRefillAndTheExactFloor) {
  // 1/3 credit/s one nanosecond at a time: each step adds 0.333333333 units, so almost every
  // step adds nothing and only the carried fraction makes the balance move at all.
  constexpr std::int64_t kSteps = 2'000'000;
  Atto tiny = 0;
  for (std::int64_t t = 1; t <= kSteps; ++t) {
    refill(tiny, 1, kThird, big_cap());
    if (t % 99'991 == 0 || t == kSteps) {
      const Split e = exact_after(0, static_cast<Rate128>(t), kThird);
      ASSERT_EQ(str(nano_of(tiny)), str(e.nano)) << "after " << t << " ns";
      ASSERT_EQ(fraction_of(tiny), e.fraction) << "after " << t << " ns";
    }
  }
  Atto once = 0;
  refill(once, kSteps, kThird, big_cap());
  EXPECT_EQ(once, tiny);
  // floor(2e6 * 333333333 / 1e9) = floor(666666.666) = 666666, 0.666e9 carried.
  EXPECT_EQ(str(nano_of(once)), "666666");
  EXPECT_EQ(fraction_of(once), 666'000'000u);
}

TEST(Bucket, RandomStepsNeverDriftFromTheExactValue) {
  std::mt19937_64 rng(20240611);
  for (const std::uint64_t rate :
       {std::uint64_t{1}, std::uint64_t{7}, kThird, std::uint64_t{999'999'999},
        std::uint64_t{1'000'000'001}, std::uint64_t{123'456'789'123}}) {
    const Balance start = -test::credits(1'000'000);
    Atto b = to_atto(start);
    Rate128 total = 0;
    for (int i = 0; i < 20'000; ++i) {
      const Nanos dt = static_cast<Nanos>(rng() % (i % 10 == 0 ? 5'000'000'000ull : 1'000ull));
      refill(b, dt, rate, big_cap());
      total += static_cast<Rate128>(dt);
      const Split e = exact_after(start, total, rate);
      if (to_atto(e.nano, e.fraction) >= big_cap()) break;
      ASSERT_EQ(str(nano_of(b)), str(e.nano)) << "rate " << rate;
      ASSERT_EQ(fraction_of(b), e.fraction);
    }
  }
}

TEST(Bucket, DebtClimbsAtTheRateThenStopsAtCapacity) {
  // -5 credits at 1 credit/s: -2.5 after 2.5 s, and capacity 3 reached 8 s after the start.
  Atto b = to_atto(-test::credits(5));
  refill(b, 2'500'000'000, 1'000'000'000, to_atto(test::credits(3)));
  EXPECT_EQ(str(nano_of(b)), "-2500000000");
  refill(b, 5'499'999'999, 1'000'000'000, to_atto(test::credits(3)));
  EXPECT_EQ(str(nano_of(b)), "2999999999");
  refill(b, 10 * test::kSec, 1'000'000'000, to_atto(test::credits(3)));
  EXPECT_EQ(b, to_atto(test::credits(3)));
}

TEST(Bucket, CappingAtCapacityDropsTheFraction) {
  // 3 units/s, capacity 10 units. From 9: half a second adds 1.5 units, which reaches the
  // capacity: the exact value is the capacity itself, so the 0.5 unit carried must go.
  Atto b = to_atto(9);
  refill(b, 500'000'000, 3, to_atto(10));
  EXPECT_EQ(b, to_atto(10));
  // A debit of one unit, then 0.2 s adds 0.6 unit: 9 with 0.6 carried. Had the 0.5 survived
  // the cap, 1.1 units would have made it 10.
  b -= to_atto(1);
  refill(b, 200'000'000, 3, to_atto(10));
  EXPECT_EQ(str(nano_of(b)), "9");
  EXPECT_EQ(fraction_of(b), 600'000'000u);
}

TEST(Bucket, ExactlyReachingCapacityWithAFractionLeftIsCapacity) {
  // From 8 units with 0.9 carried, 1.3 more units make 10.2 exact: capped at 10, nothing carried.
  Atto b = to_atto(8, 900'000'000);
  refill(b, 1'300'000'000, 1, to_atto(10));
  EXPECT_EQ(b, to_atto(10));
}

TEST(Bucket, TimeToCreditIsExactAtTheBoundary) {
  // 1/3 credit/s from zero: the credit needs T*333333333 >= 1e18, T = ceil(3000000003.000000003).
  const Atto zero = 0;
  EXPECT_EQ(time_to_credit(zero, kThird), 3'000'000'004);
  Atto before = zero;
  refill(before, 3'000'000'003, kThird, big_cap());
  EXPECT_FALSE(has_credit(before));
  Atto at = zero;
  refill(at, 3'000'000'004, kThird, big_cap());
  EXPECT_TRUE(has_credit(at));
}

TEST(Bucket, TimeToCreditMatchesTheCeilingFormulaAndRefill) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20'000; ++i) {
    const Balance balance =
        static_cast<Balance>(rng() % 2'000'000'000'000ull) - test::credits(1000) + 1;
    const Balance nano = balance < kNanoPerCredit ? balance : kNanoPerCredit - 1;
    const std::uint64_t fraction = rng() % 1'000'000'000u;
    const Atto b = to_atto(nano, fraction);
    const std::uint64_t rate = 1 + rng() % (i % 2 ? 1'000'000'000'000ull : 5000u);
    // Smallest T with b + floor((T*rate + r)/1e9) >= 1e9: T*rate >= (1e9 - b)*1e9 - r.
    const Rate128 need = static_cast<Rate128>(kNanoPerCredit - nano) * 1'000'000'000u -
                         static_cast<Rate128>(fraction);
    const Rate128 expected = (need + rate - 1) / rate;
    if (expected > static_cast<Rate128>(kMaxNanos)) continue;
    const Nanos t = time_to_credit(b, rate);
    ASSERT_EQ(static_cast<Rate128>(t) == expected, true)
        << "balance " << str(nano) << " fraction " << fraction << " rate " << rate << " got " << t;
    Atto early = b;
    refill(early, static_cast<std::uint64_t>(t) - 1, rate, big_cap());
    ASSERT_FALSE(has_credit(early));
    Atto on_time = b;
    refill(on_time, static_cast<std::uint64_t>(t), rate, big_cap());
    ASSERT_TRUE(has_credit(on_time));
  }
}

TEST(Bucket, TimeToCreditIsZeroWithACredit) {
  EXPECT_EQ(time_to_credit(to_atto(kNanoPerCredit), 1), 0);
  EXPECT_EQ(time_to_credit(to_atto(test::credits(7), 5), kThird), 0);
}

TEST(Bucket, TimeToCreditJustInsideTheClock) {
  // At 1 unit/s, -8 credits need 9e18 ns: it fits in Nanos (max ~9.22e18).
  EXPECT_EQ(time_to_credit(to_atto(-test::credits(8)), 1), 9'000'000'000'000'000'000);
  // A debt of 17 credits and more takes the 128-bit division: 1 credit/s, 18 s.
  EXPECT_EQ(time_to_credit(to_atto(-test::credits(17)), 1'000'000'000), 18'000'000'000);
}

TEST(Bucket, TimeToCreditSaturatesForAbsurdDebt) {
  // -8.3 credits at 1 unit/s need 9.3e18 ns, past the largest Nanos.
  EXPECT_EQ(time_to_credit(to_atto(-8'300'000'000), 1), kMaxNanos);
  EXPECT_EQ(time_to_credit(kDeepestDebt, 1), kMaxNanos);
  EXPECT_EQ(time_to_credit(kDeepestDebt, kTopRate), kMaxNanos);
}

TEST(Bucket, TheDeepestDebtIsBeyondTheClockAtTheTopRate) {
  // From kDeepestDebt the top refill needs more than the clock's positive half: a bucket held
  // there by the floor answers every question as it would from any deeper debt.
  const Rate128 needed = static_cast<Rate128>(kAttoPerCredit - kDeepestDebt);
  EXPECT_TRUE(needed / kTopRate > static_cast<Rate128>(kMaxNanos));
  EXPECT_EQ(credit_instant(kDeepestDebt, kTopRate, 0), std::nullopt);
}

TEST(Bucket, CreditInstantBeyondTheClockIsNothing) {
  // 0 balance at 1 unit/s: a credit needs 1e18 ns. From 1e18 it lands at 2e18; from the last
  // nanosecond that still reaches it, exactly at the end; one nanosecond later, never.
  const Atto empty = 0;
  EXPECT_EQ(credit_instant(empty, 1, 1'000'000'000'000'000'000), 2'000'000'000'000'000'000);
  const Nanos last_start = kMaxNanos - 1'000'000'000'000'000'000;
  EXPECT_EQ(credit_instant(empty, 1, last_start), kMaxNanos);
  EXPECT_EQ(credit_instant(empty, 1, last_start + 1), std::nullopt);
  // Deep debt through the 128-bit path: the same boundary.
  const Atto deep = to_atto(-test::credits(20));  // needs 21e18 ns at 1 unit/s: never
  EXPECT_EQ(credit_instant(deep, 1, 0), std::nullopt);
  // 21 credits at 1e9 units/s = 21 s, from a negative clock.
  EXPECT_EQ(credit_instant(deep, 1'000'000'000, -5), 21'000'000'000 - 5);
  // A credit in hand: the instant is now.
  EXPECT_EQ(credit_instant(to_atto(kNanoPerCredit), 1, 42), 42);
}

TEST(Bucket, HugeElapsedTimeIsExactOrCapped) {
  // The largest dt at the tiniest rate: 9223372036854775807 units of 1e-9 added.
  const Balance debt = -test::credits(1'000'000'000) * 10'000'000'000;  // -1e28 nano-credits
  Atto slow = to_atto(debt);
  refill(slow, static_cast<std::uint64_t>(kMaxNanos), 1, big_cap());
  EXPECT_EQ(str(nano_of(slow)), str(debt + 9'223'372'036));
  EXPECT_EQ(fraction_of(slow), 854'775'807u);

  // 10 credits/s for the largest dt: 92233720368547758070 units, nothing carried, still in debt.
  Atto medium = to_atto(debt);
  refill(medium, static_cast<std::uint64_t>(kMaxNanos), 10'000'000'000u, big_cap());
  EXPECT_EQ(str(nano_of(medium)), str(debt + static_cast<Balance>(kMaxNanos) * 10));
  EXPECT_EQ(fraction_of(medium), 0u);

  // The highest refill there is: exact from the deepest debt over the largest positive gap, and
  // capped from zero over the largest gap of all (2^64 - 1 ns, a product past 2^127).
  const auto positive = static_cast<std::uint64_t>(kMaxNanos);
  Atto fast = kDeepestDebt;
  refill(fast, positive, kTopRate, to_atto(kTopCap));
  EXPECT_TRUE(fast == kDeepestDebt + static_cast<Atto>(static_cast<Rate128>(positive) * kTopRate));
  const std::uint64_t longest = ~std::uint64_t{0};
  Atto from_zero = 0;
  refill(from_zero, longest, kTopRate, to_atto(kTopCap));
  EXPECT_EQ(from_zero, to_atto(kTopCap));
}

TEST(Bucket, TopRateOneNanosecondAtATime) {
  // The top refill is a whole number of units per nanosecond: nothing is ever carried.
  ASSERT_TRUE(kTopRate % 1'000'000'000u == 0);
  const Balance per_ns = static_cast<Balance>(kTopRate / 1'000'000'000u);
  Atto b = 0;
  for (int i = 0; i < 1000; ++i) refill(b, 1, kTopRate, to_atto(kTopCap));
  EXPECT_EQ(b, to_atto(per_ns * 1000));
}

// docs/contract.md §4, "Charging behind the refill": a debit taken behind the refill, then any
// later refill, gives exactly what refilling first, debiting, then refilling the rest gives, at
// every cap, debt, rate and gap, whether or not the refill reaches the cap; the value it reports
// for the later instant is the refilled one less the debit.
TEST(Bucket, TakingBehindTheRefillEqualsRefillingFirst) {
  std::mt19937_64 rng(41);
  const std::uint64_t rates[] = {1, kThird, 2'000'000'000, 30'000'000'000'000, kTopRate};
  int accepted = 0;
  int capped = 0;
  for (int i = 0; i < 200'000; ++i) {
    const std::uint64_t rate = rates[rng() % 5];
    const Balance cap_nano = test::credits(1 + static_cast<std::int64_t>(rng() % 4)) +
                             static_cast<Balance>(rng() % 1000);
    const Atto cap = to_atto(cap_nano);
    // From deep debt to the cap itself, with and without a carried fraction.
    Balance balance = cap_nano - static_cast<Balance>(rng() % (rng() % 2 ? 3'000'000'000u : 20u));
    if (rng() % 8 == 0) balance = cap_nano;
    if (rng() % 8 == 0) balance = -test::credits(static_cast<std::int64_t>(rng() % 20));
    const std::uint64_t fraction = balance >= cap_nano ? 0 : rng() % 1'000'000'000;
    const Atto start = to_atto(balance, fraction);
    const std::uint64_t gaps[] = {0, 1, rng() % 1000, rng() % 2'000'000'000,
                                  rng() % 40'000'000'000};
    const std::uint64_t dt = gaps[rng() % 5];
    const std::uint64_t later = gaps[rng() % 5];
    const Atto amount = to_atto(static_cast<Balance>(rng() % (rng() % 2 ? 3'000'000'000u : 3u)));

    Atto first = start;
    refill(first, dt, rate, cap);
    first -= amount;
    const Atto expected_at = first;
    refill(first, later, rate, cap);

    Atto behind = start;
    Atto at = 0;
    const Taken taken = take_behind(behind, dt, rate, cap, amount, at);
    ASSERT_NE(taken, Taken::refused) << "case " << i;  // gaps of seconds fit 2^120 easily
    ++accepted;
    Atto probe = start;
    refill(probe, dt, rate, cap);
    // At the cap exactly when the refill reaches it.
    ASSERT_EQ(taken == Taken::at_cap, probe >= cap) << "case " << i;
    if (taken == Taken::at_cap) ++capped;
    ASSERT_EQ(str(nano_of(at)), str(nano_of(expected_at))) << "case " << i;
    ASSERT_TRUE(at == expected_at) << "case " << i;
    refill(behind, dt + later, rate, cap);
    ASSERT_TRUE(behind == first) << "case " << i;
  }
  EXPECT_EQ(accepted, 200'000);
  EXPECT_GT(capped, 20'000);
}

TEST(Bucket, TakingBehindIsRefusedOnlyPastItsRange) {
  // Above the cap (no re-plan leaves it there), or a refill beyond 2^120 atto-credits, which
  // would push the stored value out of its 128 bits: refused, and nothing changes.
  Atto above = to_atto(11);
  Atto at = 0;
  EXPECT_EQ(take_behind(above, 5, 1, to_atto(10), to_atto(1), at), Taken::refused);
  EXPECT_EQ(above, to_atto(11));
  Atto full = to_atto(test::credits(3));
  const std::uint64_t years = std::uint64_t{1} << 63;  // about 292 years
  EXPECT_EQ(take_behind(full, years, kTopRate, to_atto(test::credits(3)), to_atto(1), at),
            Taken::refused);
  EXPECT_EQ(full, to_atto(test::credits(3)));
  // Far into debt and not reaching the cap, the debit is simply taken.
  Atto deep = kDeepestDebt + kAttoPerCredit;
  EXPECT_EQ(take_behind(deep, 0, 1, to_atto(10), kAttoPerCredit, at), Taken::below_cap);
  EXPECT_EQ(deep, kDeepestDebt);
}

}  // namespace
}  // namespace creditloop
