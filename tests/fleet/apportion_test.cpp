// The fleet rule (fleet/apportion.hpp): what the simulator's store computes, and what
// the Redis function must compute from the same entries.
#include "apportion.hpp"

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace creditloop::fleet {
namespace {

constexpr std::int64_t kTtl = 750;  // 3 x a 250 ms epoch

TEST(FleetApportion, ShareIsOwnDemandOverTheTotalRoundedDown) {
  std::vector<DemandEntry> entries;
  EXPECT_EQ(report(entries, 1, 1, 1000, kTtl).millionths, kWhole);  // alone: the whole plan
  const Apportioned a = report(entries, 2, 2, 1001, kTtl);
  EXPECT_EQ(a.total, 3u);
  EXPECT_EQ(a.live, 2u);
  EXPECT_EQ(a.millionths, 666'666u);  // 2/3 rounded down, not up to 666'667
  EXPECT_EQ(report(entries, 1, 1, 1002, kTtl).millionths, 333'333u);
}

TEST(FleetApportion, ALaterReportReplacesTheServersEntry) {
  std::vector<DemandEntry> entries;
  (void)report(entries, 1, 10, 0, kTtl);
  (void)report(entries, 2, 10, 0, kTtl);
  const Apportioned a = report(entries, 1, 30, 100, kTtl);
  EXPECT_EQ(entries.size(), 2u);
  EXPECT_EQ(a.total, 40u);
  EXPECT_EQ(a.millionths, 750'000u);
}

TEST(FleetApportion, ZeroTotalDemandSplitsEvenlyOverLiveEntries) {
  std::vector<DemandEntry> entries;
  (void)report(entries, 1, 0, 0, kTtl);
  (void)report(entries, 2, 0, 0, kTtl);
  const Apportioned a = report(entries, 3, 0, 0, kTtl);
  EXPECT_EQ(a.total, 0u);
  EXPECT_EQ(a.live, 3u);
  EXPECT_EQ(a.millionths, 333'333u);
  // Zero demand beside demand elsewhere gets nothing.
  (void)report(entries, 1, 5, 1, kTtl);
  EXPECT_EQ(report(entries, 2, 0, 2, kTtl).millionths, 0u);
}

TEST(FleetApportion, EntriesOlderThanTheTtlAreDroppedAndNoLonger) {
  std::vector<DemandEntry> entries;
  (void)report(entries, 1, 100, 0, kTtl);
  // Exactly the TTL old: still counted.
  Apportioned a = report(entries, 2, 100, kTtl, kTtl);
  EXPECT_EQ(a.live, 2u);
  EXPECT_EQ(a.millionths, 500'000u);
  // One millisecond more: server 1's entry is gone, and server 2 has the whole plan.
  a = report(entries, 2, 100, kTtl + 1, kTtl);
  EXPECT_EQ(a.live, 1u);
  EXPECT_EQ(a.total, 100u);
  EXPECT_EQ(a.millionths, kWhole);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].server, 2u);
}

TEST(FleetApportion, EntriesStampedAheadCountWithinTheAllowanceOnly) {
  std::vector<DemandEntry> entries{{1, 100, 10'000 + kMaxAheadMs}, {3, 100, 10'000 + 3'600'000}};
  Apportioned a = report(entries, 2, 100, 10'000, kTtl);
  EXPECT_EQ(a.live, 2u);  // server 1, exactly the allowance ahead, and server 2
  EXPECT_EQ(a.millionths, 500'000u);
  entries.push_back({4, 100, 10'001 + kMaxAheadMs});
  a = report(entries, 2, 100, 10'000, kTtl);
  EXPECT_EQ(a.live, 2u);
  ASSERT_EQ(entries.size(), 2u);
  // Server 1's entry stays until it is a TTL old, counted from its stamp.
  a = report(entries, 2, 100, 10'000 + kMaxAheadMs + kTtl + 1, kTtl);
  EXPECT_EQ(a.live, 1u);
  std::vector<Heartbeat> live{{1, 10'000 + kMaxAheadMs}, {3, 10'001 + kMaxAheadMs}};
  EXPECT_EQ(heartbeat(live, 2, 10'000, kTtl), 2u);
}

TEST(FleetApportion, HeartbeatCountsLiveServersAndForgetsSilentOnes) {
  std::vector<Heartbeat> live;
  EXPECT_EQ(heartbeat(live, 1, 0, kTtl), 1u);
  EXPECT_EQ(heartbeat(live, 2, 10, kTtl), 2u);
  EXPECT_EQ(heartbeat(live, 1, 10 + kTtl, kTtl), 2u);  // server 2's is exactly TTL old
  EXPECT_EQ(heartbeat(live, 1, 11 + kTtl, kTtl), 1u);
  EXPECT_EQ(even_fraction(3), 333'333u);
  EXPECT_EQ(even_fraction(0), kWhole);
}

TEST(FleetApportion, FractionsFromOneStateSumToAtMostAWholePlan) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 2000; ++round) {
    const auto servers = static_cast<std::uint32_t>(1 + rng() % 40);
    std::vector<std::uint64_t> demand(servers);
    for (auto& d : demand) d = rng() % 4 == 0 ? 0 : rng() % (round % 2 == 0 ? 10 : 1'000'000);
    std::vector<DemandEntry> entries;
    for (std::uint32_t s = 0; s < servers; ++s) (void)report(entries, s, demand[s], 0, kTtl);
    // Every server reads the same, complete state: its fraction now.
    std::uint64_t sum = 0;
    for (std::uint32_t s = 0; s < servers; ++s)
      sum += report(entries, s, demand[s], 0, kTtl).millionths;
    EXPECT_LE(sum, kWhole) << "round " << round;
    // Rounding down loses less than one millionth per server.
    EXPECT_GT(sum + servers, kWhole) << "round " << round;
  }
}

TEST(FleetApportion, DemandsAboveTheLimitAreClipped) {
  std::vector<DemandEntry> entries;
  (void)report(entries, 1, ~std::uint64_t{0}, 0, kTtl);
  Apportioned a = report(entries, 2, kMaxDemand, 0, kTtl);
  EXPECT_EQ(a.total, 2 * kMaxDemand);
  EXPECT_EQ(a.millionths, 500'000u);
  // Read back too: an entry above the limit, written by anything but a server, counts as it.
  entries.push_back({3, ~std::uint64_t{0}, 0});
  a = report(entries, 2, kMaxDemand, 0, kTtl);
  EXPECT_EQ(a.total, 3 * kMaxDemand);
  EXPECT_EQ(a.millionths, 333'333u);
}

}  // namespace
}  // namespace creditloop::fleet
