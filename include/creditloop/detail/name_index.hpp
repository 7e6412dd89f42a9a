// creditloop/detail/name_index.hpp: participant names to places, for add's duplicate check,
// find() and remove.
// Internal to the core; not part of the public API.
//
// Open addressing with linear probing over 8-byte entries (32 bits of the name's hash and the
// place); the names themselves stay where the core keeps them, and a lookup compares a name only
// when the 32 bits match. Removal shifts the entries behind the hole back, so no tombstones
// accumulate under churn. The table is kept at most 3/4 full, so a lookup probes about two
// entries, in one or two cache lines.
//   find, insert, erase: O(1) expected.  make_room_for_one: O(1) amortized (doubles and rehashes
//   from the stored hash bits, reading no name).
// Written by hand: std::unordered_map allocated a node per name (64 bytes with the allocator's
// header, plus the name a second time), and GCC's does not store the hash for a custom hasher, so
// each lookup hashed every node of its bucket's chain again to find where the chain ends. By
// perf, those lookups were 46 % of registering a million participants. Boost 1.74 (Debian 12)
// predates boost::unordered_flat_map.
#pragma once

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace creditloop::detail {

template <class Hash = std::hash<std::string_view>>
class BasicNameIndex {
 public:
  static constexpr std::uint32_t npos = 0xffffffffu;

  /// Makes room for `names` entries, so that inserting up to that many allocates nothing.
  void reserve(std::size_t names) {
    std::size_t entries = table_.empty() ? kMinCapacity : table_.size();
    while (names > entries / 4 * 3) entries *= 2;
    if (entries != table_.size()) rehash(entries);
  }

  /// Makes room for one more entry. May allocate; call it before changing any state, so that a
  /// failed allocation leaves the caller as it was.
  void make_room_for_one() { reserve(size_ + 1); }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// How many entries it holds before it must grow.
  [[nodiscard]] std::size_t capacity() const noexcept { return table_.size() / 4 * 3; }

  /// What find, insert and erase take for `name`: a caller that looks a name up and then adds it
  /// hashes it once.
  [[nodiscard]] static std::uint32_t hash_of(std::string_view name) noexcept {
    // Folded to 32 bits, so that both halves of the hash choose the home entry.
    const auto h = static_cast<std::uint64_t>(Hash{}(name));
    return static_cast<std::uint32_t>(h ^ (h >> 32));
  }

  /// The place of `name` (whose hash_of is `hash`), or npos. `name_of(place)` gives the name
  /// stored for a place.
  template <class NameOf>
  [[nodiscard]] std::uint32_t find(std::string_view name, std::uint32_t hash,
                                   const NameOf& name_of) const noexcept {
    if (size_ == 0) return npos;
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Entry& e = table_[i];
      if (e.place == npos) return npos;
      if (e.hash == hash && name_of(e.place) == name) return e.place;
    }
  }

  /// Adds the name whose hash_of is `hash` at `place`. The name must not be present, and
  /// make_room_for_one() must have run since the last insert.
  void insert(std::uint32_t hash, std::uint32_t place) noexcept {
    std::size_t i = hash & mask_;
    while (table_[i].place != npos) i = (i + 1) & mask_;
    table_[i] = Entry{hash, place};
    ++size_;
  }

  /// Removes the entry of the name whose hash_of is `hash`, which must be present at `place`.
  /// Compares places, not names.
  void erase(std::uint32_t hash, std::uint32_t place) noexcept {
    assert(size_ != 0);
    std::size_t hole = hash & mask_;
    while (table_[hole].place != place) hole = (hole + 1) & mask_;
    // Backward shift: an entry further along the run moves into the hole unless its home lies
    // cyclically after the hole (then the hole does not break its probe path).
    for (std::size_t next = (hole + 1) & mask_; table_[next].place != npos;
         next = (next + 1) & mask_) {
      const std::size_t home = table_[next].hash & mask_;
      const std::size_t from_home = (next - home) & mask_;
      const std::size_t from_hole = (next - hole) & mask_;
      if (from_home >= from_hole) {
        table_[hole] = table_[next];
        hole = next;
      }
    }
    table_[hole] = Entry{};
    --size_;
  }

 private:
  struct Entry {
    std::uint32_t hash = 0;
    std::uint32_t place = npos;  // npos: empty
  };
  static constexpr std::size_t kMinCapacity = 16;

  void rehash(std::size_t entries) {
    std::vector<Entry> old(entries);
    old.swap(table_);
    mask_ = entries - 1;
    for (const Entry& e : old) {
      if (e.place == npos) continue;
      std::size_t i = e.hash & mask_;
      while (table_[i].place != npos) i = (i + 1) & mask_;
      table_[i] = e;
    }
  }

  std::vector<Entry> table_;  // a power of two in size, or empty
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
  static_assert(std::has_single_bit(kMinCapacity));
};

using NameIndex = BasicNameIndex<>;

}  // namespace creditloop::detail
