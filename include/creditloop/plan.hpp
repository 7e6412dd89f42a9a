// creditloop/plan.hpp: classes and plans, as data.
//
// A configuration names how many metered classes there are (k, from 1 to kMaxClasses; their names
// are P1..Pk, highest first, and the unmetered class is P{k+1}) and the plans. A plan says, for
// each metered class it holds, a rate (credits per second, per share) and a burst (bucket capacity
// in credits, per share). A plan may hold no class at all: its participants only go out unmetered.
// The configuration is validated once, when a Core is built from it (errors by phase).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "creditloop/error.hpp"
#include "creditloop/units.hpp"

namespace creditloop {

/// Index of a class: 0 is P1 (highest), k-1 is Pk, k is the unmetered class P{k+1}.
using ClassId = std::uint8_t;

/// Index of a plan in Config::plans.
using PlanId = std::uint32_t;

struct ClassTerms {
  double rate = 0;   // credits per second, per share
  double burst = 0;  // bucket capacity in credits, per share
};

struct Plan {
  std::string name;
  /// Entry c describes class c (P{c+1}); an empty entry means the plan does not hold that class.
  std::array<std::optional<ClassTerms>, kMaxClasses> terms{};
};

struct Config {
  int classes = 2;  // k, the number of metered classes
  std::vector<Plan> plans;
};

/// The reference configuration: k = 2, `pro` holds P1 {2/s, 4} and P2 {5/s, 10}, `lite` holds P2.
[[nodiscard]] Config reference_config();

/// "P1".."P8". `c` may be the unmetered class.
[[nodiscard]] std::string class_name(ClassId c);

/// "P3" -> 2 for k = 2. Only P1..P{k+1} are known.
[[nodiscard]] std::optional<ClassId> parse_class_name(std::string_view name, int k) noexcept;

/// A refusal of a configuration: the error and a message naming the plan and class at fault.
struct ConfigProblem {
  Errc error;
  std::string message;
};

/// Nothing when `config` is valid; otherwise its first problem.
[[nodiscard]] std::optional<ConfigProblem> check(const Config& config);

}  // namespace creditloop
