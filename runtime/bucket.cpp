#include "creditloop/bucket.hpp"

#include <limits>

namespace creditloop {
namespace {

constexpr std::uint64_t kUnit = static_cast<std::uint64_t>(kNanoPerCredit);

}  // namespace

void refill(BucketState& b, Nanos dt, Rate128 rate, Balance cap) noexcept {
  if (b.balance >= cap) {
    // Full (or above after a capacity cut): the exact value is the capacity, no fraction.
    b.remainder = 0;
    return;
  }
  if (dt <= 0) return;
  const auto udt = static_cast<std::uint64_t>(dt);
  std::uint64_t product = 0;
  // Fast path: the numerator fits 64 bits (short gaps, ordinary rates), and the division by the
  // constant 1e9 compiles to a multiply and a shift.
  if (rate <= std::numeric_limits<std::uint64_t>::max() &&
      !__builtin_mul_overflow(udt, static_cast<std::uint64_t>(rate), &product) &&
      !__builtin_add_overflow(product, b.remainder, &product)) {
    b.balance += static_cast<Balance>(product / kUnit);
    b.remainder = product % kUnit;
  } else {
    // Long gap: if the gap is at least the time to fill, the bucket is full; otherwise
    // dt * rate < (cap - balance) * 1e9, which fits 128 bits for any balance the limits allow.
    const Balance missing = cap - b.balance;  // > 0
    const Rate128 needed = static_cast<Rate128>(missing) * kUnit - b.remainder;
    const Rate128 fill_time = (needed + rate - 1) / rate;
    if (static_cast<Rate128>(udt) >= fill_time) {
      b.balance = cap;
      b.remainder = 0;
      return;
    }
    const Rate128 numerator = static_cast<Rate128>(udt) * rate + b.remainder;
    b.balance += static_cast<Balance>(numerator / kUnit);
    b.remainder = static_cast<std::uint64_t>(numerator % kUnit);
  }
  if (b.balance >= cap) {
    b.balance = cap;
    b.remainder = 0;
  }
}

Nanos time_to_credit(const BucketState& b, Rate128 rate) noexcept {
  if (b.balance >= kNanoPerCredit) return 0;
  // Smallest dt with floor((dt*rate + rem) / 1e9) >= 1e9 - balance.
  // Fast path: a debt of less than 8 credits keeps the numerator within 64 bits.
  if (b.balance > -8 * kNanoPerCredit && rate <= std::numeric_limits<std::uint64_t>::max()) {
    const auto missing64 = static_cast<std::uint64_t>(kNanoPerCredit - b.balance);
    const std::uint64_t needed64 = missing64 * kUnit - b.remainder;
    const auto rate64 = static_cast<std::uint64_t>(rate);
    const std::uint64_t dt64 = needed64 / rate64 + (needed64 % rate64 != 0 ? 1 : 0);
    return dt64 > static_cast<std::uint64_t>(std::numeric_limits<Nanos>::max())
               ? std::numeric_limits<Nanos>::max()
               : static_cast<Nanos>(dt64);
  }
  const Rate128 missing = static_cast<Rate128>(kNanoPerCredit - b.balance);  // > 0
  constexpr Rate128 kSaturate = static_cast<Rate128>(std::numeric_limits<Nanos>::max());
  if (missing > kSaturate) return std::numeric_limits<Nanos>::max();
  const Rate128 needed = missing * kUnit - b.remainder;
  const Rate128 dt = (needed + rate - 1) / rate;
  return dt >= kSaturate ? std::numeric_limits<Nanos>::max() : static_cast<Nanos>(dt);
}

}  // namespace creditloop
