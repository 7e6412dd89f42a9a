// The module's workers apportion plans and room with the fleet's own rule, by include: the same
// arithmetic as creditloop-server's fleet mode and the fleet simulator.
#include "creditloop_share.h"

#include <algorithm>

#include "apportion.hpp"

extern "C" {

uint32_t creditloop_share_fraction(uint64_t own, uint64_t total, uint32_t live) {
  namespace fleet = creditloop::fleet;
  own = std::min(own, fleet::kMaxDemand);
  total = std::max(own, total);
  return fleet::fraction(own, total, live);
}

uint32_t creditloop_share_even(uint32_t workers) {
  return creditloop::fleet::even_fraction(workers);
}

uint64_t creditloop_share_max_demand(void) { return creditloop::fleet::kMaxDemand; }

}  // extern "C"
