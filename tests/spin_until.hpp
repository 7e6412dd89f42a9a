// tests/spin_until.hpp: waiting, in a test, for a condition another thread makes true. It polls
// with a yield, as the tests' loops did, but with a deadline: a condition that never comes ends
// the program with what was awaited, instead of a hang that ctest kills without a word.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace creditloop::test {

/// Long enough for the slowest stage (ThreadSanitizer, qemu), short of ctest's timeouts.
inline constexpr std::chrono::seconds kSpinLimit{120};

/// Returns once `done()` is true. From any thread: past the limit it writes `awaited` to standard
/// error and aborts, since a helper thread cannot fail the test for its caller.
template <class Done>
void spin_until(Done&& done, const char* awaited) {
  const auto limit = std::chrono::steady_clock::now() + kSpinLimit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > limit) {
      std::fprintf(stderr, "gave up after %lld s waiting for %s\n",
                   static_cast<long long>(kSpinLimit.count()), awaited);
      std::abort();
    }
    std::this_thread::yield();
  }
}

}  // namespace creditloop::test
