// creditloop/detail/place_store.hpp: one contiguous record per ring place: a header, then one
// bucket per metered class. Internal to the core; not part of the public API.
//
// A visit reads the header (queue, refill time, plan) and then the buckets; keeping them in one
// record of a few adjacent cache lines, in ring order, lets the hardware prefetcher follow the
// cursor instead of paying a miss per array. The record size depends on k, known only at run
// time, so the layout is computed here rather than by the compiler. Records live in chunks that
// never move, so they may hold atomics and other threads may keep pointers into them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace creditloop::detail {

template <class Header, class Bucket>
class PlaceStore {
  static_assert(std::is_trivially_destructible_v<Header> &&
                std::is_trivially_destructible_v<Bucket>);
  static_assert(sizeof(Header) % alignof(Bucket) == 0);

 public:
  static constexpr std::size_t kChunkBits = 12;
  static constexpr std::size_t kChunk = std::size_t{1} << kChunkBits;
  static constexpr std::size_t kAlign = 64;

  explicit PlaceStore(int buckets_per_place)
      : buckets_(static_cast<std::size_t>(buckets_per_place)),
        stride_(round_up(sizeof(Header) + buckets_ * sizeof(Bucket), alignof(Header))) {}

  /// Ensures places [0, n) exist, default-constructed. May allocate.
  void grow_to(std::size_t n) {
    while (chunks_.size() * kChunk < n) {
      auto* raw =
          static_cast<std::byte*>(::operator new (stride_* kChunk, std::align_val_t{kAlign}));
      chunks_.emplace_back(raw);
      for (std::size_t i = 0; i < kChunk; ++i) {
        std::byte* at = raw + i * stride_;
        new (at) Header();
        for (std::size_t c = 0; c < buckets_; ++c)
          new (at + sizeof(Header) + c * sizeof(Bucket)) Bucket();
      }
    }
  }

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

  /// Asks the cache for place's record (header and buckets) ahead of use.
  void prefetch(std::uint32_t place) const noexcept {
    const std::byte* p = at(place);
    for (std::size_t line = 0; line < stride_; line += kAlign) __builtin_prefetch(p + line);
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept {
      ::operator delete (p, std::align_val_t{kAlign});
    }
  };
  static constexpr std::size_t round_up(std::size_t n, std::size_t a) {
    return (n + a - 1) / a * a;
  }
  std::byte* at(std::uint32_t place) const noexcept {
    return chunks_[place >> kChunkBits].get() + (place & (kChunk - 1)) * stride_;
  }

  std::size_t buckets_;
  std::size_t stride_;
  std::vector<std::unique_ptr<std::byte[], Free>> chunks_;
};

}  // namespace creditloop::detail
