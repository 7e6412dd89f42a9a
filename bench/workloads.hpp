// The core's workloads, shared by bench_core (timed) and bench_instructions (counted under
// callgrind), so that a time and an instruction count always describe the same work.
//
// A decision is what the dispatcher does per request: class selection when a turn begins, one
// visit, the debit. DecisionLoop makes kBatch decisions at a time on a virtual clock that advances
// between decisions, so buckets refill and classes change; between batches (the upkeep) the
// requests dispatched one batch earlier complete with their costs, charged back to their
// admitting buckets, and are submitted again, so queues stay near their depth.
// ShallowLoop is the other common life of a queue: one request deep, submitted, dispatched and
// completed. Nothing allocates in either once constructed: capacity is reserved up front.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "creditloop/core.hpp"

namespace creditloop::bench {

inline constexpr int kBatch = 1024;
inline constexpr std::size_t kPerCall = 8;

struct Request : RequestHook {
  ParticipantId owner;
};

/// How much credit the fleet has.
///  - scarce: the reference plans' rates with a burst of one credit, and a clock step at which a
///    third to a half of the decisions find a credit (the rest go out unmetered), as a server
///    under overload sees them. The small burst brings every size to that steady state within one
///    round of the fleet: full buckets of the reference bursts took 18 rounds to drain at a
///    million participants.
///  - plentiful: plans whose refill outruns the clock step, so every visit is metered: it refills,
///    debits and re-files a bucket. The most work a decision does.
///  - high_rate: 100,000 credits per second per participant (rate 10,000 per share, 10 shares),
///    each participant visited seconds apart: the refill's arithmetic at realistic high rates
///    over long gaps.
enum class Credit { scarce, plentiful, high_rate };

inline Config plans_for(Credit credit) {
  if (credit == Credit::scarce) {
    Config c = reference_config();
    for (Plan& plan : c.plans) {
      for (auto& terms : plan.terms) {
        if (terms) terms->burst = 1;
      }
    }
    return c;
  }
  Config c;
  c.classes = 2;
  Plan pro{"pro", {}};
  Plan lite{"lite", {}};
  pro.terms[0] = ClassTerms{10'000, 10'000};
  pro.terms[1] = ClassTerms{10'000, 10'000};
  lite.terms[1] = ClassTerms{10'000, 10'000};
  c.plans = {pro, lite};
  return c;
}

/// Registers participant i of a fleet: plans alternate and shares vary (10 for high_rate), so
/// buckets differ in rate and capacity.
inline ParticipantId add_participant(Core& core, std::size_t i, Credit credit) {
  const auto shares = credit == Credit::high_rate ? 10u : static_cast<std::uint32_t>(1 + i % 3);
  return *core.add("p" + std::to_string(i), i % 2 == 0 ? "pro" : "lite", shares, 0);
}

/// `registered` participants of which `waiting_count`, spread evenly over the ring, have queues of
/// at least 8 requests (or `min_depth`): deep enough that a participant visited in several turns
/// of one batch, whose requests come back only at the next upkeep, never runs dry. A queue going
/// empty and back is ShallowLoop's work, not a decision's.
struct Fleet {
  Core core;
  std::vector<ParticipantId> waiting;
  std::vector<Request> requests;
  Nanos now = 0;
  Nanos step = 0;  // the clock's advance per decision

  Fleet(std::size_t registered, std::size_t waiting_count, Credit credit, std::size_t min_depth = 4)
      : core(plans_for(credit)) {
    const std::size_t depth =
        std::max(min_depth, waiting_count >= kBatch ? 8 : (8 * kBatch) / waiting_count);
    core.reserve(registered, 4 * kBatch);
    const std::size_t spacing = registered / waiting_count;
    requests.resize(waiting_count * depth);
    std::size_t next_request = 0;
    for (std::size_t i = 0; i < registered; ++i) {
      const ParticipantId id = add_participant(core, i, credit);
      if (i % spacing == 0 && waiting.size() < waiting_count) {
        waiting.push_back(id);
        for (std::size_t d = 0; d < depth; ++d) {
          Request& r = requests[next_request++];
          r.owner = id;
          (void)core.submit(id, r, 0);
        }
      }
    }
    const auto w = static_cast<double>(waiting_count);
    switch (credit) {
      case Credit::scarce:
        // Mean refill across plans and shares is about 12 credits/s per participant; a third to
        // a half of decisions then find a credit, the rest go out unmetered.
        step = static_cast<Nanos>(4e7 / w);
        break;
      case Credit::plentiful:
        // A participant is visited every `waiting_count` decisions and spends at most 3 credits
        // per request (1 at dispatch, up to 2 of cost); at 10,000 credits/s it refills 4 in that
        // time.
        step = static_cast<Nanos>(4e5 / w);
        break;
      case Credit::high_rate:
        step = static_cast<Nanos>(2e9 / w);  // each participant visited 2 s apart
        break;
    }
    step = std::max<Nanos>(step, 1);
  }
};

/// How the dispatcher asks for decisions: a batch at a time (Core::dispatch, the runtime's way),
/// or one visit per call (begin_turn and visit).
enum class Api { batch, single };

template <Api api>
class DecisionLoop {
 public:
  explicit DecisionLoop(Fleet& fleet)
      : fleet_(fleet), batches_{std::vector<Decision>(kBatch), std::vector<Decision>(kBatch)} {}

  /// kBatch decisions; returns how many were made.
  int decide() {
    Core& core = fleet_.core;
    Nanos now = fleet_.now;
    std::vector<Decision>& batch = batches_[current_];
    int n = 0;
    if constexpr (api == Api::batch) {
      // The clock advances between decisions: a batch of one decision at a time would not
      // batch, so each call covers the decisions of one clock step's worth of arrivals (8), as
      // a dispatcher that reads the clock once per batch would see them.
      while (n < kBatch) {
        const std::size_t got = core.dispatch(
            now, std::span<Decision>(batch).subspan(static_cast<std::size_t>(n), kPerCall));
        if (got == 0) break;
        n += static_cast<int>(got);
        now += fleet_.step * static_cast<Nanos>(got);
      }
    } else {
      while (n < kBatch) {
        if (!core.in_turn() && !core.begin_turn(now)) break;
        if (auto d = core.visit(now)) {
          batch[static_cast<std::size_t>(n++)] = *d;
          now += fleet_.step;
        }
      }
    }
    fleet_.now = now;
    return n;
  }

  /// The upkeep after decide() returned n: the requests dispatched one batch earlier complete
  /// and go back into their queues (a request is the core's until its completion); those just
  /// dispatched wait for the next upkeep, in the batch kept for it (two batches, taken in turn,
  /// so that no dispatch is copied). Counts the batch's dispatches per class into `per_class`.
  /// Costs are in nano-credits, as a runtime's dispatcher completes them: the double is
  /// converted where it enters, on the completing thread.
  void upkeep(int n, std::uint64_t* per_class) {
    Core& core = fleet_.core;
    const std::vector<Decision>& previous = batches_[current_ ^ 1];
    for (std::size_t i = 0; i < previous_count_; ++i) {
      const Decision& d = previous[i];
      (void)core.complete_nano(d.ticket, kCosts[cost_index_], fleet_.now);
      cost_index_ = cost_index_ == 2 ? 0 : cost_index_ + 1;
      auto* r = static_cast<Request*>(d.request);
      (void)core.submit(r->owner, *r, fleet_.now);
    }
    const std::vector<Decision>& current = batches_[current_];
    for (int i = 0; i < n; ++i) ++per_class[current[static_cast<std::size_t>(i)].out];
    previous_count_ = static_cast<std::size_t>(n);
    current_ ^= 1;
  }

 private:
  // 0, 0.5 and 2 credits.
  static constexpr std::int64_t kCosts[3] = {0, kNanoPerCredit / 2, 2 * kNanoPerCredit};
  Fleet& fleet_;
  std::array<std::vector<Decision>, 2> batches_;
  std::size_t current_ = 0;         // the batch decide() fills
  std::size_t previous_count_ = 0;  // dispatches in the other one, completed at the next upkeep
  std::size_t cost_index_ = 0;
};

/// Queues one deep, the common case of many participants with a request now and then (and the
/// runtime's, whose dispatcher moves each submission into the core): per round, kRound requests
/// are submitted to the next kRound participants round robin (each queue goes from empty to one),
/// kRound decisions dispatch them (each queue goes back to empty), and the requests of the
/// previous round complete with costs 0, 0.5 and 2 credits.
class ShallowLoop {
 public:
  static constexpr std::size_t kRound = 64;

  ShallowLoop(std::size_t registered, Credit credit) : core_(plans_for(credit)) {
    core_.reserve(registered, 2 * kRound);
    ids_.reserve(registered);
    for (std::size_t i = 0; i < registered; ++i) ids_.push_back(add_participant(core_, i, credit));
    requests_.resize(2 * kRound);
    previous_.reserve(kRound);
    current_.reserve(kRound);
    // A participant is back every registered / kRound rounds. Scarce: at about 12 credits/s each
    // and one step per request, a credit about one time in five. Plentiful: 10,000 credits/s
    // refill 4 credits in that time.
    const double per_request = credit == Credit::scarce ? 1.7e7 : 4e5;
    step_ = std::max<Nanos>(1, static_cast<Nanos>(per_request / static_cast<double>(registered)));
  }

  /// One round; returns the requests dispatched.
  std::size_t round() {
    for (std::size_t i = 0; i < kRound; ++i) {
      Request& r = requests_[half_ * kRound + i];
      r.owner = ids_[next_];
      next_ = next_ + 1 == ids_.size() ? 0 : next_ + 1;
      (void)core_.submit(r.owner, r, now_);
      now_ += step_;
    }
    while (current_.size() < kRound) {
      if (!core_.in_turn() && !core_.begin_turn(now_)) break;
      if (auto d = core_.visit(now_)) current_.push_back(*d);
    }
    for (const Decision& d : previous_) {
      (void)core_.complete_nano(d.ticket, kCosts[cost_index_], now_);
      cost_index_ = cost_index_ == 2 ? 0 : cost_index_ + 1;
    }
    for (const Decision& d : current_) ++per_class_[d.out];
    const std::size_t handled = current_.size();
    previous_.swap(current_);
    current_.clear();
    half_ ^= 1;
    return handled;
  }

  [[nodiscard]] const Core& core() const noexcept { return core_; }
  [[nodiscard]] std::uint64_t dispatched(ClassId c) const noexcept { return per_class_[c]; }

 private:
  // 0, 0.5 and 2 credits, in nano-credits as a runtime's dispatcher completes them.
  static constexpr std::int64_t kCosts[3] = {0, kNanoPerCredit / 2, 2 * kNanoPerCredit};
  Core core_;
  std::vector<ParticipantId> ids_;
  std::vector<Request> requests_;
  std::vector<Decision> previous_;
  std::vector<Decision> current_;
  std::array<std::uint64_t, kMaxClasses + 1> per_class_{};
  std::size_t cost_index_ = 0;
  std::size_t next_ = 0;
  std::size_t half_ = 0;
  Nanos step_ = 0;
  Nanos now_ = 0;
};

/// Registration into cores on which nothing was reserved: `count` fresh cores (the reference
/// plans), and `per_core` names made up front, so that only the adds are measured. The first add
/// into each core sizes its per-place tables; later adds grow them as they fill.
class FreshCores {
 public:
  FreshCores(std::size_t count, std::size_t per_core) {
    cores_.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      cores_.push_back(std::make_unique<Core>(reference_config()));
    }
    names_.reserve(per_core);
    for (std::size_t i = 0; i < per_core; ++i) names_.push_back("p" + std::to_string(i));
  }

  /// Registers every name into every core, core after core; returns the adds accepted.
  std::size_t add_all() {
    std::size_t added = 0;
    for (const auto& core : cores_) {
      for (std::size_t i = 0; i < names_.size(); ++i) {
        added += core->add(names_[i], i % 2 == 0 ? "pro" : "lite", 1, 0).ok() ? 1 : 0;
      }
    }
    return added;
  }

 private:
  std::vector<std::unique_ptr<Core>> cores_;
  std::vector<std::string> names_;
};

}  // namespace creditloop::bench
