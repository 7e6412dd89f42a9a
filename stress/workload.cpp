// The threads of a stress run that move requests: producers, completers (sink mode), the handler
// (pool mode) and pranks (completions that must be refused). Churn is churn.cpp; the monitor and
// the watchdog are watch.cpp.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

#include "expect.hpp"
#include "run.hpp"

namespace creditloop::stress {

using creditloop::Errc;
using creditloop::Status;

namespace {

constexpr std::memory_order kRelaxed = std::memory_order_relaxed;
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

Req* take_free(Run& run, Producer& me) {
  for (;;) {
    if (!me.free.empty()) {
      Req* const r = me.free.back();
      me.free.pop_back();
      return r;
    }
    // acquire: pairs with the release push in hand_back(); the request's fields are ours again.
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

}  // namespace

// ---- requests going back to their producer ------------------------------------------------------

void hand_back(Run& run, Req& r) noexcept {
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
    hand_back(run, r);
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
  hand_back(run, r);  // the runtime no longer touches it
  if (c.throws) throw std::runtime_error("a handler failure the stress run asked for");
  return c.credits;
}

void sink(Run& run, const creditloop::Decision& d) {
  SinkRing& ring = *run.rings[run.next_ring++ % run.rings.size()];
  if (!ring.push(d)) {
    fail("room", "a completer's queue is full: more requests in flight than the " +
                     std::to_string(run.o.slots) + " slots");
  }
}

// ---- completers (sink mode) ---------------------------------------------------------------------

namespace {

// A completer's first completion of a ticket, which the runtime must take.
void expect_completed(Run& run, Status s, Ticket t, const char* how) {
  run.completer_calls.fetch_add(1, kRelaxed);
  if (!s) {
    fail("check 3 (ledger)", std::string("the first completion of ticket ") + str(t) + " by " +
                                 how + " was refused: " + errc_str(s.error()));
  }
}

// The request the sink passed on, marked dispatched, its ticket the one the observer saw.
Req& sunk_request(Run& run, const creditloop::Decision& d) {
  Req& r = *static_cast<Req*>(d.request);
  mark_dispatched(run, r, d.participant, "completer");
  if (!(r.ticket == d.ticket)) {
    fail("check 3 (ledger)", req_str(r) + ": the sink got ticket " + str(d.ticket) +
                                 ", the observer saw " + str(r.ticket));
  }
  return r;
}

// A completion of `t` with a cost the runtime must refuse, by one of the ways to complete.
void try_refused_cost(Run& run, creditloop::CompletionBatch& batch, Rng& rng, Ticket t) {
  creditloop::Runtime& rt = *run.rt;
  switch (rng.below(4)) {
    case 0:
      expect_refused(rt.complete(t, -0.5), Errc::bad_cost, kCompletionErrors, "a negative cost");
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

}  // namespace

void completer_main(Run& run, std::uint32_t index) {
  SinkRing& ring = *run.rings[index];
  Rng rng(seed_for(run.o.seed, Role::completer, index));
  creditloop::Runtime& rt = *run.rt;
  creditloop::CompletionBatch batch(rt);
  std::size_t flush_at = 1 + rng.below(16);
  struct Held {
    Ticket ticket;
    double credits;
    Req* request;  // handed back once completed: until then it is the runtime's
  };
  std::vector<Held> held;
  held.reserve(8);
  // Held completions go out newest first: completions in another order than dispatches.
  auto settle_held = [&] {
    while (!held.empty()) {
      const Held h = held.back();
      held.pop_back();
      expect_completed(run, rt.complete(h.ticket, h.credits), h.ticket, "complete() (held back)");
      hand_back(run, *h.request);
    }
  };
  auto settle = [&] {
    settle_held();
    batch.flush();
  };
  run.gate.wait();
  for (;;) {
    creditloop::Decision d;
    if (!ring.try_pop(d)) {
      settle();  // nothing may stay unpublished while we sleep: that room is the server's
      ring.wait_nonempty();
      continue;
    }
    if (d.request == nullptr) {  // the end
      settle();
      return;
    }
    Req& r = sunk_request(run, d);
    const Ticket t = d.ticket;
    const Cost c = draw_cost(run.o.seed, r.id, false);
    run.recorder.expect_cost(t, c.applied);
    run.cost_reported.fetch_add(static_cast<std::uint64_t>(c.applied), kRelaxed);
    serve(run.o.service_us);

    if (rng.one_in(50)) try_refused_cost(run, batch, rng, t);  // first: it changes nothing
    const std::uint64_t how = rng.below(100);
    if (how < 15) {
      held.push_back(Held{t, c.credits, &r});
      if (held.size() == 8) settle_held();
      continue;
    }
    bool in_batch = false;
    if (how < 50) {
      expect_completed(run, rt.complete(t, c.credits), t, "complete()");
    } else if (how < 65) {
      expect_completed(run, rt.complete_nano(t, c.applied), t, "complete_nano()");
    } else {
      expect_completed(run, rng.one_in(2) ? batch.add(t, c.credits) : batch.add_nano(t, c.applied),
                       t, "CompletionBatch::add()");
      in_batch = true;
    }
    hand_back(run, r);     // completed (claimed): the request is its producer's again
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

}  // namespace creditloop::stress
