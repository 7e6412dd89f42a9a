// creditloop/request.hpp: the intrusive hook a queued request carries, and lists of handed-back
// ones.
//
// The core never allocates per request: a participant's FIFO is a singly linked list threaded
// through a hook that lives inside the embedder's own request object (derive from RequestHook).
// The embedder owns the storage; the core only links and unlinks. While a request is queued its
// hook belongs to the core; it comes back in a Dispatch or in a RequestList.
//
// A request submitted again while it is still queued or in flight would be relinked into a second
// place of a queue and corrupt it, so the hook also says whose the request is: the caller's, or
// the library's from submit until its completion or its hand-back. A second submit in between is
// refused with Errc::already_queued. The state is an atomic byte on the hook's own line, which
// the submitter writes anyway: one uncontended compare-and-swap for the runtime's submit, a plain
// load and store for the core's. How the library takes and gives back a request across threads,
// and why giving it back is its last access to it: creditloop/detail/hand_back.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "creditloop/units.hpp"

namespace creditloop {

struct RequestHook {
  /// Whose the request is (detail: the library sets it; the embedder only reads it).
  enum State : std::uint8_t {
    kIdle = 0,      // the caller's: it may be submitted
    kInbox = 1,     // submitted to a runtime, not yet in its core's queue
    kQueued = 2,    // in a core's queue
    kInFlight = 3,  // dispatched, not yet completed
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
  /// The one before it in its core's queue, so that Core::cancel unlinks it in O(1). Kept exact
  /// for every request but a queue's head: dispatching the head would otherwise write to the next
  /// request's line too, a second cache line per dispatch, and cancel finds the head from the
  /// queue instead.
  RequestHook* prev_in_queue = nullptr;
  /// The instant the core queued it (Core::submit's `now`; in the runtime, the dispatcher's clock
  /// when it moved the request from the inbox into the core): what the oldest queued request's
  /// age in a snapshot is measured from.
  Nanos queued_at = 0;
  /// While queued: the issuer of the core it is queued in and its ring place there, which is how
  /// Core::cancel finds its queue (and refuses a request queued in another core).
  std::uint32_t queued_by = 0;
  std::uint32_t queued_place = 0;
  std::atomic<std::uint8_t> held{kIdle};
};

/// Requests handed back to the caller (by a removal or a shutdown), oldest first.
/// A move-only view of a chain of hooks the caller now owns again; it allocates nothing.
class RequestList {
 public:
  RequestList() noexcept = default;
  RequestList(RequestHook* head, RequestHook* tail, std::size_t size) noexcept
      : head_(head), tail_(tail), size_(size) {}
  RequestList(RequestList&& other) noexcept
      : head_(other.head_), tail_(other.tail_), size_(other.size_) {
    other.head_ = other.tail_ = nullptr;
    other.size_ = 0;
  }
  RequestList& operator=(RequestList&& other) noexcept {
    head_ = other.head_;
    tail_ = other.tail_;
    size_ = other.size_;
    other.head_ = other.tail_ = nullptr;
    other.size_ = 0;
    return *this;
  }
  RequestList(const RequestList&) = delete;
  RequestList& operator=(const RequestList&) = delete;

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] RequestHook* front() const noexcept { return head_; }

  /// Unlinks and returns the oldest request, or nullptr.
  RequestHook* pop_front() noexcept {
    RequestHook* r = head_;
    if (r != nullptr) {
      head_ = r->next_in_queue;
      r->next_in_queue = nullptr;
      if (head_ == nullptr) tail_ = nullptr;
      --size_;
    }
    return r;
  }

  /// Links `r` at the back. O(1).
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
  RequestHook* head_ = nullptr;
  RequestHook* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace creditloop
