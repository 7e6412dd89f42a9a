// Shared helpers of the unit tests: a manual clock in plain Nanos, requests with ids, and a rig
// that drives the core turn by turn and writes what it decided as short strings, so that each
// test can state the expected decisions, worked out by hand from docs/contract.md, in one line.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "creditloop/core.hpp"

namespace creditloop::test {

inline constexpr Nanos kMs = 1'000'000;
inline constexpr Nanos kSec = 1'000'000'000;
inline constexpr std::int64_t kCredit = kNanoPerCredit;

/// A request as an embedder would make one: the hook plus something to recognise it by.
struct Req : RequestHook {
  int id = 0;
};

inline int id_of(const RequestHook* r) { return static_cast<const Req*>(r)->id; }

/// Balance in decimal: gtest cannot print a 128-bit integer on its own.
inline std::string str(Balance b) { return to_decimal(b); }

/// `credits` whole credits in nano-credits, as a 128-bit balance.
inline Balance credits(std::int64_t whole) { return static_cast<Balance>(whole) * kCredit; }

inline Plan make_plan(std::string name, std::initializer_list<std::pair<int, ClassTerms>> terms) {
  Plan p;
  p.name = std::move(name);
  for (const auto& [c, t] : terms) p.terms[static_cast<std::size_t>(c)] = t;
  return p;
}

inline Config make_config(int k, std::vector<Plan> plans) {
  Config c;
  c.classes = k;
  c.plans = std::move(plans);
  return c;
}

/// One visit as the rig saw it.
struct Seen {
  ParticipantId participant;
  std::string who;
  int req = 0;
  ClassId out = 0;
  ClassId turn = 0;
  Ticket ticket;
};

/// The participant a visit went to, or "none".
inline std::string who(const std::optional<Seen>& s) { return s ? s->who : "none"; }

/// A core with a manual clock and a store of requests. Requests live in a deque so their
/// addresses stay fixed while the core links them.
class Rig {
 public:
  explicit Rig(Config config) : core(std::move(config)) {}

  ParticipantId add(std::string_view name, std::string_view plan, std::uint32_t shares = 1,
                    Nanos now = 0) {
    Result<ParticipantId> r = core.add(name, plan, shares, now);
    EXPECT_TRUE(r.ok()) << "add " << name;
    return r.ok() ? *r : ParticipantId{};
  }

  Req& make() {
    reqs_.emplace_back();
    reqs_.back().id = next_id_++;
    return reqs_.back();
  }

  /// Submits `n` new requests to `p` and returns their ids, oldest first.
  std::vector<int> submit(ParticipantId p, int n, Nanos now = 0) {
    std::vector<int> ids;
    for (int i = 0; i < n; ++i) {
      Req& r = make();
      EXPECT_TRUE(core.submit(p, r, now).ok());
      ids.push_back(r.id);
    }
    return ids;
  }

  /// p's balance in class c at `now`, in nano-credits; fails the test on a refusal.
  Balance bal(ParticipantId p, ClassId c, Nanos now) {
    Result<Balance> r = core.balance(p, c, now);
    EXPECT_TRUE(r.ok()) << "balance of place " << p.place << " class " << int{c};
    return r.ok() ? *r : Balance{-1};
  }
  std::string bals(ParticipantId p, ClassId c, Nanos now) { return str(bal(p, c, now)); }

  std::string token(const Seen& s) const {
    std::string t = s.who;
    if (s.out != s.turn) t += ">" + class_name(s.out);
    return t;
  }

  /// One visit at `now` of the turn in progress, recorded.
  std::optional<Seen> visit(Nanos now) {
    const std::optional<Decision> d = core.visit(now);
    if (!d) return std::nullopt;
    Seen s{d->participant,    std::string(core.name(d->participant)),
           id_of(d->request), d->out,
           d->turn,           d->ticket};
    log.push_back(s);
    return s;
  }

  /// Begins a turn at `now` and visits until the cursor has been round the ring or `room`
  /// dispatches went out (then the turn is ended, as a server without room ends it). Returns
  /// "P2: A B>P1 C": the turn class, then each visit's participant, with the class it went out
  /// under when that differs from the turn's; "none" when every queue is empty.
  std::string turn(Nanos now, std::size_t room = SIZE_MAX) {
    const std::optional<ClassId> c = core.begin_turn(now);
    if (!c) return "none";
    std::string out = class_name(*c) + ":";
    std::size_t n = 0;
    while (n < room && core.in_turn()) {
      const std::optional<Seen> s = visit(now);
      if (!s) break;
      out += " " + token(*s);
      ++n;
    }
    if (n == room) core.end_turn();
    EXPECT_FALSE(core.in_turn());
    return out;
  }

  /// Turns at `now` until every queue is empty (or `limit` turns), joined by " | ".
  std::string drain(Nanos now, int limit = 1000) {
    std::string all;
    for (int i = 0; i < limit; ++i) {
      const std::string t = turn(now);
      if (t == "none") break;
      all += (all.empty() ? "" : " | ") + t;
    }
    return all;
  }

  Core core;
  std::vector<Seen> log;

 private:
  std::deque<Req> reqs_;
  int next_id_ = 0;
};

/// Ids of a handed-back list, oldest first, leaving the list empty.
inline std::vector<int> ids(RequestList& list) {
  std::vector<int> v;
  while (RequestHook* r = list.pop_front()) v.push_back(id_of(r));
  return v;
}

/// Everything observable about the core at `now`, as one string: per live participant its
/// queue, balances and counters, then the core's totals and turn. Reading balances refills them,
/// which changes no value, so two cores in the same state give the same string.
inline std::string snapshot(Core& core, Nanos now) {
  std::string s;
  for (std::uint32_t place = 0; place < core.ring_size(); ++place) {
    const std::optional<ParticipantId> p = core.at(place);
    if (!p) {
      s += "[" + std::to_string(place) + " free]";
      continue;
    }
    s += "[" + std::to_string(place) + " " + std::string(core.name(*p)) +
         " plan=" + std::to_string(core.plan(*p)) + " shares=" + std::to_string(core.shares(*p)) +
         " queued=" + std::to_string(core.queued(*p));
    for (ClassId c = 0; c < core.classes(); ++c) {
      if (!core.holds(*p, c)) continue;
      const Result<Balance> b = core.balance(*p, c, now);
      s += " " + class_name(c) + "=" + (b.ok() ? str(*b) : "error");
    }
    const ParticipantStats& st = core.stats(*p);
    s += " dispatched=";
    for (int c = 0; c <= core.classes(); ++c) {
      s += std::to_string(st.dispatched[static_cast<std::size_t>(c)]) + ",";
    }
    s += " completed=" + std::to_string(st.completed) + " charged=" + str(st.cost_charged) +
         " uncharged=" + str(st.cost_uncharged) + "]";
  }
  s += " size=" + std::to_string(core.size()) + " waiting=" + std::to_string(core.waiting()) +
       " in_flight=" + std::to_string(core.in_flight()) +
       " turn=" + (core.turn_class() ? class_name(*core.turn_class()) : std::string("-"));
  return s;
}

/// The slot model of docs/contract.md §6 on a manual clock: a request holds one of `slots` slots
/// for its service time and then completes with its cost. At each instant: the completions due,
/// in dispatch order; then the arrivals due, in the order given; then the loop until no room or
/// no work; a completion falling due at that same instant (service 0) waits for the loop to stop,
/// and the instant is handled again.
class SlotSim {
 public:
  SlotSim(Rig& rig, std::uint32_t slots) : rig_(rig), free_(slots) {}

  void arrive(Nanos at, ParticipantId p, Nanos service, double cost) {
    Req& r = rig_.make();
    arrivals_.push_back({at, p, &r});
    jobs_.resize(static_cast<std::size_t>(r.id) + 1);
    jobs_[static_cast<std::size_t>(r.id)] = {service, cost, at, -1};
  }

  /// Runs every instant up to and including `until`.
  void run(Nanos until) {
    std::stable_sort(arrivals_.begin() + static_cast<std::ptrdiff_t>(next_arrival_),
                     arrivals_.end(),
                     [](const Arrival& a, const Arrival& b) { return a.at < b.at; });
    for (;;) {
      Nanos t = INT64_MAX;
      if (next_arrival_ < arrivals_.size()) t = arrivals_[next_arrival_].at;
      for (const Pending& p : pending_) t = std::min(t, p.due);
      if (t == INT64_MAX || t > until) return;
      bool arrivals_done = false;
      for (;;) {
        complete_due(t);
        if (!arrivals_done) {
          while (next_arrival_ < arrivals_.size() && arrivals_[next_arrival_].at == t) {
            const Arrival& a = arrivals_[next_arrival_++];
            EXPECT_TRUE(rig_.core.submit(a.p, *a.req, t).ok());
          }
          arrivals_done = true;
        }
        Handler h{this, t};
        rig_.core.run(t, h);
        bool again = false;
        for (const Pending& p : pending_) again = again || p.due == t;
        if (!again) break;
      }
    }
  }

  struct Job {
    Nanos service = 0;
    double cost = 0;
    Nanos arrived = 0;
    Nanos dispatched = -1;
  };
  const Job& job(int req) const { return jobs_[static_cast<std::size_t>(req)]; }

  /// Every dispatch in order, with its instant.
  std::vector<std::pair<Nanos, Decision>> dispatches;
  /// Every turn class in order, with its instant.
  std::vector<std::pair<Nanos, ClassId>> turns;
  /// Called after each completion, with the instant.
  std::function<void(Nanos, const Completion&)> on_complete;

 private:
  struct Arrival {
    Nanos at;
    ParticipantId p;
    Req* req;
  };
  struct Pending {
    Nanos due;
    std::uint64_t seq;
    Ticket ticket;
    double cost;
  };
  static constexpr std::size_t kMaxPasses = 1'000'000;
  struct Handler {
    SlotSim* sim;
    Nanos now;
    // A loop that keeps starting turns without dispatching is cut short, to fail, not hang.
    bool room() const { return sim->free_ > 0 && sim->turns.size() < kMaxPasses; }
    void on_turn(ClassId c) {
      sim->turns.emplace_back(now, c);
      if (sim->turns.size() == kMaxPasses) ADD_FAILURE() << "too many turns";
    }
    void on_dispatch(const Decision& d) {
      --sim->free_;
      const auto id = static_cast<std::size_t>(id_of(d.request));
      if (id >= sim->jobs_.size()) sim->jobs_.resize(id + 1);
      Job& j = sim->jobs_[id];
      j.dispatched = now;
      sim->pending_.push_back({now + j.service, sim->seq_++, d.ticket, j.cost});
      sim->dispatches.emplace_back(now, d);
    }
  };

  void complete_due(Nanos t) {
    std::vector<Pending> due;
    std::vector<Pending> rest;
    for (const Pending& p : pending_) (p.due <= t ? due : rest).push_back(p);
    pending_ = std::move(rest);
    std::sort(due.begin(), due.end(),
              [](const Pending& a, const Pending& b) { return a.seq < b.seq; });
    for (const Pending& p : due) {
      const Result<Completion> c = rig_.core.complete(p.ticket, p.cost, t);
      EXPECT_TRUE(c.ok());
      ++free_;
      if (c.ok() && on_complete) on_complete(t, *c);
    }
  }

  Rig& rig_;
  std::uint32_t free_;
  std::vector<Arrival> arrivals_;
  std::size_t next_arrival_ = 0;
  std::vector<Job> jobs_;
  std::vector<Pending> pending_;
  std::uint64_t seq_ = 0;
};

}  // namespace creditloop::test
