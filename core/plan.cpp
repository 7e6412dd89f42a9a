#include "creditloop/plan.hpp"

#include <cmath>
#include <set>

namespace creditloop {

Config reference_config() {
  Config c;
  c.classes = 2;
  Plan pro{"pro", {}};
  pro.terms[0] = ClassTerms{2, 4};
  pro.terms[1] = ClassTerms{5, 10};
  Plan lite{"lite", {}};
  lite.terms[1] = ClassTerms{5, 10};
  c.plans = {pro, lite};
  return c;
}

std::string class_name(ClassId c) {
  // Built by append: GCC 12 warns falsely (-Wrestrict) on "P" + std::to_string(...).
  std::string name(1, 'P');
  name += static_cast<char>('1' + c);
  return name;
}

std::optional<ClassId> parse_class_name(std::string_view name, int k) noexcept {
  if (name.size() != 2 || name[0] != 'P' || name[1] < '1' || name[1] > '9') return std::nullopt;
  const int index = name[1] - '1';
  if (index > k) return std::nullopt;
  return static_cast<ClassId>(index);
}

std::optional<ConfigProblem> check(const Config& config) {
  if (config.classes < 1 || config.classes > kMaxClasses) {
    return ConfigProblem{Errc::bad_classes, "classes: " + std::to_string(config.classes) +
                                                " is outside 1.." + std::to_string(kMaxClasses)};
  }
  std::set<std::string, std::less<>> names;
  for (const Plan& plan : config.plans) {
    const std::string where = "plan '" + plan.name + "'";
    if (!names.insert(plan.name).second) {
      return ConfigProblem{Errc::unknown_plan, where + ": defined twice"};
    }
    for (int c = 0; c < kMaxClasses; ++c) {
      const auto& terms = plan.terms[static_cast<std::size_t>(c)];
      if (!terms) continue;
      const std::string at = where + " class " + class_name(static_cast<ClassId>(c));
      if (c >= config.classes) {
        return ConfigProblem{
            Errc::unknown_class,
            at + ": there are only " + std::to_string(config.classes) + " metered classes"};
      }
      const auto rate = to_nano_credits(terms->rate, kMaxRate);
      if (!rate || *rate <= 0) {
        return ConfigProblem{Errc::bad_rate, at + ": rate " + std::to_string(terms->rate) +
                                                 " must be finite, positive (at 9 decimals) and "
                                                 "at most 10000"};
      }
      const auto burst = to_nano_credits(terms->burst, kMaxBurst);
      if (!burst || *burst < kNanoPerCredit) {
        return ConfigProblem{Errc::bad_burst, at + ": burst " + std::to_string(terms->burst) +
                                                  " must be finite, at least 1 and at most "
                                                  "10000"};
      }
    }
  }
  return std::nullopt;
}

}  // namespace creditloop
