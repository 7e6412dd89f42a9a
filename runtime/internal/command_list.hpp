// runtime/internal/command_list.hpp: the commands other threads post to the dispatcher (add,
// remove, snapshots, shutdown). Internal to the runtime: not installed, not part of the public API.
//
// A Treiber list of intrusive nodes, as lock_free_bag.hpp, with one more state: closed, which the
// dispatcher sets once, as it exits. A post is one compare-and-swap; the dispatcher takes every
// command posted so far with one exchange and never waits. This replaced a vector under a mutex
// that the dispatcher took whenever a command was pending: a poster preempted inside that critical
// section (which could allocate) held up every decision until it ran again
// (tests/runtime/dispatcher_path_test.cpp), and a scrape of a million participants took the lock
// once per chunk of 256 places. A post that finds the list closed is refused, and its caller runs
// the command itself, serialized with the dispatcher's last commands by a mutex that only the
// exiting dispatcher and such callers take.
//
// Memory orders, in pairs:
//  - post's CAS (release half) / take's and close's exchange (acquire): the command, written
//    before the CAS, is visible to the dispatcher that runs it. Every change of the head is a
//    read-modify-write, so a chain taken at once is visible as a whole, links included.
//  - The CAS is seq_cst because it is the "work published" half of the runtime's parking protocol
//    (parker.hpp), against the seq_cst load of maybe_nonempty() in the dispatcher's re-check.
//  - close()'s exchange also releases, and post reads the head with acquire: a poster refused by
//    the close sees what the dispatcher wrote before it (the caller then takes the mutex anyway).
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
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
