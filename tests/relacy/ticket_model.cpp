// Ticket completion and its generation check (internal/ticket_cell.hpp, runtime.cpp claim(),
// apply_completion() and hand_out()). One cell; before the run it has been issued, completed and
// released once (generation 1, now stale) and issued again (generation 2). Two completers race to
// complete generation 2, one also tries the stale generation and the other a forged one, and
// then each tries once to complete generation 3 (a ticket that may not be issued yet, as a forged
// or early one would be). The dispatcher drains the completion bag once and, if the winner's record
// is there, applies it, frees the cell and issues generation 3 after writing the record for it.
//
// Checked: exactly one completion of generation 2 wins, and the dispatcher reads what the winner
// wrote; a stale generation is refused as stale and a never-issued one as unknown, whenever they
// come; generation 3 is claimed at most once, only once issued, and whoever claims it sees the
// record the dispatcher wrote before issuing it (a Relacy var).
//
// The orders that matter: issue()'s store releases the record, claim()'s CAS acquires it. The twin
// makes issue()'s store relaxed: a completer that claims generation 3 then reads a record that
// nothing handed to it, a data race.
#include <array>

#include "internal/lock_free_bag.hpp"
#include "internal/ticket_cell.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct Record {
  detail::TicketCell<With<Policy>::template Atomic> cell;
  ModelAtomic<Record*, Policy> next_completed{nullptr};
  rl::var<int> job{0};      // the dispatcher's, written before issue()
  rl::var<int> winner{-1};  // the claiming completer's, read by the dispatcher
};

template <class Policy>
struct TicketModel : rl::test_suite<TicketModel<Policy>, 3> {
  using R = Record<Policy>;
  using Bag = detail::LockFreeBag<R, With<Policy>::template Atomic, &R::next_completed>;
  using Claim = typename detail::TicketCell<With<Policy>::template Atomic>::Claim;

  Bag completions;
  R record;
  std::array<std::array<Claim, 3>, 2> claims{};  // [completer][gen 2, stale or forged, gen 3]
  bool reissued = false;                         // the dispatcher's

  void before() {
    const std::uint64_t first = record.cell.issue();
    RL_ASSERT(first == 1 && record.cell.claim(first) == Claim::claimed);
    record.cell.release();
    record.job(RL_INFO) = 2;
    RL_ASSERT(record.cell.issue() == 2);
  }

  void thread(unsigned index) {
    if (index == 2) {
      dispatch();
      return;
    }
    std::array<Claim, 3>& mine = claims[index];
    mine[0] = record.cell.claim(2);
    if (mine[0] == Claim::claimed) {
      RL_ASSERT(record.job(RL_INFO) == 2);
      record.winner(RL_INFO) = static_cast<int>(index);
      completions.push(record);
    }
    mine[1] = record.cell.claim(index == 0 ? 1 : 9);
    mine[2] = record.cell.claim(3);
    if (mine[2] == Claim::claimed) RL_ASSERT(record.job(RL_INFO) == 3);
  }

  void dispatch() {
    completions.drain([&](R& r) {
      const int winner = r.winner(RL_INFO);
      RL_ASSERT(winner == 0 || winner == 1);
      RL_ASSERT(claims[winner][0] == Claim::claimed);
      r.cell.release();
      r.job(RL_INFO) = 3;
      RL_ASSERT(r.cell.issue() == 3);
      reissued = true;
    });
  }

  void after() {
    RL_ASSERT((claims[0][0] == Claim::claimed) != (claims[1][0] == Claim::claimed));
    for (const std::array<Claim, 3>& mine : claims) {
      RL_ASSERT(mine[0] == Claim::claimed || mine[0] == Claim::stale);
    }
    RL_ASSERT(claims[0][1] == Claim::stale);
    RL_ASSERT(claims[1][1] == Claim::unknown);
    const int third = (claims[0][2] == Claim::claimed) + (claims[1][2] == Claim::claimed);
    RL_ASSERT(third <= (reissued ? 1 : 0));
    // In flight at the end exactly when generation 3 was issued and nobody has claimed it.
    RL_ASSERT(record.cell.in_flight() == (reissued && third == 0));
  }
};

// The cell's state is the model's only 64-bit atomic; its only release store is issue().
using Twin =
    Weaken<Holding<std::uint64_t>, Op::store, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool ticket_model(Variant variant) {
  return check<TicketModel, Twin>("ticket", variant, {rl::sched_full, 0},
                                  rl::test_result_data_race);
}

}  // namespace creditloop::relacy
