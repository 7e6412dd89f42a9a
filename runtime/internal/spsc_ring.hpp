// runtime/internal/spsc_ring.hpp: a bounded ring from one producer thread to one consumer
// thread, whose push never waits: on a full ring it fails at once. Internal to the runtime: not
// installed, not part of the public API.
//
//   tail_  records published, the producer's: release store in try_push(), whose relaxed reload
//          is its own; acquire load in drain() (a record's contents before its count)
//   head_  records consumed, the consumer's: release store in drain(), whose relaxed reload is
//          its own; acquire load in try_push() (the reads of a cell before it is written again)
// Each side reloads the other's position only when its own copy says full (producer) or empty
// (consumer). The counts never wrap in practice (2^64 records).
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
//
// Why: docs/design.md#the-captures-ring
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace creditloop::detail {

template <class Record, template <class> class Atomic>
class SpscRing {
 public:
  /// `capacity` is rounded up to a power of two, at least 2. Allocates.
  explicit SpscRing(std::size_t capacity) : mask_(round_up(capacity) - 1) {
    slots_ = std::make_unique<Record[]>(mask_ + 1);
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  [[nodiscard]] std::size_t capacity() const noexcept { return mask_ + 1; }

  /// The producer. Appends `record` if that leaves at least `keep_free` slots free; false (and
  /// nothing written) otherwise. Never blocks, never allocates.
  bool try_push(const Record& record, std::size_t keep_free = 0) noexcept {
    // relaxed: only this thread writes tail_.
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint64_t limit = capacity() - keep_free;
    if (tail - producer_head_ + 1 > limit) {
      // acquire: pairs with the release store of head_ in drain(); the consumer has finished
      // reading every cell it counted as consumed before this thread overwrites one.
      producer_head_ = head_.load(std::memory_order_acquire);
      if (tail - producer_head_ + 1 > limit) return false;
    }
    slots_[tail & mask_] = record;
    // release: pairs with the acquire load of tail_ in drain(); the record written above is
    // visible to the consumer once it sees the cell counted.
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  /// The consumer. Calls `take(const Record&)` on up to `most` published records, oldest first,
  /// and then frees their slots at once. Returns how many it took. Never blocks.
  template <class Take>
  std::size_t drain(Take&& take, std::size_t most) {
    // relaxed: only this thread writes head_.
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (consumer_tail_ == head) {
      // acquire: pairs with the release store of tail_ in try_push(); see there.
      consumer_tail_ = tail_.load(std::memory_order_acquire);
      if (consumer_tail_ == head) return 0;
    }
    const std::uint64_t available = consumer_tail_ - head;
    const std::uint64_t n = available < most ? available : most;
    for (std::uint64_t i = 0; i < n; ++i) take(slots_[(head + i) & mask_]);
    // release: pairs with the acquire load of head_ in try_push(); see there.
    head_.store(head + n, std::memory_order_release);
    return static_cast<std::size_t>(n);
  }

 private:
  static std::size_t round_up(std::size_t n) noexcept {
    std::size_t p = 2;
    while (p < n) p *= 2;
    return p;
  }

  const std::uint64_t mask_;
  std::unique_ptr<Record[]> slots_;
  alignas(64) Atomic<std::uint64_t> tail_{0};
  std::uint64_t producer_head_ = 0;  // the producer's copy of head_
  alignas(64) Atomic<std::uint64_t> head_{0};
  std::uint64_t consumer_tail_ = 0;  // the consumer's copy of tail_
};

}  // namespace creditloop::detail
