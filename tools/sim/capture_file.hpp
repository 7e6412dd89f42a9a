// tools/sim/capture_file.hpp: reading a creditloop capture (version 1, JSON Lines, one or several
// rotated files) and turning it into a scenario the simulator replays.
//
// Reading is all-or-nothing, like the scenario's: a capture comes back whole, or not at all with
// one line "FILE:LINE: field: problem". Unknown keys are ignored (the format's forward
// compatibility), and so are unknown event kinds; an unknown `version` is refused. Times are read
// from their decimal text, so that every 9-decimal time is its exact nanosecond whatever its size
// (a double would lose nanoseconds past about 97 days).
//
// Participants added during the capture (`plan` events for new names) are registered at 0 in
// order of addition, and removed ones stay registered with nothing more to send: neither changes
// a decision (docs/replay.md says why). What the simulator cannot replay is refused, naming the
// line: a `plan` event that changes a participant's plan or shares, an add after a removal (the
// core may reuse the removed one's ring place), and a participant holding only part of its plan
// (`scale`). docs/replay.md lists what a replay cannot reproduce.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "creditloop/units.hpp"
#include "scenario.hpp"

namespace creditloop::sim {

struct CapturedRequest {
  std::uint32_t participant = 0;  // index into Capture::participants
  creditloop::Nanos arrive = 0;   // since the capture's origin
  creditloop::Nanos dispatch = 0;
  creditloop::Nanos complete = 0;
  creditloop::ClassId cls = 0;  // the class it went out under (k: unmetered)
  std::int64_t cost_nano = 0;
};

struct Capture {
  int classes = 2;
  std::string plans_json;              // the header's `plans`, as a JSON object's text
  std::optional<std::uint64_t> slots;  // nothing: the runtime used a room test of its own
  /// The first file's header's, then those added, in order of addition (= ring order).
  std::vector<ParticipantSpec> participants;
  /// Every request, ordered by arrival (then dispatch, then completion): the simulator's arrival
  /// order for the replay.
  std::vector<CapturedRequest> requests;
  std::uint64_t dropped = 0;         // records the writer could not keep (`dropped` events)
  std::uint64_t origin_unix_ns = 0;  // of the capture
  std::vector<std::string> files;    // the names given, in the order read (header order)
  std::uint64_t first_file = 0;      // the `file` number of the earliest file given
};

struct CaptureText {
  std::string name;  // for messages
  std::string text;
};

/// Reads one or several files of one capture, in any order: they are ordered by their header's
/// origin and `file` number. Never throws for bad input.
[[nodiscard]] Parsed<Capture> read_capture(const std::vector<CaptureText>& files);

/// Plans for a replay or a second run: the scenario format's `plans` object (docs/contract.md §6),
/// and optionally `participants` ([{"name", "plan", "shares"}]) changing some participants' plan or
/// shares, and `classes`, which must then be the run's. Keys of a whole scenario (`server`,
/// `arrivals`, `until`) are accepted and ignored, so that another scenario file can serve.
struct PlanFile {
  std::string name;
  std::string plans_json;
  std::optional<int> classes;
  struct Change {
    std::string name;
    std::optional<std::string> plan;
    std::optional<std::uint32_t> shares;
  };
  std::vector<Change> participants;
};

/// Parses a plans file; errors are "field: problem" (the caller adds the file name).
[[nodiscard]] Parsed<PlanFile> parse_plan_file(std::string_view text);

/// The scenario that replays `capture`: its participants (with `plans`' changes, if given) and
/// plans (`plans`' if given), room `slots` if given (else the captured slot count), one arrival per
/// captured request at its `arrive`, with service `complete - dispatch` and its captured cost.
/// Errors name the file and field at fault.
[[nodiscard]] Parsed<Scenario> replay_scenario(const Capture& capture, const PlanFile* plans,
                                               std::optional<std::uint64_t> slots,
                                               const std::string& capture_name);

/// `scenario` with `plans` applied: the same arrivals under other plans and shares.
[[nodiscard]] Parsed<Scenario> with_plans(const Scenario& scenario, const PlanFile& plans);

/// Exact nanoseconds from a decimal text of seconds ("1.000000200"); nothing when it is not a
/// plain decimal (a sign, an exponent).
[[nodiscard]] std::optional<creditloop::Nanos> decimal_seconds(std::string_view text);

}  // namespace creditloop::sim
