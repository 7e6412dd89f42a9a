// The last holder of an abandoned exchange frees it (tools/server/last_holder.hpp, used by
// Exchange::let_go in tools/server/session.hpp): the withdrawal thread and the runtime's side
// (the dispatcher's hand-out, or a hand-back) each write to the exchange, then let go; whichever
// lets go last reads what both wrote, as the exchange's destructor does.
//
// Checked: exactly one of the two frees it, and that one sees both writes, with no data race.
//
// The order that matters: the acq_rel decrement. The twin weakens it to relaxed: the freeing
// thread's reads of the other's write are then a data race.
#include <array>

#include "last_holder.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct LastHolderModel : rl::test_suite<LastHolderModel<Policy>, 2> {
  server::LastHolder<With<Policy>::template Atomic> holder;
  std::array<rl::var<int>, 2> written;  // each side's own write to the exchange
  std::array<int, 2> freed{};           // each thread's own entry

  void before() {
    written[0]($) = 0;
    written[1]($) = 0;
  }

  void thread(unsigned index) {
    written[index]($) = 1 + static_cast<int>(index);
    if (!holder.let_go()) return;
    freed[index] = 1;
    RL_ASSERT(written[0]($) == 1 && written[1]($) == 2);  // the destructor's reads
  }

  void after() { RL_ASSERT(freed[0] + freed[1] == 1); }
};

using Twin = Weaken<Holding<int>, Op::rmw, std::memory_order_acq_rel, std::memory_order_relaxed>;

}  // namespace

bool last_holder_model(Variant variant) {
  return check<LastHolderModel, Twin>("last_holder", variant, {rl::sched_full, 0},
                                      rl::test_result_data_race);
}

}  // namespace creditloop::relacy
