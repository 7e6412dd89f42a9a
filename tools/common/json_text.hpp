#pragma once
// Writing JSON text by hand, for the tools whose output is too large or too hot to build as a
// nlohmann::json value first (the simulator's trace, its pictures, the replay's report): strings
// quoted and escaped as JSON, integers in decimal without a locale or an allocation of their own.

#include <charconv>
#include <concepts>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "wide_int.hpp"

namespace creditloop::tools {

// `s` as a JSON string, quotes included. Invalid UTF-8 is replaced, never thrown over: a name
// from a file must not end a run.
inline std::string json_string(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Any unsigned type up to 64 bits, so that a narrower one is not ambiguous with the U128 one.
template <std::unsigned_integral T>
requires(sizeof(T) <= sizeof(std::uint64_t)) void append_uint(std::string& out, T v) {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, r.ptr);
}

// std::to_chars has no 128-bit overload; the core's balances and sums need one.
inline void append_uint(std::string& out, U128 v) {
  char digits[40];
  std::size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + static_cast<int>(v % 10));
    v /= 10;
  } while (v != 0);
  while (n > 0) out += digits[--n];
}

inline void append_int(std::string& out, std::int64_t v) {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, r.ptr);
}

}  // namespace creditloop::tools
