// The dispatcher's loop: room (slots or a room test), the sink and what it throws, charging
// before the next decision, parking, and the observer whose journal replays every decision. The
// tests synchronise on what the runtime does, never on elapsed time (runtime_support.hpp).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/runtime.hpp"
#include "internal/spin.hpp"
#include "runtime_support.hpp"
#include "spin_until.hpp"

namespace creditloop {
namespace {

using namespace runtime_tests;

// A sink that throws did not take its request: it is completed at cost 0 and handed back
// through on_error, the caller's again; the runtime runs on.
TEST(Dispatcher, ASinkThatThrowsHandsItsRequestBackThroughOnError) {
  Recorder recorder;
  Errors errors;
  RuntimeOptions o = options_with(recorder);
  o.sink = [&](const Decision& d) {
    if (id_of(d.request) == 0) throw std::runtime_error("sink failure");
    recorder(d);
  };
  o.on_error = [&errors](const CallbackError& e) { errors(e); };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(3);
  for (int i = 0; i < 3; ++i) {
    requests[static_cast<std::size_t>(i)].id = i;
    ASSERT_TRUE(rt.submit(alice, requests[static_cast<std::size_t>(i)]).ok());
  }
  ASSERT_TRUE(recorder.wait_for(2));
  const RuntimeSnapshot s = rt.snapshot();
  EXPECT_EQ(s.dispatched, 3u);
  EXPECT_EQ(s.in_flight, 2u);  // the refused one was completed at once
  const std::vector<CallbackError> seen = errors.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, CallbackKind::sink);
  EXPECT_EQ(seen[0].request, &requests[0]);
  EXPECT_EQ(seen[0].participant, alice);
  EXPECT_EQ(what(seen[0]), "sink failure");
  EXPECT_TRUE(requests[0].idle());
  EXPECT_EQ(rt.complete(seen[0].ticket, 0).error(), Errc::stale_ticket);
  requests[0].id = 10;  // the caller's again: it can go out once more
  ASSERT_TRUE(rt.submit(alice, requests[0]).ok());
  ASSERT_TRUE(recorder.wait_for(3));
  complete_all(rt, recorder, 3);
}

// A room test, a clock and an observer that throw are reported and change nothing else: every
// request still goes out and comes back.
TEST(Dispatcher, ARoomTestClockOrObserverThatThrowsIsReportedAndTheRuntimeRunsOn) {
  struct ThrowingObserver : RuntimeObserver {
    std::atomic<int> submits{0};
    void on_submit(ParticipantId, const RequestHook&, Nanos) override {
      // relaxed: a count on the dispatcher thread, read after shutdown joins it.
      if (submits.fetch_add(1, std::memory_order_relaxed) % 2 == 0) {
        throw std::runtime_error("observer failure");
      }
    }
  } observer;
  Recorder recorder;
  Errors errors;
  std::atomic<int> room_calls{0};
  std::atomic<int> clock_calls{0};
  std::atomic<Runtime*> self{nullptr};
  RuntimeOptions o = options_with(recorder);
  o.room = [&] {
    // relaxed: counts on the dispatcher thread alone.
    if (room_calls.fetch_add(1, std::memory_order_relaxed) % 3 == 0) {
      throw std::runtime_error("room failure");
    }
    // acquire: pairs with the release store below; the runtime is constructed.
    Runtime* const rt = self.load(std::memory_order_acquire);
    return rt != nullptr && rt->snapshot().in_flight < 64;  // inline on the dispatcher
  };
  o.clock = [&] {
    const int n = clock_calls.fetch_add(1, std::memory_order_relaxed);
    if (n % 5 == 4) throw std::runtime_error("clock failure");
    return Nanos{n} * 1000;
  };
  o.observer = &observer;
  o.on_error = [&errors](const CallbackError& e) { errors(e); };
  Runtime rt(std::move(o));
  self.store(&rt, std::memory_order_release);
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(20);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(20));
  complete_all(rt, recorder, 20);
  EXPECT_TRUE(rt.shutdown(ShutdownMode::hand_back, std::nullopt).finished);
  int room = 0, clock = 0, observed = 0;
  for (const CallbackError& e : errors.seen()) {
    EXPECT_EQ(e.request, nullptr);
    room += e.kind == CallbackKind::room ? 1 : 0;
    clock += e.kind == CallbackKind::clock ? 1 : 0;
    observed += e.kind == CallbackKind::observer ? 1 : 0;
  }
  EXPECT_GT(room, 0);
  EXPECT_GT(clock, 0);
  EXPECT_EQ(observed, 10);  // every other of the 20 submits
}

TEST(Dispatcher, TheSlotModelKeepsAtMostSlotsInFlightAndACompletionReturnsOne) {
  Recorder recorder;
  Runtime rt(options_with(recorder, 2));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(10);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(recorder.wait_for(2));
  // The snapshot runs on the dispatcher after the batch that dispatched those two, so a third
  // dispatch without room would already show.
  RuntimeSnapshot s = rt.snapshot();
  EXPECT_EQ(s.dispatched, 2u);
  EXPECT_EQ(s.in_flight, 2u);
  ASSERT_TRUE(rt.complete(recorder.seen()[0].ticket, 0).ok());
  ASSERT_TRUE(recorder.wait_for(3));
  s = rt.snapshot();
  EXPECT_EQ(s.dispatched, 3u);
  EXPECT_EQ(s.in_flight, 2u);
  EXPECT_EQ(s.completed, 1u);
  complete_all(rt, recorder, 10);
}

TEST(Dispatcher, ACustomRoomTestIsObeyedAndWakeReTestsIt) {
  Recorder recorder;
  std::atomic<bool> room{false};
  RuntimeOptions o = options_with_room_flag(recorder, room);
  // No re-test on a timer within the test's deadline: only wake() can make the dispatcher see
  // the room, so the test fails if wake() does nothing.
  o.room_recheck = std::chrono::hours(1);
  o.spin = std::chrono::nanoseconds{0};  // asleep at once, not spinning on the room test
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(3);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_EQ(rt.snapshot().dispatched, 0u);
  test::spin_until([&] { return rt.dispatcher_sleeping(); },
                   "the dispatcher to sleep");  // until woken
  room.store(true, std::memory_order_relaxed);
  rt.wake();
  ASSERT_TRUE(recorder.wait_for(3));
  for (const Decision& d : recorder.seen()) ASSERT_TRUE(rt.complete(d.ticket, 0).ok());
}

TEST(Dispatcher, TheChargeLandsInTheAdmittingBucketBeforeTheNextDecision) {
  // A manual clock that never moves: the P1 bucket changes only by debits and charges.
  Recorder recorder;
  RuntimeOptions o = options_with(recorder, 1);
  o.clock = [] { return Nanos{0}; };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  const Balance full = *rt.snapshot(alice)->balance[0];
  Req first;
  Req second;
  ASSERT_TRUE(rt.submit(alice, first).ok());
  ASSERT_TRUE(recorder.wait_for(1));
  EXPECT_EQ(recorder.seen()[0].out, 0);
  ASSERT_TRUE(rt.submit(alice, second).ok());
  // Charging the whole remaining balance leaves P1 without a credit, so the second request,
  // dispatched after the charge was applied, must go out under a lower class.
  const Balance left = full - kNanoPerCredit;
  ASSERT_TRUE(rt.complete_nano(recorder.seen()[0].ticket, static_cast<std::int64_t>(left)).ok());
  ASSERT_TRUE(recorder.wait_for(2));
  EXPECT_NE(recorder.seen()[1].out, 0);
  EXPECT_EQ(*rt.snapshot(alice)->balance[0], Balance{0});
  ASSERT_TRUE(rt.complete(recorder.seen()[1].ticket, 0).ok());
}

TEST(Dispatcher, AnIdleDispatcherSleepsAndASubmissionWakesIt) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder);
  o.spin = std::chrono::nanoseconds{0};
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  for (int round = 1; round <= 20; ++round) {
    // Wait until the dispatcher has gone to sleep, then submit: only a wake-up gets that request
    // dispatched.
    test::spin_until([&] { return rt.dispatcher_sleeping(); }, "the dispatcher to sleep");
    Req r;
    ASSERT_TRUE(rt.submit(alice, r).ok());
    ASSERT_TRUE(recorder.wait_for(static_cast<std::size_t>(round)));
    ASSERT_TRUE(rt.complete(recorder.seen().back().ticket, 0).ok());
  }
  EXPECT_GE(rt.snapshot().parks, 1u);  // it did sleep; each round above proves it woke
}

// Replays what the observer saw through a fresh core: the runtime's decisions must be the core's.
class Journal : public RuntimeObserver {
 public:
  struct Event {
    enum Kind {
      add,
      remove,
      replan,
      scale,
      submit,
      withdraw,
      begin,
      batch,
      visit,
      end,
      complete,
      take_all
    } kind = add;
    ParticipantId p;
    std::string name;
    PlanId plan = 0;
    std::uint32_t shares = 0;
    const RequestHook* request = nullptr;
    std::optional<ClassId> pass;
    std::optional<Decision> dispatch;
    Ticket ticket;
    std::int64_t cost = 0;
    std::size_t asked = 0;  // a batch's span, and what it got
    std::size_t got = 0;
    Nanos now = 0;
  };
  explicit Journal(bool batches) : batches_(batches) {}
  [[nodiscard]] bool follows_batches() const override { return batches_; }
  void on_dispatch(std::size_t asked, std::size_t got, Nanos now) override {
    Event& e = record(Event::batch, now);
    e.asked = asked;
    e.got = got;
  }
  void on_add(ParticipantId p, std::string_view name, PlanId plan, std::uint32_t shares,
              Nanos now) override {
    Event& e = record(Event::add, now);
    e.p = p;
    e.name = std::string(name);
    e.plan = plan;
    e.shares = shares;
  }
  void on_remove(ParticipantId p) override { record(Event::remove, 0).p = p; }
  void on_replan(ParticipantId p, PlanId plan, std::uint32_t shares, Nanos now) override {
    Event& e = record(Event::replan, now);
    e.p = p;
    e.plan = plan;
    e.shares = shares;
  }
  void on_scale(ParticipantId p, std::uint32_t millionths, Nanos now) override {
    Event& e = record(Event::scale, now);
    e.p = p;
    e.shares = millionths;
  }
  void on_submit(ParticipantId p, const RequestHook& r, Nanos now) override {
    Event& e = record(Event::submit, now);
    e.p = p;
    e.request = &r;
  }
  void on_withdraw(ParticipantId p, const RequestHook& r) override {
    Event& e = record(Event::withdraw, 0);
    e.p = p;
    e.request = &r;
  }
  void on_begin_turn(std::optional<ClassId> pass, Nanos now) override {
    record(Event::begin, now).pass = pass;
  }
  void on_visit(const Decision* d, Ticket t, Nanos now) override {
    Event& e = record(Event::visit, now);
    if (d != nullptr) e.dispatch = *d;
    e.ticket = t;
  }
  void on_end_turn() override { record(Event::end, 0); }
  void on_complete(Ticket t, std::int64_t cost, Nanos now) override {
    Event& e = record(Event::complete, now);
    e.ticket = t;
    e.cost = cost;
  }
  void on_take_all() override { record(Event::take_all, 0); }
  Event& record(Event::Kind kind, Nanos now) {
    Event& e = events.emplace_back();
    e.kind = kind;
    e.now = now;
    return e;
  }
  std::vector<Event> events;  // written on the dispatcher thread, read after shutdown joins it

 private:
  bool batches_;
};

// Submits `requests` from two threads to six participants, withdrawing some and scaling,
// re-planning and removing participants on the way, then drains.
void submit_withdraw_and_change_plans(Runtime& rt, const std::vector<ParticipantId>& ids,
                                      std::deque<Req>& requests) {
  std::thread producer([&] {
    for (std::size_t i = 0; i < requests.size(); i += 2) {
      requests[i].id = static_cast<int>(i);
      (void)rt.submit(ids[i % ids.size()], requests[i]);
    }
  });
  for (std::size_t i = 1; i < requests.size(); i += 2) {
    requests[i].id = static_cast<int>(i);
    (void)rt.submit(ids[(i * 7) % ids.size()], requests[i]);
    // Withdrawn while queued, or refused in flight: the replay must see the same.
    if (i % 9 == 5) (void)rt.withdraw(ids[(i * 7) % ids.size()], requests[i]);
    if (i == 1201) {
      EXPECT_TRUE(rt.scale(ids[1], 300'000).ok());
      EXPECT_TRUE(rt.scale(ids[4], 0).ok());
    }
    if (i == 1501) {
      EXPECT_TRUE(rt.replan(ids[1], "lite", 3).ok());  // keeps the scale
    }
    if (i == 1801) {
      EXPECT_TRUE(rt.scale(ids[4], 123'457).ok());
    }
    if (i == 2001) {
      EXPECT_TRUE(rt.remove(ids[2]).ok());
    }
  }
  producer.join();
  (void)rt.shutdown(ShutdownMode::drain);
}

// Feeds a journal's events, one at a time, to a fresh core, and checks each of the runtime's
// decisions against the core's. With `batches`, the observer followed batches: the replay decides
// each with Core::dispatch().
class Replay {
 public:
  explicit Replay(bool batches) : batches_(batches) {}

  // The replaying core is another issuer: the same place and generation, in its own name.
  [[nodiscard]] ParticipantId here(ParticipantId p) const {
    p.issuer = core.issuer();
    return p;
  }

  void apply(const Journal::Event& e) {
    switch (e.kind) {
      case Journal::Event::add: {
        const Result<ParticipantId> id = core.add(e.name, e.plan, e.shares, e.now);
        ASSERT_TRUE(id.ok());
        ASSERT_EQ(*id, here(e.p));
        break;
      }
      case Journal::Event::remove:
        ASSERT_TRUE(core.remove(here(e.p)).ok());
        break;
      case Journal::Event::replan:
        ASSERT_TRUE(core.replan(here(e.p), e.plan, e.shares, e.now).ok());
        break;
      case Journal::Event::scale:
        ++scales;
        ASSERT_TRUE(core.scale(here(e.p), e.shares, e.now).ok());
        break;
      case Journal::Event::submit:
        ASSERT_TRUE(core.submit(here(e.p), const_cast<RequestHook&>(*e.request), e.now).ok());
        break;
      case Journal::Event::withdraw:
        ++withdrawals;
        ASSERT_TRUE(core.withdraw(const_cast<RequestHook&>(*e.request)).ok());
        break;
      case Journal::Event::begin:
        ASSERT_FALSE(batches_) << "an observer of batches sees no turn begin";
        ASSERT_EQ(core.begin_turn(e.now), e.pass);
        break;
      case Journal::Event::batch:
        batch(e);
        break;
      case Journal::Event::visit:
        visit(e);
        break;
      case Journal::Event::end:
        core.end_turn();
        break;
      case Journal::Event::complete:
        ASSERT_TRUE(core.complete_nano(*core_ticket_of_[e.ticket.index], e.cost, e.now).ok());
        break;
      case Journal::Event::take_all:
        (void)core.take_all_queued();
        break;
    }
  }

  Core core{reference_config()};
  std::size_t visits = 0;
  std::size_t batch_events = 0;
  std::size_t scales = 0;
  std::size_t withdrawals = 0;

 private:
  void batch(const Journal::Event& e) {
    ASSERT_TRUE(batches_) << "a batch reported to an observer of visits";
    ASSERT_EQ(reported_, decided_.size()) << "a batch began before the last one was reported";
    ++batch_events;
    decided_.resize(e.asked);
    ASSERT_EQ(core.dispatch(e.now, decided_), e.got);
    decided_.resize(e.got);
    reported_ = 0;
  }

  void visit(const Journal::Event& e) {
    std::optional<Decision> d;
    if (reported_ < decided_.size()) {
      d = decided_[reported_++];
    } else {
      ASSERT_FALSE(batches_) << "a dispatch outside a batch";
      d = core.visit(e.now);
    }
    ASSERT_EQ(d.has_value(), e.dispatch.has_value()) << "visit " << visits;
    if (!d) return;
    ++visits;
    ASSERT_EQ(d->participant, here(e.dispatch->participant));
    ASSERT_EQ(d->request, e.dispatch->request);
    ASSERT_EQ(d->out, e.dispatch->out);
    ASSERT_EQ(d->turn, e.dispatch->turn);
    if (core_ticket_of_.size() <= e.ticket.index) core_ticket_of_.resize(e.ticket.index + 1);
    core_ticket_of_[e.ticket.index] = d->ticket;
  }

  bool batches_;
  std::vector<std::optional<Ticket>> core_ticket_of_;  // by runtime ticket index
  std::vector<Decision> decided_;  // the batch in progress: its dispatches not yet reported
  std::size_t reported_ = 0;
};

void replay_what_the_observer_saw(bool batches) {
  Journal journal(batches);
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 3;
  o.workers = 2;
  o.handler = [](const Decision& d) { return (id_of(d.request) % 5) * 0.7; };
  o.observer = &journal;
  Runtime rt(std::move(o));
  std::vector<ParticipantId> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(*rt.add("p" + std::to_string(i), i % 3 == 0 ? "lite" : "pro", 1 + i));
  }
  // The replay core links the same request objects: they sit idle after the run.
  std::deque<Req> requests(3000);
  submit_withdraw_and_change_plans(rt, ids, requests);

  Replay replay(batches);
  for (const Journal::Event& e : journal.events) ASSERT_NO_FATAL_FAILURE(replay.apply(e));
  EXPECT_GT(replay.visits, 2000u);
  EXPECT_EQ(replay.batch_events > 0, batches);
  EXPECT_EQ(replay.scales, 3u);
  EXPECT_GT(replay.withdrawals, 0u);
  for (const ParticipantSnapshot& p : rt.snapshot_participants()) {
    const ParticipantId id = replay.here(p.id);
    EXPECT_EQ(replay.core.scale_of(id), p.scale);
    EXPECT_EQ(p.scale, p.id == ids[1] ? 300'000u : p.id == ids[4] ? 123'457u : kWholePlan);
    EXPECT_EQ(replay.core.stats(id).dispatched, p.stats.dispatched);
    EXPECT_EQ(replay.core.stats(id).cost_charged, p.stats.cost_charged);
  }
  const RuntimeSnapshot s = rt.snapshot();
  for (int c = 0; c <= replay.core.classes(); ++c) {
    EXPECT_EQ(replay.core.turns(static_cast<ClassId>(c)),
              s.per_class[static_cast<ClassId>(c)].turns)
        << "class " << c;
  }
}

TEST(Dispatcher, TheObserverSeesEveryCoreInputAndReplayingItReproducesEveryDecision) {
  replay_what_the_observer_saw(false);
}

TEST(Dispatcher, AnObserverOfBatchesSeesEveryCoreInputAndReplayingItReproducesEveryDecision) {
  replay_what_the_observer_saw(true);
}

// A sink may remove and re-add a participant inline while the rest of a batch the core decided in
// one call is still being handed out: those hand-outs are the removed participant's, and count
// nowhere in the new one's counters (they used to drive its `queued` below zero, to 2^64 - 1).
TEST(Dispatcher, ASinkThatReAddsAParticipantInlineLeavesTheNewOnesCountersAlone) {
  constexpr std::size_t kBatch = 4;
  Recorder recorder;
  std::atomic<Runtime*> runtime{nullptr};
  std::optional<ParticipantId> readded;  // written and read on the dispatcher, then after joins
  ParticipantId alice;
  RuntimeOptions o = options_with(recorder, kBatch);
  o.sink = [&](const Decision& d) {
    recorder(d);
    if (d.participant == alice && !readded) {
      // acquire: pairs with the release store below; the runtime is constructed.
      Runtime& rt = *runtime.load(std::memory_order_acquire);
      ASSERT_TRUE(rt.remove(alice).ok());
      readded = *rt.add("alice", "pro", 1);
    }
  };
  Runtime rt(std::move(o));
  runtime.store(&rt, std::memory_order_release);
  const ParticipantId bob = *rt.add("bob", "pro", 1);
  alice = *rt.add("alice", "pro", 1);
  // Bob's requests take every slot; Alice's wait in the core behind them.
  std::vector<Req> bobs(kBatch), alices(kBatch);
  for (Req& r : bobs) ASSERT_TRUE(rt.submit(bob, r).ok());
  ASSERT_TRUE(recorder.wait_for(kBatch));
  for (Req& r : alices) ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_EQ(rt.snapshot(alice)->queued, kBatch);  // its round trip moved them into the core
  // Every slot comes back at once: the next batch is all of Alice's, decided in one call.
  {
    CompletionBatch batch(rt);
    for (const Decision& d : recorder.seen()) ASSERT_TRUE(batch.add(d.ticket, 0).ok());
  }
  ASSERT_TRUE(recorder.wait_for(2 * kBatch));
  const RuntimeSnapshot snap = rt.snapshot();  // a round trip: the sink's re-add is visible
  ASSERT_TRUE(readded.has_value());
  const std::optional<ParticipantCounters> fresh = rt.counters(*readded);
  ASSERT_TRUE(fresh.has_value());
  EXPECT_EQ(fresh->queued, 0u);
  std::uint64_t dispatched = 0;
  for (const std::uint64_t n : fresh->dispatched) dispatched += n;
  EXPECT_EQ(dispatched, 0u);
  EXPECT_EQ(rt.snapshot(*readded)->last_class, std::nullopt);
  EXPECT_EQ(rt.counters().queued, 0u);
  EXPECT_EQ(snap.dispatched, 2 * kBatch);
  for (const Decision& d : recorder.seen()) (void)rt.complete(d.ticket, 0);  // Alice's
  EXPECT_TRUE(rt.shutdown(ShutdownMode::hand_back, kDeadline).finished);
}

}  // namespace
}  // namespace creditloop
