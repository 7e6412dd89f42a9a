// runtime/internal/shutdown_answer.hpp: who takes what a shutdown(hand_back) call's command hands
// back, the caller or the runtime. The caller may stop waiting at its deadline while the
// dispatcher, held up, has not run the command yet; the command then still runs later, and what it
// hands back must stay in the runtime for the next call, not go to a caller that has left. One
// compare-and-swap on one word decides it, whichever side comes first. Internal to the runtime:
// not installed, not part of the public API.
//
//   dispatcher, in the command's work         caller, its wait for the command's `done` ended
//   answer(list): CAS waiting -> answered     answered(in_time, wait): if not in time,
//     won: the list moves in here               CAS waiting -> gone; lost: wait for `done`
//   then `done`'s release (run_commands())    won or in time: take() after `done`'s acquire
//
//   the CAS (both sides)   relaxed: the word's modification order alone says who won; nothing is
//                          published through it
//   the list               written before the release of the command's `done` (a semaphore),
//                          read after its acquire: that pair publishes it, and it is the order a
//                          twin weakens (tests/relacy/shutdown_answer_model.cpp)
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
//
// Why: docs/design.md#shutdown
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace creditloop::detail {

template <class List, template <class> class Atomic>
class ShutdownAnswer {
 public:
  ShutdownAnswer() = default;
  ShutdownAnswer(const ShutdownAnswer&) = delete;
  ShutdownAnswer& operator=(const ShutdownAnswer&) = delete;

  /// Dispatcher, inside the command's work, before the command's `done` is released. Moves `list`
  /// to the caller if it still waits, and says whether it did; otherwise `list` stays as it is.
  bool answer(List& list) noexcept {
    if (!settle(kAnswered)) return false;
    handed_back_ = std::move(list);  // the dispatcher's until `done`'s release
    return true;
  }

  /// Caller, once its wait for `done` ended: `in_time` says whether it acquired `done`. Says
  /// whether the dispatcher answered: in time, or after the deadline because it was answering at
  /// that moment, and then `wait_done()` acquires `done` (a matter of moments). False: the caller
  /// left first, and answer() will leave the list where it is.
  template <class WaitDone>
  bool answered(bool in_time, WaitDone&& wait_done) {
    if (in_time) return true;
    if (settle(kGone)) return false;
    wait_done();
    return true;
  }

  /// Caller, after answered() said true: what the dispatcher handed back (read after `done`'s
  /// acquire).
  List take() noexcept { return std::move(handed_back_); }

 private:
  static constexpr std::uint8_t kWaiting = 0, kAnswered = 1, kGone = 2;

  bool settle(std::uint8_t outcome) noexcept {
    std::uint8_t expected = kWaiting;
    // relaxed: only the winner matters, and the list is published by `done` (file comment).
    return waiter_.compare_exchange_strong(expected, outcome, std::memory_order_relaxed,
                                           std::memory_order_relaxed);
  }

  Atomic<std::uint8_t> waiter_{kWaiting};
  List handed_back_;
};

}  // namespace creditloop::detail
