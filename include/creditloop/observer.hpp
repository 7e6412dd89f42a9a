// creditloop/observer.hpp: every input the runtime's dispatcher gives the core, as it gives it.
//
// An observer sees the exact sequence of calls the dispatcher makes on the deterministic core,
// with the `now` each one used. Replaying that sequence through a core (or the reference model)
// reproduces every decision, which is what the stress suite checks and what capture-and-replay
// tools build on. All calls come on the dispatcher thread, in order; they must be quick and must
// not call back into the runtime. With no observer the runtime pays one predictable branch per
// event.
//
// Two ways to follow decisions. By default the dispatcher makes one call per visit (begin_turn,
// visit, end_turn) and reports each. An observer whose follows_batches() is true lets it decide a
// batch with one Core::dispatch() call, as it does with no observer (when the room is a slot
// count): it then sees on_dispatch() and one on_visit() per dispatch of the batch, but not the
// turns begun nor the visits that found the turn over. Replaying a batch means calling
// dispatch() with the same span size at the same `now`, which takes the same decisions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "creditloop/core.hpp"
#include "creditloop/participant.hpp"
#include "creditloop/plan.hpp"
#include "creditloop/request.hpp"
#include "creditloop/ticket.hpp"
#include "creditloop/units.hpp"

namespace creditloop {

class RuntimeObserver {
 public:
  virtual ~RuntimeObserver() = default;
  /// A participant was registered (successful adds only; refused ones change nothing).
  virtual void on_add(ParticipantId, std::string_view /*name*/, PlanId, std::uint32_t /*shares*/,
                      Nanos /*now*/) {}
  virtual void on_remove(ParticipantId) {}
  virtual void on_replan(ParticipantId, PlanId, std::uint32_t /*shares*/, Nanos /*now*/) {}
  /// A participant was given a fraction of its plan: scale(p, millionths, now) (successful calls
  /// only).
  virtual void on_scale(ParticipantId, std::uint32_t /*millionths*/, Nanos /*now*/) {}
  /// A request moved from its participant's inbox into the core's queue.
  virtual void on_submit(ParticipantId, const RequestHook&, Nanos /*now*/) {}
  /// A queued request was withdrawn: withdraw(request) (successful calls only). The request is
  /// its caller's again and may be submitted anew by then: recognise it by its address, do not
  /// read it.
  virtual void on_withdraw(ParticipantId, const RequestHook&) {}
  /// begin_turn(now) returned `pass` (nothing: every queue was empty).
  virtual void on_begin_turn(std::optional<ClassId> /*pass*/, Nanos /*now*/) {}
  /// visit(now) returned `dispatch` (nullptr: the turn is over). `ticket` is the runtime's.
  virtual void on_visit(const Decision* /*dispatch*/, Ticket /*ticket*/, Nanos /*now*/) {}
  /// Whether the dispatcher may decide in batches (see above). Asked once, when the runtime
  /// starts.
  [[nodiscard]] virtual bool follows_batches() const { return false; }
  /// dispatch(now, out) with out.size() == `asked` returned `got`. The next `got` on_visit()
  /// calls carry its dispatches, in order; `got` < `asked` means every queue was empty after
  /// them. The turn the batch stopped in stays open.
  virtual void on_dispatch(std::size_t /*asked*/, std::size_t /*got*/, Nanos /*now*/) {}
  /// The server had no room: end_turn().
  virtual void on_end_turn() {}
  /// A completion was applied: complete_nano(ticket's core ticket, cost, now). `ticket` is the
  /// runtime's.
  virtual void on_complete(Ticket /*ticket*/, std::int64_t /*cost_nano*/, Nanos /*now*/) {}
  /// Shutdown took every queued request back: take_all_queued().
  virtual void on_take_all() {}
};

}  // namespace creditloop
