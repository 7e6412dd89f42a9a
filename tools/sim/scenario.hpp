// tools/sim/scenario.hpp: a simulator scenario (docs/contract.md §6), parsed strictly.
//
// Parsing is all-or-nothing: a scenario either comes back complete, with every time already in
// whole nanoseconds and every cost in nano-credits, or not at all, with one message of the form
// "path: problem" whose path names the offending field the way a reader finds it in the file
// (`arrivals[1].count`, `plans.pro.P1.rate`). Nothing here knows the dispatcher; the values the
// core validates again (shares, rates, bursts, costs) are checked against the same documented
// limits so that the simulator can refuse them before it writes anything.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/refusal.hpp"
#include "common/wide_int.hpp"
#include "creditloop/plan.hpp"
#include "creditloop/units.hpp"

namespace creditloop::sim {

using tools::I128;
using tools::U128;

/// Largest time the scenario may give, in seconds (about 31.7 years of virtual clock), so that
/// every instant of a run fits the clock's 64-bit nanoseconds with room to spare.
inline constexpr double kMaxSeconds = 1'000'000'000.0;
/// Most requests one arrival entry may describe, and most that may arrive in one run. The pool of
/// requests is allocated up front, so this bounds the simulator's memory (about 40 bytes each).
inline constexpr std::uint64_t kMaxCount = 1'000'000'000;
inline constexpr std::uint64_t kMaxRequests = 20'000'000;
/// Most slots a server may have.
inline constexpr std::uint64_t kMaxSlots = 1'000'000'000;

struct ParticipantSpec {
  std::string name;
  std::string plan;
  std::uint32_t shares = 1;
};

struct ArrivalSpec {
  creditloop::Nanos at = 0;
  std::size_t participant = 0;  // index into Scenario::participants
  std::uint64_t count = 1;
  creditloop::Nanos every = 0;
  creditloop::Nanos service = 0;
  std::int64_t cost_nano = 0;
  /// A request of this entry still queued this long after its arrival is withdrawn (its client
  /// hung up: Core::cancel); one dispatched before then is served as any other. None: never.
  std::optional<creditloop::Nanos> cancel_after;
  /// Requests of this entry that arrive no later than `until` (all of them without it).
  std::uint64_t in_run = 0;
};

struct Scenario {
  creditloop::Config config;  // classes and plans, in the core's own terms
  std::uint64_t slots = 1;
  std::vector<ParticipantSpec> participants;
  std::vector<ArrivalSpec> arrivals;
  std::optional<creditloop::Nanos> until;
  std::uint64_t requests = 0;  // sum of in_run
  bool withdraws = false;      // some entry gives `cancel_after`
};

// A refusal names the field at fault: "path: problem", one line.
using tools::Parsed;
using tools::Refusal;

/// Parses scenario text. Never throws for bad input.
[[nodiscard]] Parsed<Scenario> parse_scenario(std::string_view text);

/// Formats a path component: `.name` for a plain identifier, `["..."]` (JSON-escaped) otherwise.
[[nodiscard]] std::string path_key(std::string_view key);

}  // namespace creditloop::sim
