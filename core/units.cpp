#include "creditloop/units.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

namespace creditloop {

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
  // Exact: the double's own binary value times 1e9, rounded once, half away from zero. A plain
  // seconds * 1e9 rounds the product first, and can land a nanosecond off.
  __extension__ typedef unsigned __int128 Wide;
  if (!std::isfinite(seconds)) return std::nullopt;
  const bool negative = std::signbit(seconds);
  const double magnitude = std::fabs(seconds);
  if (magnitude == 0) return Nanos{0};
  int exp = 0;
  const double frac = std::frexp(magnitude, &exp);  // magnitude = frac * 2^exp, frac in [0.5, 1)
  const auto mantissa = static_cast<std::uint64_t>(std::ldexp(frac, 53));
  // magnitude * 1e9 = mantissa * 1e9 * 2^(exp - 53), exactly; mantissa * 1e9 < 2^83.
  const Wide scaled = static_cast<Wide>(mantissa) * static_cast<Wide>(kNanosPerSecond);
  const int shift = exp - 53;
  Wide nanos = 0;
  if (shift >= 0) {
    if (shift > 40) return std::nullopt;  // at least 2^83: far beyond Nanos
    nanos = scaled << shift;
  } else if (-shift < 100) {  // else below a quarter of a nanosecond: 0
    const int down = -shift;
    const Wide q = scaled >> down;
    const Wide rem = scaled - (q << down);
    nanos = rem >= (static_cast<Wide>(1) << (down - 1)) ? q + 1 : q;
  }
  const Wide limit = (static_cast<Wide>(1) << 63) - (negative ? 0 : 1);
  if (nanos > limit) return std::nullopt;
  if (!negative) return static_cast<Nanos>(nanos);
  return nanos == limit ? std::numeric_limits<Nanos>::min() : -static_cast<Nanos>(nanos);
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
