// runtime/internal/mailbox.hpp: a participant's inbox plus how the dispatcher hears of it.
// Internal to the runtime: not installed, not part of the public API.
//
// A mailbox is one per ring place, one cache line, touched by that participant's producers and by
// the dispatcher. A push that finds the inbox empty must put the mailbox on the runtime's
// activation list, exactly once however many producers race: the `listed` flag says the mailbox
// is on the list (or about to be), and only the producer that flips it from false pushes it.
// The dispatcher clears the flag when it takes the mailbox off the list, and only then takes the
// inbox. So a mailbox is never on the list twice, which the intrusive list needs, even across a
// removal and re-registration of its place (a closed inbox that is still listed stays listed, and
// the new registration's first push then finds the flag set and adds nothing).
//
// Why no push is stranded: a producer whose push found the inbox empty and whose flag exchange
// found `listed` already set relies on the dispatcher taking the inbox later. The dispatcher
// clears the flag and then takes the inbox; the producer pushed and then read the flag. With all
// four accesses seq_cst, the producer reading "set" puts its exchange before the clear in the
// single order, hence its push before the take: the take sees the request. (Acquire/release is
// not enough here: this is a store-then-load pair on two locations.)
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
  enum class Submit : std::uint8_t { queued, queued_and_listed, refused, unsupported };

  /// Any thread. Lock-free. queued_and_listed: the caller must push this mailbox on the
  /// activation list and wake the dispatcher. unsupported: the inbox cannot hold `node`'s address
  /// (Inbox::push).
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
    // seq_cst: see the file comment (pairs with the store in take_listed()).
    return listed.exchange(true, std::memory_order_seq_cst) ? Submit::queued
                                                            : Submit::queued_and_listed;
  }

  /// Dispatcher only, for a mailbox just taken off the activation list. Returns its requests,
  /// oldest first, or nullptr when it is closed (`open` false: the dispatcher's own record).
  Node* take_listed(bool open, std::uint32_t current_generation) noexcept {
    // seq_cst: see the file comment (pairs with the exchange in submit()).
    listed.store(false, std::memory_order_seq_cst);
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

  /// Dispatcher only. Registration of generation `g` in this place.
  void open(std::uint32_t g) noexcept { inbox.open(g); }

  Queue inbox;
  Atomic<bool> listed{false};
  Atomic<Mailbox*> next_listed{nullptr};  // the activation list's link (lock_free_bag.hpp)
  std::uint32_t place = 0;                // constant once created
};

}  // namespace creditloop::detail
