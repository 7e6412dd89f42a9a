// The core against the reference model (tests/model) on long seeded operation sequences, one
// test per shape. A failure prints the seed and the first divergence with the operations before
// it. To replay: CREDITLOOP_SEED=<seed> --gtest_filter=Differential.<Shape> makes <seed> the
// first sequence of every test (without it, each test starts at its own offset from a fixed
// base). CREDITLOOP_DIFF_SCALE=<n> runs n times as many sequences, for a longer soak.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/differential.hpp"

namespace creditloop::model {
namespace {

std::uint64_t first_seed(std::uint64_t offset) {
  const char* env = std::getenv("CREDITLOOP_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 0) : 20240601 + offset;
}

int scaled(int sequences) {
  const char* env = std::getenv("CREDITLOOP_DIFF_SCALE");
  const long scale = env != nullptr ? std::strtol(env, nullptr, 0) : 1;
  return sequences * static_cast<int>(scale > 0 ? scale : 1);
}

/// Runs `sequences` seeded sequences of shape `o`; stops at the first divergence.
DiffReport run_many(const DiffOptions& o, std::uint64_t offset, int sequences) {
  DiffReport total;
  const int n = scaled(sequences);
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = first_seed(offset) + static_cast<std::uint64_t>(i);
    SeededSource source(seed);
    const DiffReport r = run_differential(o, source);
    total.steps += r.steps;
    total.turns += r.turns;
    total.dispatches += r.dispatches;
    total.completions += r.completions;
    total.refusals += r.refusals;
    total.scales += r.scales;
    total.out_above_turn += r.out_above_turn;
    total.unmetered += r.unmetered;
    total.charged += r.charged;
    total.uncharged += r.uncharged;
    if (r.divergence) {
      ADD_FAILURE() << "seed " << seed << "\n" << *r.divergence;
      total.divergence = r.divergence;
      break;
    }
  }
  // Not vacuous: the sequences did dispatch and complete work.
  EXPECT_GT(total.dispatches, 0u);
  EXPECT_GT(total.completions, 0u);
  std::printf(
      "  %zu steps, %zu turns, %zu dispatches (%zu above the turn's class, %zu "
      "unmetered), %zu completions (%zu charged, %zu not), %zu refusals, %zu scales\n",
      total.steps, total.turns, total.dispatches, total.out_above_turn, total.unmetered,
      total.completions, total.charged, total.uncharged, total.refusals, total.scales);
  return total;
}

TEST(Differential, OneParticipant) {
  DiffOptions o;
  o.classes = 2;
  o.steps = 400;
  o.initial_participants = 1;
  o.max_participants = 1;
  run_many(o, 1'000'000, 300);
}

TEST(Differential, SingleClass) {
  DiffOptions o;
  o.classes = 1;
  o.steps = 400;
  o.max_participants = 8;
  o.initial_participants = 3;
  run_many(o, 2'000'000, 400);
}

TEST(Differential, SevenClasses) {
  DiffOptions o;
  o.classes = 7;
  o.steps = 500;
  o.max_participants = 12;
  o.initial_participants = 4;
  run_many(o, 3'000'000, 250);
}

TEST(Differential, DeepDebt) {
  DiffOptions o;
  o.steps = 400;
  o.costs = CostMix::deep_debt;
  o.initial_participants = 4;
  run_many(o, 4'000'000, 300);
}

TEST(Differential, CostsAtLimit) {
  DiffOptions o;
  o.steps = 400;
  o.costs = CostMix::at_limit;
  o.initial_participants = 4;
  run_many(o, 5'000'000, 300);
}

// Charges and debits taken behind the refill (docs/contract.md §4): small costs meeting buckets
// at, just below and just past their caps, with re-plans and scaling in between, at mixed rates
// and at rates high enough that the gap since the last refill outgrows 64-bit products.
TEST(Differential, CostsNearTheCap) {
  DiffOptions o;
  o.steps = 500;
  o.costs = CostMix::near_cap;
  o.initial_participants = 4;
  run_many(o, 5'500'000, 300);
}

TEST(Differential, CostsNearTheCapAtHugeRates) {
  DiffOptions o;
  o.steps = 500;
  o.costs = CostMix::near_cap;
  o.rates = RateMix::huge;
  o.initial_participants = 4;
  run_many(o, 5'600'000, 300);
}

TEST(Differential, TinyRates) {
  DiffOptions o;
  o.steps = 400;
  o.rates = RateMix::tiny;
  o.initial_participants = 4;
  run_many(o, 6'000'000, 250);
}

TEST(Differential, HugeRates) {
  DiffOptions o;
  o.steps = 400;
  o.rates = RateMix::huge;
  o.initial_participants = 4;
  run_many(o, 7'000'000, 250);
}

TEST(Differential, Mixed) {
  DiffOptions o;  // k chosen per sequence, everything else mixed
  o.steps = 800;
  o.max_participants = 24;
  o.initial_participants = 6;
  const DiffReport total = run_many(o, 8'000'000, 300);
  // Every kind of decision the contract describes occurred.
  EXPECT_GT(total.out_above_turn, 0u);
  EXPECT_GT(total.unmetered, 0u);
  EXPECT_GT(total.charged, 0u);
  EXPECT_GT(total.uncharged, 0u);
  EXPECT_GT(total.refusals, 0u);
  EXPECT_GT(total.scales, 0u);
}

TEST(Differential, TenThousandParticipants) {
  DiffOptions o;
  o.classes = 3;
  o.steps = 4000;
  o.initial_participants = 10'000;
  o.max_participants = 10'000;
  o.full_check_every = 1000;
  o.balance_check_every = 1;
  run_many(o, 9'000'000, 1);
}

// The clock's last nanosecond: a credit instant beyond it must never count as due (it once did,
// and begin_turn passed a metered class that nobody qualified for).
TEST(Differential, ClockAtItsEnd) {
  DiffOptions o;
  o.steps = 500;
  o.costs = CostMix::deep_debt;
  o.initial_participants = 4;
  o.clock_reaches_end = true;
  run_many(o, 11'000'000, 200);
}

// The fuzzer's inputs choose the clock's end too, not only the tests above.
TEST(Differential, FuzzInputsReachTheClocksEnd) {
  int reaching = 0;
  for (std::uint64_t seed = 1; seed <= 64; ++seed) {
    SeededSource source(seed);
    reaching += fuzz_options(source).clock_reaches_end ? 1 : 0;
  }
  EXPECT_GT(reaching, 0);
  EXPECT_LT(reaching, 64);
}

// The harness notices a wrong model: each deliberate flaw must be reported within a few seeds.
class DifferentialFlaw : public ::testing::TestWithParam<Flaw> {};

TEST_P(DifferentialFlaw, IsReported) {
  DiffOptions o;
  o.steps = 600;
  o.initial_participants = 4;
  o.flaw = GetParam();
  int found = 0;
  for (std::uint64_t seed = 1; seed <= 50 && found == 0; ++seed) {
    SeededSource source(first_seed(10'000'000) + seed);
    found += run_differential(o, source).divergence.has_value() ? 1 : 0;
  }
  EXPECT_EQ(found, 1) << "a model with this flaw agreed with the core over 50 sequences";
}

std::string flaw_name(const ::testing::TestParamInfo<Flaw>& info) {
  switch (info.param) {
    case Flaw::move_every_cursor:
      return "MoveEveryCursor";
    case Flaw::round_balance_up:
      return "RoundBalanceUp";
    case Flaw::refill_at_new_shares:
      return "RefillAtNewShares";
    case Flaw::charge_readded_bucket:
      return "ChargeReaddedBucket";
    case Flaw::scale_refill_at_new_terms:
      return "ScaleRefillAtNewTerms";
    case Flaw::withdraw_moves_cursor:
      return "WithdrawMovesCursor";
    case Flaw::none:
      break;
  }
  return "None";
}

INSTANTIATE_TEST_SUITE_P(Differential, DifferentialFlaw,
                         ::testing::Values(Flaw::move_every_cursor, Flaw::round_balance_up,
                                           Flaw::refill_at_new_shares, Flaw::charge_readded_bucket,
                                           Flaw::scale_refill_at_new_terms,
                                           Flaw::withdraw_moves_cursor),
                         flaw_name);

}  // namespace
}  // namespace creditloop::model
