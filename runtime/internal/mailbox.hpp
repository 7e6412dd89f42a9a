// runtime/internal/mailbox.hpp: a participant's inbox plus how the dispatcher hears of it: one
// per ring place, one cache line, touched by that participant's producers and the dispatcher.
// docs/design.md, "The mailbox", says why no push is stranded, even across a re-registration.
// Internal to the runtime: not installed, not part of the public API.
//
//   listed   0, or the generation of the registration whose producer listed the mailbox on the
//            activation list: only the producer that sets it from 0 pushes the mailbox, and the
//            dispatcher clears it when it takes the mailbox off the list, then takes the inbox
//
// Memory orders: a producer's push and its read of `listed`, the dispatcher's clear of `listed`
// and its take of the inbox, all four seq_cst: a store-then-load pair on two locations, where
// acquire and release are not enough.
//
// `Atomic` and `Link` (queue_link.hpp) are template parameters so that the memory-model checks
// (tests/relacy) run this code.
#pragma once

#include <atomic>
#include <cstdint>

#include "internal/inbox.hpp"
#include "internal/test_hooks.hpp"

namespace creditloop::detail {

template <class Node, template <class> class Atomic, class Link>
struct alignas(64) Mailbox {
  using Queue = Inbox<Node, Atomic, Link>;
  enum class Submit : std::uint8_t {
    queued,
    queued_and_listed,
    queued_behind_stale,
    refused,
    unsupported
  };

  /// Any thread. Lock-free. queued_and_listed: the caller must push this mailbox on the
  /// activation list and wake the dispatcher. queued_behind_stale: the mailbox is listed by a
  /// former registration of the place; the caller must raise StaleListings and wake the
  /// dispatcher. unsupported: the inbox cannot hold `node`'s address (Inbox::push).
  Submit submit(Node& node, std::uint32_t registration) noexcept {
    switch (inbox.push(node, registration)) {
      case Queue::Push::refused:
        return Submit::refused;
      case Queue::Push::unsupported:
        return Submit::unsupported;
      case Queue::Push::queued:
        return Submit::queued;
      case Queue::Push::queued_first:
        break;
    }
    CREDITLOOP_TEST_HOOK(submit_pushed_first);
    // seq_cst, success and failure: see the file comment (pairs with the store in take_listed()).
    std::uint32_t lister = 0;
    if (listed.compare_exchange_strong(lister, registration, std::memory_order_seq_cst,
                                       std::memory_order_seq_cst)) {
      return Submit::queued_and_listed;
    }
    return lister == registration ? Submit::queued : Submit::queued_behind_stale;
  }

  /// Dispatcher only, for a mailbox just taken off the activation list. Returns its requests,
  /// oldest first, or nullptr when it is closed (`open` false: the dispatcher's own record).
  Node* take_listed(bool open, std::uint32_t current_generation) noexcept {
    // seq_cst: see the file comment (pairs with the exchange in submit()).
    listed.store(0, std::memory_order_seq_cst);
    return open ? inbox.take(current_generation) : nullptr;
  }

  /// Dispatcher only, for a live participant whatever its mailbox's listing (a withdrawal looks
  /// for a request there). Returns its requests, oldest first, and leaves `listed` as it is: a
  /// listed mailbox stays on the activation list and its take_listed() then finds only what came
  /// since; a submit onto the emptied inbox lists the mailbox only if it is not listed already
  /// (tests/relacy/withdrawal_model.cpp).
  Node* take_unlisted(std::uint32_t current_generation) noexcept {
    return inbox.take(current_generation);
  }

  /// Dispatcher only, after StaleListings::take() said so, for the open registration
  /// `current_generation`: its requests, oldest first, if the mailbox is listed by another
  /// registration (whose lister may be stopped before its push), otherwise nullptr. Leaves
  /// `listed` as it is, as take_unlisted() does.
  Node* take_if_stale(std::uint32_t current_generation) noexcept {
    // seq_cst: a read of 0 or of this registration comes after the producer's read of the stale
    // lister in the single order, so a take_listed() or a live lister covers its push.
    const std::uint32_t lister = listed.load(std::memory_order_seq_cst);
    return lister != 0 && lister != current_generation ? inbox.take(current_generation) : nullptr;
  }

  /// Dispatcher only. Registration of generation `g` in this place.
  void open(std::uint32_t g) noexcept { inbox.open(g); }

  Queue inbox;
  Atomic<std::uint32_t> listed{0};        // the lister's registration; 0: not listed
  Atomic<Mailbox*> next_listed{nullptr};  // the activation list's link (lock_free_bag.hpp)
  std::uint32_t place = 0;                // constant once created
};

/// Whether some producer found its mailbox listed by a former registration of the place
/// (Mailbox::queued_behind_stale) since the dispatcher last looked. Any thread raises, the
/// dispatcher takes.
template <template <class> class Atomic>
class StaleListings {
 public:
  /// Any thread, after the push that found the stale listing, before notifying the dispatcher.
  void raise() noexcept {
    // seq_cst: the work the dispatcher re-checks after Parker::prepare() (parker.hpp); its
    // release half publishes the push to take().
    flag_.store(true, std::memory_order_seq_cst);
  }
  /// Dispatcher only. Whether a producer raised the flag; clears it. The dispatcher must then
  /// call Mailbox::take_if_stale() on every open place.
  bool take() noexcept {
    // relaxed first: the common case reads a line nobody writes. acquire (the exchange): pairs
    // with raise(), so the raiser's push is visible to the takes that follow.
    return flag_.load(std::memory_order_relaxed) &&
           flag_.exchange(false, std::memory_order_acquire);
  }
  /// Dispatcher only. The re-check after Parker::prepare(). seq_cst: against raise()'s store.
  [[nodiscard]] bool raised() const noexcept { return flag_.load(std::memory_order_seq_cst); }

 private:
  Atomic<bool> flag_{false};
};

}  // namespace creditloop::detail
