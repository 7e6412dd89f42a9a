// runtime/internal/futex.hpp: the Linux futex, the Parker's way to sleep (parker.hpp).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <ctime>

namespace creditloop::detail {

struct LinuxFutex {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                std::atomic<std::uint32_t>::is_always_lock_free);

  /// Sleeps while `word` holds `expected`, at most `timeout_ns` (negative: no limit). May return
  /// spuriously.
  static void wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                   std::int64_t timeout_ns) noexcept {
    timespec limit{};
    timespec* limit_ptr = nullptr;
    if (timeout_ns >= 0) {
      limit.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000);
      limit.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000);
      limit_ptr = &limit;
    }
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected,
            limit_ptr, nullptr, 0);
  }

  static void wake(std::atomic<std::uint32_t>& word) noexcept {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
  }
};

}  // namespace creditloop::detail
