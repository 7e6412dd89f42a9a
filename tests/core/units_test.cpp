// units.hpp: costs, rates and bursts taken to 9 decimals as nano-credits (rounded like
// llround), instants in seconds for display and from a configuration, and the documented limits
// against what the contract asks.
#include "creditloop/units.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>

namespace creditloop {
namespace {

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

}  // namespace
}  // namespace creditloop
