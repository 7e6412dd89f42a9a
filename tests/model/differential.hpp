// tests/model/differential.hpp: drives the real Core and the reference Model with one sequence of
// operations and reports the first place where they disagree.
//
// The operations come from an OpSource, so the same harness runs from a seed (the GoogleTest
// cases) or from libFuzzer's bytes (fuzz/fuzz_differential.cpp). The harness plays a slot-model
// server: the loop runs while fewer requests are in flight than there are slots, and a turn is
// ended on both sides when there is no room.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "model/model.hpp"

namespace creditloop::model {

/// Where the choices come from.
class OpSource {
 public:
  virtual ~OpSource() = default;
  /// A value in [0, bound); bound >= 1.
  virtual std::uint64_t below(std::uint64_t bound) = 0;
  /// False once the source has run dry; the harness then stops.
  [[nodiscard]] virtual bool more() const = 0;
};

class SeededSource final : public OpSource {
 public:
  explicit SeededSource(std::uint64_t seed) : rng_(seed) {}
  std::uint64_t below(std::uint64_t bound) override;
  [[nodiscard]] bool more() const override { return true; }

 private:
  std::mt19937_64 rng_;
};

/// Reads the fuzzer's bytes; each choice takes as few bytes as its bound needs. Runs dry at the
/// end of the input (choices are then 0).
class ByteSource final : public OpSource {
 public:
  ByteSource(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint64_t below(std::uint64_t bound) override;
  [[nodiscard]] bool more() const override { return pos_ < size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// near_cap: small costs, and clock steps that land just before, at or just after a bucket fills,
// so that charges and debits meet buckets at, near and just below their caps.
enum class CostMix : std::uint8_t { mixed, deep_debt, at_limit, near_cap };
enum class RateMix : std::uint8_t { mixed, tiny, huge };

struct DiffOptions {
  int classes = 0;                       // k, 1..7; 0: the source chooses
  std::size_t steps = 1000;              // operations (a byte source may stop sooner)
  std::size_t initial_participants = 0;  // registered before the first step
  std::size_t max_participants = 16;     // adds are refused by the harness beyond this
  // Every N steps compare every participant; in between only the ones the step touched. Reading a
  // balance refills it (exactly, so it changes nothing), but frequent reads would hide a bug that
  // needs a long unobserved interval, so the cadences vary. 0: the source chooses.
  std::size_t full_check_every = 0;     // 1, 8 or 64
  std::size_t balance_check_every = 0;  // balances of the touched: 1, 4 or 32
  CostMix costs = CostMix::mixed;
  RateMix rates = RateMix::mixed;
  bool churn = true;      // add, remove and re-plan during the run
  bool bad_input = true;  // also try invalid calls, which must be refused alike
  // Let the clock reach the largest Nanos, where a credit instant beyond the clock's end is
  // saturated to the same value and must still not count as due. Off by default so that most
  // runs spend their steps elsewhere; the fuzzer turns it on for a quarter of its inputs.
  bool clock_reaches_end = false;
  Flaw flaw = Flaw::none;    // a deliberately broken model, to show divergences are noticed
  std::size_t history = 48;  // operations quoted in a divergence report
};

struct DiffReport {
  std::optional<std::string> divergence;  // the first disagreement and the operations before it
  std::size_t steps = 0;
  std::size_t turns = 0;
  std::size_t dispatches = 0;
  std::size_t completions = 0;     // accepted
  std::size_t refusals = 0;        // invalid calls refused alike
  std::size_t scales = 0;          // fractions of a plan given (accepted scale calls)
  std::size_t out_above_turn = 0;  // dispatches under a higher class than the turn's
  std::size_t unmetered = 0;       // under the unmetered class
  std::size_t charged = 0;         // completions charged to a bucket
  std::size_t uncharged = 0;       // completions charged nowhere
};

/// Runs one sequence. Never throws for a divergence; returns it.
DiffReport run_differential(const DiffOptions& options, OpSource& source);

/// Options for a fuzz input: the shape is taken from the source's first choices.
DiffOptions fuzz_options(OpSource& source);

}  // namespace creditloop::model
