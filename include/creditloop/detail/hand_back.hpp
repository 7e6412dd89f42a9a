// creditloop/detail/hand_back.hpp: the hand-off of a request between its caller and the library,
// through its hook's state (request.hpp, RequestHook::held). Every path that ends the library's
// hold (completion, the pool's handler, removal, withdrawal, shutdown, a refused submit) uses it.
//
//   take       a runtime's submit: CAS from kIdle
//   hand back  a release store of kIdle, the library's last access to the request: a chain is
//              walked by reading each link before its request is handed back
//   kInList    keep_for_list(): a removal's or shutdown's requests, handed back by their
//              RequestList as its walk passes each, or all when it is dropped
//
// The atomic type is a parameter so that tests/relacy/hand_back_model.cpp runs these as shipped.
//
// Why: docs/design.md#whose-a-request-is
#pragma once

#include <atomic>
#include <cstdint>

#include "creditloop/request.hpp"

namespace creditloop::detail {

/// A runtime's submit: whether the request was its caller's and is now the library's (kInbox).
/// acquire on success: pairs with hand_back()'s release, so the library's last writes to the
/// request (its links) happen before this submitter's. relaxed on failure: the request is left
/// alone.
template <class Held>
[[nodiscard]] bool take_from_caller(Held& held) noexcept {
  std::uint8_t idle = RequestHook::kIdle;
  return held.compare_exchange_strong(idle, RequestHook::kInbox, std::memory_order_acquire,
                                      std::memory_order_relaxed);
}

/// Ends the library's hold on a request. release: pairs with take_from_caller()'s acquire in the
/// request's next submit, which may be on another thread at once.
template <class Held>
void hand_back(Held& held) noexcept {
  held.store(RequestHook::kIdle, std::memory_order_release);
}

/// The queue link as the core and runtime ship it.
struct HookLink {
  [[nodiscard]] static RequestHook* get(const RequestHook& r) noexcept { return r.next_in_queue; }
};

/// Hands back every request of the chain that starts at `first`, linked through Link (HookLink
/// as shipped), and leaves the links as they are.
template <class Link, class Node>
void hand_back_chain(Node* first) noexcept {
  for (Node* r = first; r != nullptr;) {
    Node* const next = Link::get(*r);  // before: once handed back, the link is not ours to read
    hand_back(r->held);
    r = next;
  }
}

/// The core, handing the chain that starts at `first` back in a RequestList: its requests stay
/// the library's (kInList, refused by a submit or a withdrawal) until the list hands each back.
template <class Link, class Node>
void keep_for_list(Node* first) noexcept {
  for (Node* r = first; r != nullptr; r = Link::get(*r)) {
    // relaxed: the request is still the core's. The list reaches its caller through whatever
    // hands over the core's result (a return on this thread, or the runtime's command round
    // trip, which synchronizes), so this store happens before the list's hand_back().
    r->held.store(RequestHook::kInList, std::memory_order_relaxed);
  }
}

}  // namespace creditloop::detail
