// The threads that watch a stress run: the monitor (snapshots and progress lines) and the
// watchdog (a run that stops moving fails).
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "run.hpp"

namespace creditloop::stress {
namespace {

constexpr std::memory_order kRelaxed = std::memory_order_relaxed;

}  // namespace

// ---- monitor ------------------------------------------------------------------------------------

void monitor_main(Run& run) {
  Rng rng(seed_for(run.o.seed, Role::monitor, 0));
  creditloop::Runtime& rt = *run.rt;
  creditloop::RuntimeSnapshot previous;
  const std::uint64_t log_cap = run.o.replay_backlog_mb * 1024 * 1024 / sizeof(Event);
  run.gate.wait();
  const Nanos start = steady_ns();
  Nanos next_progress = start + 5'000'000'000;
  const std::uint64_t replayed_at_start = run.replayer ? run.replayer->replayed() : 0;
  while (!run.stop.wait_for(std::chrono::milliseconds(20 + rng.below(30)))) {
    if (run.replayer && run.recorder.recording()) {
      // The replay's pace over the run so far, against what waits for it: a replay that could
      // not catch up within the allowed lag ends here, before it holds up the end of the run for
      // longer (or its log outgrows the memory allowed). Half a second of measurement first.
      const std::uint64_t replayed = run.replayer->replayed();
      const std::uint64_t appended = run.log->appended();
      const std::uint64_t backlog = appended > replayed ? appended - replayed : 0;
      const double elapsed = static_cast<double>(steady_ns() - start) / 1e9;
      const double pace = static_cast<double>(replayed - replayed_at_start) / elapsed;
      if (backlog > log_cap) {
        run.recorder.cut(Recorder::Cut::memory);
      } else if (elapsed >= 0.5 && backlog > EventLog::kChunkEvents &&
                 static_cast<double>(backlog) > pace * run.o.replay_lag_s) {
        run.recorder.cut(Recorder::Cut::lag);
      }
    }
    const creditloop::RuntimeSnapshot s = rt.snapshot();
    run.snapshots.fetch_add(1, kRelaxed);
    std::uint64_t per_class = 0;
    for (int c = 0; c <= s.classes; ++c)
      per_class += s.per_class[static_cast<std::size_t>(c)].dispatched;
    if (s.classes != run.config.classes || s.in_flight > run.o.slots ||
        s.completed > s.dispatched || s.dispatched > s.submitted || per_class != s.dispatched ||
        s.submitted < previous.submitted || s.dispatched < previous.dispatched ||
        s.completed < previous.completed || s.at < previous.at) {
      fail("snapshot", "inconsistent runtime snapshot: in flight " + std::to_string(s.in_flight) +
                           ", submitted " + std::to_string(s.submitted) + " (before " +
                           std::to_string(previous.submitted) + "), dispatched " +
                           std::to_string(s.dispatched) + " (per class " +
                           std::to_string(per_class) + "), completed " +
                           std::to_string(s.completed));
    }
    previous = s;
    if (run.o.snapshots) {
      const std::uint32_t name = rng.below32(run.o.participants);
      const ParticipantId id =
          directory::id_of(run.directory[name].load(std::memory_order_acquire), rt.issuer());
      if (const auto p = rt.snapshot(id)) {
        if (!(p->id == id) || p->name != participant_name(name)) {
          fail("snapshot", "snapshot(" + str(id) + ") describes " + p->name + " " + str(p->id));
        }
      }
      if (rng.one_in(8)) (void)rt.snapshot_participants();
    }
    const Nanos now = steady_ns();
    if (now >= next_progress) {
      next_progress += 5'000'000'000;
      std::printf("  %5.1f s: dispatched %" PRIu64 ", completed %" PRIu64 ", in flight %" PRIu64
                  ", churn %" PRIu64 ", replay %" PRIu64 " events behind%s\n",
                  static_cast<double>(now - start) / 1e9, s.dispatched, s.completed, s.in_flight,
                  run.churn_ops.load(kRelaxed),
                  run.replayer ? run.log->appended() - run.replayer->replayed() : 0,
                  run.replayer && !run.recorder.recording() ? " (ended)" : "");
      std::fflush(stdout);
    }
  }
}

// ---- watchdog -----------------------------------------------------------------------------------

void watchdog_main(Run& run) {
  const Nanos limit = static_cast<Nanos>(run.o.watchdog_ms * 1e6);
  const auto period = std::chrono::nanoseconds(std::max<Nanos>(limit / 20, 1'000'000));
  std::uint64_t last_moved = ~std::uint64_t{0};
  Nanos since = steady_ns();
  run.gate.wait();
  while (!run.stop.wait_for(period)) {
    const std::uint64_t dispatched = run.recorder.dispatches();
    const std::uint64_t completed = run.recorder.completions();
    std::uint64_t accepted = 0;
    for (const auto& p : run.producers) accepted += p->accepted.load(kRelaxed);
    const std::uint64_t handed =
        run.handed_back_remove.load(kRelaxed) + run.handed_back_shutdown.load(kRelaxed);
    const auto waiting = static_cast<std::int64_t>(accepted - dispatched - handed);
    const std::uint64_t in_flight = dispatched - completed;
    const std::uint64_t moved = dispatched + completed;
    const Nanos now = steady_ns();
    if (moved != last_moved || (waiting <= 0 && in_flight == 0)) {
      last_moved = moved;
      since = now;
      continue;
    }
    if (now - since < limit) continue;
    std::string d = "nothing dispatched or completed for " +
                    std::to_string((now - since) / 1'000'000) + " ms while " +
                    std::to_string(waiting) + " requests wait and " + std::to_string(in_flight) +
                    " are in flight (dispatched " + std::to_string(dispatched) + ", completed " +
                    std::to_string(completed) + ", accepted " + std::to_string(accepted) +
                    ", handed back " + std::to_string(handed) + "; the dispatcher's last event " +
                    std::to_string((now - run.recorder.last_now()) / 1'000'000) +
                    " ms ago; shutting down: " + (run.shutting_down.load(kRelaxed) ? "yes" : "no") +
                    "; producers:";
    for (const auto& p : run.producers) d += " " + std::to_string(p->state.load(kRelaxed));
    d += " (0 running, 1 out of requests, 2 done)";
    if (!run.rings.empty()) {
      d += "; completer queues:";
      for (const auto& r : run.rings) d += " " + std::to_string(r->depth());
    }
    if (run.replayer) {
      d += "; replay " + std::to_string(run.log->appended() - run.replayer->replayed()) +
           " events behind";
    }
    stall("check 6 (no lost wake-up)", d);
  }
}

}  // namespace creditloop::stress
