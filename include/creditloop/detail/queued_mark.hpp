// creditloop/detail/queued_mark.hpp: which core queued a request, and in which of its queues, as
// another core reads it. A request may be withdrawn through a runtime that did not queue it (a
// caller's mistake, refused): that runtime's dispatcher, on its own thread, reads the request's
// state and then its issuer and place, which the queuing core wrote before the state.
//
//   the queuing core, mark_queued()           another core, read_queued_mark()
//   queued_by, queued_place: relaxed stores   held: acquire load; it reads kQueued, and then
//   held = kQueued: release store  -------->  queued_by, queued_place (relaxed) are the queuing
//                                             core's
//
// The dispatch's release store of kInFlight (loop.cpp, take_oldest()) orders the same two fields
// for a reader that sees kInFlight: the same thread wrote them before it. Templated on the hook,
// so that the Relacy model (tests/relacy/queued_mark_model.cpp) runs this code with its own
// atomics; the core passes a RequestHook.
//
// Why: docs/design.md#whose-a-request-is
#pragma once

#include <atomic>
#include <cstdint>

namespace creditloop::detail {

/// What read_queued_mark() saw: the request's state, and which core queued it (its issuer) in
/// which place; `by` and `place` tell of the last core that queued it when `state` says it is
/// queued or in flight.
struct QueuedMark {
  std::uint8_t state;
  std::uint32_t by;
  std::uint32_t place;
};

/// The core with `issuer` queues `request` for the participant at `place`.
template <class Hook>
void mark_queued(Hook& request, std::uint32_t issuer, std::uint32_t place,
                 std::uint8_t queued) noexcept {
  // relaxed, both: published by the release store of `held` just after.
  request.queued_by.store(issuer, std::memory_order_relaxed);
  request.queued_place.store(place, std::memory_order_relaxed);
  // release: pairs with read_queued_mark()'s acquire load, which another runtime's dispatcher may
  // run on this request (it must then read this core's issuer, and refuse it).
  request.held.store(queued, std::memory_order_release);
}

/// Any core: the request's state, and who queued it where.
template <class Hook>
[[nodiscard]] QueuedMark read_queued_mark(const Hook& request) noexcept {
  QueuedMark mark{};
  // acquire: pairs with mark_queued()'s release store of kQueued and the dispatch's of
  // kInFlight, which may be another core's, on another thread: its issuer is then read, not ours.
  mark.state = request.held.load(std::memory_order_acquire);
  // relaxed, both: ordered by the acquire above.
  mark.by = request.queued_by.load(std::memory_order_relaxed);
  mark.place = request.queued_place.load(std::memory_order_relaxed);
  return mark;
}

}  // namespace creditloop::detail
