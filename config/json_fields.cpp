#include "json_fields.hpp"

#include <cmath>
#include <sstream>

namespace creditloop::config_file {

void refuse(const std::string& path, const std::string& why) { throw BadField(path + ": " + why); }

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

Fields::Fields(const nlohmann::json& object, std::string path)
    : object_(object), path_(std::move(path)) {
  if (!object_.is_object()) refuse(path_.empty() ? "(top level)" : path_, "must be an object");
}

const nlohmann::json* Fields::find(std::string_view key) {
  read_.emplace(key);
  const auto it = object_.find(key);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

double Fields::number(std::string_view key, double fallback, double min, double max) {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) refuse(path(key), "must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < min || x > max) {
    std::ostringstream why;
    why << "must be between " << min << " and " << max << ", got " << x;
    refuse(path(key), why.str());
  }
  return x;
}

std::uint64_t Fields::integer(std::string_view key, std::uint64_t fallback, std::uint64_t min,
                              std::uint64_t max) {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<std::int64_t>() < 0)) {
    refuse(path(key),
           "must be a whole number from " + std::to_string(min) + " to " + std::to_string(max));
  }
  const std::uint64_t x = v->get<std::uint64_t>();
  if (x < min || x > max) {
    refuse(path(key), "must be from " + std::to_string(min) + " to " + std::to_string(max) +
                          ", got " + std::to_string(x));
  }
  return x;
}

std::string Fields::text(std::string_view key, std::string fallback, bool required) {
  const nlohmann::json* v = find(key);
  if (v == nullptr) {
    if (required) refuse(path(key), "is required");
    return fallback;
  }
  if (!v->is_string()) refuse(path(key), "must be a string");
  return v->get<std::string>();
}

void Fields::finish() const {
  for (const auto& [key, value] : object_.items()) {
    if (read_.count(key) == 0) refuse(join(path_, key), "unknown field");
  }
}

}  // namespace creditloop::config_file
