// fleet/apportion.hpp: the fleet rule of docs/fleet.md as pure integer functions over one
// tenant's entries (per server, its demand and the store's milliseconds when it wrote it) and the
// live servers (per server, the store's milliseconds at its last heartbeat).
//
// An entry is stale, and dropped, when now_ms - written_ms > ttl_ms or when it is stamped more
// than kMaxAheadMs ahead of now_ms. For one report (server s, demand d <= kMaxDemand, at now_ms):
//   1. write s's entry (d, now_ms), replacing any earlier one of s;
//   2. drop the entries older than the TTL;
//   3. D = the sum of the live entries' demands (s's own included);
//      f = floor(d * 1e6 / D) if D > 0, else floor(1e6 / live entries).
//
// Why: docs/design.md#the-fleet-rule
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace creditloop::fleet {

/// A whole plan in millionths (the scaling API's kWholePlan).
inline constexpr std::uint32_t kWhole = 1'000'000;
/// Demands above this are clipped to it (requests per epoch: far beyond any real server).
inline constexpr std::uint64_t kMaxDemand = 1'000'000'000;
/// How far ahead of the store's clock a stamp may be and still count: a step back of that clock
/// (NTP, a fail-over to a replica whose clock is behind) within this keeps the entries, and an
/// entry stamped further ahead does not live for ever (tools/server/fleet.lua says why 1 s).
inline constexpr std::int64_t kMaxAheadMs = 1000;

/// One server's entry in a tenant's demand set.
struct DemandEntry {
  std::uint32_t server = 0;
  std::uint64_t demand = 0;
  std::int64_t written_ms = 0;
};

/// What one report returns to the server: its fraction, the number of live entries and D.
struct Apportioned {
  std::uint32_t millionths = 0;
  std::uint32_t live = 0;
  std::uint64_t total = 0;
};

[[nodiscard]] constexpr bool stale(std::int64_t written_ms, std::int64_t now_ms,
                                   std::int64_t ttl_ms) noexcept {
  return now_ms - written_ms > ttl_ms || written_ms - now_ms > kMaxAheadMs;
}

/// Step 3 alone: a server's fraction from its own demand, the live total and the live count.
/// Preconditions: own <= total, live >= 1 (the reporting server's own entry is live).
[[nodiscard]] constexpr std::uint32_t fraction(std::uint64_t own, std::uint64_t total,
                                               std::uint32_t live) noexcept {
  if (total > 0) return static_cast<std::uint32_t>(own * kWhole / total);
  return live == 0 ? kWhole : kWhole / live;
}

/// 1/n of the plan: what a server applies to every tenant at start and after the grace period
/// of a store outage (n = the last live server count it knew; at least 1).
[[nodiscard]] constexpr std::uint32_t even_fraction(std::uint32_t servers) noexcept {
  return servers <= 1 ? kWhole : kWhole / servers;
}

/// The whole rule for one report, on one tenant's entries (steps 1-3). Allocates only when the
/// server is new to the tenant's set.
inline Apportioned report(std::vector<DemandEntry>& entries, std::uint32_t server,
                          std::uint64_t demand, std::int64_t now_ms, std::int64_t ttl_ms) {
  demand = std::min(demand, kMaxDemand);
  bool written = false;
  for (DemandEntry& e : entries) {
    if (e.server == server) {
      e.demand = demand;
      e.written_ms = now_ms;
      written = true;
      break;
    }
  }
  if (!written) entries.push_back(DemandEntry{server, demand, now_ms});
  std::erase_if(entries, [&](const DemandEntry& e) { return stale(e.written_ms, now_ms, ttl_ms); });
  Apportioned out;
  for (const DemandEntry& e : entries) out.total += std::min(e.demand, kMaxDemand);
  out.live = static_cast<std::uint32_t>(entries.size());
  out.millionths = fraction(demand, out.total, out.live);
  return out;
}

/// One server's heartbeat in the live set.
struct Heartbeat {
  std::uint32_t server = 0;
  std::int64_t at_ms = 0;
};

/// Records `server`'s heartbeat at now_ms, drops the servers whose last heartbeat is stale, and
/// returns the live count n (at least 1: the caller itself).
inline std::uint32_t heartbeat(std::vector<Heartbeat>& live, std::uint32_t server,
                               std::int64_t now_ms, std::int64_t ttl_ms) {
  bool written = false;
  for (Heartbeat& h : live) {
    if (h.server == server) {
      h.at_ms = now_ms;
      written = true;
      break;
    }
  }
  if (!written) live.push_back(Heartbeat{server, now_ms});
  std::erase_if(live, [&](const Heartbeat& h) { return stale(h.at_ms, now_ms, ttl_ms); });
  return static_cast<std::uint32_t>(live.size());
}

}  // namespace creditloop::fleet
