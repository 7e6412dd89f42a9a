// The charge-back and its fold (internal/completion_handover.hpp, as runtime.cpp's claim(),
// publish() and service() run it): completers claim their tickets' cells, write the cost into
// the record and hand the records to the dispatcher on the completion bag; the dispatcher takes
// them and reads each cost to charge it to the core. One completer works like a CompletionBatch
// (two records chained, then published as one chain), the other like complete() (one record).
// The dispatcher takes twice during the run and after() takes the rest, as the dispatcher's next
// turns would, then frees the cells: release() racing claims is the ticket model's, and leaving
// it out here keeps the full search short. No dispatcher sleeps here: the parking model runs the
// waker's side.
//
// Checked: every completion reaches the dispatcher exactly once, with the cost its completer
// wrote (a Relacy var: reading it unordered is a data race), so the sum charged is the sum of the
// costs; each cell is then free and refuses its ticket as stale.
//
// The orders that matter: push_chain()'s compare-and-swap releases the costs and the relaxed links
// of the chain, drain()'s exchange acquires them. The twin drops that release (seq_cst -> acquire
// on the bag head): the dispatcher then reads a cost, or a link, that nothing handed to it.
#include <array>

#include "internal/completion_handover.hpp"
#include "internal/lock_free_bag.hpp"
#include "internal/ticket_cell.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct ChargeBackModel : rl::test_suite<ChargeBackModel<Policy>, 3> {
  using R = CostRecord<Policy>;
  using Bag = detail::LockFreeBag<R, With<Policy>::template Atomic, &R::next_completed>;
  using Claim = typename detail::TicketCell<With<Policy>::template Atomic>::Claim;

  Bag completions;
  NoSleeper waker;
  std::array<R, 3> records;
  std::array<int, 3> applied{};  // the dispatcher's, then after()'s
  std::int64_t charged = 0;      // what the dispatcher has charged to the core

  static std::int64_t cost_of(std::size_t i) { return 1000 * static_cast<std::int64_t>(i + 1); }

  void before() {
    for (R& r : records) r.generation = r.cell.issue();
  }

  R& claim(std::size_t i) {
    R& r = records[i];
    RL_ASSERT(detail::claim_completion<VarCost<R>>(r, r.generation, cost_of(i)) == Claim::claimed);
    return r;
  }

  void thread(unsigned index) {
    switch (index) {
      case 0: {  // a CompletionBatch: two completions, published at once by its flush()
        R* first = nullptr;
        R* last = nullptr;
        detail::chain(first, last, claim(0));
        detail::chain(first, last, claim(1));
        detail::publish_completions(completions, *first, *last, waker);
        break;
      }
      case 1: {  // complete(): one completion
        R& r = claim(2);
        detail::publish_completions(completions, r, r, waker);
        break;
      }
      default:
        for (int i = 0; i < 2; ++i) take();
        break;
    }
  }

  void take() {
    completions.drain([&](R& r) {  // service(): apply_completion() reads the cost
      const auto i = static_cast<std::size_t>(&r - records.data());
      const std::int64_t cost = r.cost(RL_INFO);
      RL_ASSERT(cost == cost_of(i));
      charged += cost;
      ++applied[i];
    });
  }

  void after() {
    take();
    for (std::size_t i = 0; i < records.size(); ++i) {
      RL_ASSERT(applied[i] == 1);
      records[i].cell.release();
      RL_ASSERT(!records[i].cell.in_flight());
      RL_ASSERT(records[i].cell.claim(records[i].generation) == Claim::stale);
    }
    RL_ASSERT(charged == cost_of(0) + cost_of(1) + cost_of(2));
  }
};

// The bag head and the links are the model's only pointer atomics; only push compares and swaps.
using Twin = Weaken<HoldingPointers, Op::cas, std::memory_order_seq_cst, std::memory_order_acquire>;

}  // namespace

bool charge_back_model(Variant variant) {
  return check<ChargeBackModel, Twin>("charge_back", variant, {rl::sched_full, 0},
                                      rl::test_result_data_race);
}

}  // namespace creditloop::relacy
