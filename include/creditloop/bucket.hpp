// creditloop/bucket.hpp: the fixed-point arithmetic of one token bucket.
//
// A bucket's state is one signed number, its exact value in atto-credits (1e-18 credit): the
// balance in nano-credits times 1e9, plus the fraction of a nano-credit that refill carries.
// Refill over `dt` nanoseconds at `rate` nano-credits per second adds exactly dt x rate of them,
// so that after any sequence of refills the balance (the value rounded down to a nano-credit)
// equals the exact rational value rounded down to the unit, with no drift and no division. At
// capacity the exact value is the capacity itself, whole nano-credits with no fraction. Debits
// and charges are whole nano-credits. These functions are pure: the caller owns the state and
// the clock.
//
// Cost: a refill is one 64 x 64 -> 128-bit multiply and a comparison with the capacity. Within
// the limits of units.hpp every product fits (a rate of at most 1e19 nano-credits per second, a
// gap of at most 2^64 ns), so there is no wide path; only a credit's instant divides, and in 64
// bits unless the debt is deep. Debt is held at kDeepestDebt (below).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "creditloop/units.hpp"

namespace creditloop {

__extension__ typedef unsigned __int128 Rate128;

/// A bucket's exact value in atto-credits: nano-credits x 1e9 plus the carried fraction.
__extension__ typedef __int128 Atto;

inline constexpr std::int64_t kAttoPerNano = 1'000'000'000;
inline constexpr Atto kAttoPerCredit = static_cast<Atto>(kNanoPerCredit) * kAttoPerNano;
/// The deepest debt a bucket holds, in atto-credits: -1.6e20 credits, which a charge-back never
/// reaches in practice (1.6e14 completions of the largest cost), from which even the top refill
/// (1e10 credits per second) needs 507 years to reach a credit, past the end of any clock that
/// starts at 0 or later. A charge that would go deeper leaves the bucket here, inside the 128
/// bits that hold it.
inline constexpr Atto kDeepestDebt =
    -static_cast<Atto>(16) * kAttoPerCredit * 10'000'000'000 * 1'000'000'000;

/// `nano` nano-credits and `fraction` (< 1e9) of one, as an exact value.
[[nodiscard]] constexpr Atto to_atto(Balance nano, std::uint64_t fraction = 0) noexcept {
  return static_cast<Atto>(nano) * kAttoPerNano + static_cast<Atto>(fraction);
}

/// A capacity or a cost (whole nano-credits, not negative) as an exact value: one unsigned
/// multiply, where a signed 128-bit one takes three.
[[nodiscard]] constexpr Atto to_atto_unsigned(std::uint64_t nano) noexcept {
  return static_cast<Atto>(static_cast<Rate128>(nano) * static_cast<std::uint64_t>(kAttoPerNano));
}

/// The balance in nano-credits: the exact value rounded down (towards minus infinity).
[[nodiscard]] constexpr Balance nano_of(Atto value) noexcept {
  const Atto whole = value / kAttoPerNano;  // rounded towards zero
  return static_cast<Balance>(whole * kAttoPerNano > value ? whole - 1 : whole);
}

/// The fraction of a nano-credit the value carries, in 1e-9 of one (< 1e9).
[[nodiscard]] constexpr std::uint64_t fraction_of(Atto value) noexcept {
  return static_cast<std::uint64_t>(value - static_cast<Atto>(nano_of(value)) * kAttoPerNano);
}

/// Brings `value` forward by `dt` nanoseconds at `rate` nano-credits per second, capped at
/// `cap`. Unsigned: the gap between two instants of the clock can exceed its positive half (from
/// before 0 to near its end). A value above `cap` (which no re-plan leaves) is kept as it is.
inline void refill(Atto& value, std::uint64_t dt, std::uint64_t rate, Atto cap) noexcept {
  if (value >= cap) return;
  const Rate128 added = static_cast<Rate128>(dt) * rate;  // < 2^128: both factors < 2^64
  value = added >= static_cast<Rate128>(cap - value) ? cap : value + static_cast<Atto>(added);
}

/// What take_behind() did.
enum class Taken : std::uint8_t {
  refused,    // nothing taken: refill first
  below_cap,  // the refill stays below the cap; the amount was simply taken
  at_cap,     // the refill reaches the cap: the later value is exactly cap - amount
};

/// Takes `amount` atto-credits (whole nano-credits) from `value` at an instant `dt` nanoseconds
/// after its last refill, without refilling it: `value` stays as of its last refill, holding
/// what a refill by `dt` turns into exactly the refill to the later instant followed by the debit
/// (docs/contract.md §4, "Charging behind the refill"). While that refill stays below `cap` the
/// two commute and the amount is simply taken; when it reaches the cap the later value is
/// `cap - amount`, stored as that minus the refill. `at` receives the value at the later instant,
/// after the debit. Refused, with `value` unchanged, when the refill over `dt` exceeds 2^120
/// atto-credits (years at the top rate), which would push the stored value out of its 128 bits,
/// or the value is above `cap`: refill first, then take the amount at `dt` 0. A charge may take
/// the value below kDeepestDebt: the caller holds it there (a debit of one credit never does).
[[nodiscard]] inline Taken take_behind(Atto& value, std::uint64_t dt, std::uint64_t rate, Atto cap,
                                       Atto amount, Atto& at) noexcept {
  const Rate128 added = static_cast<Rate128>(dt) * rate;
  const Atto room = cap - value;  // no overflow: value lies between kDeepestDebt and the cap
  // `room >= 0` rather than `> 0`: an empty room fails the second test anyway, and the sign
  // alone is one test of the high word, where `> 0` compared both halves.
  if (room >= 0 && added < static_cast<Rate128>(room)) {
    value -= amount;
    at = value + static_cast<Atto>(added);
    return Taken::below_cap;
  }
  if (room < 0 || (added >> 120) != 0) [[unlikely]] {
    return Taken::refused;
  }
  at = cap - amount;
  value = at - static_cast<Atto>(added);
  return Taken::at_cap;
}

/// Whether the bucket has a credit: a value of at least one whole credit.
[[nodiscard]] constexpr bool has_credit(Atto value) noexcept { return value >= kAttoPerCredit; }

namespace detail {
std::optional<Nanos> credit_instant_wide(Atto value, std::uint64_t rate, Nanos from) noexcept;
}  // namespace detail

/// The instant `value` has a credit if it refills at `rate` from instant `from` (`from` itself
/// if it has one already), stored in `at`; false if that instant lies beyond the clock's last
/// nanosecond, or never comes (rate 0: a plan scaled down to nothing). The cap is the caller's
/// to weigh: below one credit, no refill reaches a credit whatever the instant. Exact: at the
/// instant minus one nanosecond the refilled value is still short of a credit. This form rather
/// than an optional: GCC passes an optional through the stack and reads it back wider than it
/// wrote it, a store-forwarding stall that was a quarter of a re-filing's time.
[[nodiscard]] inline bool credit_instant(Atto value, std::uint64_t rate, Nanos from,
                                         Nanos& at) noexcept {
  if (value >= kAttoPerCredit) {
    at = from;
    return true;
  }
  // The smallest dt with dt x rate >= 1e18 - value: in 64 bits while the shortfall fits them
  // (a debt under 17 credits).
  const auto needed = static_cast<Rate128>(kAttoPerCredit - value);
  if (needed <= ~std::uint64_t{0} && rate != 0) {
    const auto needed64 = static_cast<std::uint64_t>(needed);
    const std::uint64_t dt = needed64 / rate + (needed64 % rate != 0 ? 1 : 0);
    return dt <= static_cast<std::uint64_t>(std::numeric_limits<Nanos>::max()) &&
           !__builtin_add_overflow(from, static_cast<Nanos>(dt), &at);
  }
  const std::optional<Nanos> wide = detail::credit_instant_wide(value, rate, from);
  if (!wide) return false;
  at = *wide;
  return true;
}

/// The same as an optional: nothing when the instant lies beyond the clock.
[[nodiscard]] inline std::optional<Nanos> credit_instant(Atto value, std::uint64_t rate,
                                                         Nanos from) noexcept {
  Nanos at = 0;
  if (!credit_instant(value, rate, from, at)) return std::nullopt;
  return at;
}

/// Nanoseconds of refill at `rate` until `value` has a credit (0 if it has one); the largest
/// Nanos when that lies beyond any clock or never comes (rate 0).
[[nodiscard]] inline Nanos time_to_credit(Atto value, std::uint64_t rate) noexcept {
  return credit_instant(value, rate, 0).value_or(std::numeric_limits<Nanos>::max());
}

}  // namespace creditloop
