// runtime/internal/completion_block.hpp: a pool worker's completions, lent to the dispatcher in
// one piece. Internal to the runtime: not installed, not part of the public API.
//
// Why: a completion that writes its cost into its ticket's record moves the record's cache line
// from the dispatcher (which wrote it at dispatch and reads it again to apply the completion) to
// the completer and back: two cross-core transfers per request. A worker of the built-in pool
// instead writes (ticket, cost) entries, four to a line, into a block of its own and hands the
// block over whole; the ticket records stay in the dispatcher's cache.
//
// Ownership alternates, and `lent` says who has the block:
//   worker      available(): lent is false -> fill entries and count -> lend() -> push on a bag
//   dispatcher  drain the bag -> read entries and count -> return_to_worker()
// The bag's push (lock_free_bag.hpp) publishes what the worker wrote. return_to_worker()'s release
// store pairs with available()'s acquire load, so the worker writes into the block again only
// after the dispatcher's reads of it have happened. A worker keeps several blocks, so it fills one
// while the dispatcher reads others, and when all of its blocks are lent it completes through
// the ticket records instead (runtime.cpp): it never waits for the dispatcher.
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
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
