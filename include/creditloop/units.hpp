// creditloop/units.hpp: time, credits and the documented limits.
//
// Time is a signed count of nanoseconds of a monotonic clock, always passed in by the caller.
// Credits are fixed point in nano-credits (1e-9 credit): rates, bursts and costs are taken to 9
// decimal places, rounded to the nearest unit. Each limit is checked where a value enters (config
// validation, registration, completion), and a value above it is rejected with an error:
// clang-format off
//   shares                        1 .. kMaxShares         1,000,000
//   scale, millionths of a plan   0 .. kWholePlan         1,000,000
//   rate, credits/s per share     (0, kMaxRate]           10,000 (at least 1e-9 after rounding)
//   burst, credits per share      [1, kMaxBurst]          10,000
//   cost, credits per request     [0, kMaxCost]           1,000,000
//   metered classes               1 .. kMaxClasses        7
//   participants registered       kMaxParticipants        16,777,216 at once
//   requests in flight            kMaxInFlight            16,777,216 at once
// clang-format on
//
// Why: docs/design.md#numbers
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace creditloop {

/// Nanoseconds of a monotonic clock. The core never reads a clock: every call that depends on time
/// takes `now` of this type. A `now` earlier than one already seen is treated as the later one.
using Nanos = std::int64_t;

/// One credit in fixed-point units.
inline constexpr std::int64_t kNanoPerCredit = 1'000'000'000;
inline constexpr std::int64_t kNanosPerSecond = 1'000'000'000;

inline constexpr std::uint32_t kMaxShares = 1'000'000;
/// A participant's fraction of its plan (Core::scale), in millionths: the whole plan, which every
/// participant starts at, and the most a scale may be.
inline constexpr std::uint32_t kWholePlan = 1'000'000;
inline constexpr double kMaxRate = 10'000.0;
inline constexpr double kMaxBurst = 10'000.0;
inline constexpr double kMaxCost = 1'000'000.0;
/// kMaxCost in nano-credits: the bound of every *_nano cost argument.
inline constexpr std::int64_t kMaxCostNano = static_cast<std::int64_t>(kMaxCost) * kNanoPerCredit;
inline constexpr int kMaxClasses = 7;
inline constexpr std::uint32_t kMaxParticipants = 1u << 24;
/// Requests dispatched and not yet completed. The runtime counts it against its room; an embedder
/// of the core alone keeps its own room below it.
inline constexpr std::uint32_t kMaxInFlight = 1u << 24;

/// A balance in nano-credits. 128 bits: debt from charge-back has no bound but the process's life.
__extension__ typedef __int128 Balance;

/// Converts a credit amount to nano-credits, rounding to the nearest unit. Returns nothing when the
/// value is not finite, negative, or above `limit` credits. Callers check their own lower bounds.
/// Inline: a completion's cost arrives as a double and is converted here, once per completion.
[[nodiscard]] inline std::optional<std::int64_t> to_nano_credits(double credits,
                                                                 double limit) noexcept {
  if (!__builtin_isfinite(credits) || credits < 0 || credits > limit) return std::nullopt;
  // Limits are at most 1e6 credits = 1e15 units, well inside the 2^53 integers a double holds
  // exactly, so the nearest unit is found without drift. Rounded half up by hand, as llround
  // would (the value is not negative): the fraction a truncation leaves is exact in a double.
  const double units = credits * static_cast<double>(kNanoPerCredit);
  auto whole = static_cast<std::int64_t>(units);
  if (units - static_cast<double>(whole) >= 0.5) ++whole;
  return whole;
}

/// A balance in credits, for display and traces only (never for decisions).
[[nodiscard]] double to_credits(Balance nano) noexcept;

/// An instant or a duration in seconds: for display, reports and traces, never for decisions.
[[nodiscard]] double to_seconds(Nanos t) noexcept;

/// Seconds as nanoseconds: the double's exact value, rounded to the nearest (halves away from
/// zero). Returns nothing when the value is not finite or does not fit Nanos (about 292 years
/// either way).
[[nodiscard]] std::optional<Nanos> from_seconds(double seconds) noexcept;

/// A balance's exact decimal digits in nano-credits ("-1500000000"): the standard library
/// cannot print a 128-bit integer. For messages and tests.
[[nodiscard]] std::string to_decimal(Balance nano);

}  // namespace creditloop
