#include "creditloop/bucket.hpp"

#include <limits>

namespace creditloop::detail {
namespace {

constexpr std::uint64_t kUnit = static_cast<std::uint64_t>(kNanoPerCredit);
constexpr Rate128 kMaxNanos = static_cast<Rate128>(std::numeric_limits<Nanos>::max());

}  // namespace

// Reached when dt * rate does not fit 64 bits: a long idle gap or a rate beyond 64 bits.
void refill_wide(BucketState& b, std::uint64_t dt, Rate128 rate, Balance cap) noexcept {
  // If the gap is at least the time to fill, the bucket is full; otherwise
  // dt * rate < (cap - balance) * 1e9, which fits 128 bits for any balance the limits allow.
  const Balance missing = cap - b.balance;  // > 0: refill() returned early otherwise
  const Rate128 needed = static_cast<Rate128>(missing) * kUnit - b.remainder;
  const Rate128 fill_time = (needed + rate - 1) / rate;
  const auto udt = static_cast<Rate128>(dt);
  if (udt >= fill_time) {
    b.balance = cap;
    b.remainder = 0;
    return;
  }
  const Rate128 numerator = udt * rate + b.remainder;
  b.balance += static_cast<Balance>(numerator / kUnit);
  b.remainder = static_cast<std::uint64_t>(numerator % kUnit);
  if (b.balance >= cap) {
    b.balance = cap;
    b.remainder = 0;
  }
}

// Reached for debts of 8 credits or more, in 128 bits, and for rate 0.
std::optional<Nanos> credit_instant_wide(const BucketState& b, Rate128 rate, Nanos from) noexcept {
  if (rate == 0) return std::nullopt;  // a plan scaled to nothing: no refill ever comes
  const Rate128 missing = static_cast<Rate128>(kNanoPerCredit - b.balance);  // > 0
  // Past 1e29 units of debt the wait exceeds 1e29 * 1e9 / 1e19 ns even at the highest rate the
  // limits allow: beyond the clock. Below it, missing * 1e9 fits 128 bits.
  constexpr Rate128 kHopeless = static_cast<Rate128>(100'000'000'000'000) * 1'000'000'000'000'000;
  if (missing > kHopeless) return std::nullopt;
  const Rate128 needed = missing * kUnit - b.remainder;
  const Rate128 dt = (needed + rate - 1) / rate;
  // A wait longer than the whole clock is beyond it from any start; checking that first keeps
  // the signed sum below from overflowing.
  if (dt > 2 * kMaxNanos) return std::nullopt;
  __extension__ typedef __int128 Wide;
  const Wide at = static_cast<Wide>(from) + static_cast<Wide>(dt);
  if (at > static_cast<Wide>(std::numeric_limits<Nanos>::max())) return std::nullopt;
  return static_cast<Nanos>(at);
}

}  // namespace creditloop::detail
