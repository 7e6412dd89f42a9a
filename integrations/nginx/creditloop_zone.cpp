// The workers' entries (zone_entry.hpp) over std::atomic, for the module's C code. The zone is
// memory shared between processes: its words are atomics that are lock-free whatever the build
// (a lock-based atomic's lock would live in one process only), as wide as the words C sizes.
#include "creditloop_zone.h"

#include <atomic>
#include <cstdint>
#include <new>

#include "creditloop/room_controller.hpp"
#include "zone_entry.hpp"
#include "zone_learned.hpp"
#include "zone_room.hpp"

namespace {

using Entry = creditloop::nginx::ZoneEntry<std::atomic>;
using Word = Entry::Word;
static_assert(Word::is_always_lock_free, "shared between processes: must not take a lock");
static_assert(sizeof(Word) == sizeof(std::uint64_t) && alignof(Word) <= sizeof(std::uint64_t));

// The words were started by creditloop_zone_clear(), in the master, before the fork.
Entry view(creditloop_zone_entry* entry) noexcept { return Entry(reinterpret_cast<Word*>(entry)); }
Entry view(const creditloop_zone_entry* entry) noexcept {
  // The view's reads never write: const only in C's eyes.
  return Entry(reinterpret_cast<Word*>(const_cast<creditloop_zone_entry*>(entry)));
}

using Room = creditloop::nginx::ZoneRoom<std::atomic>;

Room room_view(creditloop_zone_room* room) noexcept { return Room(reinterpret_cast<Word*>(room)); }
Room room_view(const creditloop_zone_room* room) noexcept {
  // used() never writes: const only in C's eyes.
  return Room(reinterpret_cast<Word*>(const_cast<creditloop_zone_room*>(room)));
}

using Learned = creditloop::nginx::ZoneLearned<std::atomic, creditloop::RoomController>;
using creditloop::RoomController;
static_assert(alignof(RoomController) <= alignof(Word), "the controller follows the words");

constexpr std::size_t kControllerAt = Learned::kWords * sizeof(Word);

Learned learned_view(const creditloop_zone_learned* learned) noexcept {
  // The words and the controller were started by creditloop_learned_start(), in the master; the
  // reads of slots() and latency() never write: const only in C's eyes.
  auto* block = reinterpret_cast<unsigned char*>(const_cast<creditloop_zone_learned*>(learned));
  return Learned(reinterpret_cast<Word*>(block),
                 std::launder(reinterpret_cast<RoomController*>(block + kControllerAt)));
}

}  // namespace

extern "C" {

size_t creditloop_zone_entry_size(size_t values) { return Entry::words(values) * sizeof(Word); }

void creditloop_zone_clear(void* block, size_t bytes) {
  auto* words = static_cast<unsigned char*>(block);
  for (size_t at = 0; at + sizeof(Word) <= bytes; at += sizeof(Word)) new (words + at) Word(0);
}

void creditloop_zone_store(creditloop_zone_entry* entry, size_t value, uint64_t v) {
  view(entry).store(value, v);
}

void creditloop_zone_add(creditloop_zone_entry* entry, size_t value, uint64_t delta) {
  view(entry).add(value, delta);
}

void creditloop_zone_publish(creditloop_zone_entry* entry, uint64_t generation, uint64_t stamp_ms) {
  view(entry).publish(generation, stamp_ms);
}

int creditloop_zone_live(const creditloop_zone_entry* entry, uint64_t generation, uint64_t now_ms,
                         uint64_t ttl_ms) {
  return view(entry).live(generation, now_ms, ttl_ms) ? 1 : 0;
}

uint64_t creditloop_zone_load(const creditloop_zone_entry* entry, size_t value) {
  return view(entry).load(value);
}

size_t creditloop_room_words(void) { return Room::kWords; }

int creditloop_room_take(creditloop_zone_room* room, uint64_t slots, int borrowing, int urgent) {
  return room_view(room).take(slots, borrowing != 0, urgent != 0) ? 1 : 0;
}

void creditloop_room_give(creditloop_zone_room* room, uint64_t n) { room_view(room).give(n); }

void creditloop_room_owe(creditloop_zone_room* room, int change) { room_view(room).owe(change); }

void creditloop_room_urge(creditloop_zone_room* room, int change) { room_view(room).urge(change); }

int creditloop_room_awaited(const creditloop_zone_room* room) {
  return room_view(room).awaited() ? 1 : 0;
}

uint64_t creditloop_room_used(const creditloop_zone_room* room) { return room_view(room).used(); }

size_t creditloop_learned_bytes(void) {
  return (kControllerAt + sizeof(RoomController) + sizeof(Word) - 1) / sizeof(Word) * sizeof(Word);
}

void creditloop_learned_start(void* block, uint32_t least, uint32_t most) {
  auto* bytes = static_cast<unsigned char*>(block);
  for (std::size_t i = 0; i < Learned::kWords; ++i) new (bytes + i * sizeof(Word)) Word(0);
  new (bytes + kControllerAt) RoomController(creditloop::RoomBounds{least, most});
  learned_view(static_cast<creditloop_zone_learned*>(block)).start();
}

int creditloop_learned_dispatched(creditloop_zone_learned* learned, int64_t now,
                                  uint64_t in_flight) {
  return learned_view(learned).dispatched(now, in_flight) ? 1 : 0;
}

int creditloop_learned_completed(creditloop_zone_learned* learned, int64_t dispatched_at,
                                 int64_t now) {
  return learned_view(learned).completed(dispatched_at, now) ? 1 : 0;
}

uint64_t creditloop_learned_slots(const creditloop_zone_learned* learned) {
  return learned_view(learned).slots();
}

uint64_t creditloop_learned_latency(const creditloop_zone_learned* learned) {
  return learned_view(learned).latency();
}

}  // extern "C"
