// The runtime's lock-free bag (internal/lock_free_bag.hpp): a push is one atomic step, so a
// producer stopped inside its push hides no other producer's node, and a push that finishes after
// the consumer took the bag (the head it read has come and gone) still lands whole.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "first_pass_stops.hpp"
#include "internal/lock_free_bag.hpp"

namespace creditloop::detail {
namespace {

struct Node {
  std::atomic<Node*> next{nullptr};
  int id = 0;
};
using Bag = LockFreeBag<Node, std::atomic, &Node::next>;

std::vector<int> drained(Bag& bag) {
  std::vector<int> ids;
  bag.drain([&](Node& n) { ids.push_back(n.id); });
  return ids;
}

using FirstPushStops = runtime_tests::FirstPassStops<&test_hooks::list_pushing>;

TEST(LockFreeBag, AProducerStoppedInsideItsPushHidesNoOtherPush) {
  Bag bag;
  Node stopped_node{.id = 1};
  Node other{.id = 2};
  FirstPushStops::arm();
  std::thread producer([&] { bag.push(stopped_node); });
  FirstPushStops::stopped.acquire();

  bag.push(other);
  EXPECT_TRUE(bag.maybe_nonempty());
  EXPECT_EQ(drained(bag), std::vector<int>{2}) << "the stopped push hid the other one";
  EXPECT_FALSE(bag.maybe_nonempty()) << "a push not yet made is no work";

  // The head it read (empty) was replaced by `other` and taken since: its push lands all the same.
  FirstPushStops::go.release();
  producer.join();
  FirstPushStops::disarm();
  EXPECT_TRUE(bag.maybe_nonempty());
  EXPECT_EQ(drained(bag), std::vector<int>{1});
  EXPECT_FALSE(bag.maybe_nonempty());
}

TEST(LockFreeBag, AChainLandsWholeAndItsNodesMayBeRecycledWhileTheWalkGoesOn) {
  Bag bag;
  std::vector<Node> nodes(4);
  for (int i = 0; i < 4; ++i) nodes[static_cast<std::size_t>(i)].id = i;
  bag.push(nodes[3]);
  for (std::size_t i = 0; i + 1 < 3; ++i) nodes[i].next.store(&nodes[i + 1]);
  bag.push_chain(nodes[0], nodes[2]);
  std::vector<int> ids;
  const std::size_t n = bag.drain([&](Node& node) {
    ids.push_back(node.id);
    node.next.store(nullptr);  // recycled at once, as the dispatcher frees a ticket's record
  });
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 2, 3}));  // newest push first, a chain in its order
}

// Under ThreadSanitizer too: every node pushed by four producers reaches a consumer draining all
// the while, exactly once, with what its producer wrote before the push.
TEST(LockFreeBag, EveryPushOfManyProducersIsDrainedOnce) {
  constexpr int kProducers = 4;
  constexpr int kEach = 20'000;
  Bag bag;
  std::vector<Node> nodes(kProducers * kEach);
  std::atomic<int> finished{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = p * kEach; i < (p + 1) * kEach; ++i) {
        nodes[static_cast<std::size_t>(i)].id = i;  // published by the push
        bag.push(nodes[static_cast<std::size_t>(i)]);
      }
      // release: pairs with the consumer's acquire load; its last drain then sees every push.
      finished.fetch_add(1, std::memory_order_release);
    });
  }
  std::vector<int> seen(nodes.size(), 0);
  auto take = [&] {
    return bag.drain([&](Node& n) {
      ASSERT_EQ(&n - nodes.data(), n.id);
      ++seen[static_cast<std::size_t>(n.id)];
    });
  };
  // acquire: pairs with each producer's release increment.
  while (finished.load(std::memory_order_acquire) < kProducers) (void)take();
  (void)take();
  for (std::thread& t : producers) t.join();
  EXPECT_FALSE(bag.maybe_nonempty());
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "node " << i;
}

}  // namespace
}  // namespace creditloop::detail
