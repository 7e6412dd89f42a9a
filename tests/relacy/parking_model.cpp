// Parking and waking (internal/parker.hpp, runtime.cpp idle(), submit() and publish()): the
// dispatcher sleeps on the Parker while two wakers publish work and notify it, one a submission
// (an activation pushed on one bag, kWakeOnWork) and one a completion (a record pushed on
// another, kWakeOnRoom). The dispatcher does what idle() does once its spinning is over: drain,
// prepare() for both reasons, re-check both bags with their seq_cst loads, then cancel() or
// wait(): without a timeout, or with one while a push it took is still half-way (a waker
// preempted between its two steps: the finishing link store is not in the seq_cst order, so its
// notify() may miss the announcement, and only the timeout ends that sleep). It stops once it
// has drained both items. The sleep is Parker::park(), the one idle() runs; the re-check and the
// timeout are idle()'s, written out here (idle() itself is a member of the runtime).
//
// The futex is modelled (ModelFutex) so that a wait returns only if the word no longer holds the
// token or a wake comes: a dispatcher asleep with work pending and no notify still to come stays
// asleep, and Relacy reports the deadlock. Checked: no wake-up is lost, including when the two
// notify() calls race and one of them finds the reasons already cleared by the other.
//
// The orders that matter: the Dekker pair. prepare()'s RMW on the word and the re-check loads on
// one side, the waker's exchange on a bag head and notify()'s load of the word on the other, all
// seq_cst, so that either the re-check sees the work or the notify sees the reason. The twin
// weakens prepare()'s fetch_or to acq_rel: notify() may then read the word from before the
// announcement while the re-check reads the bag from before the push, and the dispatcher sleeps
// for good.
#include <array>

#include "internal/parker.hpp"
#include "internal/wait_free_bag.hpp"
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
  using Bag = detail::WaitFreeBag<Item<Policy>, Atomics::template Atomic, &Item<Policy>::next>;
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
      default:  // a completer
        completions.push(items[1]);
        parker.notify(detail::kWakeOnRoom);
        break;
    }
  }

  void dispatch() {
    std::size_t seen = 0;
    auto take = [](Item<Policy>&) {};
    for (;;) {
      seen += activations.drain(take) + completions.drain(take);
      if (seen == items.size()) return;
      const bool half_pushed = activations.has_half_pushed() || completions.has_half_pushed();
      parker.park(
          kReasons, [&] { return activations.maybe_nonempty() || completions.maybe_nonempty(); },
          [&] { return half_pushed ? std::int64_t{16'000} : std::int64_t{-1}; });
    }
  }
};

// The word is the model's only 32-bit atomic, and prepare()'s fetch_or its only seq_cst RMW other
// than notify()'s compare-and-swap, which stays as written.
using Twin =
    Weaken<Holding<std::uint32_t>, Op::rmw, std::memory_order_seq_cst, std::memory_order_acq_rel>;

}  // namespace

bool parking_model(Variant variant) {
  return check<ParkingModel, Twin>("parking", variant, {rl::sched_random, 2'000'000},
                                   rl::test_result_deadlock);
}

}  // namespace creditloop::relacy
