// runtime/internal/lock_free_bag.hpp: an unordered multi-producer, single-consumer bag of
// intrusive nodes: a push is one compare-and-swap (a Treiber push), a drain one exchange of the
// whole bag. Internal to the runtime: not installed.
//
// A push touches nothing of the bag after its CAS, and the node only before it: once the
// consumer has taken a node it may recycle it at once.
//
//   push(), CAS              seq_cst: releases the node and its link to drain() (each push
//                            continues the release sequence); parking's "work published"
//   push(), load, failed CAS relaxed: the head read is only stored as the node's link
//   drain(), exchange        acquire: pairs with every push's CAS
//   maybe_nonempty()         seq_cst: the dispatcher's re-check after announcing sleep
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
//
// Why: docs/design.md#the-lock-free-bag
#pragma once

#include <atomic>
#include <cstddef>

#include "internal/test_hooks.hpp"

namespace creditloop::detail {

template <class Node, template <class> class Atomic, Atomic<Node*> Node::*Link>
class LockFreeBag {
 public:
  LockFreeBag() = default;
  LockFreeBag(const LockFreeBag&) = delete;
  LockFreeBag& operator=(const LockFreeBag&) = delete;

  /// Any thread. Lock-free. Pushes one node.
  void push(Node& node) noexcept { push_chain(node, node); }

  /// Any thread. Lock-free. Pushes first..last, already linked from first to last through Link
  /// by the caller (relaxed stores suffice: the CAS publishes them).
  void push_chain(Node& first, Node& last) noexcept {
    Node* head = head_.load(std::memory_order_relaxed);  // only ever stored as a link
    do {
      (last.*Link).store(head, std::memory_order_relaxed);  // published by the CAS
      // A stop here, the widest window a push has, must hide nothing (progress_test.cpp).
      CREDITLOOP_TEST_HOOK(list_pushing);
    } while (!head_.compare_exchange_weak(head, &first, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  }

  /// Consumer only. Calls f(Node&) once for every node pushed so far, and returns how many. Never
  /// waits and never allocates. f may recycle its node: the walk has read the link already.
  template <class F>
  std::size_t drain(F&& f) {
    std::size_t n = 0;
    // acquire: pairs with the release half of every push's CAS.
    Node* node = head_.exchange(nullptr, std::memory_order_acquire);
    while (node != nullptr) {
      // relaxed: written before the push's CAS, which the exchange above acquired.
      Node* const next = (node->*Link).load(std::memory_order_relaxed);
      f(*node);
      ++n;
      node = next;
    }
    return n;
  }

  /// Consumer only. Whether a drain would find something now. seq_cst: the dispatcher's re-check
  /// after announcing sleep, against the seq_cst CAS of a push (see parker.hpp).
  [[nodiscard]] bool maybe_nonempty() const noexcept {
    return head_.load(std::memory_order_seq_cst) != nullptr;
  }

 private:
  Atomic<Node*> head_{nullptr};
};

}  // namespace creditloop::detail
