// The runtime's wait-free bag (internal/wait_free_bag.hpp): a push its producer has not finished
// (preempted between its two steps) is not work the dispatcher can do, so it must not make the
// dispatcher's "anything to do?" answer yes, which would keep it polling at full speed until the
// producer runs again.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>

#include "internal/wait_free_bag.hpp"

namespace creditloop::detail {

struct Node {
  std::atomic<Node*> next{nullptr};
};
using Bag = WaitFreeBag<Node, std::atomic, &Node::next>;

// The test-only door of wait_free_bag.hpp: the two steps of push_chain(), one at a time.
struct WaitFreeBagTestAccess {
  static Node* first_half(Bag& bag, Node& node) {
    node.next.store(Bag::half_pushed(), std::memory_order_relaxed);  // as push_chain() does
    return bag.head_.exchange(&node, std::memory_order_seq_cst);
  }
  static void second_half(Node& node, Node* previous) {
    node.next.store(previous, std::memory_order_release);
  }
};

namespace {

TEST(WaitFreeBag, AHalfFinishedPushIsNotWorkButIsKnownToBePending) {
  Bag bag;
  Node node;
  Node* const previous = WaitFreeBagTestAccess::first_half(bag, node);
  EXPECT_TRUE(bag.maybe_nonempty());  // the head is set: a drain must look
  std::size_t taken = 0;
  EXPECT_EQ(bag.drain([&](Node&) { ++taken; }), 0u);
  EXPECT_TRUE(bag.has_half_pushed());
  EXPECT_FALSE(bag.maybe_nonempty()) << "a preempted producer's push would keep the dispatcher "
                                        "polling without pause";
  EXPECT_EQ(bag.drain([&](Node&) { ++taken; }), 0u);
  WaitFreeBagTestAccess::second_half(node, previous);
  EXPECT_TRUE(bag.maybe_nonempty());  // finished: now it is work
  EXPECT_EQ(bag.drain([&](Node&) { ++taken; }), 1u);
  EXPECT_EQ(taken, 1u);
  EXPECT_FALSE(bag.has_half_pushed());
  EXPECT_FALSE(bag.maybe_nonempty());
}

}  // namespace
}  // namespace creditloop::detail
