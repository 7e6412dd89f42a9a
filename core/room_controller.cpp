// core/room_controller.cpp: the learned room (room_controller.hpp). At each window's end the
// window's mean latency, set against the no-queue latency, cuts the room to what Little's law
// says the backend serves, grows it while it fills (above the last cut, a trial that the next
// window keeps or takes back), or becomes the new no-queue latency; every kProbeEvery windows a
// probe at three quarters of the room measures the no-queue latency again.
//
// Why: docs/design.md#a-room-that-finds-itself
#include "creditloop/room_controller.hpp"

#include <algorithm>

namespace creditloop {

namespace {

__extension__ typedef unsigned __int128 Wide;

// mean > base x (1 + per_mille / 1000), in integers.
bool above(Nanos mean, Nanos base, std::int64_t per_mille) {
  return static_cast<Wide>(std::max<Nanos>(mean, 1)) * 1000 >
         static_cast<Wide>(std::max<Nanos>(base, 1)) * static_cast<Wide>(1000 + per_mille);
}

// Half of what `step` slots added to a room of `from` raise the mean by, per mille, when the
// backend was saturated at `from` (Little's law): what tells a queue they made from noise.
std::int64_t half_the_rise(std::uint32_t step, std::uint32_t from) {
  return std::max<std::int64_t>(1, 500 * std::int64_t{step} / std::max<std::uint32_t>(from, 1));
}

}  // namespace

RoomController::RoomController(RoomBounds bounds) noexcept
    : bounds_{std::max<std::uint32_t>(bounds.least, 1),
              std::max<std::uint32_t>(bounds.most, std::max<std::uint32_t>(bounds.least, 1))},
      slots_(bounds_.least),
      threshold_(bounds_.most) {}

void RoomController::dispatched(Nanos now, std::uint64_t in_flight) noexcept {
  if (!window_open_) {
    window_open_ = true;
    window_start_ = now;
  }
  if (in_flight >= slots_) full_ = true;
}

void RoomController::completed(Nanos dispatched_at, Nanos now) noexcept {
  if (!window_open_) {
    window_open_ = true;
    window_start_ = now;
  }
  // A request dispatched before the room last changed tells of the room before.
  if (dispatched_at < changed_at_) return;
  latency_sum_ += std::max<Nanos>(now - dispatched_at, 0);
  ++completions_;
  const Nanos span = std::max(kLeastWindow, no_queue_ * kWindowLatencies);
  // Eight completions per slot, so that a small room's windows are no longer than a large one's,
  // and at most kWindowCompletions, where the mean is steady to a few per cent.
  // A probe takes four times as many, or 32 per slot: the whole room is judged against its
  // measure. The first window, at the least room, takes few: the probes refine it.
  const bool measure = phase_ == Phase::probe;
  const std::int64_t enough =
      phase_ == Phase::start ? kStartCompletions
      : measure              ? std::min<std::int64_t>(
                      4 * kWindowCompletions,
                      std::max<std::int64_t>(kWindowCompletions, 32 * std::int64_t{slots_}))
                : std::min<std::int64_t>(kWindowCompletions,
                                         std::max<std::int64_t>(32, 8 * std::int64_t{slots_}));
  if (now - window_start_ >= span && completions_ >= enough) close_window(now);
}

void RoomController::set_slots(std::uint64_t slots, Nanos now) noexcept {
  const auto next = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(std::max<std::uint64_t>(slots, bounds_.least), bounds_.most));
  if (next != slots_) changed_at_ = now;
  slots_ = next;
}

void RoomController::start_probe(Nanos now) noexcept {
  phase_ = Phase::probe;
  resume_slots_ = slots_;
  set_slots((std::uint64_t{slots_} * 3 + 3) / 4, now);
}

void RoomController::schedule_probe() noexcept {
  // A deterministic quarter either way, so that rooms started together do not probe together.
  // The first probes come sooner: the first window measured few completions.
  const std::uint64_t mix = (++probes_ * 0x9E3779B97F4A7C15ULL) >> 60;  // 0..15
  const std::uint32_t every = probes_ <= 2 ? kProbeEvery / 8 : kProbeEvery;
  windows_to_probe_ = every * 3 / 4 + static_cast<std::uint32_t>(mix) * every / 32;
}

void RoomController::close_window(Nanos now) noexcept {
  bool cutting = false;  // the last window cut the room too
  const Nanos mean = latency_sum_ / completions_;
  const bool was_full = full_;
  window_start_ = now;
  latency_sum_ = 0;
  completions_ = 0;
  full_ = false;

  switch (phase_) {
    case Phase::start:
      no_queue_ = mean;
      phase_ = Phase::steady;
      schedule_probe();
      return;
    case Phase::probe:
      end_probe(mean, now);
      return;
    case Phase::judge:
      phase_ = Phase::steady;
      if (slow_for_everyone(mean)) return;
      cutting = true;
      break;
    case Phase::steady:
      break;
  }

  if (trial_from_ != 0 && trial_failed(mean, now)) return;
  // A probe waits for the window after a judged cut: this one decides whether the room grows
  // back to where the run of cuts began.
  if (!cutting && windows_to_probe_ > 0 && --windows_to_probe_ == 0) {
    start_probe(now);
    return;
  }
  if (above(no_queue_, mean, 2 * kTolerancePerMille)) {
    no_queue_ = mean;  // the backend got faster: what it does now is its no-queue latency
  }
  if (above(mean, no_queue_, kTolerancePerMille)) {
    if (slots_ == bounds_.least) {
      // No cut is left, and the least room is taken to be within the backend: what it sees is
      // the no-queue latency (the first window's few completions may have set it low): halfway
      // there.
      no_queue_ = (no_queue_ + mean) / 2;
      // A run of cuts that reached the least room is not over until a window finds no queue:
      // the next window still judges it, so that the room grows back to where the run began
      // if the backend was slow for everyone.
      if (cutting) phase_ = Phase::judge;
      return;
    }
    cut(mean, cutting, now);
    return;
  }
  grow(was_full, cutting, now);
}

void RoomController::end_probe(Nanos mean, Nanos now) noexcept {
  // Halfway to the probe's mean, which is noisy by a percent or two; all the way when it is
  // lower by more than the tolerance, a backend that got faster. A mean higher by more than
  // that is a queue the probe did not empty (a capacity that just fell), which the cuts
  // handle, or a backend slow for everyone, which they find: it is not taken.
  if (above(no_queue_, mean, kTolerancePerMille)) {
    no_queue_ = mean;
  } else if (!above(mean, no_queue_, kTolerancePerMille)) {
    no_queue_ = (no_queue_ + mean) / 2;
  }
  phase_ = Phase::steady;
  set_slots(resume_slots_, now);
  schedule_probe();
}

bool RoomController::trial_failed(Nanos mean, Nanos now) noexcept {
  // Little's law: with the backend saturated at the room before, the step's slots raise the
  // mean by step / from; half that tells the two apart (a slot in 8 is 12.5 %, and a window's
  // 64 completions of service times spread by half either way measure the mean to 3.6 %).
  const std::uint32_t from = trial_from_;
  const std::uint32_t step = slots_ - from;
  trial_from_ = 0;
  if (!above(mean, no_queue_, half_the_rise(step, from))) {
    patience_ = 2;
    trial_step_ = std::min(trial_step_ * 2, bounds_.most);
    return false;
  }
  patience_ = std::min(patience_ * 2, kMostPatience);
  trial_step_ = 1;
  calm_ = 0;
  // Back to what Little's law says the backend serves, to the nearest slot, down to a step
  // below the room before: a room that a false pass left a slot above the capacity comes down
  // too.
  const Wide twice_served = static_cast<Wide>(slots_) *
                            static_cast<Wide>(std::max<Nanos>(no_queue_, 1)) * 2 /
                            static_cast<Wide>(std::max<Nanos>(mean, 1));
  const auto served = static_cast<std::uint64_t>((twice_served + 1) / 2);
  set_slots(
      std::min<std::uint64_t>(std::max<std::uint64_t>(served, from > step ? from - step : 1), from),
      now);
  return true;
}

bool RoomController::slow_for_everyone(Nanos mean) noexcept {
  // Only a cut of a quarter or more tells: a smaller one moves the mean by less than its noise.
  if (above(mean, no_queue_, 2 * kTolerancePerMille) && slots_ * 4 <= before_cut_ * 3 &&
      mean * 8 > cut_mean_ * 7 && mean * 8 < cut_mean_ * 9) {
    // The cut left the mean where it was. Twice in a row, the backend is slow for everyone
    // (once may be a window that straddled a fall in capacity): its latency now is its
    // no-queue latency, and the room grows back to where it was before the cuts.
    if (++unchanged_ >= 2) {
      unchanged_ = 0;
      no_queue_ = mean;
      threshold_ = std::max(threshold_, before_cuts_);
      return true;
    }
  } else {
    unchanged_ = 0;
  }
  return false;
}

void RoomController::cut(Nanos mean, bool cutting, Nanos now) noexcept {
  // Little's law: the backend serves about slots x base / mean at once.
  const Wide served = static_cast<Wide>(slots_) * static_cast<Wide>(std::max<Nanos>(no_queue_, 1)) *
                      (1000 + kTolerancePerMille / 2) /
                      (static_cast<Wide>(std::max<Nanos>(mean, 1)) * 1000);
  const std::uint64_t next = std::min<std::uint64_t>(
      std::max<std::uint64_t>(static_cast<std::uint64_t>(served), (std::uint64_t{slots_} + 1) / 2),
      slots_ > bounds_.least ? slots_ - 1 : slots_);
  // A run of cuts begins: remember where it began. If the room was growing back after the
  // last run and its last doubling found a queue larger than half of what that doubling adds to
  // a saturated backend, the capacity truly fell: the room before that doubling is as far as
  // the next regrowth goes. A smaller queue is the noise of a window (a 12.5 % rise is 2.5
  // standard errors of 32 completions spread by half): the regrowth resumes after this cut.
  if (!cutting) {
    if (!regrowing_) {
      before_cuts_ = slots_;
    } else if (above(mean, no_queue_, half_the_rise(slots_ - grown_from_, grown_from_))) {
      before_cuts_ = grown_from_;
    }
  }
  regrowing_ = false;
  calm_ = 0;
  before_cut_ = slots_;
  cut_mean_ = mean;
  set_slots(next, now);
  threshold_ = slots_;
  phase_ = Phase::judge;
}

void RoomController::grow(bool was_full, bool cutting, Nanos now) noexcept {
  if (cutting && before_cuts_ > slots_) {
    // A run of cuts ended with the queue gone. If the backend was slow for everyone (a pause),
    // the room it had before serves again: grow back there at once, by doubling. If its
    // capacity fell instead, the regrown room finds a queue once, and the next run ends here
    // for good.
    threshold_ = std::max(threshold_, before_cuts_);
    regrowing_ = true;
  }
  if (slots_ >= threshold_) regrowing_ = false;
  // Above the threshold, patience_ windows in a row without a queue (one may be the noise of a
  // room already a slot too large), and the growth is a trial.
  calm_ = was_full ? calm_ + 1 : 0;
  if (was_full && (slots_ < threshold_ || calm_ >= patience_)) {
    calm_ = 0;
    const std::uint32_t before = slots_;
    const bool trial = slots_ >= threshold_;
    if (!trial) grown_from_ = before;
    set_slots(slots_ < threshold_ ? std::min<std::uint64_t>(std::uint64_t{slots_} * 2, threshold_)
                                  : std::uint64_t{slots_} + std::max(trial_step_, slots_ / 16),
              now);
    if (trial && slots_ > before) trial_from_ = before;
  }
}

}  // namespace creditloop
