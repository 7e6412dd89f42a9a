// The vyukov contender of bench_queues.cpp, on its own: a queue the benchmark compares with the
// runtime's mailbox, never shipped.
#pragma once

#include <atomic>
#include <cstdint>

#include "creditloop/request.hpp"

namespace creditloop::bench {

// Dmitry Vyukov's non-blocking intrusive MPSC queue, linked through RequestHook::next_in_queue
// (accessed as an atomic_ref, so requests need no other field). Push is one exchange and one
// store, wait-free; a consumer that meets a producer between the two sees the queue as busy.
struct alignas(64) VyukovQueue {
  enum class Pop : std::uint8_t { item, empty, busy };

  VyukovQueue() noexcept : head(&stub), tail(&stub) {}
  VyukovQueue(const VyukovQueue&) = delete;
  VyukovQueue& operator=(const VyukovQueue&) = delete;

  static std::atomic_ref<RequestHook*> link(RequestHook& node) noexcept {
    return std::atomic_ref<RequestHook*>(node.next_in_queue);
  }

  void push(RequestHook& node) noexcept {
    link(node).store(nullptr, std::memory_order_relaxed);  // published by the exchange
    // seq_cst: also the producer's half of the activation flag's store-then-load pair.
    RequestHook* const previous = head.exchange(&node, std::memory_order_seq_cst);
    link(*previous).store(&node, std::memory_order_release);  // pairs with pop()'s acquire
  }

  // Consumer only.
  RequestHook* pop(Pop& outcome) noexcept {
    RequestHook* first = tail;
    RequestHook* next = link(*first).load(std::memory_order_acquire);
    if (first == &stub) {
      if (next == nullptr) {
        outcome = head.load(std::memory_order_acquire) == &stub ? Pop::empty : Pop::busy;
        return nullptr;
      }
      tail = next;
      first = next;
      next = link(*next).load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      tail = next;
      outcome = Pop::item;
      return first;
    }
    if (first != head.load(std::memory_order_acquire)) {
      outcome = Pop::busy;
      return nullptr;
    }
    push(stub);  // the last node is handed out only once something follows it
    next = link(*first).load(std::memory_order_acquire);
    if (next == nullptr) {
      outcome = Pop::busy;
      return nullptr;
    }
    tail = next;
    outcome = Pop::item;
    return first;
  }

  std::atomic<RequestHook*> head;  // producers
  RequestHook* tail;               // consumer
  RequestHook stub;
  std::atomic<bool> listed{false};
  std::atomic<VyukovQueue*> next_listed{nullptr};
  std::uint32_t place = 0;
};
// Its stub is a whole request hook (40 bytes since the hook links both ways), which takes it past
// one line: the comparison with the shipped inbox, which keeps no stub, got no fairer for it.
static_assert(sizeof(VyukovQueue) == 128);

}  // namespace creditloop::bench
