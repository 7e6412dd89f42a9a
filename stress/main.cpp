// creditloop-stress: the multithreaded runtime under load, checked against the contract.
//
// Producers submit to random participants (often a few hot ones, sometimes in bursts) while the
// runtime's worker pool (--mode pool) or a sink feeding our own completer threads (--mode sink,
// using complete(), complete_nano() and CompletionBatch, out of order) completes them with costs
// drawn from the seed: mostly 0 or fractions of a credit, sometimes thousands, sometimes the
// limit, sometimes a cost the runtime must refuse. With --churn a thread adds, removes and
// re-plans participants (and tries the refusals of docs/contract.md §5) while all this runs.
// Another thread tries completions that must be refused (repeated, stale, forged tickets; bad
// costs). The run ends with shutdown(hand_back) or shutdown(drain). All threads start at one gate.
//
// The six checks (fate, order, ledger, classes, bounded wait, no lost wake-up), what the replay
// covers, and the quick and long runs: docs/testing.md, "Stress". The first violation ends the
// run with status 1 and a message that names the check, the participant or request, and the
// seed; a failure prints the command that reruns it with the same seed (the threads'
// interleaving is not reproducible, the workload is).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "run.hpp"

namespace creditloop::stress {
namespace {

// The counters this file reads were written by threads it has joined (or, in the watchdog's
// report, are only printed): the join orders every write before the read, so relaxed suffices.
constexpr std::memory_order kRelaxed = std::memory_order_relaxed;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

void register_all(Run& run) {
  // Several threads: their add() calls reach the dispatcher together and share its wake-ups.
  // Each name's plan and shares come from the seed and the name, whatever thread registers it.
  const std::uint32_t threads = std::clamp<std::uint32_t>(run.o.producers, 1, 8);
  std::vector<std::thread> adders;
  for (std::uint32_t t = 0; t < threads; ++t) {
    adders.emplace_back([&run, t, threads] {
      // pro, lite, free, top, odd, gold: the same weights as churn (churn.cpp).
      constexpr std::uint64_t kWeights[] = {35, 25, 10, 12, 10, 8};
      for (std::uint32_t i = t; i < run.o.participants; i += threads) {
        Rng rng(seed_for(run.o.seed, Role::setup, i));
        std::uint64_t roll = rng.below(100);
        std::size_t plan = 0;
        while (roll >= kWeights[plan]) roll -= kWeights[plan++];
        const std::uint64_t s = rng.below(100);
        const std::uint32_t shares = s < 60   ? 1
                                     : s < 93 ? 2 + rng.below32(9)
                                              : 11 + rng.below32(90);
        const std::string name = participant_name(i);
        const auto r = run.rt->add(name, run.config.plans[plan].name, shares);
        if (!r) fail("setup", "add(" + name + ") refused: " + errc_str(r.error()));
        run.directory[i].store(directory::pack(*r, false), kRelaxed);  // published by the join
      }
    });
  }
  for (std::thread& t : adders) t.join();
}

/// Check 1 after the run: every request is back with its producer.
void check_fates(Run& run, std::uint64_t accepted) {
  const std::uint64_t dispatched = run.dispatched_seen.load(kRelaxed);
  const std::uint64_t by_remove = run.handed_back_remove.load(kRelaxed);
  const std::uint64_t by_shutdown = run.handed_back_shutdown.load(kRelaxed);
  for (auto& p : run.producers) {
    for (Req* r = p->returned.exchange(nullptr, std::memory_order_acquire); r != nullptr;) {
      Req* const next = r->next_free;
      if (r != &p->wake) p->free.push_back(r);
      r = next;
    }
    if (p->free.size() != p->size) {
      for (std::uint32_t i = 0; i < p->size; ++i) {
        const Req& r = p->requests[i];
        if (r.state.load(kRelaxed) != ReqState::free ||
            std::find(p->free.begin(), p->free.end(), &r) == p->free.end()) {
          fail("check 1 (fate)",
               req_str(r) + " to " + who(r.name, r.participant) +
                   " was neither dispatched and completed nor handed back (state " +
                   std::to_string(static_cast<int>(r.state.load(kRelaxed))) + ")");
        }
      }
    }
  }
  if (accepted != dispatched + by_remove + by_shutdown) {
    fail("check 1 (fate)", std::to_string(accepted) + " submits accepted, but " +
                               std::to_string(dispatched) + " dispatched + " +
                               std::to_string(by_remove) + " handed back by remove() + " +
                               std::to_string(by_shutdown) + " by shutdown()");
  }
  if (run.recorder.dispatches() != dispatched || run.recorder.completions() != dispatched ||
      run.recorder.in_flight() != 0) {
    fail("check 1 (fate)", "the observer saw " + std::to_string(run.recorder.dispatches()) +
                               " dispatches and " + std::to_string(run.recorder.completions()) +
                               " completions; handlers and completers took " +
                               std::to_string(dispatched));
  }
}

/// Check 3: the runtime's counters against the observer's and the handlers' and completers'.
void check_runtime_counters(Run& run, const creditloop::RuntimeSnapshot& s) {
  creditloop::Runtime& rt = *run.rt;
  const int k = run.config.classes;
  if (s.in_flight != 0 || s.dispatched != run.recorder.dispatches() ||
      s.completed != run.recorder.completions() || s.submitted != run.recorder.submits()) {
    fail("check 3 (ledger)", "runtime counters: submitted " + std::to_string(s.submitted) +
                                 ", dispatched " + std::to_string(s.dispatched) + ", completed " +
                                 std::to_string(s.completed) + ", in flight " +
                                 std::to_string(s.in_flight) +
                                 "; the observer: " + std::to_string(run.recorder.submits()) +
                                 ", " + std::to_string(run.recorder.dispatches()) + ", " +
                                 std::to_string(run.recorder.completions()));
  }
  for (int c = 0; c <= k; ++c) {
    const auto cls = static_cast<ClassId>(c);
    const creditloop::ClassSnapshot& cs = s.per_class[cls];
    // A batch does not report its turns: with batches, the replay counts them (below).
    const bool by_visits = *run.o.decide == DecideMode::visits;
    if (cs.dispatched != run.recorder.dispatched_in(cls) ||
        (by_visits && cs.turns != run.recorder.turns(cls))) {
      fail("check 3 (ledger)", class_str(cls) + ": the runtime counts " +
                                   std::to_string(cs.dispatched) + " dispatches in " +
                                   std::to_string(cs.turns) + " turns, the observer " +
                                   std::to_string(run.recorder.dispatched_in(cls)) + " in " +
                                   std::to_string(run.recorder.turns(cls)));
    }
  }
  if (*run.o.mode == SinkMode::pool && rt.handler_errors() != run.handler_refusals.load(kRelaxed)) {
    fail("check 3 (ledger)", "handler_errors() is " + std::to_string(rt.handler_errors()) +
                                 "; handlers threw or returned refused costs " +
                                 std::to_string(run.handler_refusals.load(kRelaxed)) + " times");
  }
  if (run.throws_reported.load(kRelaxed) != run.handler_throws.load(kRelaxed)) {
    fail("check 3 (ledger)", "on_error reported " +
                                 std::to_string(run.throws_reported.load(kRelaxed)) +
                                 " handler failures; handlers threw " +
                                 std::to_string(run.handler_throws.load(kRelaxed)) + " times");
  }
  if (static_cast<std::uint64_t>(run.recorder.cost_applied()) != run.cost_reported.load(kRelaxed)) {
    fail("check 3 (ledger)", "costs applied (" + str(run.recorder.cost_applied()) +
                                 " nano-credits) differ from the costs completers reported");
  }
}

/// Check 4, for batches: the turns the runtime counts in each class against those the model began.
void check_replayed_turns(Run& run, const creditloop::RuntimeSnapshot& s) {
  const int k = run.config.classes;
  for (int c = 0; c <= k; ++c) {
    const std::uint64_t turns = run.replayer->summary().turns_in[static_cast<std::size_t>(c)];
    const std::uint64_t settled = s.per_class[static_cast<ClassId>(c)].turns;
    if (turns != settled) {
      fail("check 4 (replay)", class_str(static_cast<ClassId>(c)) + ": the runtime counts " +
                                   std::to_string(settled) + " turns, the model began " +
                                   std::to_string(turns));
    }
  }
}

/// Check 3: one participant's registration and statistics against the observer's account;
/// returns the participant as messages name it.
std::string check_participant_ledger(Run& run, const creditloop::ParticipantSnapshot& p) {
  const int k = run.config.classes;
  const Recorder::Account* a = run.recorder.account(p.id);
  std::uint32_t index = 0;
  if (a == nullptr || !parse_participant_name(p.name, index) || index != a->name) {
    fail("check 3 (ledger)", p.name + " " + str(p.id) + " is registered; the observer saw " +
                                 (a ? participant_name(a->name) : std::string("nobody")) +
                                 " there");
  }
  const std::string subject = who(a->name, p.id);
  const creditloop::ParticipantStats& st = p.stats;
  if (p.plan != a->plan || p.shares != a->shares || p.queued != 0) {
    fail("check 3 (ledger)", subject + ": plan " + std::to_string(p.plan) + " x" +
                                 std::to_string(p.shares) + " with " + std::to_string(p.queued) +
                                 " queued; the observer saw plan " + std::to_string(a->plan) +
                                 " x" + std::to_string(a->shares));
  }
  for (int c = 0; c <= k; ++c) {
    const auto cls = static_cast<std::size_t>(c);
    if (st.dispatched[cls] != a->dispatched[cls]) {
      fail("check 3 (ledger)", subject + ": the core counts " + std::to_string(st.dispatched[cls]) +
                                   " dispatches under " + class_str(static_cast<ClassId>(c)) +
                                   ", the observer " + std::to_string(a->dispatched[cls]));
    }
  }
  if (st.completed != a->completed || st.cost_charged != a->cost_charged ||
      st.cost_uncharged != a->cost_uncharged) {
    fail("check 3 (ledger)", subject + ": the core counts " + std::to_string(st.completed) +
                                 " completions, " + str(st.cost_charged) + " charged, " +
                                 str(st.cost_uncharged) + " charged nowhere; the observer " +
                                 std::to_string(a->completed) + ", " + str(a->cost_charged) + ", " +
                                 str(a->cost_uncharged) + " (nano-credits)");
  }
  return subject;
}

/// Check 4: one participant's statistics, plan, queue and balances (at `at`) against the model's.
void check_participant_model(Run& run, creditloop::model::Model& model,
                             const creditloop::ParticipantSnapshot& p, const std::string& subject,
                             Nanos at) {
  const int k = run.config.classes;
  const creditloop::ParticipantStats& st = p.stats;
  const std::optional<creditloop::model::Pid> pid = run.replayer->pid_of(p.id);
  if (!pid || !model.contains(*pid)) {
    fail("check 4 (replay)", subject + " is registered; the model does not have it");
  }
  const creditloop::model::Stats& ms = model.stats(*pid);
  if (ms.dispatched != st.dispatched || ms.completed != st.completed ||
      ms.cost_charged != st.cost_charged || ms.cost_uncharged != st.cost_uncharged ||
      model.plan(*pid) != p.plan || model.shares(*pid) != p.shares || model.queued(*pid) != 0) {
    fail("check 4 (replay)", subject + ": statistics, plan or queue differ from the model's");
  }
  for (int c = 0; c < k; ++c) {
    const auto cls = static_cast<ClassId>(c);
    const auto mb = model.balance(*pid, cls, at);
    const std::optional<Balance>& rb = p.balance[cls];
    if (mb.ok() != rb.has_value() || (rb && *mb != *rb)) {
      fail("check 4 (replay)",
           subject + ": " + class_str(cls) + " balance at " + std::to_string(at) + " ns is " +
               (rb ? str(*rb) : std::string("not held")) + " nano-credits; the model says " +
               (mb.ok() ? str(*mb) : std::string("not held")));
    }
  }
}

/// Check 3 after the run: the runtime's counters and every participant's statistics against
/// the ledger; then, with a whole-run replay, check 4's balances against the model.
void check_accounts(Run& run) {
  creditloop::Runtime& rt = *run.rt;
  const creditloop::RuntimeSnapshot s = rt.snapshot();
  check_runtime_counters(run, s);

  // The dispatcher has exited: this call runs on this thread and reads the clock once, which
  // gives the instant of every balance it reports.
  const std::vector<creditloop::ParticipantSnapshot> all = rt.snapshot_participants();
  const Nanos at = run.clock_last.load(kRelaxed);
  std::size_t live = 0;
  for (const auto& a : run.recorder.accounts()) live += a.live ? 1 : 0;
  if (all.size() != live) {
    fail("check 3 (ledger)", std::to_string(all.size()) + " participants registered, the " +
                                 "observer saw " + std::to_string(live));
  }
  const bool whole = run.replayer && !run.recorder.truncated() && !run.replayer->abandoned();
  creditloop::model::Model* model = whole ? &run.replayer->model() : nullptr;
  if (whole && *run.o.decide == DecideMode::batches) check_replayed_turns(run, s);
  if (model != nullptr && (model->size() != all.size() || model->in_flight() != 0)) {
    fail("check 4 (replay)", "the model ends with " + std::to_string(model->size()) +
                                 " participants and " + std::to_string(model->in_flight()) +
                                 " requests in flight; the runtime with " +
                                 std::to_string(all.size()) + " and 0");
  }
  for (const creditloop::ParticipantSnapshot& p : all) {
    const std::string subject = check_participant_ledger(run, p);
    if (model != nullptr) check_participant_model(run, *model, p, subject, at);
  }
}

}  // namespace

Run::Run(Options options)
    : o(std::move(options)),
      config(make_config(o.classes)),
      log(o.replay ? std::make_unique<EventLog>() : nullptr),
      recorder(config, o, log.get()),
      directory(new std::atomic<std::uint64_t>[o.participants]()) {
  if (o.replay) replayer = std::make_unique<Replayer>(config, o, handbacks);
  for (std::uint32_t i = 0; i < o.producers; ++i) {
    producers.push_back(std::make_unique<Producer>(o.pool));
    Producer& p = *producers.back();
    for (std::uint32_t j = 0; j < o.pool; ++j) p.free.push_back(&p.requests[j]);
  }
  if (*o.mode == SinkMode::sink) {
    for (unsigned i = 0; i < o.workers; ++i) rings.push_back(std::make_unique<SinkRing>(o.slots));
  }
}

// What the run will do, for the log.
void print_setup(const Options& o) {
  const std::string replay =
      !o.replay ? std::string("off")
                : "through the reference model until " +
                      (o.replay_limit == 0 ? std::string("the end")
                                           : std::to_string(o.replay_limit) + " dispatches") +
                      ", or " + fmt("%.0f", o.replay_lag_s) + " s behind, or " +
                      std::to_string(o.replay_backlog_mb) + " MB of log behind";
  std::printf(
      "  %u producers, %u %s, %u participants, %u slots, k = %d, %u requests per "
      "producer, %.3g s, churn %s, shutdown %s, decisions by %s\n"
      "  replay: %s; wait slack %.0f ms; watchdog %.0f ms\n",
      o.producers, o.workers,
      *o.mode == SinkMode::pool ? "pool workers" : "completer threads (sink)", o.participants,
      o.slots, o.classes, o.pool, o.seconds, o.churn ? "on" : "off", end_name(*o.end),
      *o.decide == DecideMode::visits ? "visit" : "batch", replay.c_str(), o.wait_slack_ms,
      o.watchdog_ms);
  std::fflush(stdout);
}

// The runtime under test: the run's recorder observes it, and its clock is the run's.
creditloop::RuntimeOptions runtime_options(Run& run) {
  const Options& o = run.o;
  creditloop::RuntimeOptions ro;
  ro.config = run.config;
  ro.slots = o.slots;
  ro.observer = &run.recorder;
  ro.expected_participants = std::size_t{o.participants} + o.participants / 4 + 16;
  ro.expected_in_flight = o.slots;
  ro.thread_name = "cl-stress";
  ro.clock = [&run] {
    const Nanos t = steady_ns();
    run.clock_last.store(t, kRelaxed);  // read after the dispatcher exited (check_accounts)
    return t;
  };
  if (*o.mode == SinkMode::pool) {
    ro.workers = o.workers;
    ro.handler = [&run](const creditloop::Decision& d) {
      return handle(run, *d.request, d.participant);
    };
    // Every throw the workload asks for must be reported once, on a worker's thread.
    ro.on_error = [&run](const creditloop::CallbackError& e) {
      if (e.kind == creditloop::CallbackKind::handler) run.throws_reported.fetch_add(1, kRelaxed);
    };
  } else {
    ro.sink = [&run](const creditloop::Decision& d) { sink(run, d); };
  }
  return ro;
}

// Shuts the runtime down as --end says and checks what it hands back. Returns the instant
// shutdown() returned.
Nanos shut_down(Run& run) {
  const Options& o = run.o;
  run.shutting_down.store(true, std::memory_order_release);
  creditloop::RequestList back =
      run.rt->shutdown(*o.end == EndMode::hand_back ? creditloop::ShutdownMode::hand_back
                                                    : creditloop::ShutdownMode::drain);
  const Nanos ended = steady_ns();
  std::size_t queued = 0;
  const std::size_t count = back.size();
  if (*o.end == EndMode::drain && count != 0) {
    fail("check 1 (fate)", "shutdown(drain) handed back " + std::to_string(count) + " requests");
  }
  std::vector<std::uint64_t> ids =
      take_handed_back(run, std::move(back), std::nullopt, "shutdown()", queued);
  run.handed_back_shutdown.fetch_add(count, kRelaxed);
  if (run.log && *o.end == EndMode::hand_back) {
    run.handbacks.real(HandBacks::kShutdownKey, std::move(ids), queued, "shutdown()");
  }
  return ended;
}

// Everything in flight is completed and every queued request was handed back or dispatched:
// wakes every producer and completer for the last time, and joins them.
void release_threads(Run& run, std::vector<std::thread>& threads, std::thread& watchdog) {
  run.producers_stop.store(true, std::memory_order_release);
  for (auto& p : run.producers) {
    Req* head = p->returned.load(kRelaxed);
    do {
      p->wake.next_free = head;
    } while (
        !p->returned.compare_exchange_weak(head, &p->wake, std::memory_order_release, kRelaxed));
    p->returned.notify_one();
  }
  for (auto& ring : run.rings) {
    creditloop::Decision end;  // request nullptr: the end (the sink's thread has exited)
    if (!ring->push(end)) fail("room", "a completer's queue is full at the end");
  }
  run.stop.raise();
  for (std::thread& t : threads) t.join();
  watchdog.join();
}

// Checks 1 and 2 from the producers' counts. Returns the bursts they sent, for the last line.
std::uint64_t report_fates(Run& run) {
  std::uint64_t accepted = 0, refused_unknown = 0, refused_removed = 0, refused_shutdown = 0,
                bursts = 0;
  for (const auto& p : run.producers) {
    accepted += p->accepted.load(kRelaxed);
    refused_unknown += p->refused_unknown;
    refused_removed += p->refused_removed;
    refused_shutdown += p->refused_shutdown;
    bursts += p->bursts;
  }
  check_fates(run, accepted);
  std::printf("  check 1 (fate): %" PRIu64 " submits accepted = %" PRIu64 " dispatched + %" PRIu64
              " handed back by remove() + %" PRIu64
              " by shutdown(); refused and kept by their "
              "producer: %" PRIu64 " unknown_participant (%" PRIu64
              " after the removal had "
              "returned), %" PRIu64 " shut_down\n",
              accepted, run.dispatched_seen.load(kRelaxed), run.handed_back_remove.load(kRelaxed),
              run.handed_back_shutdown.load(kRelaxed), refused_unknown, refused_removed,
              refused_shutdown);
  std::printf(
      "  check 2 (order): every queue entered in each producer's order and left in the "
      "order it was entered\n");
  return bursts;
}

// Lets the replay catch up, for at most --replay-lag-s: what it has not reached by then is left
// unreplayed.
void finish_replay(Run& run, std::thread& replay_thread) {
  run.log->finish();
  if (const std::uint64_t behind = run.log->appended() - run.replayer->replayed();
      behind > EventLog::kChunkEvents) {
    std::printf("  waiting for the replay (%" PRIu64 " events behind), at most %.0f s\n", behind,
                run.o.replay_lag_s);
    std::fflush(stdout);
  }
  if (!run.replayer->wait_done(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(run.o.replay_lag_s)))) {
    run.replayer->abandon();
  }
  replay_thread.join();
  run.handbacks.check_drained(!run.recorder.truncated() && !run.replayer->abandoned());
}

// Checks 4 and 5, from the replay through the reference model.
void report_replay(Run& run, Nanos start) {
  const Replayer::Summary& r = run.replayer->summary();
  const bool part = run.recorder.truncated() || run.replayer->abandoned();
  if (run.recorder.truncated()) {
    constexpr const char* kWhy[] = {"", "at the replay limit", "the replay was too far behind",
                                    "its log outgrew the memory allowed"};
    std::printf("  recording for the replay ended %.1f s into the run (%s)\n",
                creditloop::to_seconds(run.recorder.cut_at() - start),
                kWhy[static_cast<int>(run.recorder.cut_reason())]);
  }
  if (run.replayer->abandoned()) {
    std::printf("  the replay was left %" PRIu64 " events short of the %" PRIu64
                " recorded, after waiting %.0f s (--replay-lag-s)\n",
                run.log->appended() - r.events, run.log->appended(), run.o.replay_lag_s);
  }
  if (part) {
    std::printf(
        "  checks 4 and 5 cover the part of the run replayed; the ledger checks all "
        "of it\n");
  }
  std::printf("  check 4 (classes): %" PRIu64
              " events replayed through the reference model%s: "
              "%" PRIu64 " turns, %" PRIu64 " dispatches (%" PRIu64
              " under a class above "
              "their turn's), %" PRIu64 " completions (%" PRIu64 " charged), %" PRIu64
              " hand-backs matched; %s\n",
              r.events, part ? " (the run's first part)" : "", r.turns, r.dispatches,
              r.out_above_turn, r.completions, r.charged, run.handbacks.matched(),
              part ? "balances not compared" : "final balances equal to the nano-credit");
  std::printf("  check 5 (bounded wait): %" PRIu64 " waits of P1 holders checked; at most %" PRIu64
              " dispatches (bound 2 x %u ring places) and %s ms (slack %s ms) from its P1 "
              "credit to its dispatch\n",
              r.waits_checked, r.max_dispatches_after_credit, r.ring,
              fmt("%.3f", static_cast<double>(r.max_wait_after_credit) / 1e6).c_str(),
              fmt("%.0f", run.o.wait_slack_ms).c_str());
}

// Check 3, then 4 and 5 (or that they were off), 6, and the run's totals.
void report_checks(Run& run, std::uint64_t bursts, Nanos start, Nanos ended) {
  check_accounts(run);
  const std::string unchecked =
      run.recorder.unchecked_costs() == 0
          ? std::string()
          : ", except " + std::to_string(run.recorder.unchecked_costs()) +
                " whose ticket index lay beyond the table (checked in the total only)";
  std::printf(
      "  check 3 (ledger): per bucket, dispatches and costs (%s nano-credits applied, "
      "each as its completer reported it%s) match the core's statistics exactly\n",
      str(run.recorder.cost_applied()).c_str(), unchecked.c_str());
  if (run.replayer) {
    report_replay(run, start);
  } else {
    std::printf("  checks 4 and 5: off (--no-replay)\n");
  }
  std::printf("  check 6 (no lost wake-up): nothing stood still for %.0f ms with work waiting\n",
              run.o.watchdog_ms);
  std::printf("  also: %" PRIu64 " lifecycle calls (%" PRIu64 " adds, %" PRIu64 " removes, %" PRIu64
              " re-plans, %" PRIu64 " scales, %" PRIu64 " refused as required), %" PRIu64
              " completions refused as required, %" PRIu64 " bursts, %" PRIu64
              " runtime snapshots, longest queue wait %.1f ms\n",
              run.churn_ops.load(kRelaxed), run.adds.load(kRelaxed), run.removes.load(kRelaxed),
              run.replans.load(kRelaxed), run.scales.load(kRelaxed),
              run.churn_refusals.load(kRelaxed), run.refusals_checked.load(kRelaxed), bursts,
              run.snapshots.load(kRelaxed),
              static_cast<double>(run.recorder.max_queue_wait()) / 1e6);
  const std::uint64_t through = run.dispatched_seen.load(kRelaxed);
  const double seconds = creditloop::to_seconds(ended - start);
  std::printf("creditloop-stress: ok: %" PRIu64
              " requests pushed through (dispatched and "
              "completed) in %.1f s, %.0f per second\n",
              through, seconds, static_cast<double>(through) / seconds);
}

}  // namespace creditloop::stress

int main(int argc, char** argv) {
  using namespace creditloop::stress;
  const Options options = parse_options(argc, argv);
  std::printf("creditloop-stress: seed 0x%016" PRIx64 "\n", options.seed);
  std::fflush(stdout);
  set_identity(options.seed, rerun_command(options, argv[0]));
  Run run(options);
  const Options& o = run.o;
  print_setup(o);

  std::thread replay_thread;
  if (run.replayer) replay_thread = std::thread([&run] { run.replayer->run(*run.log); });
  run.rt = std::make_unique<creditloop::Runtime>(runtime_options(run));
  const Nanos setup = steady_ns();
  register_all(run);
  std::printf("  registered %u participants in %.2f s\n", o.participants,
              creditloop::to_seconds(steady_ns() - setup));
  std::fflush(stdout);

  std::vector<std::thread> threads;
  for (std::uint32_t i = 0; i < o.producers; ++i) {
    threads.emplace_back([&run, i] { producer_main(run, i); });
  }
  for (std::uint32_t i = 0; i < run.rings.size(); ++i) {
    threads.emplace_back([&run, i] { completer_main(run, i); });
  }
  if (o.churn) threads.emplace_back([&run] { churn_main(run); });
  threads.emplace_back([&run] { pranks_main(run); });
  threads.emplace_back([&run] { monitor_main(run); });
  std::thread watchdog([&run] { watchdog_main(run); });

  const Nanos start = steady_ns();
  run.gate.count_down();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));  // the run's length
  const Nanos ended = shut_down(run);
  release_threads(run, threads, watchdog);

  const std::uint64_t bursts = report_fates(run);
  if (run.log) finish_replay(run, replay_thread);
  report_checks(run, bursts, start, ended);
  return 0;
}
