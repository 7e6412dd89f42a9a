/* The workers' entries in the module's shared-memory zone (zone_entry.hpp) for the module's C
 * code: each worker stores its values into its own entry and publishes them under a stamp and
 * its configuration's generation; any worker reads an entry's values once creditloop_zone_live()
 * has found it live. None of these allocates, blocks or takes a lock. */
#ifndef CREDITLOOP_NGINX_ZONE_H
#define CREDITLOOP_NGINX_ZONE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An entry: opaque to C, laid out by zone_entry.hpp. */
typedef struct creditloop_zone_entry creditloop_zone_entry;

/* Bytes an entry of `values` values takes (a multiple of 8). */
size_t creditloop_zone_entry_size(size_t values);
/* Starts `bytes` (a multiple of 8) at `block`, 8-byte aligned, as zeroed entries: never
 * published, every value 0. In the master, before the workers that use the block fork. */
void creditloop_zone_clear(void* block, size_t bytes);

/* The owner's, on its one thread: set or add to one value, and publish every value stored so far
 * under `generation` and `stamp_ms` (0 is taken as 1). */
void creditloop_zone_store(creditloop_zone_entry* entry, size_t value, uint64_t v);
void creditloop_zone_add(creditloop_zone_entry* entry, size_t value, uint64_t delta);
void creditloop_zone_publish(creditloop_zone_entry* entry, uint64_t generation, uint64_t stamp_ms);

/* Any worker's: 1 when the entry belongs to a worker of `generation` that published at most
 * `ttl_ms` before `now_ms`, else 0. Its values are this generation's only after a 1. */
int creditloop_zone_live(const creditloop_zone_entry* entry, uint64_t generation, uint64_t now_ms,
                         uint64_t ttl_ms);
/* One value: after creditloop_zone_live() returned 1, or the owner's own. */
uint64_t creditloop_zone_load(const creditloop_zone_entry* entry, size_t value);

/* The room all workers share (zone_room.hpp): `words` is creditloop_room_words() 64-bit words
 * of the zone, zero before the workers fork. */
typedef struct creditloop_zone_room creditloop_zone_room;

size_t creditloop_room_words(void);
/* 1 when a slot of `slots` was taken; one past its own share (`borrowing` 1) is taken only while
 * no worker is owed, one not for an `urgent` request only while no worker is urgent. */
int creditloop_room_take(creditloop_zone_room* room, uint64_t slots, int borrowing, int urgent);
/* Gives `n` slots back. */
void creditloop_room_give(creditloop_zone_room* room, uint64_t n);
/* The worker became owed (+1) or stopped being owed (-1). */
void creditloop_room_owe(creditloop_zone_room* room, int change);
/* The worker became urgent (+1) or stopped being urgent (-1). */
void creditloop_room_urge(creditloop_zone_room* room, int change);
/* 1 while any worker is owed or urgent. */
int creditloop_room_awaited(const creditloop_zone_room* room);
/* Requests in flight, all workers together. */
uint64_t creditloop_room_used(const creditloop_zone_room* room);

/* A room learned from all workers' requests (zone_learned.hpp): one room controller in the zone.
 * Feeding it never waits: a worker that finds another feeding it drops its sample (0). */
typedef struct creditloop_zone_learned creditloop_zone_learned;

/* Bytes a learned room takes in the zone, 8-byte aligned. */
size_t creditloop_learned_bytes(void);
/* Starts a learned room of `least`..`most` slots at `block`. In the master, before the fork. */
void creditloop_learned_start(void* block, uint32_t least, uint32_t most);
/* A request went out at `now` (ns) with `in_flight` in flight, all workers together. */
int creditloop_learned_dispatched(creditloop_zone_learned* learned, int64_t now,
                                  uint64_t in_flight);
/* A request dispatched at `dispatched_at` completed at `now` (ns). */
int creditloop_learned_completed(creditloop_zone_learned* learned, int64_t dispatched_at,
                                 int64_t now);
/* The room learned so far, and its no-queue latency in ns (0 until measured). */
uint64_t creditloop_learned_slots(const creditloop_zone_learned* learned);
uint64_t creditloop_learned_latency(const creditloop_zone_learned* learned);

#ifdef __cplusplus
}
#endif

#endif
