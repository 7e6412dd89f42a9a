// The threads of a stress run: producers, completers (sink mode), the handler (pool mode), churn,
// pranks (completions that must be refused), the monitor and the watchdog.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

#include "run.hpp"

namespace creditloop::stress {

using creditloop::Errc;
using creditloop::Status;

namespace {

constexpr std::memory_order kRelaxed = std::memory_order_relaxed;
// The names of the checks beyond the six: docs/contract.md §5's refusals, asserted as they happen.
constexpr const char* kCompletionErrors = "completion errors (contract §5)";
constexpr const char* kLifecycle = "lifecycle (contract §5)";

const char* state_str(ReqState s) {
  switch (s) {
    case ReqState::free:
      return "free (back with its producer)";
    case ReqState::queued:
      return "queued";
    case ReqState::dispatched:
      return "dispatched";
    case ReqState::handed_back:
      return "handed back";
  }
  return "?";
}

/// What a request costs: drawn from the seed and the request's id alone, so that a seed names
/// the same costs whichever thread completes the request.
struct Cost {
  double credits = 0;        // what the handler returns or the completer passes
  std::int64_t applied = 0;  // what the runtime must charge, in nano-credits
  bool refused = false;      // a cost the runtime refuses (the worker pool then charges 0)
  bool throws = false;       // the handler throws (charged 0)
};

Cost draw_cost(std::uint64_t seed, std::uint64_t request, bool allow_refused) {
  Rng rng(mix(seed ^ mix(request)));
  Cost c;
  auto nano = [&](std::uint64_t lo, std::uint64_t span) {
    c.credits = static_cast<double>(lo + rng.below(span)) / 1e9;
    c.applied = creditloop::to_nano_credits(c.credits, creditloop::kMaxCost).value();
  };
  const std::uint64_t roll = rng.below(10'000);
  if (roll < 4'500) {
    c.credits = 0;  // most requests cost nothing beyond their dispatch
  } else if (roll < 7'500) {
    nano(0, 2'000'000'000);  // fractions of a credit, to the last unit
  } else if (roll < 9'200) {
    nano(2'000'000'000, 18'000'000'000);
  } else if (roll < 9'900) {
    nano(20'000'000'000, 480'000'000'000);
  } else if (roll < 9'980) {
    nano(500'000'000'000, 19'500'000'000'000);  // deep debt: minutes to hours of refill
  } else if (roll < 9'990) {
    c.credits = creditloop::kMaxCost;  // the documented limit itself
    c.applied = creditloop::kMaxCostNano;
  } else if (allow_refused && roll < 9'998) {
    constexpr double kRefused[] = {-1.0, -1e-9, std::numeric_limits<double>::quiet_NaN(),
                                   std::numeric_limits<double>::infinity(),
                                   creditloop::kMaxCost * 2};
    c.credits = kRefused[rng.below(std::size(kRefused))];
    c.refused = true;
  } else if (allow_refused) {
    c.throws = true;
  }
  return c;
}

/// A busy server: time spent per request without giving up the processor.
void serve(double us) {
  if (us <= 0) return;
  const Nanos until = steady_ns() + static_cast<Nanos>(us * 1000);
  while (steady_ns() < until) {
  }
}

void mark_dispatched(Run& run, Req& r, ParticipantId p, const char* by) {
  ReqState seen = ReqState::queued;
  if (!r.state.compare_exchange_strong(seen, ReqState::dispatched, std::memory_order_acq_rel)) {
    fail("check 1 (fate)", req_str(r) + " of " + who(r.name, r.participant) + " reached a " + by +
                               " while " + state_str(seen) +
                               ": dispatched twice, or after it was handed back");
  }
  if (!(r.participant == p)) {
    fail("check 1 (fate)", req_str(r) + " submitted to " + who(r.name, r.participant) +
                               " reached a " + by + " as " + str(p) + "'s");
  }
  run.dispatched_seen.fetch_add(1, kRelaxed);
}

/// A call that must be refused with `want`.
void expect_refused(Status got, Errc want, const char* check, const std::string& what) {
  if (!got.ok() && got.error() == want) return;
  fail(check, what + ": expected " + errc_str(want) + ", got " + status_str(got));
}

/// A lifecycle call that must be refused with `want`; shut_down is the answer to everything
/// once shutdown has begun.
void expect_lifecycle_refusal(Run& run, Status got, Errc want, const std::string& what) {
  if (!got.ok() && got.error() == Errc::shut_down &&
      run.shutting_down.load(std::memory_order_acquire)) {
    return;
  }
  expect_refused(got, want, kLifecycle, what);
  run.churn_refusals.fetch_add(1, kRelaxed);
}

/// Whether a lifecycle call that should succeed did; false when it was refused because shutdown
/// has begun.
bool lifecycle_ok(Run& run, Status got, const std::string& what) {
  if (got.ok()) return true;
  if (got.error() == Errc::shut_down && run.shutting_down.load(std::memory_order_acquire)) {
    return false;
  }
  fail(kLifecycle, what + " refused: " + errc_str(got.error()));
}

Req* take_free(Run& run, Producer& me) {
  for (;;) {
    if (!me.free.empty()) {
      Req* const r = me.free.back();
      me.free.pop_back();
      return r;
    }
    // acquire: pairs with the release push in give_back(); the request's fields are ours again.
    for (Req* r = me.returned.exchange(nullptr, std::memory_order_acquire); r != nullptr;) {
      Req* const next = r->next_free;
      if (r != &me.wake) me.free.push_back(r);
      r = next;
    }
    if (!me.free.empty()) continue;
    if (run.producers_stop.load(std::memory_order_acquire)) return nullptr;
    me.state.store(Producer::out_of_requests, kRelaxed);
    me.returned.wait(nullptr, std::memory_order_acquire);
    me.state.store(Producer::running, kRelaxed);
  }
}

std::string plan_of(const Run& run, Rng& rng) {
  // pro, lite, free, top, odd, gold (options.cpp), weighted towards the reference plans.
  constexpr std::uint64_t kWeights[] = {35, 25, 10, 12, 10, 8};
  std::uint64_t roll = rng.below(100);
  for (std::size_t i = 0; i < std::size(kWeights); ++i) {
    if (roll < kWeights[i]) return run.config.plans[i].name;
    roll -= kWeights[i];
  }
  return run.config.plans[0].name;
}

// A fraction of a plan in millionths, as a fleet gives them: often the whole plan or nothing,
// otherwise anything between, small ones included (rates and capacities that round away).
std::uint32_t scale_of(Rng& rng) {
  const std::uint64_t roll = rng.below(100);
  if (roll < 20) return creditloop::kWholePlan;
  if (roll < 35) return 0;
  if (roll < 45) return 1 + rng.below32(1000);
  return rng.below32(creditloop::kWholePlan + 1);
}

std::uint32_t shares_of(Rng& rng) {
  const std::uint64_t roll = rng.below(100);
  if (roll < 60) return 1;
  if (roll < 93) return 2 + rng.below32(9);
  if (roll < 98) return 11 + rng.below32(90);
  return 1000 + rng.below32(9001);
}

}  // namespace

// ---- requests going back to their producer ------------------------------------------------------

void give_back(Run& run, Req& r) noexcept {
  r.state.store(ReqState::free, kRelaxed);  // published by the push
  Producer& p = *run.producers[r.producer];
  Req* head = p.returned.load(kRelaxed);
  do {
    r.next_free = head;
    // release: the producer's acquire exchange sees the request as we leave it.
  } while (!p.returned.compare_exchange_weak(head, &r, std::memory_order_release, kRelaxed));
  if (head == nullptr) p.returned.notify_one();  // it may be waiting for an empty stack to fill
}

std::vector<std::uint64_t> take_handed_back(Run& run, creditloop::RequestList list,
                                            std::optional<ParticipantId> from,
                                            const std::string& subject, std::size_t& queued) {
  std::vector<std::uint64_t> ids;
  ids.reserve(list.size());
  std::vector<std::uint64_t> last_seq(run.producers.size(), 0);
  std::set<std::uint64_t> groups;  // participants already passed (shutdown lists)
  ParticipantId current{};
  std::uint64_t previous = 0;
  bool inbox = false;
  queued = 0;
  const std::size_t size = list.size();
  std::size_t n = 0;
  while (creditloop::RequestHook* h = list.pop_front()) {
    ++n;
    Req& r = static_cast<Req&>(*h);
    if (r.producer >= run.producers.size()) {
      fail("check 1 (fate)", subject + " handed back a request no producer made");
    }
    const std::string what = req_str(r) + " of " + who(r.name, r.participant);
    if (from && !(r.participant == *from)) {
      fail("check 1 (fate)", subject + " handed back " + what);
    }
    if (!from && !(r.participant == current)) {
      // Shutdown: participants one after the other, each one's requests oldest first.
      if (!groups.insert(HandBacks::key(r.participant)).second) {
        fail("check 2 (order)",
             subject + " handed back " + what + " apart from the participant's other requests");
      }
      current = r.participant;
      std::fill(last_seq.begin(), last_seq.end(), 0);
      previous = 0;
      inbox = false;
    }
    if (r.seq <= last_seq[r.producer]) {
      fail("check 2 (order)", subject + " handed back " + what + " after the same producer's " +
                                  "later submission " + std::to_string(last_seq[r.producer]));
    }
    last_seq[r.producer] = r.seq;
    if (r.core_seq != 0) {
      if (inbox || (previous != 0 && r.core_seq != previous + 1)) {
        fail("check 2 (order)",
             subject + " handed back " + what + " out of the order in which the queue took them");
      }
      previous = r.core_seq;
      ++queued;
    } else {
      if (!from) fail("check 1 (fate)", subject + " handed back " + what + " that never queued");
      inbox = true;  // never seen by the core: it was still in the inbox, and is newer
    }
    ReqState seen = ReqState::queued;
    if (!r.state.compare_exchange_strong(seen, ReqState::handed_back, std::memory_order_acq_rel)) {
      fail("check 1 (fate)", subject + " handed back " + what + " while " + state_str(seen));
    }
    ids.push_back(r.id);
    give_back(run, r);
  }
  if (n != size) {
    fail("check 1 (fate)", subject + " handed back a list of " + std::to_string(size) +
                               " requests that holds " + std::to_string(n));
  }
  return ids;
}

// ---- producers ----------------------------------------------------------------------------------

void producer_main(Run& run, std::uint32_t index) {
  Producer& me = *run.producers[index];
  Rng rng(seed_for(run.o.seed, Role::producer, index));
  const std::uint32_t names = run.o.participants;
  const std::uint32_t hot = std::max<std::uint32_t>(1, names / 100);
  std::uint32_t last = rng.below32(names);
  std::uint64_t submissions = 0;
  run.gate.wait();
  while (!run.producers_stop.load(kRelaxed)) {
    // Mostly anyone, often one of a few hot participants (deep queues, descending classes),
    // sometimes the same one again; now and then a burst.
    const std::uint64_t pick = rng.below(100);
    const std::uint32_t name = pick < 60 ? rng.below32(names) : pick < 85 ? rng.below32(hot) : last;
    last = name;
    const std::uint32_t burst = rng.one_in(8) ? 2 + rng.below32(31) : 1;
    if (burst > 1) ++me.bursts;
    // acquire: pairs with the churn thread's release store after add() or remove() returned.
    const std::uint64_t word = run.directory[name].load(std::memory_order_acquire);
    const ParticipantId id = directory::id_of(word, run.rt->issuer());
    const bool removed = directory::removed(word);
    for (std::uint32_t b = 0; b < burst; ++b) {
      Req* const r = take_free(run, me);
      if (r == nullptr) break;
      ++submissions;
      r->id = request_id(index, submissions);
      r->seq = submissions;
      r->core_seq = 0;
      r->participant = id;
      r->name = name;
      r->producer = index;
      r->ticket = Ticket{};
      r->state.store(ReqState::queued, kRelaxed);  // published by submit()
      r->submitted_at = steady_ns();
      const Status s = run.rt->submit(id, *r);
      if (s) {
        me.accepted.store(me.accepted.load(kRelaxed) + 1, kRelaxed);
        if (removed) {  // the request is the runtime's now: name it from what we kept
          fail("check 1 (fate)",
               "submit of request " + std::to_string(request_id(index, submissions)) +
                   " (producer " + std::to_string(index) + ") to " + who(name, id) +
                   " returned ok although its remove() had returned before");
        }
        continue;
      }
      // Refused: the request never left us.
      r->state.store(ReqState::free, kRelaxed);
      me.free.push_back(r);
      if (s.error() == Errc::unknown_participant) {
        ++me.refused_unknown;
        if (removed) ++me.refused_removed;
        break;
      }
      if (s.error() == Errc::shut_down) {
        if (!run.shutting_down.load(std::memory_order_acquire)) {
          fail("check 1 (fate)",
               "submit to " + who(name, id) + " refused with shut_down before shutdown began");
        }
        ++me.refused_shutdown;
        me.state.store(Producer::done, kRelaxed);
        return;
      }
      fail("check 1 (fate)", "submit of " + req_str(*r) + " to " + who(name, id) +
                                 " refused with " + errc_str(s.error()));
    }
  }
  me.state.store(Producer::done, kRelaxed);
}

// ---- the worker pool's handler and the sink -----------------------------------------------------

double handle(Run& run, creditloop::RequestHook& request, ParticipantId p) {
  Req& r = static_cast<Req&>(request);
  mark_dispatched(run, r, p, "handler");
  const Ticket ticket = r.ticket;  // the observer wrote it before the job was queued
  const Cost c = draw_cost(run.o.seed, r.id, true);
  run.recorder.expect_cost(ticket, c.applied);
  run.cost_reported.fetch_add(static_cast<std::uint64_t>(c.applied), kRelaxed);
  if (c.refused || c.throws) run.handler_refusals.fetch_add(1, kRelaxed);
  if (c.throws) run.handler_throws.fetch_add(1, kRelaxed);
  serve(run.o.service_us);
  give_back(run, r);  // the runtime no longer touches it
  if (c.throws) throw std::runtime_error("a handler failure the stress run asked for");
  return c.credits;
}

void sink(Run& run, const creditloop::Dispatched& d) {
  SinkRing& ring = *run.rings[run.next_ring++ % run.rings.size()];
  if (!ring.push(d)) {
    fail("room", "a completer's queue is full: more requests in flight than the " +
                     std::to_string(run.o.slots) + " slots");
  }
}

// ---- completers (sink mode) ---------------------------------------------------------------------

void completer_main(Run& run, std::uint32_t index) {
  SinkRing& ring = *run.rings[index];
  Rng rng(seed_for(run.o.seed, Role::completer, index));
  creditloop::Runtime& rt = *run.rt;
  creditloop::CompletionBatch batch(rt);
  std::size_t flush_at = 1 + rng.below(16);
  struct Held {
    Ticket ticket;
    double credits;
    Req* request;  // given back once completed: until then it is the runtime's
  };
  std::vector<Held> held;
  held.reserve(8);
  auto complete_ok = [&](Status s, Ticket t, const char* how) {
    run.completer_calls.fetch_add(1, kRelaxed);
    if (!s) {
      fail("check 3 (ledger)", std::string("the first completion of ticket ") + str(t) + " by " +
                                   how + " was refused: " + errc_str(s.error()));
    }
  };
  // Held completions go out newest first: completions in another order than dispatches.
  auto settle_held = [&] {
    while (!held.empty()) {
      const Held h = held.back();
      held.pop_back();
      complete_ok(rt.complete(h.ticket, h.credits), h.ticket, "complete() (held back)");
      give_back(run, *h.request);
    }
  };
  auto settle = [&] {
    settle_held();
    batch.flush();
  };
  run.gate.wait();
  for (;;) {
    creditloop::Dispatched d;
    if (!ring.try_pop(d)) {
      settle();  // nothing may stay unpublished while we sleep: that room is the server's
      ring.wait_nonempty();
      continue;
    }
    if (d.request == nullptr) {  // the end
      settle();
      return;
    }
    Req& r = *static_cast<Req*>(d.request);
    mark_dispatched(run, r, d.participant, "completer");
    if (!(r.ticket == d.ticket)) {
      fail("check 3 (ledger)", req_str(r) + ": the sink got ticket " + str(d.ticket) +
                                   ", the observer saw " + str(r.ticket));
    }
    const Ticket t = d.ticket;
    const Cost c = draw_cost(run.o.seed, r.id, false);
    run.recorder.expect_cost(t, c.applied);
    run.cost_reported.fetch_add(static_cast<std::uint64_t>(c.applied), kRelaxed);
    serve(run.o.service_us);

    if (rng.one_in(50)) {  // a refused cost first changes nothing
      switch (rng.below(4)) {
        case 0:
          expect_refused(rt.complete(t, -0.5), Errc::bad_cost, kCompletionErrors,
                         "a negative cost");
          break;
        case 1:
          expect_refused(rt.complete(t, std::numeric_limits<double>::quiet_NaN()), Errc::bad_cost,
                         kCompletionErrors, "a NaN cost");
          break;
        case 2:
          expect_refused(rt.complete_nano(t, creditloop::kMaxCostNano + 1), Errc::bad_cost,
                         kCompletionErrors, "a cost above the limit");
          break;
        default:
          expect_refused(batch.add(t, std::numeric_limits<double>::infinity()), Errc::bad_cost,
                         kCompletionErrors, "an infinite cost in a batch");
          break;
      }
      run.refusals_checked.fetch_add(1, kRelaxed);
    }
    const std::uint64_t how = rng.below(100);
    if (how < 15) {
      held.push_back(Held{t, c.credits, &r});
      if (held.size() == 8) settle_held();
      continue;
    }
    bool in_batch = false;
    if (how < 50) {
      complete_ok(rt.complete(t, c.credits), t, "complete()");
    } else if (how < 65) {
      complete_ok(rt.complete_nano(t, c.applied), t, "complete_nano()");
    } else {
      complete_ok(rng.one_in(2) ? batch.add(t, c.credits) : batch.add_nano(t, c.applied), t,
                  "CompletionBatch::add()");
      in_batch = true;
    }
    give_back(run, r);     // completed (claimed): the request is its producer's again
    if (rng.one_in(40)) {  // again: claimed already (published or not), so stale
      expect_refused(rt.complete(t, 0.25), Errc::stale_ticket, kCompletionErrors,
                     std::string("a second completion of ticket ") + str(t) +
                         (in_batch ? " (the first still in an unflushed batch)" : ""));
      run.refusals_checked.fetch_add(1, kRelaxed);
    }
    if (batch.pending() >= flush_at) {
      batch.flush();
      flush_at = 1 + rng.below(16);
    }
  }
}

// ---- pranks: completions that must be refused, and change nothing -------------------------------

void pranks_main(Run& run) {
  Rng rng(seed_for(run.o.seed, Role::pranks, 0));
  creditloop::Runtime& rt = *run.rt;
  auto refused = [&](Status got, Errc want, const std::string& what) {
    expect_refused(got, want, kCompletionErrors, what);
    run.refusals_checked.fetch_add(1, kRelaxed);
  };
  run.gate.wait();
  while (!run.stop.wait_for(std::chrono::microseconds(100 + rng.below(400)))) {
    if (const std::optional<Ticket> t = run.recorder.completed_sample(rng, rt.issuer())) {
      const std::string done = "ticket " + str(*t) + ", whose completion was applied,";
      switch (rng.below(4)) {
        case 0:
          refused(rt.complete(*t, 1.0), Errc::stale_ticket, done + " completed again");
          break;
        case 1:
          refused(rt.complete_nano(*t, 7), Errc::stale_ticket,
                  done + " completed again by complete_nano()");
          break;
        case 2: {
          creditloop::CompletionBatch batch(rt);
          refused(batch.add(*t, 0.0), Errc::stale_ticket, done + " added to a batch");
          if (batch.pending() != 0) fail(kCompletionErrors, "a refused batch add is pending");
          break;
        }
        default:  // the cost is checked first
          refused(rt.complete(*t, -1.0), Errc::bad_cost, done + " completed with cost -1");
          break;
      }
      const Ticket future{t->index, t->issuer, t->generation + 0x40000000u};
      refused(rt.complete(future, 0.0), Errc::unknown_ticket,
              "ticket " + str(future) + ", a generation never issued");
    }
    const Ticket beyond{0xfff00000u + rng.below32(0x100000), rt.issuer(), 1 + rng.below32(1000)};
    refused(rt.complete(beyond, 0.0), Errc::unknown_ticket,
            "ticket " + str(beyond) + ", beyond every record");
    const Ticket zero{rng.below32(run.o.slots), rt.issuer(), 0};
    refused(rt.complete(zero, 0.0), Errc::unknown_ticket,
            "ticket " + str(zero) + " (generation 0 is never issued)");
    refused(rt.complete(zero, std::numeric_limits<double>::quiet_NaN()), Errc::bad_cost,
            "a NaN cost on a forged ticket");
    refused(rt.complete_nano(beyond, -1), Errc::bad_cost, "cost -1 nano-credit, forged ticket");
  }
}

// ---- churn --------------------------------------------------------------------------------------

namespace {

void publish(Run& run, std::uint32_t name, ParticipantId id, bool removed) {
  // release: pairs with the producers' acquire load; they then know the call has returned.
  run.directory[name].store(directory::pack(id, removed), std::memory_order_release);
}

void churn_add(Run& run, Rng& rng, std::uint32_t name) {
  const std::string n = participant_name(name);
  const auto r = run.rt->add(n, plan_of(run, rng), shares_of(rng));
  if (!lifecycle_ok(run, r.status(), "add(" + n + ") after its removal")) return;
  publish(run, name, *r, false);
  run.adds.fetch_add(1, kRelaxed);
  if (rng.one_in(16)) {
    const std::optional<ParticipantId> found = run.rt->find(n);
    if (found && !(*found == *r) && !run.shutting_down.load(std::memory_order_acquire)) {
      fail("check 1 (fate)", "find(" + n + ") is " + str(*found) + ", add() returned " + str(*r));
    }
  }
}

void churn_once(Run& run, Rng& rng) {
  creditloop::Runtime& rt = *run.rt;
  const std::uint32_t name = rng.below32(run.o.participants);
  const std::uint64_t word = run.directory[name].load(std::memory_order_acquire);
  const ParticipantId id = directory::id_of(word, run.rt->issuer());
  const std::string n = participant_name(name);
  const std::string subject = who(name, id);
  run.churn_ops.fetch_add(1, kRelaxed);
  if (directory::removed(word)) {
    switch (rng.below(10)) {
      case 0:
        expect_lifecycle_refusal(run, rt.remove(id).status(), Errc::unknown_participant,
                                 "remove() of " + subject + ", removed already");
        return;
      case 1:
        expect_lifecycle_refusal(run, rt.replan(id, plan_of(run, rng), 1),
                                 Errc::unknown_participant,
                                 "replan() of " + subject + ", removed already");
        return;
      case 2:
        expect_lifecycle_refusal(run, rt.add(n, "no-such-plan", 1).status(), Errc::unknown_plan,
                                 "add(" + n + ") with an unknown plan");
        return;
      case 3:
        expect_lifecycle_refusal(run, rt.add(n, plan_of(run, rng), 0).status(), Errc::bad_shares,
                                 "add(" + n + ") with 0 shares");
        return;
      case 4:
        expect_lifecycle_refusal(run, rt.scale(id, scale_of(rng)), Errc::unknown_participant,
                                 "scale() of " + subject + ", removed already");
        return;
      default:
        churn_add(run, rng, name);
        return;
    }
  }
  const std::uint64_t roll = rng.below(100);
  if (roll < 45) {
    auto r = rt.remove(id);
    if (!lifecycle_ok(run, r.status(), "remove() of " + subject)) return;
    std::size_t queued = 0;
    const std::size_t count = r->size();
    std::vector<std::uint64_t> ids =
        take_handed_back(run, std::move(*r), id, "remove() of " + subject, queued);
    run.handed_back_remove.fetch_add(count, kRelaxed);
    publish(run, name, id, true);
    run.removes.fetch_add(1, kRelaxed);
    if (run.log)
      run.handbacks.real(HandBacks::key(id), std::move(ids), queued, "remove() of " + subject);
    if (rng.one_in(2)) churn_add(run, rng, name);  // back at once, as a new participant
  } else if (roll < 72) {
    if (lifecycle_ok(run, rt.replan(id, plan_of(run, rng), shares_of(rng)),
                     "replan() of " + subject)) {
      run.replans.fetch_add(1, kRelaxed);
    }
  } else if (roll < 82) {
    if (lifecycle_ok(run, rt.scale(id, scale_of(rng)), "scale() of " + subject)) {
      run.scales.fetch_add(1, kRelaxed);
    }
  } else if (roll < 85) {
    expect_lifecycle_refusal(run, rt.scale(id, creditloop::kWholePlan + 1 + rng.below32(1000)),
                             Errc::bad_scale, "scale() of " + subject + " above the whole plan");
  } else if (roll < 89) {
    expect_lifecycle_refusal(run, rt.replan(id, plan_of(run, rng), 0), Errc::bad_shares,
                             "replan() of " + subject + " to 0 shares");
  } else if (roll < 92) {
    expect_lifecycle_refusal(run, rt.replan(id, plan_of(run, rng), creditloop::kMaxShares + 1),
                             Errc::bad_shares, "replan() of " + subject + " above the share limit");
  } else if (roll < 95) {
    expect_lifecycle_refusal(run, rt.replan(id, "no-such-plan", 1), Errc::unknown_plan,
                             "replan() of " + subject + " to an unknown plan");
  } else if (roll < 98) {
    expect_lifecycle_refusal(run, rt.add(n, plan_of(run, rng), shares_of(rng)).status(),
                             Errc::duplicate_name, "add(" + n + ") while registered");
  } else {
    // The core tests the shares before the name.
    expect_lifecycle_refusal(run, rt.add(n, plan_of(run, rng), 0).status(), Errc::bad_shares,
                             "add(" + n + ") with 0 shares while registered");
  }
}

}  // namespace

void churn_main(Run& run) {
  Rng rng(seed_for(run.o.seed, Role::churn, 0));
  run.gate.wait();
  // Paced, not synchronized: no check depends on when a lifecycle call happens.
  const double mean_ns = run.o.churn_us * 1000;
  while (
      !run.stop.wait_for(std::chrono::nanoseconds(static_cast<Nanos>(2 * mean_ns * rng.unit())))) {
    churn_once(run, rng);
  }
}

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
