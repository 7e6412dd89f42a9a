// The targets of docs/design.md, "A room that finds itself", on
// tools/scenarios/capacity_steps.json: the simulator's learned room in front of a backend whose
// capacity steps, in-process.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/backend_trace.hpp"

using json = nlohmann::json;

namespace {

using creditloop::test::example;
using creditloop::test::text_of;
using creditloop::test::trace_of;
using creditloop::test::TraceReading;

// The target of docs/design.md: a backend of 8, 16, 4 and 8 (8 s each) under a heavy tenant that
// always has work and a light one at 20 requests a second.
class CapacitySteps : public ::testing::Test {
 protected:
  static constexpr double kStep = 8;
  static constexpr double kSettle = 2;
  static constexpr double kService = 0.010;  // the mean service time of both tenants
  static constexpr std::array<double, 4> kCapacity{8, 16, 4, 8};
};

TEST_F(CapacitySteps, RoomWithinAQuarterOfCapacityFromTwoSecondsAfterEachStep) {
  const TraceReading r(trace_of(text_of(example("capacity_steps.json"))));
  for (std::size_t i = 0; i < kCapacity.size(); ++i) {
    const double from = static_cast<double>(i) * kStep;
    EXPECT_EQ(r.in_band(from + kSettle, from + kStep, kCapacity[i]), 1.0)
        << "step " << i << " (capacity " << kCapacity[i] << ")";
  }
}

TEST_F(CapacitySteps, ThroughputAtLeast95PerCentOfCapacityOutsideTheSettling) {
  const TraceReading r(trace_of(text_of(example("capacity_steps.json"))));
  for (std::size_t i = 0; i < kCapacity.size(); ++i) {
    const double from = static_cast<double>(i) * kStep + kSettle;
    const double to = static_cast<double>(i + 1) * kStep;
    const double served = static_cast<double>(r.completed_in(from, to));
    EXPECT_GE(served, 0.95 * (to - from) * kCapacity[i] / kService)
        << "step " << i << " (capacity " << kCapacity[i] << ")";
  }
}

// The light tenant's p99, arrival to completion, against the same arrivals through a hand-set
// room of the step's capacity (the slot model of that many slots), outside the settling.
TEST_F(CapacitySteps, LightTenantsP99WithinAQuarterOfAHandSetRoom) {
  const json scenario = example("capacity_steps.json");
  const TraceReading learned(trace_of(text_of(scenario)));
  for (std::size_t i = 0; i < kCapacity.size(); ++i) {
    json hand_set = scenario;
    hand_set["server"] = {{"slots", static_cast<int>(kCapacity[i])}};
    const TraceReading fixed(trace_of(text_of(hand_set)));
    const double from = static_cast<double>(i) * kStep + kSettle;
    const double to = static_cast<double>(i + 1) * kStep;
    const double p99 = learned.p99_latency("light", from, to);
    const double reference = fixed.p99_latency("light", from, to);
    EXPECT_GT(reference, 0);
    EXPECT_LE(p99, 1.25 * reference + 1e-9)
        << "step " << i << ": " << p99 << " s against " << reference << " s";
  }
}

}  // namespace
