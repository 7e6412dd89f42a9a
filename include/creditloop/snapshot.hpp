// creditloop/snapshot.hpp: what the runtime reports about itself while it runs.
//
// Snapshots are taken by the dispatcher between two decisions, so each one is consistent: the
// balances, queue depths and counters of one instant. Taking one costs the caller a round trip to
// the dispatcher (a few microseconds) and the dispatcher O(1) per participant reported. A snapshot
// of every participant (Runtime::snapshot_participants) is taken in chunks, each consistent at its
// own instant, so that a large one does not stall dispatching.
//
// Counters (ParticipantCounters, RuntimeCounters) are for a metrics scrape under full load: any
// thread reads them at any time without a round trip and without slowing the dispatcher, which
// alone writes them, as it decides. Each counter is exact and monotonic (queued is a gauge);
// one participant's counters are a consistent cut (read under a sequence count), but different
// participants' counters and the totals are not a consistent cut with each other.
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
  /// The fraction of its plan it has, in millionths (Runtime::scale; kWholePlan unless scaled).
  std::uint32_t scale = kWholePlan;
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
  /// Per metered class the plan holds whose bucket has no credit at the snapshot's instant: the
  /// exact instant its next credit lands (Core::next_credit()), on the dispatcher's clock. Nothing
  /// for a class not held, one with a credit now, or one whose credit lies beyond the clock.
  std::array<std::optional<Nanos>, kMaxClasses> next_credit{};
  /// How long the oldest queued request has waited at the snapshot's instant, measured from when
  /// the dispatcher moved it from the inbox into the core (RequestHook::queued_at); nothing when
  /// nothing is queued.
  std::optional<Nanos> oldest_queued_age;
};

/// One participant's counters, readable from any thread without a round trip
/// (Runtime::counters(ParticipantId)). See the file comment for their consistency.
struct ParticipantCounters {
  std::uint64_t queued = 0;  // in the core's queue (not the requests still in its inbox)
  /// Per class the request went out under (0..k-1 metered, k unmetered).
  std::array<std::uint64_t, kMaxClasses + 1> dispatched{};
  std::uint64_t completed = 0;  // completions applied
  Balance cost_charged = 0;     // nano-credits charged back to its buckets
};

/// The runtime's totals, over every participant ever registered (Runtime::counters()).
struct RuntimeCounters {
  std::uint64_t queued = 0;
  std::array<std::uint64_t, kMaxClasses + 1> dispatched{};
  std::uint64_t completed = 0;  // completions applied, removed participants' included
  Balance cost_charged = 0;
};

struct ClassSnapshot {
  std::uint64_t turns = 0;       // turns settled on this class
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
  // Times it slept with a timeout because it had something to retry that no other thread would
  // announce (a batch the worker pool's queue could not take) and nothing else was to be done.
  std::uint64_t retry_waits = 0;
  // Times the dispatcher could not grow its tables of requests in flight past their reservation
  // (an allocation failed): the room counted as full meanwhile (runtime.hpp, expected_in_flight).
  std::uint64_t ticket_growth_failures = 0;
  // CPU time the dispatcher thread has used since it started (its final figure once it has
  // exited): divided by `dispatched`, the serial cost per request that bounds throughput.
  Nanos dispatcher_cpu = 0;
  int classes = 0;  // k: classes[0..k-1] metered, classes[k] unmetered
  std::array<ClassSnapshot, kMaxClasses + 1> per_class{};
};

}  // namespace creditloop
