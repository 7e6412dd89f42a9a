// creditloop/detail/segmented.hpp: an append-only array whose elements never move.
// Internal to the core; not part of the public API.
//
// Elements live in fixed chunks of 4096, so growth never relocates them: they can hold atomics,
// and other threads may keep pointers into them. Indexing is a shift, a mask and two loads.
// Growth allocates one chunk at a time (never on a hot path once reserved).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace creditloop::detail {

template <class T>
class Segmented {
 public:
  static constexpr std::size_t kChunkBits = 12;
  static constexpr std::size_t kChunk = std::size_t{1} << kChunkBits;

  /// Ensures indices [0, n) exist (default-constructed). May allocate.
  void grow_to(std::size_t n) {
    while (chunks_.size() * kChunk < n) chunks_.push_back(std::make_unique<T[]>(kChunk));
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return chunks_.size() * kChunk; }

  T& operator[](std::size_t i) noexcept { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  const T& operator[](std::size_t i) const noexcept {
    return chunks_[i >> kChunkBits][i & (kChunk - 1)];
  }

 private:
  std::vector<std::unique_ptr<T[]>> chunks_;
};

}  // namespace creditloop::detail
