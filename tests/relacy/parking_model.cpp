// Relacy model of parking and waking (internal/parker.hpp idle_wait() through
// internal/idle_env.hpp, as dispatcher.cpp idle() runs it; the wakers of submit_complete.cpp
// submit() and of a completion, internal/completion_handover.hpp publish_completions()): the
// dispatcher runs the runtime's idle loop on the Parker while a submission (kWakeOnWork) and a
// completion (kWakeOnRoom) publish work and notify it. The futex is modelled (ModelFutex), so a
// lost wake-up is a deadlock Relacy reports.
//
// Checked: no wake-up is lost, also when the two notify() calls race.
// Orders (the Dekker pair, all seq_cst):
//  - prepare()'s RMW on the word, then the re-check loads of both bags;
//  - the waker's CAS on a bag head, then notify()'s load of the word.
// Twin: prepare()'s fetch_or weakened to acq_rel; the dispatcher sleeps for good.
// Why: docs/testing.md#the-parking-model
#include <array>

#include "internal/completion_handover.hpp"
#include "internal/idle_env.hpp"
#include "internal/lock_free_bag.hpp"
#include "internal/parker.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct Item {
  ModelAtomic<Item*, Policy> next{nullptr};
};

template <class Policy>
struct ParkingModel : rl::test_suite<ParkingModel<Policy>, 3> {
  using Atomics = With<Policy>;
  using Bag = detail::LockFreeBag<Item<Policy>, Atomics::template Atomic, &Item<Policy>::next>;
  static constexpr std::uint32_t kReasons = detail::kWakeOnWork | detail::kWakeOnRoom;

  detail::Parker<Atomics::template Atomic, ModelFutex> parker;
  Bag activations;
  Bag completions;
  std::array<Item<Policy>, 2> items;

  void thread(unsigned index) {
    switch (index) {
      case 0:
        dispatch();
        break;
      case 1:  // a producer whose submission activated a participant
        activations.push(items[0]);
        parker.notify(detail::kWakeOnWork);
        break;
      default:  // a completer: complete()'s publish
        detail::publish_completions(completions, items[1], items[1], parker);
        break;
    }
  }

  // The runtime's idle environment over the two bags, without the spin (which reads the clock and
  // can only end the wait early).
  using Sources = detail::WorkSources<NoWork, Bag, NoWork, Bag, NoWork>;

  void dispatch() {
    std::size_t seen = 0;
    auto take = [](Item<Policy>&) {};
    detail::RetryBackoff backoff;
    const NoWork none;
    const Sources sources{none, activations, none, completions, none};
    QuietHost host;
    ModelIdleEnv<Sources> env(sources, host, {.reasons = kReasons});
    for (;;) {
      seen += activations.drain(take) + completions.drain(take);
      if (seen == items.size()) return;
      detail::idle_wait(parker, kReasons, env, backoff);
    }
  }
};

// The word is the model's only 32-bit atomic, and prepare()'s fetch_or its only seq_cst RMW other
// than notify()'s compare-and-swap, which stays as written.
using Twin =
    Weaken<Holding<std::uint32_t>, Op::rmw, std::memory_order_seq_cst, std::memory_order_acq_rel>;

// The other half of the Dekker pair: notify()'s seq_cst load of the word, the model's only 32-bit
// load that is seq_cst as written, weakened to acquire.
using NotifyTwin =
    Weaken<Holding<std::uint32_t>, Op::load, std::memory_order_seq_cst, std::memory_order_acquire>;

// The re-check: the bags' maybe_nonempty() loads, the model's only seq_cst loads of a pointer,
// weakened to acquire.
using RecheckTwin =
    Weaken<HoldingPointers, Op::load, std::memory_order_seq_cst, std::memory_order_acquire>;

}  // namespace

bool parking_model(Variant variant) {
  return check<ParkingModel, Twin>("parking", variant, {rl::sched_random, 2'000'000},
                                   rl::test_result_deadlock);
}

bool parking_notify_model(Variant variant) {
  return check<ParkingModel, NotifyTwin>("parking_notify", variant, {rl::sched_random, 2'000'000},
                                         rl::test_result_deadlock);
}

bool parking_recheck_model(Variant variant) {
  return check<ParkingModel, RecheckTwin>("parking_recheck", variant, {rl::sched_random, 2'000'000},
                                          rl::test_result_deadlock);
}

}  // namespace creditloop::relacy
