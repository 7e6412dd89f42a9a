// tools/fleet-sim/fleet.hpp: a fleet of creditloop servers sharing tenants' plans through a
// store, on a virtual clock (docs/fleet.md, "Simulated at scale").
//
// Each simulated server holds a real creditloop::Core with only the tenants that send it
// traffic (registered at their first request, at the fraction an idle tenant has there), a slot
// model like creditloop-sim's (a dispatch takes one of `slots` for `service_ms`), and per tenant
// an arrival stream. Once per epoch, at its own phase, each server reports its demands; the
// store (in-process, the rule of apportion.hpp) answers after the configured round trip, or not
// at all during an outage or a random failure, and the server applies the fractions with
// Core::scale. Servers interact only through the store, so each is advanced lazily: only to the
// instant of its next store event, and the global event queue holds store events alone. That
// keeps the cost per request to one arrival-heap step, the core's own work and one completion.
//
// Deterministic for a seed: each arrival stream has its own generator, and store events at one
// instant go in the order they were scheduled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace creditloop::fleet {

struct PlanSpec {
  std::string name;
  double rate = 40;   // P1 credits per second, fleet-wide
  double burst = 20;  // P1 bucket capacity, fleet-wide
  double weight = 1;  // relative frequency among tenants
};

/// What happens at `change_at_s`: nothing, a traffic shift, or server deaths.
enum class Change { none, shift, death };

struct SimConfig {
  std::uint32_t servers = 100;
  std::uint32_t tenants = 10'000;
  double epoch_ms = 250;
  double duration_s = 20;
  double warmup_s = 3;
  std::uint64_t seed = 1;
  bool poisson = true;  // else periodic arrivals, each stream at a random phase
  std::uint32_t slots = 64;
  double service_ms = 5;
  // The store.
  double store_rtt_ms = 1;
  double store_failure_rate = 0;  // probability that a round trip fails
  double outage_at_s = -1;        // the store answers nothing in [outage_at_s, +outage_s)
  double outage_s = 0;
  double grace_s = 2;
  // Tenants.
  std::vector<PlanSpec> plans{{"small", 40, 20, 6}, {"medium", 80, 40, 3}, {"large", 160, 80, 1}};
  double saturating_fraction = 0.7;  // tenants offering saturating_load x plan; the rest light_load
  double saturating_load = 1.5;
  double light_load = 0.5;
  std::vector<double> spread{0.4, 0.25, 0.15, 0.1, 0.1};  // P(a tenant is on 1, 2, ... servers)
  // The change.
  Change change = Change::shift;
  double change_at_s = 10;
  double shift_fraction = 0.1;  // of tenants, moved to as many other servers
  std::uint32_t deaths = 5;
  // Measurement.
  double bin_ms = 100;
  double window_s = 2;             // convergence and the band are judged over windows this long
  double over_grant_window_s = 1;  // over-grant is summed over windows this long
  double band = 0.10;              // "within 10 % of plan"
};

/// Quantiles of a sample (all zero when it is empty).
struct Spread {
  std::size_t count = 0;
  double min = 0, p01 = 0, p05 = 0, p50 = 0, p95 = 0, p99 = 0, max = 0, mean = 0;
};

struct OverGrant {
  double from_s = 0, to_s = 0;
  /// Sum over tenants and over consecutive windows of window_s of max(0, P1 dispatches - plan
  /// rate x window), in credits.
  double excess = 0;
  /// The same beyond one burst per window (what one server with the whole plan could give).
  double excess_beyond_burst = 0;
  /// Sum over tenants of plan rate x time: the denominator of the fractions.
  double planned = 0;
  std::size_t tenants_over = 0;
  /// Sum over saturating tenants of max(0, plan rate x time - P1 dispatches): plan not granted.
  double shortfall = 0;
  double saturating_planned = 0;
};

struct SimResult {
  std::uint64_t arrivals = 0;
  std::uint64_t dispatches = 0;
  std::uint64_t p1_dispatches = 0;
  std::uint64_t store_calls = 0;  // round trips (one per live server per epoch)
  std::uint64_t store_ops = 0;  // functions run in the store (one per reported tenant + heartbeat)
  std::uint64_t failed_calls = 0;  // round trips that failed or timed out
  std::uint64_t fallbacks = 0;     // servers that went to 1/n after the grace period
  /// Steady state, [warmup, first disturbance): each saturating tenant's fleet-wide P1 rate over
  /// its plan rate; each light tenant's P1 dispatches over its arrivals.
  Spread saturating_share;
  Spread light_p1_share;
  std::vector<double> saturating_ratios;  // sorted, for the histogram
  /// Saturating tenants whose P1 rate was within the band in every window of the steady state.
  std::size_t saturating_in_band = 0;
  OverGrant steady;
  /// After the change: the moved (or stranded) saturating tenants' convergence times, seconds.
  std::size_t moved = 0;
  std::size_t eligible = 0;  // of those, the ones in the band in every window before the change
  std::size_t converged = 0;
  Spread convergence_s;
  OverGrant after_change;  // [change, change + 5 s), all tenants
  /// The outage and the 5 s after it, all tenants.
  OverGrant outage;
};

/// Runs the whole simulation. Throws std::invalid_argument naming the field at fault for a bad
/// configuration, and std::runtime_error if the core refuses a call the simulator makes
/// correctly (a bug).
[[nodiscard]] SimResult simulate(const SimConfig& config);

}  // namespace creditloop::fleet
