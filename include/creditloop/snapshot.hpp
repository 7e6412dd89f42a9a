// creditloop/snapshot.hpp: what the runtime reports about itself while it runs.
//
// Snapshots are taken by the dispatcher between two decisions, so each one is consistent: the
// balances, queue depths and counters of one instant. Taking one costs the caller a round trip to
// the dispatcher (a few microseconds) and the dispatcher O(1) per participant reported.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "creditloop/participant.hpp"
#include "creditloop/plan.hpp"
#include "creditloop/units.hpp"

namespace creditloop {

struct ParticipantSnapshot {
  ParticipantId id;
  std::string name;
  PlanId plan = 0;
  std::uint32_t shares = 0;
  /// Requests queued: those the core holds plus those still in the participant's inbox.
  std::uint64_t queued = 0;
  /// Balance per metered class in nano-credits, at the snapshot's instant; nothing for a class
  /// the plan does not hold.
  std::array<std::optional<Balance>, kMaxClasses> balance{};
  /// Dispatches per class the request went out under (0..k-1 metered, k unmetered), completions,
  /// and costs, since registration.
  ParticipantStats stats;
  /// The class the latest dispatch went out under, if any.
  std::optional<ClassId> last_class;
};

struct ClassSnapshot {
  std::uint64_t passes = 0;      // turns settled on this class
  std::uint64_t dispatched = 0;  // requests that went out under this class
};

struct RuntimeSnapshot {
  Nanos at = 0;  // the dispatcher's clock when the snapshot was taken
  std::uint64_t participants = 0;
  std::uint64_t waiting = 0;    // participants with queued requests in the core
  std::uint64_t in_flight = 0;  // dispatched and not yet completed (as the dispatcher knows it)
  std::uint64_t submitted = 0;  // requests moved from inboxes into the core
  std::uint64_t dispatched = 0;
  std::uint64_t completed = 0;  // completions applied
  std::uint64_t parks = 0;      // times the dispatcher slept
  std::uint64_t wakeups = 0;    // times a waker woke it
  // CPU time the dispatcher thread has used since it started (its final figure once it has
  // exited): divided by `dispatched`, the serial cost per request that bounds throughput.
  Nanos dispatcher_cpu = 0;
  int classes = 0;  // k: classes[0..k-1] metered, classes[k] unmetered
  std::array<ClassSnapshot, kMaxClasses + 1> per_class{};
};

}  // namespace creditloop
