// creditloop/request.hpp: the intrusive hook a queued request carries (derive from RequestHook),
// and RequestList, the list that hands requests back.
//
//  - A participant's FIFO is linked through the hooks inside the embedder's own objects: the
//    embedder owns the storage, the core only links and unlinks and never allocates per request.
//  - While a request is queued its hook is the core's; it comes back in a Decision or in a
//    RequestList. The hook also says whose the request is: the caller's, or the library's from
//    submit until its completion or hand-back; a submit in between is refused (already_queued).
//  - A request in a RequestList stays the library's until the list's walk has passed it
//    (pop_front()) or the list is dropped. How it is handed back: detail/hand_back.hpp.
//
// Why: docs/design.md#whose-a-request-is
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "creditloop/units.hpp"

namespace creditloop {

namespace detail {
// creditloop/detail/hand_back.hpp, included at the end of this file: every hand-back goes
// through it, and it needs RequestHook's states.
template <class Held>
void hand_back(Held& held) noexcept;
struct HookLink;
template <class Link, class Node>
void hand_back_chain(Node* first) noexcept;
}  // namespace detail

struct RequestHook {
  /// Whose the request is (detail: the library sets it; the embedder only reads it).
  enum State : std::uint8_t {
    kIdle = 0,      // the caller's: it may be submitted
    kInbox = 1,     // submitted to a runtime, not yet in its core's queue
    kQueued = 2,    // in a core's queue
    kInFlight = 3,  // dispatched, not yet completed
    kInList = 4,    // in a RequestList handed back, not yet passed by its walk
  };

  RequestHook() noexcept = default;
  // A copy is a new request, never submitted: it takes neither the link nor the state.
  RequestHook(const RequestHook& /*other*/) noexcept {}
  RequestHook& operator=(const RequestHook& /*other*/) noexcept { return *this; }
  ~RequestHook() = default;

  /// Whether the request is the caller's now (submitting it is allowed). Any thread; relaxed, a
  /// gauge for assertions and tests.
  [[nodiscard]] bool idle() const noexcept { return held.load(std::memory_order_relaxed) == kIdle; }

  RequestHook* next_in_queue = nullptr;
  /// The one before it in its core's queue, so that Core::withdraw unlinks it in O(1). Kept exact
  /// for every request but a queue's head: dispatching the head would otherwise write to the next
  /// request's line too, a second cache line per dispatch, and withdraw finds the head from the
  /// queue instead.
  RequestHook* prev_in_queue = nullptr;
  /// The instant the core queued it (Core::submit's `now`; in the runtime, the dispatcher's clock
  /// when it moved the request from the inbox into the core): what the oldest queued request's
  /// age in a snapshot is measured from.
  Nanos queued_at = 0;
  /// While queued: the issuer of the core it is queued in and its ring place there, which is how
  /// Core::withdraw finds its queue (and refuses a request queued in another core). Atomic,
  /// relaxed: another runtime's dispatcher may read them while this one writes them (a
  /// withdrawal through the wrong runtime); the release store of `held` that follows orders them
  /// for a reader that acquires `held`.
  std::atomic<std::uint32_t> queued_by{0};
  std::atomic<std::uint32_t> queued_place{0};
  std::atomic<std::uint8_t> held{kIdle};
};

/// Requests handed back to the caller (by a removal or a shutdown), oldest first: a move-only
/// chain of hooks that allocates nothing. Each request is the caller's (idle, and free to be
/// submitted again) once pop_front() has returned it, or once the list is destroyed or assigned
/// over; until then it is the list's, and a submit of it is refused with already_queued. Use a
/// list from one thread at a time.
class RequestList {
 public:
  RequestList() noexcept = default;
  /// Takes the chain from `head` to `tail`, linked through next_in_queue.
  RequestList(RequestHook* head, RequestHook* tail, std::size_t size) noexcept
      : head_(head), tail_(tail), size_(size) {}
  RequestList(RequestList&& other) noexcept
      : head_(other.head_), tail_(other.tail_), size_(other.size_) {
    other.head_ = other.tail_ = nullptr;
    other.size_ = 0;
  }
  /// Hands back what this list still holds, then takes `other`'s.
  RequestList& operator=(RequestList&& other) noexcept {
    if (this == &other) return *this;
    hand_back_all();
    head_ = other.head_;
    tail_ = other.tail_;
    size_ = other.size_;
    other.head_ = other.tail_ = nullptr;
    other.size_ = 0;
    return *this;
  }
  RequestList(const RequestList&) = delete;
  RequestList& operator=(const RequestList&) = delete;
  /// Hands back what the list still holds, each request's link read before it is handed back and
  /// left as it was.
  ~RequestList() { hand_back_all(); }

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The oldest request, still the list's (see the class comment).
  [[nodiscard]] RequestHook* front() const noexcept { return head_; }

  /// Unlinks the oldest request, hands it back and returns it, or nullptr. Its link is read
  /// first: once handed back, the request may be submitted again and relinked by another thread.
  RequestHook* pop_front() noexcept {
    RequestHook* const r = head_;
    if (r != nullptr) {
      head_ = r->next_in_queue;
      r->next_in_queue = nullptr;
      if (head_ == nullptr) tail_ = nullptr;
      --size_;
      detail::hand_back(r->held);  // the list's last access to r
    }
    return r;
  }

  /// Links `r`, which must not be in a queue or another list, at the back. O(1).
  void push_back(RequestHook& r) noexcept {
    r.next_in_queue = nullptr;
    if (tail_ == nullptr) {
      head_ = &r;
    } else {
      tail_->next_in_queue = &r;
    }
    tail_ = &r;
    ++size_;
  }

  /// Moves all of `other` to the back of this list. O(1).
  void splice_back(RequestList&& other) noexcept {
    if (other.empty()) return;
    if (tail_ == nullptr) {
      head_ = other.head_;
    } else {
      tail_->next_in_queue = other.head_;
    }
    tail_ = other.tail_;
    size_ += other.size_;
    other.head_ = other.tail_ = nullptr;
    other.size_ = 0;
  }

 private:
  void hand_back_all() noexcept {
    detail::hand_back_chain<detail::HookLink>(head_);
    head_ = tail_ = nullptr;
    size_ = 0;
  }

  RequestHook* head_ = nullptr;
  RequestHook* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace creditloop

#include "creditloop/detail/hand_back.hpp"  // IWYU pragma: export
