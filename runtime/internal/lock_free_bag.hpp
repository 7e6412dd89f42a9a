// runtime/internal/lock_free_bag.hpp: an unordered multi-producer, single-consumer bag of
// intrusive nodes. Internal to the runtime: not installed, not part of the public API.
//
// Used where order does not matter and a producer stopped anywhere must hold up nobody else: the
// runtime's activation list (participants whose queue just became non-empty), its completion list
// (tickets completed by completers) and the pool's list of completion blocks. Why by hand:
// moodycamel and Boost.Lockfree queues copy values into storage of their own (and allocate, or are
// bounded), while here the node is the caller's object and a push is one compare-and-swap.
//
// Push: link the node to the head last seen, then compare-and-swap the head from that to the
// node, again until it holds (a Treiber push). A push is a single atomic step: before its CAS
// succeeds the node is nobody's but its producer's, after it the node is whole on the list. So a
// producer stopped anywhere in a push (preempted, throttled by a cgroup quota) hides no other
// producer's node, and the consumer never meets a half-made one. The consumer takes the whole bag
// with one exchange and walks it: no pop of single nodes, so the ABA problem of a Treiber stack
// does not arise (a head that was taken and has come back as the same node is the true head, and
// linking to it is right). Lock-free, not wait-free: a producer retries only when another push
// or the consumer's take changed the head between its load and its CAS, that is, when someone
// else made progress.
//
// A push touches nothing of the bag after its CAS, and the node only before it: once the consumer
// has taken a node it may recycle it at once, and once the runtime has reported `finished` a
// completer still returning from its push reads no memory of the runtime (docs/design.md).
//
// This replaced a push of one exchange and a link store after it, which is wait-free but leaves a
// node half-made between the two: a producer stopped there hid every node pushed before it until
// it ran again (tests/runtime/progress_test.cpp measured 200 ms of a stop as 200 ms of every other
// tenant's wait). Side by side (bench/bench_bag.cpp): a push and its drain take fewer
// instructions than before (no half-made nodes to keep aside), and with producers racing the
// consumer the retry costs a few per cent of pushes per second (docs/design.md, "Progress").
//
// Memory orders, in pairs:
//  - push's CAS (release half) / drain's exchange (acquire): the node's contents and its link,
//    written before the CAS, are visible to the consumer. Every change of the head is a
//    read-modify-write, so each push's release heads a release sequence that the later pushes
//    continue: a chain taken at once is visible as a whole, links included (relaxed loads suffice).
//  - The CAS is seq_cst because it is also the "work published" half of the runtime's parking
//    protocol (parker.hpp): the dispatcher's seq_cst read of the head, after it announced that it
//    will sleep, must see this push or this push's notify must see that announcement.
//  - A failed CAS and the first load of the head are relaxed: the producer never dereferences the
//    head it read, it only stores it as its node's link, which the successful CAS publishes.
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
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
