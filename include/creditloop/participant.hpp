// creditloop/participant.hpp: how a participant is named to the core, and what is counted for it.
#pragma once

#include <array>
#include <cstdint>

#include "creditloop/units.hpp"

namespace creditloop {

/// A registered participant: its place in the ring and the generation of that place's use.
/// Removing a participant makes every copy of its id stale; a place can be reused by a later
/// registration, which gets a new generation.
struct ParticipantId {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;  // never 0 for a registered participant

  friend constexpr bool operator==(ParticipantId, ParticipantId) noexcept = default;
};

/// Counters kept per participant since its registration.
struct ParticipantStats {
  /// Dispatches per class the request went out under, by ClassId: 0..k-1 metered, k unmetered.
  std::array<std::uint64_t, kMaxClasses + 1> dispatched{};
  std::uint64_t completed = 0;
  /// Cost charged back to this participant's buckets, in nano-credits.
  Balance cost_charged = 0;
  /// Cost reported but charged nowhere (unmetered requests, dropped buckets), in nano-credits.
  Balance cost_uncharged = 0;
};

}  // namespace creditloop
