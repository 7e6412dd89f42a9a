#pragma once
// Reading a field of a JSON input the way every tool here refuses a bad one: naming the field and
// quoting what it held.

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "creditloop/units.hpp"

#include "refusal.hpp"

namespace creditloop::tools {

/// ", got VALUE", the value cut to 40 characters: the end of a refusal's message.
inline std::string got(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return ", got " + s;
}

/// A whole number in [lo, hi], or a Refusal naming `where`. 3 and 3.0 are whole; 2.5, -1, "3"
/// and true are not.
inline std::uint64_t whole(const nlohmann::json& v, const std::string& where, std::uint64_t lo,
                           std::uint64_t hi) {
  std::optional<std::uint64_t> n;
  if (v.is_number_unsigned()) {
    n = v.get<std::uint64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^64 exactly is the first double that no longer fits.
    if (std::isfinite(d) && d >= 0 && std::floor(d) == d && d < 18446744073709551616.0) {
      n = static_cast<std::uint64_t>(d);
    }
  }
  if (!n || *n < lo || *n > hi) {
    refuse(where, "must be a whole number from " + std::to_string(lo) + " to " +
                      std::to_string(hi) + got(v));
  }
  return *n;
}

/// A `classes` field: ["P1", ..., "Pk"], k from 1 to kMaxClasses, in order. Returns k, or a
/// Refusal naming `where` or the entry at fault.
inline int metered_classes(const nlohmann::json& v, const std::string& where) {
  if (!v.is_array() || v.empty() || v.size() > creditloop::kMaxClasses) {
    refuse(where, "must be [\"P1\", ..., \"Pk\"] with k from 1 to " +
                      std::to_string(creditloop::kMaxClasses) + got(v));
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string want = "P" + std::to_string(i + 1);
    if (!v[i].is_string() || v[i].get<std::string>() != want) {
      refuse(where + "[" + std::to_string(i) + "]",
             "must be \"" + want + "\" (classes are P1..Pk in order)" + got(v[i]));
    }
  }
  return static_cast<int>(v.size());
}

}  // namespace creditloop::tools
