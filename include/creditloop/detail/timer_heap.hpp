// creditloop/detail/timer_heap.hpp: places keyed by the instant a bucket reaches a credit.
// Internal to the core; not part of the public API.
//
// A radix heap with 6-bit digits: it relies on the core's clock never running backwards, and on
// every filed instant being at or after the latest `now` it was asked about (a due instant is
// computed from the present). An entry above the floor (the latest `now`) sits in the list for
// the highest 6-bit digit in which its key differs from the floor and its key's value there;
// the due list holds the keys at or below the floor. Moving the floor re-sorts only the lists it
// overtook, and each entry can only move to a lower digit, so an entry moves at most 11 times
// over its life and in practice once or twice. Binary digits were tried first: an entry then
// moved down about one bit per move, and every move is a cache miss on the entry's record.
//   set (file or move), erase: O(1).  find_due: O(1) amortized.
// Written by hand: a binary or d-ary heap pays O(log W) per expiry (it was the largest cost of
// a decision in callgrind), and no packaged library offers a radix heap with erase by key.
//
// Where the nodes live is the caller's choice (`Nodes` maps a place to its TimerNode): the core
// keeps each one inside the bucket's own cache line, so that filing a bucket touches the line the
// visit already holds, and a visit reads a bucket's credit instant without a second miss. An
// erased node keeps its key: the core reads it as "the credit instant last filed".
#pragma once

#include <array>
#include <bit>
#include <cassert>
#include <cstdint>
#include <utility>
#include <vector>

#include "creditloop/units.hpp"

namespace creditloop::detail {

/// One place's entry: 16 bytes, so that it fits beside a bucket's 48 in one cache line. Which
/// list a filed node is in is not stored: it is always list_for(key) against the current floor
/// (see advance()).
struct TimerNode {
  static constexpr std::uint32_t npos = 0xffffffffu;
  static constexpr std::uint32_t kNotFiled = 0xfffffffeu;  // in `prev`; places stay below it
  // Keys are biased so that the order of signed instants is the order of unsigned keys.
  static constexpr std::uint64_t kBias = std::uint64_t{1} << 63;

  std::uint64_t key = 0;  // the biased instant
  std::uint32_t prev = kNotFiled;
  std::uint32_t next = npos;

  [[nodiscard]] bool filed() const noexcept { return prev != kNotFiled; }

  [[nodiscard]] Nanos instant() const noexcept { return static_cast<Nanos>(key ^ kBias); }
  void set_instant(Nanos at) noexcept { key = static_cast<std::uint64_t>(at) ^ kBias; }
};

/// Nodes in a vector of their own, for a heap used on its own.
class OwnedTimerNodes {
 public:
  TimerNode& operator()(std::uint32_t place) noexcept { return nodes_[place]; }
  const TimerNode& operator()(std::uint32_t place) const noexcept { return nodes_[place]; }
  void resize(std::uint32_t places) {
    if (nodes_.size() < places) nodes_.resize(places);
  }

 private:
  std::vector<TimerNode> nodes_;
};

template <class Nodes>
class BasicTimerHeap {
 public:
  static constexpr std::uint32_t npos = TimerNode::npos;

  explicit BasicTimerHeap(Nodes nodes = Nodes{}) : nodes_(std::move(nodes)) { heads_.fill(npos); }

  /// Grows to hold places [0, places), for node storage that the heap owns. May allocate.
  void resize(std::uint32_t places) requires requires(Nodes& n) { n.resize(places); }
  { nodes_.resize(places); }

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool contains(std::uint32_t place) const noexcept { return nodes_(place).filed(); }
  /// The instant `place` is (or was last) filed at.
  [[nodiscard]] Nanos due(std::uint32_t place) const noexcept { return nodes_(place).instant(); }

  /// Files `place` at `due`, or moves it there. An instant at or before the floor (the latest
  /// find_due's `now`) is due at once.
  void set(std::uint32_t place, Nanos due) noexcept {
    TimerNode& n = nodes_(place);
    const std::uint64_t key = static_cast<std::uint64_t>(due) ^ kBias;
    if (n.filed()) {
      // A charge-back usually moves an instant within its list: then only the key changes, and
      // the neighbours' records are not written.
      if (list_for(key) == list_for(n.key)) {
        n.key = key;
        return;
      }
      unlink(n);
    } else {
      ++size_;
    }
    n.key = key;
    link(place, n, list_for(key));
  }

  /// Removes `place` if filed. Its key stays.
  void erase(std::uint32_t place) noexcept {
    TimerNode& n = nodes_(place);
    if (!n.filed()) return;
    unlink(n);
    n.prev = TimerNode::kNotFiled;
    --size_;
  }

  /// A place filed at or before `now`, or npos. `now` must not be earlier than in any earlier
  /// call. The place stays filed until erased or moved.
  [[nodiscard]] std::uint32_t find_due(Nanos now) noexcept {
    advance(static_cast<std::uint64_t>(now) ^ kBias);
    return heads_[0];
  }

 private:
  static constexpr std::uint64_t kBias = TimerNode::kBias;

  // Lists: 0 is the due list; 1 + 64 * d + v holds the keys whose highest digit differing from
  // the floor is d and whose value there is v.
  static constexpr int kDigitBits = 6;
  static constexpr int kDigits = (64 + kDigitBits - 1) / kDigitBits;  // 11
  static constexpr std::size_t kLists = 1 + kDigits * 64;

  [[nodiscard]] std::uint16_t list_for(std::uint64_t key) const noexcept {
    if (key <= floor_) return 0;
    const int digit = (63 - std::countl_zero(key ^ floor_)) / kDigitBits;
    const auto value = static_cast<int>((key >> (digit * kDigitBits)) & 63);
    return static_cast<std::uint16_t>(1 + digit * 64 + value);
  }

  void link(std::uint32_t place, TimerNode& n, std::uint16_t list) noexcept {
    n.prev = npos;
    n.next = heads_[list];
    if (n.next != npos) nodes_(n.next).prev = place;
    heads_[list] = place;
    if (list != 0) nonempty_[(list - 1) / 64] |= std::uint64_t{1} << ((list - 1) % 64);
  }

  void unlink(const TimerNode& n) noexcept {
    if (n.prev != npos) {
      nodes_(n.prev).next = n.next;
    } else {
      // Not stored in the node: every filed entry is in list_for(key) against the current floor.
      const std::uint16_t list = list_for(n.key);
      heads_[list] = n.next;
      if (n.next == npos && list != 0) {
        nonempty_[(list - 1) / 64] &= ~(std::uint64_t{1} << ((list - 1) % 64));
      }
    }
    if (n.next != npos) nodes_(n.next).prev = n.prev;
  }

  // Raises the floor to `now`. Let d be the highest digit in which `now` differs from the old
  // floor and v its new value there. Every entry below digit d, and every entry at digit d with a
  // value at or below v, is overtaken (it is due, or now agrees with the floor at d) and is
  // re-sorted; the others keep their list, since the floor above d did not change and at d it is
  // still below them. That keeps every entry in list_for(key), which unlink relies on.
  void advance(std::uint64_t now) noexcept {
    if (now <= floor_) return;
    const int top = (63 - std::countl_zero(now ^ floor_)) / kDigitBits;
    const auto value = static_cast<int>((now >> (top * kDigitBits)) & 63);
    floor_ = now;
    for (int digit = 0; digit <= top; ++digit) {
      std::uint64_t& lists = nonempty_[static_cast<std::size_t>(digit)];
      std::uint64_t resort =
          digit < top || value == 63 ? lists : lists & ((std::uint64_t{2} << value) - 1);
      lists &= ~resort;
      while (resort != 0) {
        const std::size_t list = 1 + static_cast<std::size_t>(digit) * 64 +
                                 static_cast<std::size_t>(std::countr_zero(resort));
        resort &= resort - 1;
        std::uint32_t place = heads_[list];
        heads_[list] = npos;
        while (place != npos) {
          TimerNode& n = nodes_(place);
          const std::uint32_t next = n.next;
          link(place, n, list_for(n.key));
          place = next;
        }
      }
    }
  }

  Nodes nodes_;
  std::array<std::uint32_t, kLists> heads_{};
  std::array<std::uint64_t, kDigits> nonempty_{};  // digit d, bit v: list 1 + 64d + v not empty
  std::uint64_t floor_ = 0;                        // biased: the latest `now` seen by find_due
  std::size_t size_ = 0;
};

using TimerHeap = BasicTimerHeap<OwnedTimerNodes>;

}  // namespace creditloop::detail
