// creditloop/detail/timer_heap.hpp: participants keyed by the instant a bucket reaches a credit.
// Internal to the core; not part of the public API.
//
// An indexed 4-ary min-heap of (due, place): push, update (either direction) and erase in
// O(log4 W), top in O(1). Four children per node keep a sift within one or two cache lines per
// level. Ties are broken by place so the order is deterministic. Written by hand because the
// standard heap algorithms cannot move or erase an element by key, and Boost's d_ary_heap
// mutable handles allocate per element.
#pragma once

#include <cassert>
#include <cstdint>
#include <vector>

#include "creditloop/units.hpp"

namespace creditloop::detail {

class TimerHeap {
 public:
  static constexpr std::uint32_t npos = 0xffffffffu;

  struct Entry {
    Nanos due;
    std::uint32_t place;
  };

  /// Grows to hold places [0, places). May allocate.
  void resize(std::uint32_t places) {
    if (pos_.size() < places) pos_.resize(places, npos);
  }
  void reserve(std::size_t entries) { heap_.reserve(entries); }

  [[nodiscard]] bool empty() const noexcept { return heap_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return heap_.size(); }
  [[nodiscard]] bool contains(std::uint32_t place) const noexcept { return pos_[place] != npos; }
  [[nodiscard]] const Entry& top() const noexcept { return heap_.front(); }

  /// Files `place` at `due`, or moves it there if already filed. Allocates only when the heap
  /// outgrows its reservation.
  void set(std::uint32_t place, Nanos due) {
    const std::uint32_t at = pos_[place];
    if (at == npos) {
      heap_.push_back({due, place});
      pos_[place] = static_cast<std::uint32_t>(heap_.size() - 1);
      sift_up(static_cast<std::uint32_t>(heap_.size() - 1));
      return;
    }
    const Nanos old = heap_[at].due;
    heap_[at].due = due;
    if (due < old) {
      sift_up(at);
    } else if (due > old) {
      sift_down(at);
    }
  }

  /// Removes `place` if filed.
  void erase(std::uint32_t place) noexcept {
    const std::uint32_t at = pos_[place];
    if (at == npos) return;
    pos_[place] = npos;
    const std::uint32_t last = static_cast<std::uint32_t>(heap_.size() - 1);
    if (at != last) {
      heap_[at] = heap_[last];
      pos_[heap_[at].place] = at;
      heap_.pop_back();
      if (!sift_up(at)) sift_down(at);
    } else {
      heap_.pop_back();
    }
  }

 private:
  static bool before(const Entry& a, const Entry& b) noexcept {
    return a.due < b.due || (a.due == b.due && a.place < b.place);
  }
  bool sift_up(std::uint32_t i) noexcept {
    const Entry e = heap_[i];
    const std::uint32_t start = i;
    while (i > 0) {
      const std::uint32_t parent = (i - 1) / 4;
      if (!before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      pos_[heap_[i].place] = i;
      i = parent;
    }
    heap_[i] = e;
    pos_[e.place] = i;
    return i != start;
  }
  void sift_down(std::uint32_t i) noexcept {
    const Entry e = heap_[i];
    const std::uint32_t n = static_cast<std::uint32_t>(heap_.size());
    for (;;) {
      const std::uint32_t first = i * 4 + 1;
      if (first >= n) break;
      std::uint32_t best = first;
      const std::uint32_t end = first + 4 < n ? first + 4 : n;
      for (std::uint32_t c = first + 1; c < end; ++c) {
        if (before(heap_[c], heap_[best])) best = c;
      }
      if (!before(heap_[best], e)) break;
      heap_[i] = heap_[best];
      pos_[heap_[i].place] = i;
      i = best;
    }
    heap_[i] = e;
    pos_[e.place] = i;
  }

  std::vector<Entry> heap_;
  std::vector<std::uint32_t> pos_;  // place -> index in heap_, or npos
};

}  // namespace creditloop::detail
