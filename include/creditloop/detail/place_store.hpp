// creditloop/detail/place_store.hpp: one contiguous record per ring place, in ring order: a
// header, then one bucket per metered class. Internal to the core; not part of the public API.
//
// - The record size depends on k, known only at run time, so the layout is computed here rather
//   than by the compiler.
// - Records live in chunks that never move, so they may hold atomics and other threads may keep
//   pointers into them. The first chunk is allocated whole and its records are constructed as
//   the store grows into them.
// - Past the first few chunks, records come in 2 MiB-aligned slabs offered to the kernel as
//   transparent huge pages.
//
// Why: docs/design.md#data-structures
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace creditloop::detail {

/// Memory for records, aligned to `align`; when `huge`, also offered as transparent huge pages.
/// Throws std::bad_alloc.
std::byte* allocate_records(std::size_t bytes, std::size_t align, bool huge);
void free_records(std::byte* p, std::size_t align) noexcept;

template <class Header, class Bucket>
class PlaceStore {
  static_assert(std::is_trivially_destructible_v<Header> &&
                std::is_trivially_destructible_v<Bucket>);
  static_assert(sizeof(Header) % alignof(Bucket) == 0);

 public:
  static constexpr std::size_t kChunkBits = 12;
  static constexpr std::size_t kChunk = std::size_t{1} << kChunkBits;
  static constexpr std::size_t kAlign = 64;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  // Chunks allocated one by one before slabs begin, and chunks per slab: a slab of 8 chunks of
  // 4096 records, each a whole number of 64-byte lines, is a whole number of 2 MiB pages.
  static constexpr std::size_t kSmallChunks = 8;
  static constexpr std::size_t kSlabChunks = 8;
  static_assert(kSlabChunks * kChunk * kAlign % kHugePage == 0);

  explicit PlaceStore(int buckets_per_place)
      : buckets_(static_cast<std::size_t>(buckets_per_place)),
        stride_(round_up(sizeof(Header) + buckets_ * sizeof(Bucket), alignof(Header))) {}

  /// Ensures places [0, n) exist, default-constructed. May allocate.
  void grow_to(std::size_t n) {
    if (n <= capacity_) return;
    if (capacity_ < kChunk) grow_first_chunk(n < kChunk ? n : kChunk);
    while (capacity_ < n) {
      const bool slab = chunks_.size() >= kSmallChunks;
      const std::size_t count = slab ? kSlabChunks : 1;
      const std::size_t align = slab ? kHugePage : kAlign;
      blocks_.reserve(blocks_.size() + 1);
      chunks_.reserve(chunks_.size() + count);
      std::byte* raw = allocate_records(stride_ * kChunk * count, align, slab);
      blocks_.emplace_back(raw, Free{align});
      construct(raw, 0, kChunk * count);
      for (std::size_t i = 0; i < count; ++i) chunks_.push_back(raw + i * kChunk * stride_);
      capacity_ += kChunk * count;
    }
  }

  /// Places that exist.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  /// The buckets of the record whose header is `h`: they follow it directly.
  static Bucket* buckets_after(Header& h) noexcept {
    return std::launder(
        reinterpret_cast<Bucket*>(reinterpret_cast<std::byte*>(&h) + sizeof(Header)));
  }
  static const Bucket* buckets_after(const Header& h) noexcept {
    return std::launder(
        reinterpret_cast<const Bucket*>(reinterpret_cast<const std::byte*>(&h) + sizeof(Header)));
  }

  Header& header(std::uint32_t place) noexcept {
    return *std::launder(reinterpret_cast<Header*>(at(place)));
  }
  const Header& header(std::uint32_t place) const noexcept {
    return *std::launder(reinterpret_cast<const Header*>(at(place)));
  }
  Bucket& bucket(std::uint32_t place, std::size_t c) noexcept {
    return *std::launder(
        reinterpret_cast<Bucket*>(at(place) + sizeof(Header) + c * sizeof(Bucket)));
  }
  const Bucket& bucket(std::uint32_t place, std::size_t c) const noexcept {
    return *std::launder(
        reinterpret_cast<const Bucket*>(at(place) + sizeof(Header) + c * sizeof(Bucket)));
  }

  /// Asks the cache for the record whose header is `h` (header and buckets) ahead of use.
  void prefetch(const Header& h) const noexcept {
    const auto* p = reinterpret_cast<const std::byte*>(&h);
    // The first three lines unrolled (a record of k = 2 has three): the loop's step and test
    // cost 6 instructions a record more (tools/instruction-budget, the 1M cases).
    __builtin_prefetch(p);
    if (stride_ > kAlign) __builtin_prefetch(p + kAlign);
    if (stride_ > 2 * kAlign) __builtin_prefetch(p + 2 * kAlign);
    for (std::size_t line = 3 * kAlign; line < stride_; line += kAlign) {
      __builtin_prefetch(p + line);
    }
  }

 private:
  struct Free {
    std::size_t align = kAlign;
    void operator()(std::byte* p) const noexcept { free_records(p, align); }
  };
  static constexpr std::size_t round_up(std::size_t n, std::size_t a) {
    return (n + a - 1) / a * a;
  }
  // Default-constructs records [from, to) of the block at `raw`.
  void construct(std::byte* raw, std::size_t from, std::size_t to) const noexcept {
    for (std::size_t i = from; i < to; ++i) {
      std::byte* at = raw + i * stride_;
      new (at) Header();
      for (std::size_t c = 0; c < buckets_; ++c)
        new (at + sizeof(Header) + c * sizeof(Bucket)) Bucket();
    }
  }
  // Constructs the first chunk's records up to `n`, allocating the whole chunk the first time.
  void grow_first_chunk(std::size_t n) {
    if (chunks_.empty()) {
      blocks_.reserve(1);
      chunks_.reserve(1);
      std::byte* raw = allocate_records(stride_ * kChunk, kAlign, false);
      blocks_.emplace_back(raw, Free{kAlign});
      chunks_.push_back(raw);
    }
    construct(chunks_[0], capacity_, n);
    capacity_ = n;
  }
  std::byte* at(std::uint32_t place) const noexcept {
    return chunks_[place >> kChunkBits] + (place & (kChunk - 1)) * stride_;
  }

  std::size_t buckets_;
  std::size_t stride_;
  std::vector<std::byte*> chunks_;                          // by place >> kChunkBits
  std::vector<std::unique_ptr<std::byte[], Free>> blocks_;  // owns the chunks and slabs
  std::size_t capacity_ = 0;                                // places that exist
};

}  // namespace creditloop::detail
