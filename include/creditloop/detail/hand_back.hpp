// creditloop/detail/hand_back.hpp: the hand-off of a request between its caller and the library,
// through its hook's state (request.hpp, RequestHook::held).
//
// A runtime's submit takes the request with a compare-and-swap from kIdle; whatever ends the
// library's hold on it (a completion, the worker pool handing it to its handler, a removal, a
// withdrawal, a shutdown's hand-back, a refused submit) hands it back with a release store of
// kIdle. The moment that store is visible another thread may submit the request again and rewrite
// its links, so the store is the library's last access to the request: a chain is walked by
// reading each link before its request is handed back. Every such path goes through these
// functions, which take the atomic type as a parameter so that the Relacy model
// (tests/relacy/hand_back_model.cpp) runs them as shipped.
//
// A removal or a shutdown hands its requests back in a RequestList (request.hpp) linked through
// those same links, walked by its caller on the caller's thread. So the core does not hand them
// back: it marks them kInList (keep_for_list()), and the list hands each back as its walk passes
// it, or all of them when it is dropped. Handing the whole chain back first, as the core once did,
// let a request be submitted again while the caller's walk was still to read its link: the walk
// then followed the link into another participant's inbox, and its unlink cut that inbox's chain.
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
