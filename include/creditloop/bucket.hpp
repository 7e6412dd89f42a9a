// creditloop/bucket.hpp: the fixed-point arithmetic of one token bucket.
//
// A bucket is a signed balance in nano-credits plus the remainder of its last refill division.
// Refill over `dt` nanoseconds at `rate` nano-credits per second adds floor((dt*rate + rem)/1e9)
// and keeps the new remainder, so that after any sequence of refills the balance equals the exact
// rational value rounded down to the unit, with no drift. At capacity the exact value is the
// capacity itself, so the remainder is dropped there. Debits and charges are whole units and do
// not touch the remainder. These functions are pure: the caller owns the state and the clock.
//
// Cost: refill is one 64x64 multiply and a division by a constant in the common case (the product
// fits 64 bits); 128-bit arithmetic only after long idle periods or at extreme rates.
#pragma once

#include <cstdint>

#include "creditloop/units.hpp"

namespace creditloop {

__extension__ typedef unsigned __int128 Rate128;

struct BucketState {
  Balance balance = 0;  // nano-credits, the exact value rounded down
  std::uint64_t remainder =
      0;  // < 1e9: the fractional nano-credit carried by refill, in 1e-9 units
};

/// Brings `b` forward by `dt` >= 0 nanoseconds at `rate` nano-credits per second, capped at `cap`.
void refill(BucketState& b, Nanos dt, Rate128 rate, Balance cap) noexcept;

/// Whether the bucket has a credit: balance of at least one whole credit.
[[nodiscard]] constexpr bool has_credit(const BucketState& b) noexcept {
  return b.balance >= kNanoPerCredit;
}

/// Nanoseconds of refill at `rate` until `b` has a credit (0 if it has one). Saturates at the
/// largest Nanos for debts so deep that the instant lies beyond any clock.
[[nodiscard]] Nanos time_to_credit(const BucketState& b, Rate128 rate) noexcept;

}  // namespace creditloop
