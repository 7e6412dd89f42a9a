// runtime/internal/idle_env.hpp: the dispatcher's idle environment, what detail::idle_wait()
// (parker.hpp) asks while the dispatcher has nothing to do: which lists can end a wait for the
// reasons it waits for, the embedder's room test, a retry that no waker announces, and the spin.
// The runtime's idle() sleeps through one; the Relacy models that put the dispatcher to sleep
// (parking, wake, command_list, relisting) build the same over their own lists, with no spin, so
// they check this code rather than a copy of it. Internal to the runtime: not installed, not part
// of the public API.
//
// Why: docs/design.md#parking
#pragma once

#include <cstdint>

#include "creditloop/units.hpp"
#include "internal/parker.hpp"

namespace creditloop::detail {

/// Where work comes from, by the reason that can end a wait for it: commands always; submissions
/// (the activation list, a listing of another registration) for kWakeOnWork; completions (one at
/// a time, or the pool's blocks) for kWakeOnRoom. Each source's `maybe_nonempty()` or `raised()`
/// is its seq_cst re-check after Parker::prepare().
template <class Commands, class Activations, class Stale, class Completions, class PoolCompletions>
struct WorkSources {
  const Commands& commands;
  const Activations& activations;
  const Stale& stale;
  const Completions& completions;
  const PoolCompletions& pool_completions;

  [[nodiscard]] bool visible(std::uint32_t reasons) const noexcept {
    if (commands.maybe_nonempty()) return true;
    if ((reasons & kWakeOnWork) != 0 && (activations.maybe_nonempty() || stale.raised())) {
      return true;
    }
    return (reasons & kWakeOnRoom) != 0 &&
           (completions.maybe_nonempty() || pool_completions.maybe_nonempty());
  }
};

/// How one wait goes, fixed when it begins.
struct IdleSetting {
  std::uint32_t reasons = 0;
  // The embedder has a room test and the wait is also for room: the sleep is then timed, and the
  // test asked after each.
  bool room_polled = false;
  std::int64_t room_recheck_ns = -1;  // negative: an untimed sleep (a model's, see wake_model)
  std::int64_t spin_ns = 0;           // 0: no spin, and the clock is not read
};

/// idle_wait()'s `Env` over `Sources` (WorkSources). `Host` provides
///   bool has_room()        the room now, when room_polled (the room test, and tickets left)
///   bool retry_pending()   something to retry that nobody will announce
///   void parked(std::uint32_t reasons, std::int64_t timeout_ns)   told before each sleep
/// and `Pause` now(), relax() and yield(): the clock for the spin, the pause in each of its rounds,
/// and the yield before a sleep (the runtime's in dispatcher.cpp).
template <class Sources, class Host, class Pause>
class IdleEnv {
 public:
  IdleEnv(const Sources& sources, Host& host, IdleSetting setting) noexcept
      : sources_(sources), host_(host), setting_(setting) {}

  [[nodiscard]] bool work_visible() const noexcept { return sources_.visible(setting_.reasons); }
  [[nodiscard]] bool room_polled() const noexcept { return setting_.room_polled; }
  // has_room(), not the test alone: with every record in use the room is full whatever the test
  // says, and a yes would only spin the loop.
  [[nodiscard]] bool room_ready() const { return setting_.room_polled && host_.has_room(); }
  [[nodiscard]] std::int64_t room_recheck_ns() const noexcept { return setting_.room_recheck_ns; }
  [[nodiscard]] bool retry_pending() const { return host_.retry_pending(); }
  bool start_spin() noexcept {
    if (setting_.spin_ns <= 0) return false;
    spin_until_ = Pause::now() + setting_.spin_ns;
    return true;
  }
  // The clock is read every 64th round only: a read costs more than a round.
  [[nodiscard]] bool spin_more(std::uint32_t i) const noexcept {
    return (i & 63) != 0 || Pause::now() < spin_until_;
  }
  static void relax() noexcept { Pause::relax(); }
  static void yield() noexcept { Pause::yield(); }
  void parked(std::int64_t timeout_ns) { host_.parked(setting_.reasons, timeout_ns); }

 private:
  const Sources& sources_;
  Host& host_;
  const IdleSetting setting_;
  Nanos spin_until_ = 0;
};

}  // namespace creditloop::detail
