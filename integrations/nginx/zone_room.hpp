// integrations/nginx/zone_room.hpp: the room every nginx worker of one configuration shares, in
// the module's zone, so that never more requests are in flight than creditloop_slots whatever
// the worker count. Internal to the module: its C code reaches it through creditloop_zone.h.
//
//   word 0  used   requests in flight, all workers together; at most `slots`
//   word 1  owed   workers that have a queue, are below their share of the room, and found it
//                  full: while any is owed, no worker borrows beyond its own share
//   word 2  urgent workers holding a queued request whose tenant had a P1 credit when it came:
//                  while any is, only such a worker takes a slot
//
// Orders: give()'s release -> take()'s acquire hands a slot on; the bound is the CAS on `used`;
// `owed` and `urgent` are counts that publish nothing. No allocation, no wait, no lock.
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
// Why: docs/nginx.md#several-workers
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace creditloop::nginx {

template <template <class> class Atomic>
class ZoneRoom {
 public:
  using Word = Atomic<std::uint64_t>;
  static constexpr std::size_t kWords = 3;

  /// A view of the room at `words`, which holds kWords live words (zero: nothing in flight).
  explicit ZoneRoom(Word* words) noexcept : words_(words) {}

  /// Takes one of `slots` slots if one is free; a worker past its own share (`borrowing`) takes
  /// one only while no worker is owed, and a slot for a request that is not `urgent` is taken
  /// only while no worker is urgent.
  bool take(std::uint64_t slots, bool borrowing, bool urgent) noexcept {
    // relaxed, both: counts; nothing is published with them.
    if (!urgent && words_[kUrgent].load(std::memory_order_relaxed) != 0) return false;
    if (borrowing && words_[kOwed].load(std::memory_order_relaxed) != 0) return false;
    // relaxed: a first look; the compare-and-swap below decides.
    std::uint64_t used = words_[kUsed].load(std::memory_order_relaxed);
    while (used < slots) {
      // acquire on success: pairs with the release in give() by the slot's last holder. relaxed
      // on failure: `used` is only looked at again.
      if (words_[kUsed].compare_exchange_weak(used, used + 1, std::memory_order_acquire,
                                              std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  /// Gives `n` slots back (a completion's, or what a worker took and did not fill).
  void give(std::uint64_t n) noexcept {
    // release: pairs with the acquire of take() by the slot's next holder.
    words_[kUsed].fetch_sub(n, std::memory_order_release);
  }

  /// The worker became owed (+1) or stopped being owed (-1).
  void owe(std::int64_t change) noexcept {
    // relaxed: a count, as in take(); a worker that starts borrowing one slot before it sees an
    // owed worker's mark costs that worker at most that slot's turn.
    words_[kOwed].fetch_add(static_cast<std::uint64_t>(change), std::memory_order_relaxed);
  }

  /// The worker became urgent (+1) or stopped being urgent (-1).
  void urge(std::int64_t change) noexcept {
    // relaxed: a count, as owe()'s.
    words_[kUrgent].fetch_add(static_cast<std::uint64_t>(change), std::memory_order_relaxed);
  }
  /// Whether any worker is owed or urgent: a slot given back then is worth a wake-up.
  [[nodiscard]] bool awaited() const noexcept {
    // relaxed: a hint; a worker missed here looks again at its next retry.
    return words_[kOwed].load(std::memory_order_relaxed) != 0 ||
           words_[kUrgent].load(std::memory_order_relaxed) != 0;
  }
  [[nodiscard]] std::uint64_t used() const noexcept {
    // relaxed: a gauge.
    return words_[kUsed].load(std::memory_order_relaxed);
  }

 private:
  static constexpr std::size_t kUsed = 0;
  static constexpr std::size_t kOwed = 1;
  static constexpr std::size_t kUrgent = 2;
  Word* words_;
};

}  // namespace creditloop::nginx
