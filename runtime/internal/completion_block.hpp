// runtime/internal/completion_block.hpp: a pool worker's completions, (ticket, cost) entries four
// to a line, lent to the dispatcher in one piece. Internal to the runtime: not installed, not
// part of the public API.
//
// Ownership alternates, and `lent` says who has the block:
//   worker      available(): lent is false -> fill entries and count -> lend() -> push on a bag
//   dispatcher  drain the bag -> read entries and count -> return_to_worker()
//
//   the bag's push       publishes what the worker wrote (lock_free_bag.hpp)
//   return_to_worker()   release store of lent: pairs with available()'s acquire load, so the
//                        worker writes the block again only after the dispatcher's reads
//
// A worker keeps several blocks; with all of them lent it completes through the ticket records
// (runtime.cpp): it never waits for the dispatcher.
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
//
// Why: docs/design.md#the-hand-offs
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace creditloop::detail {

template <template <class> class Atomic, class Entry, std::size_t Capacity>
struct alignas(64) CompletionBlock {
  static constexpr std::size_t kCapacity = Capacity;

  /// The owning worker. Whether the block is its own again (never lent, or returned).
  [[nodiscard]] bool available() const noexcept {
    // acquire: pairs with return_to_worker(); the dispatcher's reads of the entries come before the
    // worker's next writes.
    return !lent.load(std::memory_order_acquire);
  }
  /// The owning worker, just before it publishes the block.
  void lend() noexcept {
    // relaxed: only the owner reads the flag, and the dispatcher's return_to_worker() comes after
    // this store in its order (the bag's exchange orders it before the drain).
    lent.store(true, std::memory_order_relaxed);
  }
  /// The dispatcher, once it has read every entry.
  void return_to_worker() noexcept {
    // release: pairs with available(); see the file comment.
    lent.store(false, std::memory_order_release);
  }

  Atomic<CompletionBlock*> next_completed{nullptr};  // the bag's link
  Atomic<bool> lent{false};
  std::uint32_t count = 0;  // entries in use: the worker writes it, the dispatcher reads it
  std::array<Entry, Capacity> entries{};
};

}  // namespace creditloop::detail
