#include "creditloop/bucket.hpp"

#include <limits>

namespace creditloop::detail {

// Reached for a shortfall beyond 64 bits (a debt of 17 credits or more), in 128 bits, and for
// rate 0.
std::optional<Nanos> credit_instant_wide(Atto value, std::uint64_t rate, Nanos from) noexcept {
  if (rate == 0) return std::nullopt;  // a plan scaled to nothing: no refill ever comes
  // > 0, and at most 1.6e38 + 1e18 (kDeepestDebt), so adding rate - 1 stays within 128 bits.
  const auto needed = static_cast<Rate128>(kAttoPerCredit - value);
  const Rate128 dt = (needed + rate - 1) / rate;
  // A wait longer than the whole clock is beyond it from any start; checking that first keeps
  // the signed sum below from overflowing.
  constexpr auto kMaxNanos = static_cast<Rate128>(std::numeric_limits<Nanos>::max());
  if (dt > 2 * kMaxNanos) return std::nullopt;
  const Atto at = static_cast<Atto>(from) + static_cast<Atto>(dt);
  if (at > static_cast<Atto>(std::numeric_limits<Nanos>::max())) return std::nullopt;
  return static_cast<Nanos>(at);
}

}  // namespace creditloop::detail
