// A pool worker's completion blocks (internal/completion_block.hpp, completion_handover.hpp): a
// completion joins the block the worker lent last while the dispatcher has not closed it, so a
// worker's completions share one push on the bag's head while the dispatcher is busy, and one
// that comes too late for a block goes out in another, never lost and never read twice.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "first_pass_stops.hpp"
#include "internal/completion_block.hpp"
#include "internal/completion_handover.hpp"
#include "internal/lock_free_bag.hpp"

namespace creditloop::detail {
namespace {

struct Entry {
  std::uint64_t id = 0;
};
constexpr std::size_t kEntries = 3;
using Block = CompletionBlock<std::atomic, Entry, kEntries>;
using Bag = LockFreeBag<Block, std::atomic, &Block::next_completed>;

struct CountingWaker {
  int notified = 0;
  void notify(std::uint32_t) noexcept { ++notified; }
};

// A worker's side: its blocks and the one it lent last.
struct Worker {
  std::array<Block, 2> own;
  std::size_t last = own.size();
  CountingWaker waker;

  bool complete(Bag& bag, std::uint64_t id) {
    return lend_completion(
        bag, own, last, [&](Entry& e) { e.id = id; }, waker);
  }
  // Which of its blocks holds `entry`: only the addresses are read.
  const Block* block_of(const Entry& entry) const {
    for (const Block& block : own) {
      for (const Entry& e : block.entries) {
        if (&e == &entry) return &block;
      }
    }
    return nullptr;
  }
};

using Ids = std::vector<std::vector<std::uint64_t>>;

// The dispatcher's side, as it ships (take_blocks()): the ids of each block it takes, a vector
// per block. A block is drained once per take, so its entries come together.
Ids take(Bag& bag, const Worker& worker) {
  Ids blocks;
  const Block* current = nullptr;
  take_blocks(bag, [&](const Entry& e) {
    const Block* const in = worker.block_of(e);
    if (in != current) {
      blocks.emplace_back();
      current = in;
    }
    blocks.back().push_back(e.id);
  });
  return blocks;
}

TEST(CompletionBlocks, CompletionsWhileTheDispatcherIsBusyShareOnePush) {
  Bag bag;
  Worker worker;
  ASSERT_TRUE(worker.complete(bag, 1));
  ASSERT_TRUE(worker.complete(bag, 2));
  ASSERT_TRUE(worker.complete(bag, 3));
  EXPECT_EQ(worker.waker.notified, 1) << "one push, one wake";
  EXPECT_EQ(take(bag, worker), (Ids{{1, 2, 3}}));

  // Taken and closed: the next completion opens the other block, and the blocks go in turn.
  ASSERT_TRUE(worker.complete(bag, 4));
  EXPECT_EQ(worker.last, 1U);
  EXPECT_EQ(take(bag, worker), (Ids{{4}}));
  ASSERT_TRUE(worker.complete(bag, 5));
  EXPECT_EQ(worker.last, 0U);
  EXPECT_EQ(take(bag, worker), (Ids{{5}}));
}

TEST(CompletionBlocks, AFullBlockSendsTheNextCompletionToAnotherAndNoneWaitsWhenAllAreLent) {
  Bag bag;
  Worker worker;
  for (std::uint64_t id = 1; id <= kEntries + 1; ++id) ASSERT_TRUE(worker.complete(bag, id));
  EXPECT_EQ(worker.waker.notified, 2);
  // Both blocks lent, the second still open: it takes more until it is full too.
  for (std::uint64_t id = kEntries + 2; id <= 2 * kEntries; ++id) {
    ASSERT_TRUE(worker.complete(bag, id));
  }
  EXPECT_FALSE(worker.complete(bag, 99))
      << "every block lent and full: the worker goes another way";
  EXPECT_EQ(take(bag, worker), (Ids{{4, 5, 6}, {1, 2, 3}}));  // the bag is a stack
  ASSERT_TRUE(worker.complete(bag, 7));
  EXPECT_EQ(take(bag, worker), (Ids{{7}}));
}

TEST(CompletionBlocks, AnEntryTooLateForItsBlockGoesInAnotherAndIsReadOnce) {
  Bag bag;
  Worker worker;
  ASSERT_TRUE(worker.complete(bag, 1));
  // The worker stops with its second entry written into the lent block but not yet counted; the
  // dispatcher takes and closes the block meanwhile.
  using Stops = runtime_tests::FirstPassStops<&test_hooks::block_appending>;
  Stops::arm();
  std::thread completer([&] { EXPECT_TRUE(worker.complete(bag, 2)); });
  Stops::stopped.acquire();
  EXPECT_EQ(take(bag, worker), (Ids{{1}}));
  Stops::go.release();
  completer.join();
  Stops::disarm();
  EXPECT_EQ(take(bag, worker), (Ids{{2}}));
  EXPECT_EQ(take(bag, worker), Ids{});
}

// A worker completing as fast as it can against a dispatcher taking as fast as it can: every
// completion is read exactly once, and a worker's entries keep their order within a block. (Here
// the worker tries again while every block is lent, where the pool's goes through the ticket's
// record, so that every completion crosses the blocks.) Run under ThreadSanitizer by the tsan
// preset.
TEST(CompletionBlocks, EveryCompletionIsReadOnceUnderContention) {
  constexpr std::uint64_t kCompletions = 200'000;
  Bag bag;
  Worker worker;
  std::atomic<bool> done{false};
  std::thread completer([&] {
    for (std::uint64_t id = 1; id <= kCompletions; ++id) {
      while (!worker.complete(bag, id)) std::this_thread::yield();
    }
    done.store(true, std::memory_order_release);  // pairs with the loop's acquire load below
  });
  std::vector<std::uint8_t> seen(kCompletions + 1, 0);
  std::uint64_t blocks = 0;
  std::uint64_t entries = 0;
  bool ordered = true;
  const auto read = [&] {
    for (const std::vector<std::uint64_t>& ids : take(bag, worker)) {
      ++blocks;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        ++seen[ids[i]];
        ++entries;
        if (i > 0 && ids[i] != ids[i - 1] + 1) ordered = false;
      }
    }
  };
  while (!done.load(std::memory_order_acquire)) read();
  completer.join();
  read();
  EXPECT_TRUE(ordered) << "a block's entries are one worker's consecutive completions";
  EXPECT_EQ(entries, kCompletions);
  std::uint64_t once = 0;
  for (std::uint64_t id = 1; id <= kCompletions; ++id) once += seen[id] == 1 ? 1 : 0;
  EXPECT_EQ(once, kCompletions);
  EXPECT_LE(blocks, entries);
}

}  // namespace
}  // namespace creditloop::detail
