// Parking and waking (internal/parker.hpp idle_wait(), runtime.cpp idle(), submit() and
// publish()): the dispatcher sleeps on the Parker while two wakers publish work and notify it,
// one a submission (an activation pushed on one bag, kWakeOnWork) and one a completion (a record
// pushed on another, kWakeOnRoom). The dispatcher runs the runtime's own idle loop,
// detail::idle_wait(), between drains: re-check both bags with their seq_cst loads, yield, then
// park(): prepare() for both reasons, re-check, then cancel() or wait() without a timeout (a push
// is one seq_cst compare-and-swap, so a waker has no step outside the seq_cst order whose notify()
// could miss the announcement). It stops once it has drained both items. Only the spin, which
// reads the clock and can only end the wait early, is switched off, and the retry of a batch the
// pool could not take, which the model has no pool for.
//
// The futex is modelled (ModelFutex) so that a wait returns only if the word no longer holds the
// token or a wake comes: a dispatcher asleep with work pending and no notify still to come stays
// asleep, and Relacy reports the deadlock. Checked: no wake-up is lost, including when the two
// notify() calls race and one of them finds the reasons already cleared by the other.
//
// The orders that matter: the Dekker pair. prepare()'s RMW on the word and the re-check loads on
// one side, the waker's compare-and-swap on a bag head and notify()'s load of the word on the
// other, all seq_cst, so that either the re-check sees the work or the notify sees the reason. The
// twin weakens prepare()'s fetch_or to acq_rel: notify() may then read the word from before the
// announcement while the re-check reads the bag from before the push, and the dispatcher sleeps
// for good.
#include <array>

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
      default:  // a completer
        completions.push(items[1]);
        parker.notify(detail::kWakeOnRoom);
        break;
    }
  }

  // idle_wait()'s sources of work, as the runtime's idle() gives them, but for two bags and no
  // clock: the spin phase, which only returns early, is left out.
  struct Env {
    ParkingModel& m;
    bool work_visible() const {
      return m.activations.maybe_nonempty() || m.completions.maybe_nonempty();
    }
    static bool room_polled() { return false; }
    static bool room_ready() { return false; }
    static std::int64_t room_recheck_ns() { return 1'000'000; }
    static bool retry_pending() { return false; }
    static bool start_spin() { return false; }
    static bool spin_more(std::uint32_t) { return false; }
    static void relax() {}
    static void yield() {}
    static void parked(std::int64_t) {}
  };

  void dispatch() {
    std::size_t seen = 0;
    auto take = [](Item<Policy>&) {};
    detail::RetryBackoff backoff;
    Env env{*this};
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
