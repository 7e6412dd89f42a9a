// runtime/internal/spin.hpp: the monotonic clock and the pause instruction the runtime's waits
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

/// How long the dispatcher spins before it yields and sleeps, unless the embedder says: 20 µs
/// when the CPUs this process may run on outnumber the runtime's own busy threads (the dispatcher
/// and `workers`), none otherwise. Spinning buys a wake-up without a system call only if the
/// spinner has a CPU to itself; where it does not, it takes the CPU from the producers and
/// workers it waits for (on 2 CPUs with one worker, bench_runtime's cost per request was lower
/// without the spin in all six configurations, in two runs side by side). `cpus` 0 means
/// unknown: spin.
inline std::chrono::nanoseconds default_spin(unsigned cpus, unsigned workers) noexcept {
  const bool spare_cpu = cpus == 0 || cpus > workers + 1;
  return spare_cpu ? std::chrono::nanoseconds{20'000} : std::chrono::nanoseconds{0};
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
