// creditloop/request.hpp: the intrusive hook a queued request carries, and lists of handed-back
// ones.
//
// The core never allocates per request: a participant's FIFO is a singly linked list threaded
// through a hook that lives inside the embedder's own request object (derive from RequestHook).
// The embedder owns the storage; the core only links and unlinks. While a request is queued its
// hook belongs to the core; it comes back in a Dispatch or in a RequestList.
#pragma once

#include <cstddef>

namespace creditloop {

struct RequestHook {
  RequestHook* next_in_queue = nullptr;
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
