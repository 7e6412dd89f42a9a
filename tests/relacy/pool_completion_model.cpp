// A pool worker's completions (internal/completion_block.hpp and completion_handover.hpp, as
// runtime.cpp hand_out(), worker_pool.cpp worker_main() and dispatcher.cpp service() run them).
// Four tickets were issued claimed for the pool (issue_claimed()). The worker has two blocks of
// two entries and completes each ticket as worker_main() does (lend_completion()): behind the
// entries of the block it lent last while the dispatcher has not closed it, else into the next
// of its blocks that the dispatcher has returned, lent at once, or, when the dispatcher holds
// both, through the ticket's record. (Four, so that a block the dispatcher returned is lent
// again: with three, the third always finds room in the second block.) The dispatcher takes the
// completions once, closing each block, reading the entries it counted and returning it, and then a
// completion of the last ticket is forged, as a user calling complete() with it would. after()
// takes the rest, as the dispatcher's next turns would. (A second take by the dispatcher makes the
// full search run for more than ten minutes.)
//
// Checked: each ticket is applied exactly once with the cost its worker wrote (Relacy vars:
// reading one unordered is a data race, and so is the worker writing a block the dispatcher may
// still be reading); an entry written into a block the dispatcher closed first is never read, and
// its completion goes out in another block; the forged completion is refused as stale and changes
// nothing.
//
// The orders that matter, one twin each: return_to_worker()'s release store and available()'s
// acquire load return the block to its worker (twin `pool_completion`: the store relaxed, so the
// worker may rewrite the block while the dispatcher's reads of it are not ordered before, a data
// race); append()'s release CAS and close()'s acquire exchange hand over an entry added to a lent
// block (twin `pool_completion_append`: the CAS relaxed, so the dispatcher reads an entry whose
// write is not ordered before, a data race).
#include <array>
#include <cstdint>

#include "internal/completion_block.hpp"
#include "internal/completion_handover.hpp"
#include "internal/lock_free_bag.hpp"
#include "internal/ticket_cell.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

struct Entry {
  std::uint32_t index = 0;
  rl::var<std::int64_t> cost{-1};
};

template <class Policy>
struct PoolCompletionModel : rl::test_suite<PoolCompletionModel<Policy>, 2> {
  using R = CostRecord<Policy>;
  using Block = detail::CompletionBlock<With<Policy>::template Atomic, Entry, 2>;
  using Blocks = detail::LockFreeBag<Block, With<Policy>::template Atomic, &Block::next_completed>;
  using Records = detail::LockFreeBag<R, With<Policy>::template Atomic, &R::next_completed>;
  using Claim = typename detail::TicketCell<With<Policy>::template Atomic>::Claim;

  Blocks blocks;
  Records records_bag;
  std::array<Block, 2> own;       // the worker's blocks
  std::size_t last = own.size();  // worker_main()'s last_lent
  NoSleeper waker;
  std::array<R, 4> records;
  std::array<int, 4> applied{};  // the dispatcher's, then after()'s
  std::int64_t charged = 0;

  static std::int64_t cost_of(std::size_t i) { return 1000 * static_cast<std::int64_t>(i + 1); }

  void before() {
    for (R& r : records) r.generation = r.cell.issue_claimed();
  }

  // worker_main(): one completion as its job ends.
  void complete(std::size_t ticket) {
    const auto fill = [&](Entry& entry) {
      entry.index = static_cast<std::uint32_t>(ticket);
      entry.cost(RL_INFO) = cost_of(ticket);
    };
    if (detail::lend_completion(blocks, own, last, fill, waker)) return;
    VarCost<R>::set(records[ticket], cost_of(ticket));  // the record is the pool's
    detail::publish_completions(records_bag, records[ticket], records[ticket], waker);
  }

  void thread(unsigned index) {
    switch (index) {
      case 0:  // the worker
        complete(0);
        RL_ASSERT(last == 0);
        complete(1);
        complete(2);
        complete(3);
        break;
      default:  // the dispatcher, and a forged completion of the last ticket: the pool owns it
        drain();
        RL_ASSERT(records[3].cell.claim(records[3].generation) == Claim::stale);
        break;
    }
  }

  void apply(std::size_t i, std::int64_t cost) {
    RL_ASSERT(cost == cost_of(i));
    charged += cost;
    ++applied[i];
  }

  void drain() {
    records_bag.drain(
        [&](R& r) { apply(static_cast<std::size_t>(&r - records.data()), r.cost(RL_INFO)); });
    detail::take_blocks(blocks, [&](const Entry& e) { apply(e.index, e.cost(RL_INFO)); });
  }

  void after() {
    drain();
    for (std::size_t i = 0; i < records.size(); ++i) {
      RL_ASSERT(applied[i] == 1);
      records[i].cell.release();
      RL_ASSERT(records[i].cell.claim(records[i].generation) == Claim::stale);
    }
    RL_ASSERT(charged == cost_of(0) + cost_of(1) + cost_of(2) + cost_of(3));
  }
};

// `filled` is the model's only 32-bit atomic: return_to_worker() is its only release store, and
// append()'s its only CAS.
using ReturnTwin =
    Weaken<Holding<std::uint32_t>, Op::store, std::memory_order_release, std::memory_order_relaxed>;
using AppendTwin =
    Weaken<Holding<std::uint32_t>, Op::cas, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool pool_completion_model(Variant variant) {
  return check<PoolCompletionModel, ReturnTwin>("pool_completion", variant, {rl::sched_full, 0},
                                                rl::test_result_data_race);
}

bool pool_completion_append_model(Variant variant) {
  return check<PoolCompletionModel, AppendTwin>("pool_completion_append", variant,
                                                {rl::sched_full, 0}, rl::test_result_data_race);
}

}  // namespace creditloop::relacy
