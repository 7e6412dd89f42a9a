// runtime/internal/completion_block.hpp: a pool worker's completions, (ticket, cost) entries four
// to a line, lent to the dispatcher in one piece, and added to while it is lent until the
// dispatcher closes it. Internal to the runtime: not installed, not part of the public API.
//
// One word, `filled`, says who has the block and how many entries it carries:
//   0          the worker's: never lent, or returned
//   1..Cap     lent and open: the worker may still add an entry behind the ones the word counts
//   kClosed    the dispatcher's: it reads the entries the word counted when it closed it
//
//   worker      available() -> write entries[0] -> open() -> push on a bag
//               append(): write entries[n] -> CAS filled n -> n + 1 (fails once it is closed)
//   dispatcher  drain the bag -> close(): exchange filled for kClosed -> read the entries it
//               counted -> return_to_worker()
//
//   the bag's push       publishes the first entry (lock_free_bag.hpp)
//   append()'s CAS       release: pairs with close()'s acquire exchange, which reads the latest
//                        count, so every entry it counts was written before
//   return_to_worker()   release store of 0: pairs with available()'s acquire load, so the worker
//                        writes the block again only after the dispatcher's reads
//
// A worker keeps several blocks; with all of them lent it completes through the ticket records
// (worker_pool.cpp): it never waits for the dispatcher.
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
//
// Why: docs/design.md#the-hand-offs
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "internal/test_hooks.hpp"

namespace creditloop::detail {

template <template <class> class Atomic, class Entry, std::size_t Capacity>
struct alignas(64) CompletionBlock {
  static constexpr std::uint32_t kCapacity = Capacity;
  static constexpr std::uint32_t kClosed = std::numeric_limits<std::uint32_t>::max();
  static_assert(Capacity >= 1 && Capacity < kClosed);

  /// The owning worker. Whether the block is its own again (never lent, or returned).
  [[nodiscard]] bool available() const noexcept {
    // acquire: pairs with return_to_worker(); the dispatcher's reads of the entries come before the
    // worker's next writes.
    return filled.load(std::memory_order_acquire) == 0;
  }
  /// The owning worker, with entries[0] written, just before it pushes the block on the bag.
  void open() noexcept {
    // relaxed: the bag's push publishes it with entries[0], and close()'s exchange reads the
    // latest value, which the push's order puts after this one.
    filled.store(1, std::memory_order_relaxed);
  }
  /// The owning worker, with the block lent: `fill(entry)` writes the next entry, which the
  /// dispatcher reads if the block is still open when the count takes it in. Says whether it did;
  /// if not (closed, full, or already returned), the entry written, if any, is never read.
  template <class Fill>
  bool append(Fill&& fill) noexcept {
    // relaxed: the worker wrote the count itself, and only the dispatcher changes it after; a
    // value the dispatcher wrote (kClosed, 0) means no append, and the CAS below decides the rest.
    std::uint32_t count = filled.load(std::memory_order_relaxed);
    if (count == 0 || count >= kCapacity) return false;
    fill(entries[count]);
    CREDITLOOP_TEST_HOOK(block_appending);
    // release: pairs with close()'s acquire exchange; the entry is read only after it. No
    // seq_cst for parking: the block is on the bag, or in the dispatcher's hands and not yet
    // closed, so the dispatcher cannot sleep before reading the count (idle_env.hpp).
    return filled.compare_exchange_strong(count, count + 1, std::memory_order_release,
                                          std::memory_order_relaxed);
  }
  /// The dispatcher, having drained the block from the bag. Returns how many entries it carries;
  /// no append after this counts.
  [[nodiscard]] std::uint32_t close() noexcept {
    // acquire: pairs with append()'s release CAS (and, through the latest value, with open()'s
    // store, which the drain's acquire exchange already ordered).
    return filled.exchange(kClosed, std::memory_order_acquire);
  }
  /// The dispatcher, once it has read every entry.
  void return_to_worker() noexcept {
    // release: pairs with available(); see the file comment.
    filled.store(0, std::memory_order_release);
  }

  Atomic<CompletionBlock*> next_completed{nullptr};  // the bag's link
  Atomic<std::uint32_t> filled{0};
  std::array<Entry, Capacity> entries{};
};

}  // namespace creditloop::detail
