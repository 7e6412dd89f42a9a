// creditloop/detail/timer_heap.hpp: places keyed by the instant a bucket reaches a credit, in a
// radix heap with 6-bit digits. Internal to the core; not part of the public API.
//
// - Needs a clock that never runs backwards, and every filed instant at or after the latest `now`
//   asked about (a due instant is computed from the present).
// - An entry above the floor (the latest `now` at which an entry may have been due) sits in the
//   list of the highest 6-bit digit where its key differs from the floor, at its key's value
//   there; the due list holds the keys at or below the floor. Moving the floor re-sorts only the
//   lists it overtook, and an entry only moves down a digit: at most 11 times over its life.
// - set (file or move), erase: O(1). find_due: O(1) amortized.
// - Lists are blocks of 31 entries (key, place, id; 512 bytes), all full but a list's first, in a
//   dense pool; free blocks are a stack of indices; each entry's position is in a dense table by
//   timer id (given out when a place first files, kept until forget()).
// - Each place's TimerHandle (its key and timer id) lives where the caller chooses (`Handles`),
//   touched only when that place is filed or erased; an erased handle keeps its key, which the
//   core reads as "the credit instant last filed".
//
// Why: docs/design.md#data-structures
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "creditloop/units.hpp"

namespace creditloop::detail {

/// What a place keeps of its timer: 16 bytes, to fit beside a bucket's 48 in one cache line.
struct TimerHandle {
  static constexpr std::uint32_t npos = 0xffffffffu;
  // Keys are biased so that the order of signed instants is the order of unsigned keys.
  static constexpr std::uint64_t kBias = std::uint64_t{1} << 63;

  std::uint64_t key = 0;    // the biased instant, filed or last filed
  std::uint32_t id = npos;  // its row in the heap's table of positions, once it has filed

  [[nodiscard]] Nanos instant() const noexcept { return static_cast<Nanos>(key ^ kBias); }
  void set_instant(Nanos at) noexcept { key = static_cast<std::uint64_t>(at) ^ kBias; }
};

/// Handles in a vector of their own, for a heap used on its own.
class OwnedTimerHandles {
 public:
  TimerHandle& operator()(std::uint32_t place) noexcept { return handles_[place]; }
  const TimerHandle& operator()(std::uint32_t place) const noexcept { return handles_[place]; }
  void resize(std::uint32_t places) {
    if (handles_.size() < places) handles_.resize(places);
  }

 private:
  std::vector<TimerHandle> handles_;
};

template <class Handles>
class BasicTimerHeap {
 public:
  static constexpr std::uint32_t npos = TimerHandle::npos;

  explicit BasicTimerHeap(Handles handles = Handles{}) : handles_(std::move(handles)) {
    heads_.fill(npos);
  }

  /// Makes room for `places` filed entries, so that filing allocates nothing up to that many.
  /// Grows the handles too when the heap owns them. May allocate.
  void reserve(std::uint32_t places) {
    if constexpr (requires(Handles & s) { s.resize(places); }) handles_.resize(places);
    pos_.reserve(places);
    free_ids_.reserve(places);
    // Every list's blocks are full but its first, a list holds at least one entry, and a re-sort
    // holds one drained block.
    const std::size_t partial = std::min<std::size_t>(places, kLists);
    blocks_.reserve(places / kPerBlock + 1 + partial + 1);
    free_blocks_.reserve(blocks_.capacity());
  }

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool contains(std::uint32_t place) const noexcept {
    return position(handles_(place)) != npos;
  }
  /// The instant `place` is (or was last) filed at.
  [[nodiscard]] Nanos due(std::uint32_t place) const noexcept { return handles_(place).instant(); }

  /// Files `place` at `due`, or moves it there. An instant at or before the floor (at most the
  /// latest find_due's `now`) is due at once.
  void set(std::uint32_t place, Nanos due) noexcept {
    TimerHandle& s = handles_(place);
    const std::uint64_t key = static_cast<std::uint64_t>(due) ^ kBias;
    if (due < due_from_) due_from_ = due;
    if (s.id == npos) s.id = take_id();
    const std::uint32_t pos = pos_[s.id];
    if (pos != npos) {
      const std::uint16_t from = list_for(s.key);
      if (from == list_for(key)) {
        // A charge-back usually moves an instant within its list: only the key changes.
        entry(pos).key = key;
        s.key = key;
        return;
      }
      remove(from, pos);
      --size_;
    }
    insert(s, place, key);
  }

  /// set() for a place known not to be filed: it does not read where the place sits. At a
  /// million participants that read is a cache miss, and a caller often knows the answer (the
  /// core files a bucket it has just taken from the ready set, which holds no filed place).
  void file(std::uint32_t place, Nanos due) noexcept {
    TimerHandle& s = handles_(place);
    assert(!contains(place));
    const std::uint64_t key = static_cast<std::uint64_t>(due) ^ kBias;
    if (due < due_from_) due_from_ = due;
    if (s.id == npos) s.id = take_id();
    insert(s, place, key);
  }

  /// Removes `place` if filed. Its key stays, and its id.
  void erase(std::uint32_t place) noexcept {
    const TimerHandle& s = handles_(place);
    const std::uint32_t pos = position(s);
    if (pos == npos) return;
    remove(list_for(s.key), pos);
    pos_[s.id] = npos;
    --size_;
  }

  /// Removes `place` if filed and gives its id back: for a place whose timer will not be filed
  /// again soon (its participant leaves, or its bucket is dropped).
  void forget(std::uint32_t place) noexcept {
    erase(place);
    TimerHandle& s = handles_(place);
    if (s.id == npos) return;
    free_ids_.push_back(s.id);  // within the reservation: ids never outnumber the places
    s.id = npos;
  }

  /// A place filed at or before `now`, or npos. `now` must not be earlier than in any earlier
  /// call. The place stays filed until erased or moved.
  [[nodiscard]] std::uint32_t find_due(Nanos now) noexcept {
    if (now < due_from_ || !settle(static_cast<std::uint64_t>(now) ^ kBias)) return npos;
    const std::uint32_t first = heads_[0];
    return blocks_[first].entries[blocks_[first].count - 1].place;
  }

  /// Whether find_due or pop_due at `now` may find a place: false proves neither will. Two
  /// instructions, for callers that ask on every step.
  [[nodiscard]] bool may_be_due(Nanos now) const noexcept { return now >= due_from_; }

  /// Removes and returns a place filed at or before `now`, or npos. Like find_due then erase,
  /// but it touches neither the place's handle nor its record, which the caller has not loaded.
  [[nodiscard]] std::uint32_t pop_due(Nanos now) noexcept {
    if (now < due_from_ || !settle(static_cast<std::uint64_t>(now) ^ kBias)) return npos;
    const std::uint32_t first = heads_[0];
    Block& b = blocks_[first];
    const Entry& e = b.entries[--b.count];
    pos_[e.id] = npos;
    const std::uint32_t place = e.place;
    if (b.count == 0) {
      heads_[0] = b.next;
      free_block(first);
    }
    --size_;
    return place;
  }

 private:
  static constexpr std::uint64_t kBias = TimerHandle::kBias;
  // A block's size in entries (a power of two, for positions): kPerBlock of them and the link.
  static constexpr std::uint32_t kStride = 32;
  static constexpr std::uint32_t kPerBlock = kStride - 1;

  struct Entry {
    std::uint64_t key = 0;
    std::uint32_t place = npos;
    std::uint32_t id = npos;  // the place's row in pos_
  };
  struct alignas(64) Block {
    std::array<Entry, kPerBlock> entries;
    std::uint32_t next = npos;  // the list's next (full) block
    std::uint32_t count = 0;
  };
  static_assert(sizeof(Block) == 16 * kStride);

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

  Entry& entry(std::uint32_t pos) noexcept { return blocks_[pos / kStride].entries[pos % kStride]; }

  // Files `s` (of `place`, with an id, not filed) at `key`.
  void insert(TimerHandle& s, std::uint32_t place, std::uint64_t key) noexcept {
    ++size_;
    s.key = key;
    pos_[s.id] = append(list_for(key), Entry{key, place, s.id});
  }

  // The most recently freed block, so that the live ones stay packed and likely in cache; a new
  // one past the end only when none is free (within the reservation, this does not allocate).
  std::uint32_t take_block() noexcept {
    const std::uint32_t index = pop_given_back(free_blocks_);
    return index != npos ? index : new_block();
  }
  // Where a place's entry sits, or npos when it is not filed (or has never had an id).
  [[nodiscard]] std::uint32_t position(const TimerHandle& s) const noexcept {
    return s.id == npos ? npos : pos_[s.id];
  }

  // A free id, or a new one (which allocates only past the reservation).
  std::uint32_t take_id() noexcept {
    const std::uint32_t id = pop_given_back(free_ids_);
    return id != npos ? id : new_id();
  }
  // The index given back last, or npos when none is left.
  static std::uint32_t pop_given_back(std::vector<std::uint32_t>& stack) noexcept {
    if (stack.empty()) return npos;
    const std::uint32_t index = stack.back();
    stack.pop_back();
    return index;
  }
  [[gnu::cold, gnu::noinline]] std::uint32_t new_id() {
    pos_.push_back(npos);
    return static_cast<std::uint32_t>(pos_.size() - 1);
  }

  // Out of line and cold, so that filing does not save registers for a vector's growth.
  [[gnu::cold, gnu::noinline]] std::uint32_t new_block() {
    blocks_.emplace_back();
    // So that freeing a block never allocates.
    if (free_blocks_.capacity() < blocks_.capacity()) free_blocks_.reserve(blocks_.capacity());
    return static_cast<std::uint32_t>(blocks_.size() - 1);
  }
  void free_block(std::uint32_t index) noexcept { free_blocks_.push_back(index); }

  void mark(std::uint16_t list, bool nonempty) noexcept {
    if (list == 0) return;
    const std::size_t digit = (list - 1) / 64;
    const std::uint64_t bit = std::uint64_t{1} << ((list - 1) % 64);
    std::uint64_t& word = nonempty_[digit];
    word = nonempty ? word | bit : word & ~bit;
    if (word != 0) {
      digits_ |= 1u << digit;
    } else {
      digits_ &= ~(1u << digit);
    }
  }

  // Appends to `list`'s first block, or a new first block when it is full; returns the position.
  std::uint32_t append(std::uint16_t list, const Entry& e) noexcept {
    std::uint32_t first = heads_[list];
    if (first == npos || blocks_[first].count == kPerBlock) {
      const std::uint32_t fresh = take_block();
      blocks_[fresh].next = first;
      blocks_[fresh].count = 0;
      if (first == npos) mark(list, true);
      heads_[list] = first = fresh;
    }
    Block& b = blocks_[first];
    const std::uint32_t index = b.count++;
    b.entries[index] = e;
    return first * kStride + index;
  }

  // Fills the hole at `pos` with the last entry of `list`'s first block, and records where that
  // entry went.
  void remove(std::uint16_t list, std::uint32_t pos) noexcept {
    const std::uint32_t first = heads_[list];
    Block& b = blocks_[first];
    const std::uint32_t last = first * kStride + --b.count;
    if (pos != last) {
      const Entry moved = b.entries[b.count];
      entry(pos) = moved;
      pos_[moved.id] = pos;
    }
    if (b.count == 0) {
      heads_[list] = b.next;
      free_block(first);
      if (heads_[list] == npos) mark(list, false);
    }
  }

  // Moves a whole list (blocks full but its first, `first`) into the due list. Entries keep their
  // positions, so no position is written, except for the few entries of a partial first block
  // that are appended one by one to keep the due list's blocks full but its first.
  void splice_into_due(std::uint32_t first) noexcept {
    if (heads_[0] == npos) {
      heads_[0] = first;
      return;
    }
    std::uint32_t full = first;
    if (blocks_[first].count < kPerBlock) {
      full = blocks_[first].next;
      const std::uint32_t count = blocks_[first].count;
      for (std::uint32_t i = 0; i < count; ++i) {
        const Entry e = blocks_[first].entries[i];
        pos_[e.id] = append(0, e);
      }
      free_block(first);
    }
    if (full == npos) return;
    std::uint32_t last = full;
    while (blocks_[last].next != npos) last = blocks_[last].next;
    // After the due list's first block, which stays the only one that may be partial.
    const std::uint32_t due = heads_[0];
    blocks_[last].next = blocks_[due].next;
    blocks_[due].next = full;
  }

  // The least key any filed entry may have: 0 while the due list holds one, else the least key
  // the lowest non-empty list can hold (the floor's digits above its digit d, its value at d,
  // zeros below), or past every key when nothing is filed.
  [[nodiscard]] std::uint64_t least_possible_key() const noexcept {
    if (heads_[0] != npos) return 0;
    if (digits_ == 0) return ~std::uint64_t{0};
    const int digit = std::countr_zero(digits_);
    const int value = std::countr_zero(nonempty_[static_cast<std::size_t>(digit)]);
    const int above = (digit + 1) * kDigitBits;
    const std::uint64_t high = above >= 64 ? 0 : floor_ >> above << above;
    return high | static_cast<std::uint64_t>(value) << (digit * kDigitBits);
  }

  // Brings the due list up to `now` (biased); true when it holds an entry. When it holds none,
  // due_from_ moves up to the least key left, so that the callers' next checks cost one compare.
  // Until `now` reaches that key the floor stays where it is, rather than re-sorting entries that
  // are not due yet at every tick of the clock: by callgrind, class selection with one
  // participant went from 263 to 219 instructions, and a visit from 340 to 334 at 1,000
  // participants all waiting.
  bool settle(std::uint64_t now) noexcept {
    const std::uint64_t least = least_possible_key();
    if (now < least) {
      due_from_ = static_cast<Nanos>(least ^ kBias);
      return false;
    }
    advance(now);
    if (heads_[0] != npos) return true;
    due_from_ = static_cast<Nanos>(least_possible_key() ^ kBias);
    return false;
  }

  // Raises the floor to `now`. Let d be the highest digit in which `now` differs from the old
  // floor and v its new value there. Every entry below digit d, and every entry at digit d with a
  // value at or below v, is overtaken (it is due, or now agrees with the floor at d) and is
  // re-sorted; the others keep their list, since the floor above d did not change and at d it is
  // still below them. That keeps every entry in list_for(key), which remove relies on.
  void advance(std::uint64_t now) noexcept {
    if (now <= floor_) return;
    const int top = (63 - std::countl_zero(now ^ floor_)) / kDigitBits;
    const auto value = static_cast<int>((now >> (top * kDigitBits)) & 63);
    floor_ = now;
    // Only the digits that hold entries, lowest first; entries moved down from `top` land in
    // digits already done, where they belong.
    for (std::uint32_t digits = digits_ & ((2u << top) - 1); digits != 0; digits &= digits - 1) {
      const int digit = std::countr_zero(digits);
      std::uint64_t& lists = nonempty_[static_cast<std::size_t>(digit)];
      const std::uint64_t resort =
          digit < top || value == 63 ? lists : lists & ((std::uint64_t{2} << value) - 1);
      lists &= ~resort;
      if (lists == 0) digits_ &= ~(1u << digit);
      for (std::uint64_t left = resort; left != 0; left &= left - 1) {
        const std::size_t list = 1 + static_cast<std::size_t>(digit) * 64 +
                                 static_cast<std::size_t>(std::countr_zero(left));
        std::uint32_t block = heads_[list];
        heads_[list] = npos;
        if (digit < top) {
          // Below the floor's highest changed digit every entry is due: the blocks move whole.
          splice_into_due(block);
          continue;
        }
        while (block != npos) {
          const std::uint32_t next = blocks_[block].next;
          if (next != npos) __builtin_prefetch(&blocks_[next]);
          // The drained block is freed only after its entries are placed, so the appends never
          // write into it (they take other blocks).
          const std::uint32_t count = blocks_[block].count;
          for (std::uint32_t i = 0; i < count; ++i) {
            const Entry e = blocks_[block].entries[i];
            pos_[e.id] = append(list_for(e.key), e);
          }
          free_block(block);
          block = next;
        }
      }
    }
  }

  Handles handles_;
  std::vector<std::uint32_t> pos_;          // by id: block * kStride + index while filed, else npos
  std::vector<std::uint32_t> free_ids_;     // ids given back by forget()
  std::vector<Block> blocks_;               // the filed entries, and free blocks among them
  std::vector<std::uint32_t> free_blocks_;  // as a stack, its capacity that of blocks_
  std::array<std::uint32_t, kLists> heads_{};      // each list's first block
  std::array<std::uint64_t, kDigits> nonempty_{};  // digit d, bit v: list 1 + 64d + v not empty
  std::uint32_t digits_ = 0;                       // bit d: nonempty_[d] != 0
  std::uint64_t floor_ = 0;  // biased: the latest `now` of a find_due that could find one
  // No filed instant is before it. Lowered by set(), raised only when a find finds nothing due
  // (erasing an entry leaves it a valid bound), so "nothing due" is one compare. An instant, not
  // a biased key: the visit's check then compares the clock as it is, where a biased clock was
  // kept on the stack across the walk (about 4 instructions a visit, tools/instruction-budget).
  Nanos due_from_ = std::numeric_limits<Nanos>::max();
  std::size_t size_ = 0;
};

using TimerHeap = BasicTimerHeap<OwnedTimerHandles>;

}  // namespace creditloop::detail
