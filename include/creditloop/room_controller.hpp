// creditloop/room_controller.hpp: a room that finds itself. Learns how many requests a backend
// serves at once from the instants its requests are dispatched and completed, so that the queue
// forms in creditloop, where fairness lives, and not in the backend's own FIFO (docs/design.md,
// "A room that finds itself"; docs/contract.md §5c).
//
// - Deterministic: it reads no clock; the same dispatch and completion instants give the same
//   slots, in the simulator as in a server. Integer arithmetic only, so x86-64 and AArch64 agree.
// - O(1) per call; allocates nothing.
// - A lowered room never preempts and never refuses: the embedder dispatches nothing more until
//   fewer than slots() are in flight.
#pragma once

#include <cstdint>

#include "creditloop/units.hpp"

namespace creditloop {

/// The least and the most slots a learned room may have.
struct RoomBounds {
  std::uint32_t least = 1;
  std::uint32_t most = 256;
  friend bool operator==(const RoomBounds&, const RoomBounds&) = default;
};

class RoomController {
 public:
  /// A room of `bounds.least`..`bounds.most` slots (least >= 1, least <= most; out-of-range
  /// values are clamped). It starts at `least`, where the first window measures the no-queue
  /// latency, and doubles from there while the backend keeps up.
  explicit RoomController(RoomBounds bounds) noexcept;

  /// A request went out at `now`, leaving `in_flight` dispatched and not completed.
  void dispatched(Nanos now, std::uint64_t in_flight) noexcept;
  /// A request dispatched at `dispatched_at` completed at `now`.
  void completed(Nanos dispatched_at, Nanos now) noexcept;

  /// The room now.
  [[nodiscard]] std::uint32_t slots() const noexcept { return slots_; }
  /// The latency without a queue in the backend, as the last probe (or the first window)
  /// measured it; 0 until then.
  [[nodiscard]] Nanos no_queue_latency() const noexcept { return no_queue_; }
  [[nodiscard]] RoomBounds bounds() const noexcept { return bounds_; }

  /// Completions the first window takes, at the least room.
  static constexpr std::int64_t kStartCompletions = 32;
  /// Windows between probes, on average.
  static constexpr std::uint32_t kProbeEvery = 96;
  /// A window spans at least this long, and kWindowLatencies no-queue latencies.
  static constexpr Nanos kLeastWindow = 20'000'000;  // 20 ms
  static constexpr std::int64_t kWindowLatencies = 8;
  /// ... and eight completions per slot (at least 32), up to this many, where its mean is steady
  /// to a few per cent.
  static constexpr std::int64_t kWindowCompletions = 64;
  /// A window mean this far above the no-queue latency (per mille) is a queue in the backend.
  static constexpr std::int64_t kTolerancePerMille = 125;
  /// Calm windows before a growth above the threshold, which is a trial: two, doubled by each
  /// trial that found a queue, up to this many, so that a room at the capacity spends little
  /// time a slot above it and a capacity that rose is still tried within about a second.
  static constexpr std::uint32_t kMostPatience = 16;

 private:
  enum class Phase { start, steady, judge, probe };

  void close_window(Nanos now) noexcept;
  // close_window's steps: a probe's end takes its mean; a trial that found a queue goes back; a
  // judged cut that left the mean where it was (twice) says the backend is slow for everyone; a
  // queue cuts; no queue may grow.
  void end_probe(Nanos mean, Nanos now) noexcept;
  [[nodiscard]] bool trial_failed(Nanos mean, Nanos now) noexcept;
  [[nodiscard]] bool slow_for_everyone(Nanos mean) noexcept;
  void cut(Nanos mean, bool cutting, Nanos now) noexcept;
  void grow(bool was_full, bool cutting, Nanos now) noexcept;
  void set_slots(std::uint64_t slots, Nanos now) noexcept;
  void start_probe(Nanos now) noexcept;
  void schedule_probe() noexcept;

  RoomBounds bounds_;
  std::uint32_t slots_;
  /// While below it, the room doubles each window (a slow start, and the way back after a
  /// backend slow for everyone); set to the room a cut left.
  std::uint32_t threshold_;
  Nanos no_queue_ = 0;
  Phase phase_ = Phase::start;
  /// The room before the last cut and before the run of cuts it ended, and the mean that made
  /// the last cut.
  std::uint32_t before_cut_ = 0;
  std::uint32_t before_cuts_ = 0;
  /// Growing back to where the last run of cuts began.
  bool regrowing_ = false;
  /// The room before the last growth below the threshold.
  std::uint32_t grown_from_ = 0;
  /// Windows in a row without a queue, the room full.
  std::uint32_t calm_ = 0;
  /// Calm windows a trial waits for.
  std::uint32_t patience_ = 2;
  /// The least slots a trial adds: doubled by each trial that passed, so that a capacity that
  /// rose far is reached in a few trials; one after a trial that failed.
  std::uint32_t trial_step_ = 1;
  /// The room before the trial the open window judges; 0 when it judges none.
  std::uint32_t trial_from_ = 0;
  /// Cuts in a row that left the mean where it was.
  std::uint32_t unchanged_ = 0;
  Nanos cut_mean_ = 0;
  /// The room a probe gives back.
  std::uint32_t resume_slots_ = 0;
  std::uint32_t windows_to_probe_ = 0;
  std::uint64_t probes_ = 0;

  /// When the room last changed: the requests dispatched before are not counted.
  Nanos changed_at_ = 0;

  // The open window.
  Nanos window_start_ = 0;
  bool window_open_ = false;
  std::int64_t latency_sum_ = 0;
  std::int64_t completions_ = 0;
  bool full_ = false;  // the room was full at some dispatch: more slots might have been used
};

}  // namespace creditloop
