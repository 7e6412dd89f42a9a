/* The fleet's apportioning rule (fleet/apportion.hpp) for the module's C code: one
 * worker's fraction of a plan, or of the room, from its own demand and every live worker's. */
#ifndef CREDITLOOP_NGINX_SHARE_H
#define CREDITLOOP_NGINX_SHARE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fleet::fraction after clipping each demand to fleet::kMaxDemand: own * 1e6 / total, or 1e6 /
 * live when total is 0. `own` <= `total`, `live` >= 1. Allocates nothing. */
uint32_t creditloop_share_fraction(uint64_t own, uint64_t total, uint32_t live);
/* fleet::even_fraction: 1/n of the plan, what each worker starts at. */
uint32_t creditloop_share_even(uint32_t workers);
/* fleet::kMaxDemand. */
uint64_t creditloop_share_max_demand(void);

#ifdef __cplusplus
}
#endif

#endif
