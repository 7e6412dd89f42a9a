// runtime/internal/parker.hpp: how the dispatcher sleeps without losing a wake-up.
// Internal to the runtime: not installed, not part of the public API.
//
// An event count on one 32-bit word: bits 0-1 say what the dispatcher is (about to be) asleep
// for, the remaining bits count wake-ups. The protocol is the classic store-then-load pair on
// both sides, made safe by putting every access involved in the single seq_cst order:
//
//   dispatcher                                 any waker (producer, completer, admin call)
//   token = prepare(reasons)  seq_cst RMW      publish work                seq_cst RMW
//   re-check every work source  seq_cst loads  notify(reason): load word   seq_cst
//   if none: wait(token)      futex(token)       if it has the reason: CAS  -> wake count + 1,
//                                                reasons cleared, futex wake
//
// In the seq_cst order either the dispatcher's re-check comes after the waker's publication (it
// sees the work and does not sleep), or the waker's load comes after prepare() (it sees the reason
// and bumps the word, so the futex wait on the old value returns at once or is woken). A waker
// that finds no reason set does nothing but that one load: the common case costs no RMW and no
// system call.
//
// `Atomic` and the `Futex` policy are template parameters so that the memory-model checks
// (tests/relacy) run this code with a model of the wait.
#pragma once

#include <atomic>
#include <cstdint>

namespace creditloop::detail {

enum WakeReason : std::uint32_t {
  kWakeOnWork = 1,  // a submission, a command, a shutdown
  kWakeOnRoom = 2,  // a completion returned room
};

template <template <class> class Atomic, class Futex>
class Parker {
 public:
  /// Dispatcher only. Announces a sleep for `reasons`. The caller must re-check every source of
  /// work with seq_cst loads afterwards, then call wait() or cancel().
  std::uint32_t prepare(std::uint32_t reasons) noexcept {
    // seq_cst: ordered before the re-check loads and against every notify()'s load.
    return word_.fetch_or(reasons, std::memory_order_seq_cst) | reasons;
  }

  /// Any thread. Whether the dispatcher is asleep or about to be (monitoring only).
  [[nodiscard]] bool sleeping() const noexcept {
    return (word_.load(std::memory_order_relaxed) & kReasons) != 0;  // a gauge: no pairing
  }

  /// Dispatcher only. Work was found after prepare(): no sleep.
  void cancel() noexcept {
    // relaxed: only the dispatcher sets reasons; a waker's CAS on a stale value merely fails.
    word_.fetch_and(~kReasons, std::memory_order_relaxed);
  }

  /// Dispatcher only. Sleeps until a notify() for one of the prepared reasons, a spurious wake,
  /// or `timeout_ns` (negative: no limit). Returns at once if a notify() came after prepare().
  void wait(std::uint32_t token, std::int64_t timeout_ns) noexcept {
    Futex::wait(word_, token, timeout_ns);
    cancel();
  }

  /// Dispatcher only. The sleep, as one piece: prepare() for `reasons`, then `visible()`, which
  /// must re-check every source of work with seq_cst loads; if it finds work, cancel(); otherwise
  /// wait() for the timeout that `timeout()` returns (negative: no limit). Returns whether it
  /// slept. The runtime's idle loop and the Relacy parking model both sleep through this.
  template <class Visible, class Timeout>
  bool park(std::uint32_t reasons, Visible&& visible, Timeout&& timeout) {
    const std::uint32_t token = prepare(reasons);
    if (visible()) {
      cancel();
      return false;
    }
    wait(token, timeout());
    return true;
  }

  /// Any thread, after publishing work with a seq_cst RMW. Wakes the dispatcher if it sleeps
  /// (or is about to) for `reason`. Wait-free: one load, at most one CAS and one futex wake.
  void notify(std::uint32_t reason) noexcept {
    // seq_cst: the other half of the Dekker pair with prepare() (see the file comment).
    std::uint32_t word = word_.load(std::memory_order_seq_cst);
    if ((word & reason) == 0) return;
    const std::uint32_t woken = (word + kOneWake) & ~kReasons;
    // seq_cst: a failed CAS means the dispatcher cancelled or another waker already woke it.
    if (word_.compare_exchange_strong(word, woken, std::memory_order_seq_cst,
                                      std::memory_order_relaxed)) {
      Futex::wake(word_);
    }
  }

 private:
  static constexpr std::uint32_t kReasons = kWakeOnWork | kWakeOnRoom;
  static constexpr std::uint32_t kOneWake = 4;

  Atomic<std::uint32_t> word_{0};
};

}  // namespace creditloop::detail
