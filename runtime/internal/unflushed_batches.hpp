// runtime/internal/unflushed_batches.hpp: which runtimes this thread holds completions for that it
// has not published (a CompletionBatch with entries). Internal to the runtime.
//
// shutdown() waits until nothing is in flight; completions claimed into a batch and not yet
// flushed are in flight until the batch's thread flushes it, so a shutdown() from that thread
// waited for itself, without a deadline for ever. It now looks here first and refuses with
// wrong_thread (tests/runtime/dispatcher_path_test.cpp). Thread-local: no other thread reads it.
// A thread holding unflushed batches of more than kRuntimes runtimes at once is not tracked past
// the first kRuntimes (its shutdown of another then waits as before).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace creditloop::detail {

class UnflushedBatches {
 public:
  static constexpr std::size_t kRuntimes = 4;

  /// A batch of `runtime`'s on this thread holds its first unpublished completion.
  void enter(const void* runtime) noexcept {
    for (Entry& e : entries_) {
      if (e.runtime == runtime || e.batches == 0) {
        e.runtime = runtime;
        ++e.batches;
        return;
      }
    }
  }
  /// That batch published them. `runtime` is only compared: it may be gone.
  void leave(const void* runtime) noexcept {
    for (Entry& e : entries_) {
      if (e.runtime == runtime && e.batches > 0) {
        --e.batches;
        return;
      }
    }
  }
  [[nodiscard]] bool holds(const void* runtime) const noexcept {
    for (const Entry& e : entries_) {
      if (e.runtime == runtime && e.batches > 0) return true;
    }
    return false;
  }

 private:
  struct Entry {
    const void* runtime = nullptr;
    std::uint32_t batches = 0;
  };
  std::array<Entry, kRuntimes> entries_{};
};

inline thread_local UnflushedBatches unflushed_batches;

}  // namespace creditloop::detail
