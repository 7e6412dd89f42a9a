// creditloop/participant.hpp: how a participant is named to the core, and what is counted for it.
#pragma once

#include <array>
#include <cstdint>

#include "creditloop/units.hpp"

namespace creditloop {

/// A registered participant: its place in the ring and the generation of that place's use.
/// Removing a participant makes every copy of its id stale; a place can be reused by a later
/// registration, which gets a new generation. The id also names the core that registered the
/// participant (its issuer, detail/issuer.hpp): every other core and runtime refuses it.
///
/// Why 32 bits of generation are enough: an id goes stale only by a removal of its participant,
/// and aliases only when the same place is registered 2^32 times while a copy of the old id is
/// kept. An add and a remove take about 1,500 instructions together (bench/instruction-budget.txt
/// has add at about 740), so 2^32 pairs are 6.4e12 instructions: over half an hour of nothing but
/// churn on one place even at 3e9 instructions a second; through a runtime, where each is a round
/// trip to the dispatcher of a microsecond or more, over two hours. A server changes its tenants a
/// few times a second.
struct ParticipantId {
  std::uint32_t place = 0;
  std::uint32_t generation = 0;  // never 0 for a registered participant
  std::uint32_t issuer = 0;      // the registering core's identity; never 0 for a registered one

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
