// creditloop/detail/timer_heap.hpp: places keyed by the instant a bucket reaches a credit.
// Internal to the core; not part of the public API.
//
// A radix heap: it relies on the core's clock never running backwards, and on every filed instant
// being at or after the latest `now` it was asked about (a due instant is computed from the
// present). Entries sit in 65 intrusive lists by the highest bit in which their key differs from
// the floor (the latest `now`); list 0 holds the keys at or below the floor: the due ones.
// Moving the floor re-sorts only the lists whose range it crossed, and each entry can only move
// to a lower list, so over its life an entry moves at most 64 times (in practice once or twice).
//   set (file or move), erase: O(1).  find_due: O(1) amortized.
// Written by hand: a binary or d-ary heap pays O(log W) per expiry (it was the largest cost of
// a decision in callgrind), and no packaged library offers a radix heap with erase by key.
#pragma once

#include <array>
#include <bit>
#include <cassert>
#include <cstdint>
#include <vector>

#include "creditloop/units.hpp"

namespace creditloop::detail {

class TimerHeap {
 public:
  static constexpr std::uint32_t npos = 0xffffffffu;

  TimerHeap() { heads_.fill(npos); }

  /// Grows to hold places [0, places). May allocate.
  void resize(std::uint32_t places) {
    if (nodes_.size() < places) {
      nodes_.resize(places);
      list_.resize(places, kNotFiled);
    }
  }

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool contains(std::uint32_t place) const noexcept {
    return list_[place] != kNotFiled;
  }
  /// The instant `place` is filed at. Precondition: contains(place).
  [[nodiscard]] Nanos due(std::uint32_t place) const noexcept {
    return static_cast<Nanos>(nodes_[place].key ^ kBias);
  }

  /// Files `place` at `due`, or moves it there. An instant at or before the floor (the latest
  /// find_due's `now`) is due at once.
  void set(std::uint32_t place, Nanos due) noexcept {
    if (list_[place] != kNotFiled) {
      unlink(place);
    } else {
      ++size_;
    }
    nodes_[place].key = static_cast<std::uint64_t>(due) ^ kBias;
    link(place, list_for(nodes_[place].key));
  }

  /// Removes `place` if filed.
  void erase(std::uint32_t place) noexcept {
    if (list_[place] == kNotFiled) return;
    unlink(place);
    list_[place] = kNotFiled;
    --size_;
  }

  /// A place filed at or before `now`, or npos. `now` must not be earlier than in any earlier
  /// call. The place stays filed until erased or moved.
  [[nodiscard]] std::uint32_t find_due(Nanos now) noexcept {
    advance(static_cast<std::uint64_t>(now) ^ kBias);
    return heads_[0];
  }

 private:
  // Keys are biased so that the order of signed instants is the order of unsigned keys.
  static constexpr std::uint64_t kBias = std::uint64_t{1} << 63;
  static constexpr std::uint8_t kNotFiled = 0xff;

  struct Node {
    std::uint64_t key = 0;
    std::uint32_t prev = npos;
    std::uint32_t next = npos;
  };

  [[nodiscard]] std::uint8_t list_for(std::uint64_t key) const noexcept {
    return key <= floor_ ? 0 : static_cast<std::uint8_t>(64 - std::countl_zero(key ^ floor_));
  }

  void link(std::uint32_t place, std::uint8_t list) noexcept {
    Node& n = nodes_[place];
    list_[place] = list;
    n.prev = npos;
    n.next = heads_[list];
    if (n.next != npos) nodes_[n.next].prev = place;
    heads_[list] = place;
    if (list != 0) nonempty_ |= std::uint64_t{1} << (list - 1);
  }

  void unlink(std::uint32_t place) noexcept {
    const Node& n = nodes_[place];
    const std::uint8_t list = list_[place];
    if (n.prev != npos) {
      nodes_[n.prev].next = n.next;
    } else {
      heads_[list] = n.next;
      if (n.next == npos && list != 0) nonempty_ &= ~(std::uint64_t{1} << (list - 1));
    }
    if (n.next != npos) nodes_[n.next].prev = n.prev;
  }

  // Raises the floor to `now`. Lists above the highest bit in which `now` differs from the old
  // floor keep their meaning; the lists at or below it are re-sorted against the new floor.
  void advance(std::uint64_t now) noexcept {
    if (now <= floor_) return;
    const int crossed = 64 - std::countl_zero(now ^ floor_);  // 1..64
    std::uint64_t resort =
        nonempty_ & (crossed == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << crossed) - 1);
    floor_ = now;
    while (resort != 0) {
      const int list = std::countr_zero(resort) + 1;
      resort &= resort - 1;
      std::uint32_t place = heads_[static_cast<std::size_t>(list)];
      heads_[static_cast<std::size_t>(list)] = npos;
      nonempty_ &= ~(std::uint64_t{1} << (list - 1));
      while (place != npos) {
        const std::uint32_t next = nodes_[place].next;
        link(place, list_for(nodes_[place].key));
        place = next;
      }
    }
  }

  std::vector<Node> nodes_;         // by place
  std::vector<std::uint8_t> list_;  // by place: the list it is in, or kNotFiled
  std::array<std::uint32_t, 65> heads_{};
  std::uint64_t nonempty_ = 0;  // bit i: list i+1 is not empty
  std::uint64_t floor_ = 0;     // biased: the latest `now` seen by find_due
  std::size_t size_ = 0;
};

}  // namespace creditloop::detail
