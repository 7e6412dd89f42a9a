// creditloop/bucket.hpp: the fixed-point arithmetic of one token bucket.
//
// A bucket is a signed balance in nano-credits plus the remainder of its last refill division.
// Refill over `dt` nanoseconds at `rate` nano-credits per second adds floor((dt*rate + rem)/1e9)
// and keeps the new remainder, so that after any sequence of refills the balance equals the exact
// rational value rounded down to the unit, with no drift. At capacity the exact value is the
// capacity itself, so the remainder is dropped there. Debits and charges are whole units and do
// not touch the remainder. These functions are pure: the caller owns the state and the clock.
//
// Cost: refill is one 64x64 multiply and a division by a constant while rate x elapsed fits 64
// bits: 1.8 s at one credit per second, 1.8 ms at 10,000. Past that (high rates, gaps of seconds)
// the rate is split into whole credits per second and the rest, which keeps both products in 64
// bits for gaps up to 18 s at any rate up to 10^10 credits/s: three multiplies and two divisions
// by a constant. 128-bit arithmetic only beyond that, or when debt is deep.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "creditloop/units.hpp"

namespace creditloop {

__extension__ typedef unsigned __int128 Rate128;

struct BucketState {
  Balance balance = 0;  // nano-credits, the exact value rounded down
  std::uint64_t remainder =
      0;  // < 1e9: the fractional nano-credit carried by refill, in 1e-9 units
};

namespace detail {
void refill_wide(BucketState& b, std::uint64_t dt, Rate128 rate, Balance cap) noexcept;
std::optional<Nanos> credit_instant_wide(const BucketState& b, Rate128 rate, Nanos from) noexcept;

/// refill_wide on a copy: the caller's state, whose address is not taken, can stay in registers
/// on the usual paths instead of being stored for a call that rarely happens.
inline void refill_out_of_line(BucketState& b, std::uint64_t dt, Rate128 rate,
                               Balance cap) noexcept {
  BucketState wide = b;
  refill_wide(wide, dt, rate, cap);
  b = wide;
}
}  // namespace detail

/// Brings `b` forward by `dt` nanoseconds at `rate` nano-credits per second, capped at `cap`.
/// Unsigned: the gap between two instants of the clock can exceed its positive half (from
/// before 0 to near its end). Inline: a visit calls it for every bucket it reads.
inline void refill(BucketState& b, std::uint64_t dt, Rate128 rate, Balance cap) noexcept {
  if (b.balance >= cap) {
    b.remainder = 0;  // full (or above, after a capacity cut): the exact value has no fraction
    return;
  }
  if (dt == 0) return;
  constexpr auto kUnit = static_cast<std::uint64_t>(kNanoPerCredit);
  if (rate > ~std::uint64_t{0}) [[unlikely]] {
    detail::refill_out_of_line(b, dt, rate, cap);
    return;
  }
  const auto rate64 = static_cast<std::uint64_t>(rate);
  std::uint64_t added = 0;
  std::uint64_t fraction = 0;
  if (!__builtin_mul_overflow(dt, rate64, &fraction) &&
      !__builtin_add_overflow(fraction, b.remainder, &fraction)) {
    added = fraction / kUnit;  // a division by a constant: a multiply and a shift
  } else {
    // rate = whole * 1e9 + part, so floor((dt * rate + rem) / 1e9) is
    // dt * whole + floor((dt * part + rem) / 1e9), exactly, with no 128-bit product: part is
    // below 1e9, so dt * part + rem fits for gaps up to 18 s.
    const std::uint64_t whole = rate64 / kUnit;
    const std::uint64_t part = rate64 % kUnit;
    if (__builtin_mul_overflow(dt, whole, &added) || __builtin_mul_overflow(dt, part, &fraction) ||
        __builtin_add_overflow(fraction, b.remainder, &fraction) ||
        __builtin_add_overflow(added, fraction / kUnit, &added)) [[unlikely]] {
      detail::refill_out_of_line(b, dt, rate, cap);
      return;
    }
  }
  b.balance += static_cast<Balance>(added);
  b.remainder = fraction % kUnit;
  if (b.balance >= cap) {
    b.balance = cap;
    b.remainder = 0;
  }
}

/// What take_behind() did.
enum class Taken : std::uint8_t {
  refused,    // nothing taken: refill first
  below_cap,  // the refill stays below the cap; the amount was simply taken
  at_cap,     // the refill reaches the cap: the later value is exactly cap - amount
};

/// Takes `amount` nano-credits from `b` at an instant `dt` nanoseconds after its last refill,
/// without refilling it: `b` stays as of its last refill, holding the value that a refill by `dt`
/// turns into exactly the refill to the later instant followed by the debit (docs/contract.md
/// §4, "Charging behind the refill"). While that refill stays below `cap` the two commute and
/// the amount is simply taken; when it reaches the cap the later value is `cap - amount`, stored
/// as that minus the refill. `at` receives the balance at the later instant, after the debit.
/// Refused, with `b` unchanged, when the refill needs more than 64-bit arithmetic (a gap of more
/// than 18 s at the highest rates, a rate beyond 64 bits) or the balance is above `cap`: refill
/// first, then take the amount at `dt` 0. The same arithmetic as refill(), so the same values.
[[nodiscard]] inline Taken take_behind(BucketState& b, std::uint64_t dt, Rate128 rate, Balance cap,
                                       std::int64_t amount, Balance& at) noexcept {
  constexpr auto kUnit = static_cast<std::uint64_t>(kNanoPerCredit);
  if (dt == 0) {
    b.balance -= amount;
    at = b.balance;
    return Taken::below_cap;
  }
  if (rate > ~std::uint64_t{0}) [[unlikely]] {
    return Taken::refused;
  }
  const auto rate64 = static_cast<std::uint64_t>(rate);
  // The refill over dt is dt x rate in 1e-9 nano-credits: `whole` nano-credits and `part`
  // (< 1e9) of one. Split as refill() splits it when the product overflows, since the gap here
  // runs from the last refill, which this leaves where it was.
  std::uint64_t whole = 0;
  std::uint64_t part = 0;
  if (std::uint64_t product = 0; !__builtin_mul_overflow(dt, rate64, &product)) {
    whole = product / kUnit;
    part = product % kUnit;
  } else {
    std::uint64_t fraction = 0;
    if (__builtin_mul_overflow(dt, rate64 / kUnit, &whole) ||
        __builtin_mul_overflow(dt, rate64 % kUnit, &fraction) ||
        __builtin_add_overflow(whole, fraction / kUnit, &whole)) [[unlikely]] {
      return Taken::refused;
    }
    part = fraction % kUnit;
  }
  if (b.balance < cap) {
    // part + remainder < 2e9: at most one more whole nano-credit.
    const Balance refilled = b.balance + static_cast<Balance>(whole) +
                             static_cast<Balance>((part + b.remainder) / kUnit);
    if (refilled < cap) {
      b.balance -= amount;
      at = refilled - amount;
      return Taken::below_cap;
    }
  } else if (b.balance > cap) [[unlikely]] {
    return Taken::refused;  // above its cap, which no re-plan leaves: refill() keeps such a balance
  }
  // cap - amount - (whole + part / 1e9), exactly: the whole part rounded down, the fraction
  // carried.
  b.balance = cap - amount - static_cast<Balance>(whole) - (part != 0 ? 1 : 0);
  b.remainder = part != 0 ? kUnit - part : 0;
  at = cap - amount;
  return Taken::at_cap;
}

/// Whether the bucket has a credit: balance of at least one whole credit.
[[nodiscard]] constexpr bool has_credit(const BucketState& b) noexcept {
  return b.balance >= kNanoPerCredit;
}

/// The instant `b` has a credit if it refills at `rate` from instant `from` (`from` itself if it
/// has one already), stored in `at`; false if that instant lies beyond the clock's last
/// nanosecond, or never comes (rate 0: a plan scaled down to nothing). The cap is the caller's to
/// weigh: below one credit, no refill reaches a credit whatever the instant. Exact: at the instant
/// minus one nanosecond the refilled balance is still short of a credit. This form rather than an
/// optional: GCC passes an optional through the stack and reads it back wider than it wrote it, a
/// store-forwarding stall that was a quarter of a re-filing's time.
[[nodiscard]] inline bool credit_instant(const BucketState& b, Rate128 rate, Nanos from,
                                         Nanos& at) noexcept {
  if (b.balance >= kNanoPerCredit) {
    at = from;
    return true;
  }
  // Smallest dt with floor((dt * rate + remainder) / 1e9) >= 1e9 - balance. A debt under 8
  // credits keeps the numerator within 64 bits.
  if (b.balance > -8 * kNanoPerCredit && rate <= ~std::uint64_t{0}) {
    if (rate == 0) [[unlikely]] {
      return false;  // a plan scaled to nothing: never
    }
    const auto missing = static_cast<std::uint64_t>(kNanoPerCredit - b.balance);
    const std::uint64_t needed = missing * static_cast<std::uint64_t>(kNanoPerCredit) - b.remainder;
    const auto rate64 = static_cast<std::uint64_t>(rate);
    const std::uint64_t dt = needed / rate64 + (needed % rate64 != 0 ? 1 : 0);
    return dt <= static_cast<std::uint64_t>(std::numeric_limits<Nanos>::max()) &&
           !__builtin_add_overflow(from, static_cast<Nanos>(dt), &at);
  }
  const std::optional<Nanos> wide = detail::credit_instant_wide(b, rate, from);
  if (!wide) return false;
  at = *wide;
  return true;
}

/// The same as an optional: nothing when the instant lies beyond the clock.
[[nodiscard]] inline std::optional<Nanos> credit_instant(const BucketState& b, Rate128 rate,
                                                         Nanos from) noexcept {
  Nanos at = 0;
  if (!credit_instant(b, rate, from, at)) return std::nullopt;
  return at;
}

/// Nanoseconds of refill at `rate` until `b` has a credit (0 if it has one); the largest Nanos
/// when that lies beyond any clock or never comes (rate 0).
[[nodiscard]] inline Nanos time_to_credit(const BucketState& b, Rate128 rate) noexcept {
  return credit_instant(b, rate, 0).value_or(std::numeric_limits<Nanos>::max());
}

}  // namespace creditloop
