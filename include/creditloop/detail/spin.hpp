// creditloop/detail/spin.hpp: the monotonic clock and the pause instruction the runtime's waits
// use. Internal; the benchmarks share it so that their contenders wait the same way.
#pragma once

#include <chrono>

#include "creditloop/units.hpp"

namespace creditloop::detail {

/// std::chrono::steady_clock in nanoseconds: the runtime's default clock.
inline Nanos monotonic_now() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Tells the core it is spinning (frees the sibling hyper-thread, saves power); no-op elsewhere.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace creditloop::detail
