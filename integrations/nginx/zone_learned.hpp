// integrations/nginx/zone_learned.hpp: one room controller that every nginx worker of one
// configuration feeds, in the module's zone, so that a learned room is learned from all of the
// backend's traffic and is one room for all workers. Internal to the module: its C code reaches
// it through creditloop_zone.h.
//
//   word 0  lock      1 while a worker feeds the controller: taken by try_lock, never waited for
//   word 1  slots     the controller's room, published after each feed
//   word 2  latency   its no-queue latency in nanoseconds, the same way
//   word 3  last      the latest instant fed (the workers' clocks are one clock, but a worker may
//                     feed an instant a little older than another's, taken before it)
// and the controller after them, touched only while holding the lock.
//
// Orders: unlock()'s release -> the next try_lock()'s acquire, ordering one feed's writes to the
// controller before the next one's reads; slots and latency are read alone: relaxed.
//
// `Atomic` and `Controller` are template parameters so that the memory-model check runs this
// code with a stand-in controller.
// Why: docs/nginx.md#a-room-that-finds-itself
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace creditloop::nginx {

template <template <class> class Atomic, class Controller>
class ZoneLearned {
 public:
  using Word = Atomic<std::uint64_t>;
  static constexpr std::size_t kWords = 4;

  /// A view of the learned room whose words are at `words` and whose controller is `controller`.
  ZoneLearned(Word* words, Controller* controller) noexcept
      : words_(words), controller_(controller) {}

  /// In the master, before the workers fork, once the words hold 0 and the controller is built:
  /// its room published.
  void start() noexcept { publish(*controller_); }

  /// A request went out at `now` with `in_flight` in flight, all workers together. False: the
  /// sample was dropped, another worker was feeding.
  bool dispatched(std::int64_t now, std::uint64_t in_flight) noexcept {
    if (!try_lock()) return false;
    controller_->dispatched(latest(now), in_flight);
    publish(*controller_);
    unlock();
    return true;
  }

  /// A request dispatched at `dispatched_at` completed at `now`. False: dropped, as above.
  bool completed(std::int64_t dispatched_at, std::int64_t now) noexcept {
    if (!try_lock()) return false;
    controller_->completed(dispatched_at, latest(now));
    publish(*controller_);
    unlock();
    return true;
  }

  [[nodiscard]] std::uint64_t slots() const noexcept {
    // relaxed: a value read alone (see the top).
    return words_[kSlots].load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t latency() const noexcept {
    // relaxed: as slots().
    return words_[kLatency].load(std::memory_order_relaxed);
  }

 private:
  static constexpr std::size_t kLock = 0;
  static constexpr std::size_t kSlots = 1;
  static constexpr std::size_t kLatency = 2;
  static constexpr std::size_t kLast = 3;

  bool try_lock() noexcept {
    // relaxed: a first look, so that a busy lock costs no write to its line.
    if (words_[kLock].load(std::memory_order_relaxed) != 0) return false;
    // acquire: pairs with the release store in unlock() by the last holder.
    return words_[kLock].exchange(1, std::memory_order_acquire) == 0;
  }
  void unlock() noexcept {
    // release: pairs with the acquire exchange in the next holder's try_lock().
    words_[kLock].store(0, std::memory_order_release);
  }

  // Under the lock: never earlier than an instant already fed.
  std::int64_t latest(std::int64_t now) noexcept {
    // relaxed, both: written and read under the lock only; atomic because the zone holds words.
    const auto last = static_cast<std::int64_t>(words_[kLast].load(std::memory_order_relaxed));
    now = std::max(now, last);
    words_[kLast].store(static_cast<std::uint64_t>(now), std::memory_order_relaxed);
    return now;
  }

  void publish(const Controller& controller) noexcept {
    // relaxed, both: values read alone (see the top).
    words_[kSlots].store(controller.slots(), std::memory_order_relaxed);
    words_[kLatency].store(
        static_cast<std::uint64_t>(std::max<std::int64_t>(controller.no_queue_latency(), 0)),
        std::memory_order_relaxed);
  }

  Word* words_;
  Controller* controller_;
};

}  // namespace creditloop::nginx
