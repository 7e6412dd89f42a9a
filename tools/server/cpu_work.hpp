// CPU work of a requested size, for the server's work mode and the load test's demo backend.
//
// Measured as the calling thread's CPU time: what a request is charged for on a shared machine,
// where wall time also counts other threads' turns.
#pragma once

#include <time.h>

#include <cstdint>

namespace creditloop::server {

inline double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

/// Burns at least `ms` of this thread's CPU; returns the milliseconds it used.
inline double burn_cpu(double ms) {
  const double start = thread_cpu_ms();
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  double used = 0;
  while (used < ms) {
    for (int i = 0; i < 4096; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
    asm volatile("" : : "r"(x));  // keeps the work from being optimised away
    used = thread_cpu_ms() - start;
  }
  return used;
}

}  // namespace creditloop::server
