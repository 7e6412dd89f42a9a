// runtime/internal/accepting_flag.hpp: whether the runtime still accepts submissions, and the
// order that lets a submit refused by shutdown say so. begin_shutdown() clears the flag and only
// then closes the inboxes; a producer whose push was refused reads the flag to pick its error,
// shut_down or unknown_participant. Internal to the runtime: not installed, not part of the
// public API.
//
//   dispatcher, stop_accepting()               producer, submit() refused
//   store false (relaxed)                      push: its acquire load of the inbox head, or a
//   then each inbox's close(): acq_rel  ---->  failed CAS (acquire), reads the head closed
//   exchange on its head                       shut_down(): load (relaxed) reads false
//
// The flag needs no order of its own: the close's release publishes the store before it, and a
// push refused by that close has acquired it (inbox.hpp). Closing first, or a close without the
// release, lets a refused producer read the flag still set (tests/relacy/shutdown_flag_model.cpp).
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
//
// Why: docs/design.md#shutdown
#pragma once

#include <atomic>

namespace creditloop::detail {

template <template <class> class Atomic>
class AcceptingFlag {
 public:
  /// The dispatcher, in begin_shutdown(): clears the flag, then runs `close_inboxes`, which closes
  /// every inbox (after it a push is refused).
  template <class CloseInboxes>
  void stop_accepting(CloseInboxes&& close_inboxes) {
    // relaxed: published by each inbox's close() in close_inboxes() (release), which every
    // producer refused by it acquires (file comment).
    accepting_.store(false, std::memory_order_relaxed);
    close_inboxes();
  }

  /// A producer whose push was refused: whether shutdown refused it (else its mailbox is gone).
  [[nodiscard]] bool shut_down() const noexcept {
    // relaxed: the refused push acquired the close that follows the store (file comment).
    return !accepting_.load(std::memory_order_relaxed);
  }

 private:
  Atomic<bool> accepting_{true};
};

}  // namespace creditloop::detail
