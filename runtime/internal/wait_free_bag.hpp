// runtime/internal/wait_free_bag.hpp: an unordered multi-producer, single-consumer bag of
// intrusive nodes. Internal to the runtime: not installed, not part of the public API.
//
// Used where order does not matter and producers must never wait: the runtime's activation list
// (participants whose queue just became non-empty) and its completion list (tickets completed by
// workers). Why by hand: moodycamel and Boost.Lockfree queues copy values into storage of their
// own (and allocate, or are bounded), while here the node is the caller's object and pushing it
// must cost two instructions' worth of atomics whatever the load.
//
// Push: one exchange on the head, then one store linking the node to the previous head. Wait-free.
// Between the two a node is "half-pushed": its successor is unknown. The consumer takes the whole
// bag with one exchange and walks it; when it meets a half-pushed node it keeps that node, and the
// rest of the chain behind it, for its next drain instead of waiting for the producer. So neither
// side ever waits for the other. A kept node whose push is still half-way is not work the consumer
// can do: maybe_nonempty() ignores it, so that a consumer deciding whether to sleep does not spin
// while the producer is preempted (it sleeps with a timeout instead, has_half_pushed()). A node
// that is still deferred is not handed to the consumer's callback, because the callback may recycle
// it while its producer's link store is pending.
//
// Memory orders, in pairs:
//  - push's exchange (release) / drain's exchange (acquire): the node's contents, written before
//    the push, are visible to the consumer. The exchanges form one release sequence on the head,
//    so a chain taken at once is visible as a whole.
//  - push's link store (release) / drain's link load (acquire): the link, written after the
//    exchange.
//  - The exchange is seq_cst because it is also the "work published" half of the runtime's
//    parking protocol (parker.hpp): the dispatcher's seq_cst read of the head, after it announced
//    that it will sleep, must see this push or this push's notify must see that announcement.
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace creditloop::detail {

// Defined by the tests alone, which stop a push half-way, as a preempted producer does.
struct WaitFreeBagTestAccess;

template <class Node, template <class> class Atomic, Atomic<Node*> Node::*Link>
class WaitFreeBag {
 public:
  WaitFreeBag() { deferred_.reserve(kDeferredReserve); }
  WaitFreeBag(const WaitFreeBag&) = delete;
  WaitFreeBag& operator=(const WaitFreeBag&) = delete;

  /// Any thread. Wait-free. Pushes one node.
  void push(Node& node) noexcept { push_chain(node, node); }

  /// Any thread. Wait-free. Pushes first..last, already linked from first to last through Link
  /// by the caller (relaxed stores suffice: the exchange publishes them).
  void push_chain(Node& first, Node& last) noexcept {
    (last.*Link).store(half_pushed(), std::memory_order_relaxed);  // published by the exchange
    Node* const previous = head_.exchange(&first, std::memory_order_seq_cst);
    (last.*Link).store(previous, std::memory_order_release);  // pairs with the acquire in walk()
  }

  /// Consumer only. Calls f(Node&) once for every node whose push is complete, and returns how
  /// many. Never waits: a half-pushed node and those behind it are kept for the next drain.
  /// Allocates only when more producers are half-way through a push at once than ever before.
  template <class F>
  std::size_t drain(F&& f) {
    std::size_t n = 0;
    const std::size_t kept = deferred_.size();
    for (std::size_t i = 0; i < kept; ++i) {
      Node* const node = deferred_[i];
      deferred_[i] = nullptr;
      n += walk(node, f);
    }
    std::erase(deferred_, nullptr);
    // acquire: pairs with the release half of every push's exchange.
    n += walk(head_.exchange(nullptr, std::memory_order_acquire), f);
    return n;
  }

  /// Consumer only. Whether a drain could find something now: a pushed node, or a kept one whose
  /// push has been finished since. seq_cst: the dispatcher's re-check after announcing sleep (see
  /// parker.hpp). The finishing link store is a release, outside the seq_cst order (a seq_cst
  /// store would cost every push a full barrier), so a push finished while the consumer goes to
  /// sleep may not wake it: has_half_pushed() tells it to sleep with a timeout.
  [[nodiscard]] bool maybe_nonempty() const noexcept {
    if (head_.load(std::memory_order_seq_cst) != nullptr) return true;
    for (Node* const node : deferred_) {
      // seq_cst: as the head's load; pairs with the release link store in push_chain().
      if ((node->*Link).load(std::memory_order_seq_cst) != half_pushed()) return true;
    }
    return false;
  }
  /// Consumer only. Whether a producer is half-way through a push whose node was taken (or was,
  /// at the last drain).
  [[nodiscard]] bool has_half_pushed() const noexcept { return !deferred_.empty(); }

 private:
  friend struct WaitFreeBagTestAccess;
  static constexpr std::size_t kDeferredReserve = 64;
  // Never a node's address: nodes are at least pointer-aligned.
  static Node* half_pushed() noexcept { return reinterpret_cast<Node*>(std::uintptr_t{1}); }

  template <class F>
  std::size_t walk(Node* node, F& f) {
    std::size_t n = 0;
    while (node != nullptr) {
      // acquire: pairs with the release link store in push_chain().
      Node* const next = (node->*Link).load(std::memory_order_acquire);
      if (next == half_pushed()) {
        deferred_.push_back(node);
        break;
      }
      f(*node);
      ++n;
      node = next;
    }
    return n;
  }

  Atomic<Node*> head_{nullptr};
  std::vector<Node*> deferred_;  // consumer-only: the first half-pushed node of each chain
};

}  // namespace creditloop::detail
