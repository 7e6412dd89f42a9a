// The inbox's head word holds a 48-bit address beside a 16-bit registration tag
// (internal/inbox.hpp). An address with a bit above bit 47 set, such as a pointer tag (AArch64's
// top byte under MTE or HWASan, x86 LAM's bits 57-62 or 48-62), must be refused before the push
// touches the node, never masked into another address. The tagged references here stand for
// what a tagging allocator hands out; nothing dereferences them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "first_pass_stops.hpp"
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

// A submitter stopped inside its push, after reading the head and before its compare-and-swap,
// while its participant is removed and the place re-registered 65,536 times (the 16-bit tag
// wraps: well under a second of churn): its late push must be refused, not queued for the new
// tenant. Once with the inbox empty when the push read it and when it goes on, once with a
// request at the head each time.
using FirstPushStops = runtime_tests::FirstPassStops<&detail::test_hooks::inbox_pushing>;

void stale_push_across_reregistrations(bool with_queued_request) {
  constexpr std::uint32_t kOld = 7;
  constexpr std::uint32_t kNew = kOld + 65'536;  // the same low 16 bits
  Inbox inbox;
  inbox.open(kOld);
  Node old_head;
  if (with_queued_request) {
    ASSERT_EQ(inbox.push(old_head, kOld), Inbox::Push::queued_first);
  }
  Node stale;
  FirstPushStops::arm();
  Inbox::Push late = Inbox::Push::queued;
  std::thread producer([&] { late = inbox.push(stale, kOld); });
  FirstPushStops::stopped.acquire();

  // The dispatcher: the participant removed, its place given to 65,536 registrations in turn.
  (void)inbox.close();
  for (std::uint32_t g = kOld + 1; g < kNew; ++g) {
    inbox.open(g);
    (void)inbox.close();
  }
  inbox.open(kNew);
  Node fresh;
  if (with_queued_request) {
    ASSERT_EQ(inbox.push(fresh, kNew), Inbox::Push::queued_first);
  }

  FirstPushStops::go.release();
  producer.join();
  FirstPushStops::disarm();
  EXPECT_EQ(late, Inbox::Push::refused) << "a removed participant's request reached the place's "
                                           "new tenant";
  EXPECT_EQ(inbox.take(kNew), with_queued_request ? &fresh : nullptr);
  EXPECT_EQ(fresh.next, nullptr);
}

TEST(Inbox, AStalePushIsRefusedAfterItsPlaceWasReRegistered65536TimesWhileItWasEmpty) {
  stale_push_across_reregistrations(false);
}

TEST(Inbox, AStalePushIsRefusedAfterItsPlaceWasReRegistered65536TimesWhileItHeldARequest) {
  stale_push_across_reregistrations(true);
}

}  // namespace
}  // namespace creditloop
