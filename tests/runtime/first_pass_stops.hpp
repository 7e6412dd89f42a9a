// tests/runtime/first_pass_stops.hpp: stops the first thread that reaches a test hook
// (runtime/internal/test_hooks.hpp) until the test lets it go; later threads pass. A preemption
// at a chosen instruction, opened without timing.
#pragma once

#include <atomic>
#include <semaphore>

#include "internal/test_hooks.hpp"

namespace creditloop::runtime_tests {

template <std::atomic<void (*)()>* Hook>
struct FirstPassStops {
  static inline std::binary_semaphore stopped{0};
  static inline std::binary_semaphore go{0};
  static inline std::atomic<bool> first{true};

  static void stop() {
    // relaxed: only elects the one thread that stops; the semaphores order the rest.
    if (!first.exchange(false, std::memory_order_relaxed)) return;
    stopped.release();
    go.acquire();
  }
  static void arm() {
    first.store(true, std::memory_order_relaxed);  // published by the hook's release store
    // release: pairs with the acquire load in CREDITLOOP_TEST_HOOK (test_hooks.hpp).
    Hook->store(&stop, std::memory_order_release);
  }
  static void disarm() { Hook->store(nullptr, std::memory_order_release); }
};

}  // namespace creditloop::runtime_tests
