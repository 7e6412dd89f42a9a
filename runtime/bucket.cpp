#include "creditloop/bucket.hpp"

#include <limits>

namespace creditloop::detail {
namespace {

constexpr std::uint64_t kUnit = static_cast<std::uint64_t>(kNanoPerCredit);
constexpr Rate128 kMaxNanos = static_cast<Rate128>(std::numeric_limits<Nanos>::max());

}  // namespace

// Reached when dt * rate does not fit 64 bits: a long idle gap or a rate beyond 64 bits.
void refill_wide(BucketState& b, Nanos dt, Rate128 rate, Balance cap) noexcept {
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

// Reached for debts of 8 credits or more: the smallest dt with
// floor((dt * rate + remainder) / 1e9) >= 1e9 - balance, in 128 bits.
Nanos time_to_credit_wide(const BucketState& b, Rate128 rate) noexcept {
  const Rate128 missing = static_cast<Rate128>(kNanoPerCredit - b.balance);  // > 0
  if (missing > kMaxNanos) return std::numeric_limits<Nanos>::max();
  const Rate128 needed = missing * kUnit - b.remainder;
  const Rate128 dt = (needed + rate - 1) / rate;
  return dt >= kMaxNanos ? std::numeric_limits<Nanos>::max() : static_cast<Nanos>(dt);
}

}  // namespace creditloop::detail
