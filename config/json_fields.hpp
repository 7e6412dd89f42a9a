// The reading rules of creditloop-server's JSON file, for every part of it: each field is read
// through a Fields, which refuses a value of the wrong type or range, and what is left unread is
// a misspelling ("tenants[0].sharez: unknown field"). The tenant file (tenant_file.hpp) and the
// server's own fields (tools/server/config.cpp) read alike because they read through this.
#pragma once

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace creditloop::config_file {

/// A refused field: "path: why". The message names the field and never holds a key.
struct BadField : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void refuse(const std::string& path, const std::string& why);

/// `path.key`, or `key` at the top level.
[[nodiscard]] std::string join(const std::string& path, std::string_view key);

/// An object whose every key must be read: finish() refuses whatever is left.
class Fields {
 public:
  Fields(const nlohmann::json& object, std::string path);

  /// The value at `key`, or null when it is absent or JSON null; `key` counts as read.
  const nlohmann::json* find(std::string_view key);

  [[nodiscard]] std::string path(std::string_view key) const { return join(path_, key); }

  /// A number from `min` to `max` (`fallback` when absent).
  double number(std::string_view key, double fallback, double min, double max);
  /// A whole number from `min` to `max` (`fallback` when absent). `3.0` is not one: JSON
  /// writes a whole number without a fraction, and a fraction in a count is a mistake.
  std::uint64_t integer(std::string_view key, std::uint64_t fallback, std::uint64_t min,
                        std::uint64_t max);
  std::string text(std::string_view key, std::string fallback, bool required = false);

  /// Refuses the first key that nothing read.
  void finish() const;

 private:
  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

}  // namespace creditloop::config_file
