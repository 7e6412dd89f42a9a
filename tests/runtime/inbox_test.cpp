// The inbox's head word holds a 48-bit address beside a 16-bit registration tag
// (internal/inbox.hpp). An address with a bit above bit 47 set, such as a pointer tag (AArch64's
// top byte under MTE or HWASan, x86 LAM's bits 57-62 or 48-62), must be refused before the push
// touches the node, never masked into another address. The tagged references here stand for
// what a tagging allocator hands out; nothing dereferences them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>

#include "internal/inbox.hpp"
#include "internal/queue_link.hpp"

namespace creditloop {
namespace {

struct Node {
  Node* next = nullptr;
};
using Inbox = detail::Inbox<Node, std::atomic, detail::MemberLink<Node, &Node::next>>;

Node& with_bit(Node& node, int bit) {
  return *reinterpret_cast<Node*>(reinterpret_cast<std::uintptr_t>(&node) |
                                  (std::uintptr_t{1} << bit));
}

TEST(Inbox, AnAddressWithABitAbove47IsRefusedAndTheQueueIsUnchanged) {
  constexpr std::uint16_t kTag = 3;
  Inbox inbox;
  inbox.open(kTag);
  Node first;
  Node second;
  ASSERT_EQ(inbox.push(first, kTag), Inbox::Push::queued_first);
  for (const int bit : {48, 55, 56, 57, 59, 62, 63}) {
    EXPECT_EQ(inbox.push(with_bit(second, bit), kTag), Inbox::Push::unsupported) << "bit " << bit;
  }
  EXPECT_EQ(second.next, nullptr);
  EXPECT_EQ(inbox.take(kTag), &first);
  EXPECT_EQ(first.next, nullptr);
  // The untagged node is accepted as usual, and the inbox is empty again once taken.
  EXPECT_EQ(inbox.push(second, kTag), Inbox::Push::queued_first);
  EXPECT_EQ(inbox.take(kTag), &second);
  EXPECT_EQ(inbox.take(kTag), nullptr);
}

TEST(Inbox, PackableAcceptsExactly48BitAddresses) {
  Node node;
  EXPECT_TRUE(Inbox::packable(&node));
  EXPECT_TRUE(Inbox::packable(reinterpret_cast<const void*>(std::uintptr_t{0xFFFF'FFFF'FFF8})));
  EXPECT_FALSE(Inbox::packable(&with_bit(node, 48)));
  EXPECT_FALSE(Inbox::packable(&with_bit(node, 56)));
  EXPECT_FALSE(Inbox::packable(&with_bit(node, 63)));
}

}  // namespace
}  // namespace creditloop
