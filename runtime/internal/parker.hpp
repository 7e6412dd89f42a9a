// runtime/internal/parker.hpp: how the dispatcher sleeps without losing a wake-up, an event count
// on one 32-bit word. Internal to the runtime: not installed, not part of the public API.
//
//   bits 0-1    what the dispatcher is (about to be) asleep for
//   bits 2-31   the count of wake-ups
//
//   dispatcher                                 any waker (producer, completer, admin call)
//   token = prepare(reasons)  seq_cst RMW      publish work                seq_cst RMW
//   re-check every work source  seq_cst loads  notify(reason): load word   seq_cst
//   if none: wait(token)      futex(token)       if it has the reason: CAS  -> wake count + 1,
//                                                reasons cleared, futex wake
//
// idle_wait() is the dispatcher's whole wait for work: spin, yield, then park(), timed.
// `Atomic` and the `Futex` policy are template parameters so that tests/relacy runs this code.
//
// Why: docs/design.md#parking
#pragma once

#include <algorithm>
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

  /// Any thread, after publishing with plain stores (relaxed or release) what the dispatcher's
  /// re-check reads with plain loads: an embedder's room flag (Runtime::wake()). notify()'s load
  /// would pair with nothing there (the store may sit in the waker's store buffer while the
  /// dispatcher re-checks), so the word is read with a read-modify-write that releases the store:
  /// before prepare() in the word's order, prepare() acquires it and the re-check sees the store;
  /// after it, it reads the reason and wakes (tests/relacy/wake_model.cpp). Wait-free: one RMW,
  /// at most one CAS and one futex wake.
  void wake(std::uint32_t reasons) noexcept {
    // release: pairs with prepare()'s RMW (seq_cst, so acquire), which reads this or a later value.
    std::uint32_t word = word_.fetch_or(0, std::memory_order_release);
    wake_if_waiting(word, reasons);
  }

  /// Any thread, after publishing work with a seq_cst RMW. Wakes the dispatcher if it sleeps
  /// (or is about to) for `reason`. Wait-free: one load, at most one CAS and one futex wake.
  void notify(std::uint32_t reason) noexcept {
    // seq_cst: the other half of the Dekker pair with prepare() (see the file comment).
    std::uint32_t word = word_.load(std::memory_order_seq_cst);
    wake_if_waiting(word, reason);
  }

 private:
  static constexpr std::uint32_t kReasons = kWakeOnWork | kWakeOnRoom;
  static constexpr std::uint32_t kOneWake = 4;

  // `word` as the waker last read it.
  void wake_if_waiting(std::uint32_t word, std::uint32_t reason) noexcept {
    if ((word & reason) == 0) return;
    const std::uint32_t woken = (word + kOneWake) & ~kReasons;
    // seq_cst: a failed CAS means the dispatcher cancelled or another waker already woke it.
    if (word_.compare_exchange_strong(word, woken, std::memory_order_seq_cst,
                                      std::memory_order_relaxed)) {
      Futex::wake(word_);
    }
  }

  Atomic<std::uint32_t> word_{0};
};

/// The timed sleep's length while the dispatcher has something to retry that no waker will announce
/// (a batch the pool's queue could not take: no thread says when it can). Starts short and doubles
/// up to a millisecond, so the dispatcher neither polls at full speed nor sleeps long past the
/// moment the retry would succeed.
class RetryBackoff {
 public:
  static constexpr std::int64_t kFirstNs = 16'000;
  static constexpr std::int64_t kLastNs = 1'000'000;

  void reset() noexcept { next_ns_ = kFirstNs; }
  /// Whether no timed sleep was taken for the current retry yet.
  [[nodiscard]] bool first() const noexcept { return next_ns_ == kFirstNs; }
  /// The timeout of the next sleep: `timeout_ns` (negative: none) cut to the backoff's length.
  std::int64_t next(std::int64_t timeout_ns) noexcept {
    const std::int64_t wait = timeout_ns < 0 ? next_ns_ : std::min(timeout_ns, next_ns_);
    next_ns_ = std::min(2 * next_ns_, kLastNs);
    ++waits_;
    return wait;
  }
  /// Timed sleeps taken for retries, ever.
  [[nodiscard]] std::uint64_t waits() const noexcept { return waits_; }

 private:
  std::int64_t next_ns_ = kFirstNs;
  std::uint64_t waits_ = 0;
};

/// Dispatcher only. Waits until `env` shows work (or room) for `reasons`, or a sleep on `parker`
/// ends; returns whether it slept. Spin, then yield, then sleep: a hand-off that comes within the
/// spin costs no system call. A retry that was already waited for once will not succeed within a
/// spin, so spinning or yielding would only take CPU from the threads it waits for: straight to a
/// timed sleep. `Env` provides:
///   bool work_visible()      every work source for the reasons, with seq_cst loads
///   bool room_ready()        the embedder's room test, when the wait is also for room it says
///   bool room_polled()       whether there is such a test (the sleep then has a timeout)
///   std::int64_t room_recheck_ns()
///   bool retry_pending()     whether the dispatcher has something to retry that nobody announces
///   bool start_spin()        whether to spin at all (and starts the spin's clock)
///   bool spin_more(std::uint32_t i)   whether the spin goes on after i rounds
///   void relax(), void yield()
///   void parked(std::int64_t timeout_ns)   told before each sleep (statistics, probes)
template <class ParkerT, class Env>
bool idle_wait(ParkerT& parker, std::uint32_t reasons, Env& env, RetryBackoff& backoff) {
  const bool retry = env.retry_pending();
  if (!retry) backoff.reset();
  const bool spin = (!retry || backoff.first()) && env.start_spin();
  for (std::uint32_t i = 1;; ++i) {
    if (env.work_visible()) {
      backoff.reset();
      return false;
    }
    if (env.room_ready()) return false;
    if (!spin || !env.spin_more(i)) break;
    env.relax();
  }
  for (int i = 0; (!retry || backoff.first()) && i < 4; ++i) {
    env.yield();
    if (env.work_visible()) return false;
  }
  return parker.park(
      reasons, [&] { return env.work_visible() || env.room_ready(); },
      [&] {
        std::int64_t timeout = env.room_polled() ? env.room_recheck_ns() : -1;
        if (retry) timeout = backoff.next(timeout);
        env.parked(timeout);
        return timeout;
      });
}

}  // namespace creditloop::detail
