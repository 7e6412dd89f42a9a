// runtime/internal/announce.hpp: how a producer or a poster of a command makes its work visible to
// the dispatcher and wakes it: first the seq_cst read-modify-write or store that the dispatcher's
// re-check after Parker::prepare() reads (idle_env.hpp), then Parker::notify(). Either order
// reversed, or a notify left out, can leave the dispatcher asleep beside the work. The runtime
// runs these (submit(), run_on_dispatcher()); so do the Relacy models relisting, command_list and
// withdrawal.
// Internal to the runtime: not installed, not part of the public API.
//
// Why: docs/design.md#parking
#pragma once

#include <cstdint>

#include "internal/parker.hpp"
#include "internal/test_hooks.hpp"

namespace creditloop::detail {

/// A producer, after Mailbox::submit() said `outcome`: lists the mailbox on the activation list
/// (its first request since the last take), or raises the stale listings (the mailbox is listed
/// by another registration, mailbox.hpp), and then wakes the dispatcher; otherwise nothing (the
/// mailbox is listed already, or the submit was refused). `Waker` is the Parker, or anything with
/// its notify() (the runtime passes its ParkingBerth).
template <class Box, class Activations, class Stale, class Waker>
void announce_submit(typename Box::Submit outcome, Box& mailbox, Activations& activations,
                     Stale& stale, Waker& waker) noexcept {
  if (outcome == Box::Submit::queued_and_listed) {
    CREDITLOOP_TEST_HOOK(submit_listed);
    activations.push(mailbox);  // seq_cst CAS: the work the dispatcher re-checks
    waker.notify(kWakeOnWork);
  } else if (outcome == Box::Submit::queued_behind_stale) [[unlikely]] {
    stale.raise();  // seq_cst store: the work the dispatcher re-checks
    waker.notify(kWakeOnWork);
  }
}

/// Any thread but the dispatcher: posts `command` and wakes the dispatcher, whatever it sleeps
/// for. False: the list is closed (the dispatcher has exited), the command not posted.
template <class Commands, class Command, class ParkerT>
[[nodiscard]] bool announce_command(Commands& commands, Command& command,
                                    ParkerT& parker) noexcept {
  if (!commands.post(command)) return false;  // seq_cst CAS: the work the dispatcher re-checks
  CREDITLOOP_TEST_HOOK(command_posted);
  parker.notify(kWakeOnWork | kWakeOnRoom);
  return true;
}

}  // namespace creditloop::detail
