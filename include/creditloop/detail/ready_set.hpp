// creditloop/detail/ready_set.hpp: an ordered set of ring places with "next at or after".
// Internal to the core; not part of the public API.
//
// A 64-ary hierarchical bitmap of four levels (up to 2^24 places): bit i of a word at level L+1
// says word i of level L is non-zero. find_next reads at most four words going up and four going
// down, so its cost does not depend on how many places are set or how far away the next one is.
// set/clear touch one word per level only when a word turns zero or non-zero. Memory: 1 bit per
// place plus 1/63 of that for the upper levels. Written by hand because no packaged library
// offers successor search on a bitset in O(log64 N): boost::dynamic_bitset's find_next scans
// words linearly, which at a million places and 1 % set costs hundreds of word reads.
#pragma once

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace creditloop::detail {

class ReadySet {
 public:
  static constexpr std::uint32_t npos = 0xffffffffu;
  static constexpr int kLevels = 4;

  ReadySet() { resize(0); }

  /// Grows to hold places [0, places). Never shrinks. May allocate.
  void resize(std::uint32_t places) {
    // A word more than the places need, always empty: find_next() reads from's word with no
    // bounds test for any `from` up to the capacity.
    std::size_t words = static_cast<std::size_t>(places) / 64 + 1;
    for (auto& level : levels_) {
      if (level.size() < words) level.resize(words, 0);
      words = (words + 63) / 64;
    }
    places_ = places > places_ ? places : places_;
  }

  [[nodiscard]] std::uint32_t capacity() const noexcept { return places_; }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  [[nodiscard]] bool any() const noexcept { return count_ != 0; }

  [[nodiscard]] bool test(std::uint32_t i) const noexcept {
    assert(i < places_);
    return (levels_[0][i >> 6] >> (i & 63)) & 1u;
  }

  /// Adds place i; returns false if it was already there.
  bool set(std::uint32_t i) noexcept {
    assert(i < places_);
    std::uint32_t idx = i;
    for (auto& level : levels_) {
      std::uint64_t& w = level[idx >> 6];
      const std::uint64_t bit = std::uint64_t{1} << (idx & 63);
      const bool was_empty = w == 0;
      if (&level == &levels_[0] && (w & bit) != 0) return false;
      w |= bit;
      if (!was_empty) break;
      idx >>= 6;
    }
    ++count_;
    return true;
  }

  /// Removes place i; returns false if it was not there.
  bool clear(std::uint32_t i) noexcept {
    assert(i < places_);
    std::uint32_t idx = i;
    for (auto& level : levels_) {
      std::uint64_t& w = level[idx >> 6];
      const std::uint64_t bit = std::uint64_t{1} << (idx & 63);
      if (&level == &levels_[0] && (w & bit) == 0) return false;
      w &= ~bit;
      if (w != 0) break;
      idx >>= 6;
    }
    --count_;
    return true;
  }

  /// The first place at or after `from`, or npos. `from` is at most the capacity: a search
  /// starts at a place or just after one. Without a bounds test, a visit's search is 3
  /// instructions shorter (tools/instruction-budget).
  [[nodiscard]] std::uint32_t find_next(std::uint32_t from) const noexcept {
    assert(from <= places_);
    // The usual answer lies in from's own word, which exists (resize()).
    const std::uint64_t bits = levels_[0][from >> 6] & (~std::uint64_t{0} << (from & 63));
    if (bits != 0) {
      return (from & ~std::uint32_t{63}) | static_cast<std::uint32_t>(std::countr_zero(bits));
    }
    return find_after_word(from >> 6);
  }

 private:
  // The first place in a level-0 word after `word`, or npos: up the levels to the first word
  // with a bit, then down.
  [[nodiscard]] std::uint32_t find_after_word(std::uint64_t word) const noexcept {
    std::uint64_t idx = word + 1;  // the next word of level 0 is the next bit of level 1
    int level = 1;
    for (; level < kLevels; ++level) {
      const std::uint64_t above = idx >> 6;
      if (above >= levels_[level].size()) return npos;
      const std::uint64_t bits = levels_[level][above] & (~std::uint64_t{0} << (idx & 63));
      if (bits != 0) {
        idx = (above << 6) | static_cast<std::uint64_t>(std::countr_zero(bits));
        break;
      }
      idx = above + 1;
    }
    if (level == kLevels) return npos;
    while (level > 0) {
      --level;
      idx = (idx << 6) | static_cast<std::uint64_t>(std::countr_zero(levels_[level][idx]));
    }
    return static_cast<std::uint32_t>(idx);
  }

  std::vector<std::uint64_t> levels_[kLevels];
  std::uint32_t places_ = 0;
  std::size_t count_ = 0;
};

}  // namespace creditloop::detail
