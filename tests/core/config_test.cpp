// docs/contract.md §1 and §5: a configuration is refused when a class count, rate or burst is out
// of bounds; check() names the error, the plan and the class, and Core(config) throws with it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "harness.hpp"

namespace creditloop::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A valid plan "base", and "gold" whose P2 terms are under test.
Config gold_p2(double rate, double burst) {
  return make_config(2, {make_plan("base", {{0, {1, 1}}, {1, {1, 1}}}),
                         make_plan("gold", {{0, {1, 1}}, {1, {rate, burst}}})});
}

void expect_refused(const Config& config, Errc error, const std::string& what) {
  const std::optional<ConfigProblem> problem = check(config);
  ASSERT_TRUE(problem.has_value()) << what;
  EXPECT_EQ(problem->error, error) << what << ": " << problem->message;
  EXPECT_FALSE(problem->message.empty());
  try {
    Core core(config);
    ADD_FAILURE() << what << ": Core accepted the configuration";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).empty(), false);
  }
}

void expect_names_gold_p2(const Config& config, const std::string& what) {
  const std::optional<ConfigProblem> problem = check(config);
  ASSERT_TRUE(problem.has_value()) << what;
  EXPECT_NE(problem->message.find("gold"), std::string::npos) << problem->message;
  EXPECT_NE(problem->message.find("P2"), std::string::npos) << problem->message;
  try {
    Core core(config);
    ADD_FAILURE() << what;
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("gold"), std::string::npos) << message;
    EXPECT_NE(message.find("P2"), std::string::npos) << message;
  }
}

TEST(Config, ReferenceConfigIsValidAndAsSpecified) {
  const Config c = reference_config();
  EXPECT_FALSE(check(c).has_value());
  EXPECT_EQ(c.classes, 2);
  Core core(c);
  const std::optional<PlanId> pro = core.find_plan("pro");
  const std::optional<PlanId> lite = core.find_plan("lite");
  ASSERT_TRUE(pro && lite);
  EXPECT_TRUE(core.plan_holds(*pro, 0));
  EXPECT_TRUE(core.plan_holds(*pro, 1));
  EXPECT_FALSE(core.plan_holds(*lite, 0));
  EXPECT_TRUE(core.plan_holds(*lite, 1));
  EXPECT_EQ(core.find_plan("gold"), std::nullopt);
  EXPECT_EQ(core.classes(), 2);
  EXPECT_EQ(core.unmetered(), 2);
  // pro: P1 {2, 4}, P2 {5, 10}; lite: P2 {5, 10}.
  const Plan& p = c.plans[*pro];
  ASSERT_TRUE(p.terms[0] && p.terms[1]);
  EXPECT_EQ(p.terms[0]->rate, 2);
  EXPECT_EQ(p.terms[0]->burst, 4);
  EXPECT_EQ(p.terms[1]->rate, 5);
  EXPECT_EQ(p.terms[1]->burst, 10);
  const Plan& l = c.plans[*lite];
  EXPECT_FALSE(l.terms[0]);
  ASSERT_TRUE(l.terms[1]);
  EXPECT_EQ(l.terms[1]->rate, 5);
  EXPECT_EQ(l.terms[1]->burst, 10);
}

TEST(Config, PlanHoldingNoClassIsValid) {
  EXPECT_FALSE(check(make_config(2, {make_plan("free", {})})).has_value());
  EXPECT_FALSE(check(make_config(1, {})).has_value());
}

TEST(Config, ClassCountOutsideOneToSevenIsRefused) {
  for (const int k : {0, -1, kMaxClasses + 1, 100}) {
    expect_refused(make_config(k, {}), Errc::bad_classes, "classes " + std::to_string(k));
  }
  for (const int k : {1, kMaxClasses}) {
    EXPECT_FALSE(check(make_config(k, {make_plan("p", {{k - 1, {1, 1}}})})).has_value()) << k;
  }
}

TEST(Config, PlanHoldingAnUnknownClassIsRefused) {
  // k = 2: P3 is the unmetered class and has no bucket; P4 does not exist.
  expect_refused(make_config(2, {make_plan("gold", {{2, {1, 1}}})}), Errc::unknown_class, "P3");
  expect_refused(make_config(2, {make_plan("gold", {{6, {1, 1}}})}), Errc::unknown_class, "P7");
}

TEST(Config, RateNotFiniteAndPositiveIsRefused) {
  const double above = std::nextafter(kMaxRate, kInf);
  for (const double rate : {0.0, -0.0, -1.0, kNaN, kInf, -kInf, 4e-10, above, 2 * kMaxRate}) {
    const std::string what = "rate " + std::to_string(rate);
    expect_refused(gold_p2(rate, 1), Errc::bad_rate, what);
    expect_names_gold_p2(gold_p2(rate, 1), what);
  }
}

TEST(Config, RateAtTheLimitsIsAccepted) {
  EXPECT_FALSE(check(gold_p2(kMaxRate, 1)).has_value());
  EXPECT_FALSE(check(gold_p2(1e-9, 1)).has_value());
  EXPECT_FALSE(check(gold_p2(6e-10, 1)).has_value()) << "rounds to 1e-9, positive";
}

TEST(Config, BurstBelowOneOrNotFiniteIsRefused) {
  const double above = std::nextafter(kMaxBurst, kInf);
  for (const double burst : {0.0, 0.5, 0.999999, -1.0, kNaN, kInf, -kInf, above}) {
    const std::string what = "burst " + std::to_string(burst);
    expect_refused(gold_p2(1, burst), Errc::bad_burst, what);
    expect_names_gold_p2(gold_p2(1, burst), what);
  }
}

TEST(Config, BurstAtTheLimitsIsAccepted) {
  EXPECT_FALSE(check(gold_p2(1, 1)).has_value());
  EXPECT_FALSE(check(gold_p2(1, kMaxBurst)).has_value());
}

TEST(Config, ProblemInAnyPlanIsFound) {
  // The bad plan comes after valid ones, in P1.
  const Config c = make_config(2, {make_plan("a", {{0, {1, 1}}}), make_plan("b", {{1, {1, 1}}}),
                                   make_plan("late", {{0, {kNaN, 1}}})});
  const std::optional<ConfigProblem> problem = check(c);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->error, Errc::bad_rate);
  EXPECT_NE(problem->message.find("late"), std::string::npos) << problem->message;
  EXPECT_NE(problem->message.find("P1"), std::string::npos) << problem->message;
}

TEST(Classes, NamesAndParsing) {
  EXPECT_EQ(class_name(0), "P1");
  EXPECT_EQ(class_name(2), "P3");
  EXPECT_EQ(class_name(7), "P8");
  EXPECT_EQ(parse_class_name("P1", 2), std::optional<ClassId>(0));
  EXPECT_EQ(parse_class_name("P3", 2), std::optional<ClassId>(2));
  EXPECT_EQ(parse_class_name("P4", 2), std::nullopt);
  EXPECT_EQ(parse_class_name("P0", 2), std::nullopt);
  EXPECT_EQ(parse_class_name("", 2), std::nullopt);
  EXPECT_EQ(parse_class_name("P8", 7), std::optional<ClassId>(7));
}

}  // namespace
}  // namespace creditloop::test
