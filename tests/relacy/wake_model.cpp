// Runtime::wake() (internal/parker.hpp wake()) after an embedder's room flag: the embedder stores
// its flag relaxed, as the runtime's own tests do, and calls wake(); the dispatcher, out of room,
// runs the runtime's idle loop, detail::idle_wait() with internal/idle_env.hpp, whose re-check asks
// the embedder's room test (a relaxed load of the flag) after prepare(). It stops once the test
// says room.
//
// The futex is modelled (ModelFutex) and the sleep has no timeout: in the runtime a room test
// bounds the sleep by room_recheck, so a lost wake-up costs that long; here it sleeps for good and
// Relacy reports the deadlock. Checked: the wake-up is never lost.
//
// The orders that matter: neither the flag's store nor its load is seq_cst, so notify()'s seq_cst
// load of the parking word pairs with nothing on the embedder's side (the store may still be in
// its store buffer when the dispatcher re-checks). wake() therefore reads the word with a
// read-modify-write that releases the flag: if it comes before prepare()'s RMW in the word's
// modification order, prepare() acquires it and the re-check sees the flag; if after, it reads
// the reason prepare() set and wakes the dispatcher. The twin weakens that RMW to relaxed.
#include "internal/idle_env.hpp"
#include "internal/parker.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct WakeModel : rl::test_suite<WakeModel<Policy>, 2> {
  using Atomics = With<Policy>;

  detail::Parker<Atomics::template Atomic, ModelFutex> parker;
  ModelAtomic<bool, Policy> room{false};

  void thread(unsigned index) {
    if (index == 0) {
      dispatch();
      return;
    }
    room.store(true, std::memory_order_relaxed);  // the embedder's flag, as the tests write it
    parker.wake(detail::kWakeOnRoom | detail::kWakeOnWork);  // Runtime::wake()
  }

  // The runtime's idle environment when it is out of room and has a room test: no list has work,
  // and the room test reads the flag. The sleep is untimed (room_recheck_ns negative; see the file
  // comment) and there is no spin.
  using Sources = detail::WorkSources<NoWork, NoWork, NoWork, NoWork, NoWork>;
  struct Host : QuietHost {
    WakeModel& m;
    explicit Host(WakeModel& model) : m(model) {}
    bool has_room() const { return m.room.load(std::memory_order_relaxed); }
  };

  void dispatch() {
    detail::RetryBackoff backoff;
    const NoWork none;
    const Sources sources{none, none, none, none, none};
    Host host(*this);
    ModelIdleEnv<Sources, Host> env(
        sources, host,
        {.reasons = detail::kWakeOnRoom, .room_polled = true, .room_recheck_ns = -1});
    while (!env.room_ready()) detail::idle_wait(parker, detail::kWakeOnRoom, env, backoff);
  }
};

// The word is the model's only 32-bit atomic; wake()'s RMW its only release one.
using Twin =
    Weaken<Holding<std::uint32_t>, Op::rmw, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool wake_model(Variant variant) {
  return check<WakeModel, Twin>("wake", variant, {rl::sched_full, 0}, rl::test_result_deadlock);
}

}  // namespace creditloop::relacy
