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
#include "creditloop/room_controller.hpp"
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
  /// hung up: Core::withdraw); one dispatched before then is served as any other. None: never.
  std::optional<creditloop::Nanos> withdraw_after;
  /// Requests of this entry that arrive no later than `until` (all of them without it).
  std::uint64_t in_run = 0;
};

/// The backend from `at` on: it serves at most `capacity` requests at once, the rest wait in its
/// own FIFO, and a request that starts while this step holds is served for its `service` times
/// `slowdown_milli` / 1000.
struct BackendStep {
  creditloop::Nanos at = 0;
  std::uint64_t capacity = 1;
  std::int64_t slowdown_milli = 1000;
};

/// A slowdown from 0.001 to 1000, kept in thousandths.
inline constexpr std::int64_t kMaxSlowdownMilli = 1'000'000;

struct Scenario {
  creditloop::Config config;  // classes and plans, in the core's own terms
  /// The room: a fixed number of slots, or with `room_auto` the most a learned room may have.
  std::uint64_t slots = 1;
  /// `"slots": "auto"`: a RoomController within these bounds sets the room.
  std::optional<creditloop::RoomBounds> room_auto;
  /// `server.backend.capacity`, steps in time order from 0. Empty: a dispatched request starts
  /// at once and holds its slot for its `service` (the slot model).
  std::vector<BackendStep> backend;
  std::vector<ParticipantSpec> participants;
  std::vector<ArrivalSpec> arrivals;
  std::optional<creditloop::Nanos> until;
  std::uint64_t requests = 0;  // sum of in_run
  bool withdraws = false;      // some entry gives `withdraw_after`
};

// A refusal names the field at fault: "path: problem", one line.
using tools::Parsed;
using tools::Refusal;

/// Parses scenario text. Never throws for bad input.
[[nodiscard]] Parsed<Scenario> parse_scenario(std::string_view text);

/// Formats a path component: `.name` for a plain identifier, `["..."]` (JSON-escaped) otherwise.
[[nodiscard]] std::string path_key(std::string_view key);

}  // namespace creditloop::sim
