// tests/model/model.hpp: a reference model of the scheduling contract (docs/contract.md §1-5),
// deliberately plain and sharing nothing with the core but the public plain types, so that the
// differential test compares two independent readings of the contract.
//
// Where the contract leaves a choice open, the model makes the core's:
//  - a new participant takes the most recently freed ring place, else a new place at the end;
//  - class c's cursor is the place of the last dispatch of a turn of class c; a turn starts just
//    after it (at place 0 before the first), and visits places in place order once round;
//  - a `now` earlier than the latest seen is the latest; a call counts its `now` as seen only
//    once it gets past its checks (and, for qualifies, only when it reads a bucket);
//  - add reports bad shares before a duplicate name;
//  - a participant registered during a turn is not visited by that turn;
//  - a re-plan that drops a class and a later one that adds it back make a new bucket, so tickets
//    admitted by the old one charge nowhere.
// Why: docs/testing.md#the-reference-model
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "creditloop/error.hpp"
#include "creditloop/plan.hpp"
#include "creditloop/units.hpp"

namespace creditloop::model {

__extension__ typedef __int128 Int128;

/// Deliberate mistakes, so that a test can show the differential harness notices them.
enum class Flaw : std::uint8_t {
  none,
  move_every_cursor,          // a dispatch moves the cursor of every class, not only the turn's
  round_balance_up,           // balances are reported rounded up instead of down
  refill_at_new_shares,       // a re-plan refills up to `now` at the new share count, not the old
  charge_readded_bucket,      // a completion charges a bucket dropped and added back since dispatch
  scale_refill_at_new_terms,  // a scale refills up to `now` at the new fraction, not the old
  withdraw_moves_cursor,      // a withdrawal moves every class's cursor to the withdrawn's place
};

/// A participant: its ring place and a serial number never reused, so a stale id never matches.
struct Pid {
  std::uint32_t place = 0;
  std::uint64_t serial = 0;
  friend bool operator==(const Pid&, const Pid&) = default;
};

using RequestId = std::uint64_t;
using TicketId = std::uint64_t;

struct Decision {
  RequestId request = 0;
  TicketId ticket = 0;
  Pid participant;
  ClassId out = 0;
  ClassId turn = 0;
};

struct Completion {
  Pid participant;
  ClassId bucket = 0;  // k for an unmetered request
  bool charged = false;
  bool registered = false;  // the participant was not removed since the dispatch
};

struct Stats {
  std::array<std::uint64_t, kMaxClasses + 1> dispatched{};
  std::uint64_t completed = 0;
  Int128 cost_charged = 0;    // nano-credits
  Int128 cost_uncharged = 0;  // nano-credits
};

/// `credits` in nano-credits, rounded to the nearest unit; nothing when it is not finite,
/// negative or above `limit`.
[[nodiscard]] std::optional<std::int64_t> nano_of(double credits, double limit);

class Model {
 public:
  /// `config` must be valid (the harness only builds valid ones).
  explicit Model(const Config& config, Flaw flaw = Flaw::none);

  [[nodiscard]] int classes() const { return k_; }
  [[nodiscard]] ClassId unmetered() const { return static_cast<ClassId>(k_); }
  [[nodiscard]] std::optional<PlanId> find_plan(std::string_view name) const;
  [[nodiscard]] bool plan_holds(PlanId plan, ClassId c) const;

  // ---- participants ----
  Result<Pid> add(std::string_view name, std::string_view plan, std::uint32_t shares, Nanos now);
  Result<Pid> add(std::string_view name, PlanId plan, std::uint32_t shares, Nanos now);
  Result<std::vector<RequestId>> remove(Pid p);
  /// Keeps the participant's scale.
  Status replan(Pid p, PlanId plan, std::uint32_t shares, Nanos now);
  /// Rate and burst x shares x millionths / 1e6, each rounded down to a whole nano-credit (per
  /// second); balances refilled at the old terms, then clipped.
  Status scale(Pid p, std::uint32_t millionths, Nanos now);

  [[nodiscard]] bool contains(Pid p) const;
  [[nodiscard]] std::optional<Pid> find(std::string_view name) const;
  [[nodiscard]] std::optional<Pid> at(std::uint32_t place) const;
  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] std::uint32_t ring_size() const { return static_cast<std::uint32_t>(ring_.size()); }
  /// Preconditions for these five: contains(p).
  [[nodiscard]] const std::string& name(Pid p) const;
  [[nodiscard]] PlanId plan(Pid p) const;
  [[nodiscard]] std::uint32_t shares(Pid p) const;
  [[nodiscard]] std::uint32_t scale_of(Pid p) const;
  [[nodiscard]] const Stats& stats(Pid p) const;

  // ---- requests ----
  Status submit(Pid p, RequestId r, Nanos now);
  /// Takes `r` out of whichever queue holds it; no balance or cursor changes. not_queued when no
  /// queue holds it, in_flight when it was dispatched and is not yet completed.
  Status withdraw(RequestId r);
  [[nodiscard]] std::size_t queued(Pid p) const;
  [[nodiscard]] std::size_t waiting() const;
  /// Every queued request, participants in ring order, oldest first; ends any turn.
  std::vector<RequestId> take_all_queued();

  // ---- the loop ----
  std::optional<ClassId> begin_turn(Nanos now);
  std::optional<Decision> visit(Nanos now);
  void end_turn() { turn_.active = false; }
  [[nodiscard]] bool in_turn() const { return turn_.active; }
  [[nodiscard]] std::optional<ClassId> turn_class() const;

  // ---- completions ----
  Result<Completion> complete(TicketId t, double cost, Nanos now);
  Result<Completion> complete_nano(TicketId t, std::int64_t cost_nano, Nanos now);
  [[nodiscard]] std::size_t in_flight() const { return in_flight_; }

  // ---- balances ----
  [[nodiscard]] bool holds(Pid p, ClassId c) const;
  /// Nano-credits, the exact value rounded down.
  Result<Int128> balance(Pid p, ClassId c, Nanos now);
  bool qualifies(Pid p, ClassId c, Nanos now);
  /// The first instant at or after the latest `now` seen at which p's c bucket holds a credit,
  /// or nothing when p does not hold c or that instant lies beyond the clock. Changes nothing.
  [[nodiscard]] std::optional<Nanos> credit_instant(Pid p, ClassId c) const;
  /// The first instant at or after the latest `now` seen at which p's c bucket is full, or
  /// nothing when p does not hold c or that instant lies beyond the clock. Changes nothing.
  [[nodiscard]] std::optional<Nanos> full_instant(Pid p, ClassId c) const;

 private:
  struct Terms {
    bool held = false;
    std::int64_t rate = 0;   // nano-credits per second per share
    std::int64_t burst = 0;  // nano-credits per share
  };
  struct PlanRec {
    std::string name;
    std::array<Terms, kMaxClasses> terms{};
  };
  struct Bucket {
    bool held = false;
    Int128 value = 0;      // 1e-18 credits, exact
    std::uint64_t id = 0;  // which bucket this is, for completions after re-plans
  };
  struct Participant {
    bool live = false;
    std::uint64_t serial = 0;
    std::string name;
    PlanId plan = 0;
    std::uint32_t shares = 0;
    std::uint32_t scale = kWholePlan;  // millionths
    Nanos at = 0;                      // the instant every bucket was last brought to
    std::uint64_t joined_turn = 0;     // the turn during which it registered, or 0
    std::array<Bucket, kMaxClasses> buckets{};
    std::deque<RequestId> queue;
    Stats stats;
  };
  struct TicketRec {
    bool done = false;
    RequestId request = 0;
    Pid participant;
    ClassId bucket = 0;
    std::uint64_t bucket_id = 0;
  };
  struct Turn {
    bool active = false;
    bool wrapped = false;
    ClassId cls = 0;
    std::uint32_t start = 0;
    std::uint32_t end = 0;  // the ring's size when the turn began
    std::uint32_t next = 0;
    std::uint64_t serial = 0;
  };

  Nanos observe(Nanos now);
  Participant* live(Pid p);
  [[nodiscard]] const Participant* live(Pid p) const;
  [[nodiscard]] Int128 rate_units(const Participant& p, ClassId c) const;  // 1e-18 credits / ns
  [[nodiscard]] Int128 cap_units(PlanId plan, std::uint32_t shares, std::uint32_t scale,
                                 ClassId c) const;
  [[nodiscard]] Int128 refilled(const Participant& p, ClassId c, Nanos now) const;
  void bring(Participant& p, Nanos now);
  bool qualifies_at(std::uint32_t place, ClassId c, Nanos now);

  int k_;
  Flaw flaw_;
  std::vector<PlanRec> plans_;
  std::vector<Participant> ring_;           // index = place
  std::vector<std::uint32_t> free_places_;  // a stack: the most recently freed on top
  std::map<std::string, std::uint32_t, std::less<>> names_;  // live participants' places
  std::uint64_t serials_ = 0;
  std::uint64_t bucket_ids_ = 0;
  std::array<std::int64_t, kMaxClasses + 1> cursor_{};  // -1 = no dispatch yet
  Turn turn_;
  std::vector<TicketRec> tickets_;
  std::size_t in_flight_ = 0;
  Nanos latest_ = std::numeric_limits<Nanos>::min();
};

}  // namespace creditloop::model
