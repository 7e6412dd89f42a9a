// runtime/internal/learned_room.hpp: the runtime's learned room (RuntimeOptions::learned_room).
// The dispatcher feeds a RoomController each dispatch and each completion, keeping a dispatch's
// instant by its ticket record's index until the completion comes (the record itself is one full
// cache line, and a completer may have given the request back already), and publishes the room
// for monitoring. Internal to the runtime.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "creditloop/room_controller.hpp"
#include "creditloop/units.hpp"

namespace creditloop::detail {

class LearnedRoom {
 public:
  /// Room for the instants of `tickets` ticket records (allocates).
  LearnedRoom(RoomBounds bounds, std::size_t tickets)
      : controller_(bounds), dispatched_at_(tickets) {
    publish();
  }

  // ---- dispatcher only
  /// The ticket table grew to `tickets` records: allocates, as that growth does.
  void reserve(std::size_t tickets) {
    if (tickets > dispatched_at_.size()) dispatched_at_.resize(tickets);
  }
  /// Record `index` went out at `now`, leaving `in_flight` dispatched (itself included).
  void dispatched(std::uint32_t index, Nanos now, std::uint64_t in_flight) noexcept {
    dispatched_at_[index] = now;
    controller_.dispatched(now, in_flight);
  }
  /// Record `index`'s request completed; `now` is the dispatcher's clock as it applies that.
  void completed(std::uint32_t index, Nanos now) noexcept {
    const std::uint32_t before = controller_.slots();
    const Nanos latency_before = controller_.no_queue_latency();
    controller_.completed(dispatched_at_[index], now);
    // Only a change is stored, so a scrape's loads rarely take the line from the dispatcher.
    if (controller_.slots() != before || controller_.no_queue_latency() != latency_before) {
      publish();
    }
  }
  [[nodiscard]] std::uint32_t slots() const noexcept { return controller_.slots(); }

  // ---- any thread
  [[nodiscard]] std::uint32_t published_slots() const noexcept {
    return slots_.load(std::memory_order_relaxed);  // pairs with publish(): a gauge alone
  }
  [[nodiscard]] Nanos published_latency() const noexcept {
    return latency_.load(std::memory_order_relaxed);  // pairs with publish(): a gauge alone
  }

 private:
  // Relaxed: each value is read on its own, for monitoring, and guards nothing else; a reader
  // may see the slots of one window with the latency of the one before.
  void publish() noexcept {
    slots_.store(controller_.slots(), std::memory_order_relaxed);  // read by published_slots()
    latency_.store(controller_.no_queue_latency(),
                   std::memory_order_relaxed);  // read by published_latency()
  }

  RoomController controller_;
  std::vector<Nanos> dispatched_at_;  // by ticket record index
  std::atomic<std::uint32_t> slots_{0};
  std::atomic<Nanos> latency_{0};
};

}  // namespace creditloop::detail
