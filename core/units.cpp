#include "creditloop/units.hpp"

#include <cmath>

namespace creditloop {

std::optional<std::int64_t> to_nano_credits(double credits, double limit) noexcept {
  if (!std::isfinite(credits) || credits < 0 || credits > limit) return std::nullopt;
  // Limits are at most 1e6 credits = 1e15 units, well inside the 2^53 integers a double holds
  // exactly, so the nearest unit is found without drift. Rounded half up by hand, as llround
  // would (the value is not negative): the fraction a truncation leaves is exact in a double.
  // This runs once per completion, and the libm call was most of its cost.
  const double units = credits * static_cast<double>(kNanoPerCredit);
  auto whole = static_cast<std::int64_t>(units);
  if (units - static_cast<double>(whole) >= 0.5) ++whole;
  return whole;
}

double to_credits(Balance nano) noexcept {
  // Split first so that balances beyond 2^53 units lose only the sub-unit digits.
  const Balance whole = nano / kNanoPerCredit;
  const Balance frac = nano % kNanoPerCredit;
  return static_cast<double>(whole) +
         static_cast<double>(frac) / static_cast<double>(kNanoPerCredit);
}

double to_seconds(Nanos t) noexcept {
  // Split as to_credits does, so that the whole seconds are converted exactly.
  return static_cast<double>(t / kNanosPerSecond) +
         static_cast<double>(t % kNanosPerSecond) / static_cast<double>(kNanosPerSecond);
}

std::optional<Nanos> from_seconds(double seconds) noexcept {
  if (!std::isfinite(seconds)) return std::nullopt;
  const double nanos = std::round(seconds * static_cast<double>(kNanosPerSecond));
  // -2^63 and 2^63 are exact doubles; every double in [-2^63, 2^63) converts without overflow.
  constexpr double kLimit = 9'223'372'036'854'775'808.0;
  if (nanos < -kLimit || nanos >= kLimit) return std::nullopt;
  return static_cast<Nanos>(nanos);
}

std::string to_decimal(Balance nano) {
  if (nano == 0) return "0";
  const bool negative = nano < 0;
  std::string digits;
  while (nano != 0) {
    const int digit = static_cast<int>(nano % 10);  // negative for a negative balance
    digits.insert(digits.begin(), static_cast<char>('0' + (digit < 0 ? -digit : digit)));
    nano /= 10;
  }
  return negative ? "-" + digits : digits;
}

}  // namespace creditloop
