// runtime/internal/command_list.hpp: the commands other threads post to the dispatcher (add,
// remove, snapshots, shutdown): a Treiber list that the dispatcher takes whole and closes once,
// as it exits. Internal to the runtime: not installed, not part of the public API.
//
//   post(), CAS           seq_cst: releases the command to take() and close(); seq_cst as the
//                         "work published" half of parking (parker.hpp)
//   post(), head loads    acquire: pairs with close()'s release
//   take(), exchange      acquire: pairs with every post's CAS, so a chain is visible whole
//   close(), exchange     acq_rel: acquires as take()'s; releases to the posts it refuses
//   maybe_nonempty()      seq_cst: the dispatcher's re-check before it sleeps (parker.hpp)
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
//
// Why: docs/design.md#the-command-list
#pragma once

#include <atomic>
#include <cstdint>

namespace creditloop::detail {

template <class Node, template <class> class Atomic, Atomic<Node*> Node::*Link>
class CommandList {
 public:
  CommandList() = default;
  CommandList(const CommandList&) = delete;
  CommandList& operator=(const CommandList&) = delete;

  /// Any thread. Lock-free. False: the list is closed, the node was not posted.
  [[nodiscard]] bool post(Node& node) noexcept {
    // acquire: pairs with close()'s release, for a post it refuses; otherwise validated by the CAS.
    Node* head = head_.load(std::memory_order_acquire);
    do {
      if (head == closed()) return false;
      (node.*Link).store(head, std::memory_order_relaxed);  // published by the CAS
    } while (!head_.compare_exchange_weak(head, &node, std::memory_order_seq_cst,
                                          std::memory_order_acquire));
    return true;
  }

  /// Consumer only. Takes every command posted so far, oldest first (linked through Link), or
  /// nullptr. Never waits.
  Node* take() noexcept {
    // acquire: pairs with the release half of every post's CAS.
    return oldest_first(head_.exchange(nullptr, std::memory_order_acquire));
  }

  /// Consumer only, once: takes what take() would and refuses every later post.
  Node* close() noexcept {
    // acq_rel: acquire as take(); release pairs with the acquire of a post this refuses.
    return oldest_first(head_.exchange(closed(), std::memory_order_acq_rel));
  }

  /// Consumer only. Whether take() would find something now. seq_cst: the dispatcher's re-check
  /// after announcing sleep, against the seq_cst CAS of a post (see parker.hpp).
  [[nodiscard]] bool maybe_nonempty() const noexcept {
    Node* const head = head_.load(std::memory_order_seq_cst);
    return head != nullptr && head != closed();
  }

 private:
  // Never a node's address: the list's own.
  Node* closed() const noexcept { return reinterpret_cast<Node*>(const_cast<CommandList*>(this)); }
  static Node* oldest_first(Node* newest) noexcept {
    Node* oldest = nullptr;
    while (newest != nullptr) {
      // relaxed: written before the post's CAS, which the exchange acquired.
      Node* const next = (newest->*Link).load(std::memory_order_relaxed);
      (newest->*Link).store(oldest, std::memory_order_relaxed);  // the consumer's from here on
      oldest = newest;
      newest = next;
    }
    return oldest;
  }

  Atomic<Node*> head_{nullptr};
};

}  // namespace creditloop::detail
