// creditloop/detail/chunked_table.hpp: an array whose elements never move.
// Internal to creditloop; not part of the public API.
//
// Elements live in chunks of 4096 reached through a fixed directory, so growth never relocates
// them: they can hold atomics, other threads may keep pointers into them, and, because the
// directory itself never moves either, other threads may index the table while its owner grows it
// (find()). Indexing is a shift, a mask and two loads. Growth allocates one chunk at a time (never
// on a hot path once reserved); growing past kMax throws std::length_error.
//
// The directory's entries are atomics only for find(): the owner's own accesses are relaxed
// loads, which compile to plain loads.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <stdexcept>

namespace creditloop::detail {

template <class T, std::size_t Chunks = 4096>
class ChunkedTable {
 public:
  static constexpr std::size_t kChunkBits = 12;
  static constexpr std::size_t kChunk = std::size_t{1} << kChunkBits;
  static constexpr std::size_t kChunks = Chunks;
  static constexpr std::size_t kMax = kChunk * kChunks;

  ChunkedTable() = default;
  ChunkedTable(const ChunkedTable&) = delete;
  ChunkedTable& operator=(const ChunkedTable&) = delete;
  ~ChunkedTable() {
    for (std::size_t i = 0; i < chunks_; ++i)
      delete[] directory_[i].load(std::memory_order_relaxed);
  }

  /// Any thread. nullptr for an index never grown to.
  T* find(std::size_t i) const noexcept {
    if (i >= kMax) return nullptr;
    // acquire: pairs with the release store in grow_to(); the chunk's elements are constructed.
    T* chunk = directory_[i >> kChunkBits].load(std::memory_order_acquire);
    return chunk == nullptr ? nullptr : chunk + (i & (kChunk - 1));
  }

  /// Owner only, for an index below capacity().
  T& operator[](std::size_t i) const noexcept {
    // relaxed: the owner created the chunk itself.
    return directory_[i >> kChunkBits].load(std::memory_order_relaxed)[i & (kChunk - 1)];
  }

  /// Owner only. Ensures indices [0, n) exist, default-constructed, then passed chunk by chunk
  /// to `fresh(chunk, first index)` before any other thread can find them. May allocate.
  template <class F>
  void grow_to(std::size_t n, F&& fresh) {
    if (n > kMax) throw std::length_error("creditloop: a chunked table grew past its capacity");
    while (chunks_ * kChunk < n) {
      T* chunk = new T[kChunk]();
      fresh(chunk, chunks_ * kChunk);
      // release: pairs with the acquire in find().
      directory_[chunks_].store(chunk, std::memory_order_release);
      ++chunks_;
    }
  }
  void grow_to(std::size_t n) {
    grow_to(n, [](T*, std::size_t) {});
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return chunks_ * kChunk; }

 private:
  std::array<std::atomic<T*>, kChunks> directory_{};
  std::size_t chunks_ = 0;  // owner only
};

}  // namespace creditloop::detail
