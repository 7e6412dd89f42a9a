// stress/replay.hpp: the observer's events through the reference model (checks 4 and 5).
//
//  - Classes (4): each recorded core input goes to creditloop::model::Model with the same `now`,
//    which must take the same decisions; after the run, balances and statistics must equal the
//    runtime's snapshot to the nano-credit.
//  - Bounded wait (5): from the instant C a queued P1 holder's P1 bucket holds a credit, its next
//    dispatch comes within 2 x (places in the ring) dispatches and within --wait-slack-ms.
//  - The model keeps every ticket it issued, so the replay stops at --replay-limit dispatches.
// Why: docs/testing.md#the-replay
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "common.hpp"
#include "event_log.hpp"
#include "model/model.hpp"
#include "options.hpp"

namespace creditloop::stress {

/// Requests handed back, as the runtime returned them and as the model says, matched by key
/// (the participant for remove(), kShutdownKey for shutdown) whichever side arrives first.
class HandBacks {
 public:
  static constexpr std::uint64_t kShutdownKey = ~std::uint64_t{0};
  static std::uint64_t key(ParticipantId p) noexcept {
    return (std::uint64_t{p.place} << 32) | p.generation;
  }
  /// `queued` requests at the front came from the core's queue; the rest from the inbox, which
  /// the model never saw.
  void real(std::uint64_t key, std::vector<std::uint64_t> ids, std::size_t queued,
            std::string subject);
  void model(std::uint64_t key, std::vector<std::uint64_t> ids);
  /// Lists still unmatched: the model's side must be empty; the runtime's too when the replay
  /// saw the whole run.
  void check_drained(bool whole_run);
  [[nodiscard]] std::uint64_t matched() const noexcept { return matched_; }

 private:
  struct Entry {
    std::optional<std::vector<std::uint64_t>> real, model;
    std::size_t queued = 0;
    std::string subject;
  };
  void match(std::uint64_t key, Entry& e);
  std::mutex mutex_;
  std::map<std::uint64_t, Entry> entries_;
  std::uint64_t matched_ = 0;
};

class Replayer {
 public:
  Replayer(const creditloop::Config& config, const Options& options, HandBacks& handbacks);

  /// The replay thread's body: returns when the log is finished and read, or abandoned.
  void run(EventLog& log);
  /// Waits up to `timeout` for run() to return; false if it has not.
  bool wait_done(std::chrono::nanoseconds timeout);
  /// Makes run() return before its next event: what is left is not replayed.
  void abandon() noexcept { abandoned_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] bool abandoned() const noexcept {
    return abandoned_.load(std::memory_order_relaxed);
  }

  [[nodiscard]] creditloop::model::Model& model() noexcept { return model_; }
  /// The model's participant for a runtime id, if the replay saw it registered.
  [[nodiscard]] std::optional<creditloop::model::Pid> pid_of(ParticipantId p) const noexcept;

  struct Summary {
    std::uint64_t events = 0;
    std::uint64_t turns = 0;
    std::array<std::uint64_t, creditloop::kMaxClasses + 1> turns_in{};  // by class
    std::uint64_t dispatches = 0;
    std::uint64_t out_above_turn = 0;  // a credit in a higher class found during the turn
    std::uint64_t completions = 0;
    std::uint64_t charged = 0;
    std::uint64_t waits_checked = 0;
    Nanos max_wait_after_credit = 0;
    std::uint64_t max_dispatches_after_credit = 0;
    std::uint32_t ring = 0;
  };
  [[nodiscard]] const Summary& summary() const noexcept { return summary_; }
  /// Any thread: events replayed so far (a gauge for the monitor).
  [[nodiscard]] std::uint64_t replayed() const noexcept {
    return replayed_.load(std::memory_order_relaxed);
  }

 private:
  struct Place {
    std::uint32_t generation = 0;
    bool live = false;
    std::uint32_t name = 0;
    creditloop::model::Pid pid;
    // The bounded-wait watch: active while it holds P1 and has a request queued.
    bool watching = false;
    bool credit_known = false;
    bool marked = false;
    Nanos credit_at = 0;
    std::uint64_t mark = 0;  // dispatches replayed before the first event at or after credit_at
    std::uint32_t version = 0;
  };
  struct Flight {
    std::uint32_t generation = 0;
    creditloop::model::TicketId id = 0;
    bool live = false;
  };
  struct Due {
    Nanos at;
    std::uint32_t place;
    std::uint32_t version;
    bool operator>(const Due& o) const noexcept { return at > o.at; }
  };

  void apply(const Event& e);
  // For every watched participant whose credit instant has come, records how many dispatches
  // had been made before it.
  void mark_due_credits();
  // One per event kind: each replays its event on the model and diverges where they differ.
  void apply_add(const Event& e);
  void apply_remove(const Event& e);
  // A re-plan or a scale: the two differ only in the model's call.
  void apply_plan_change(const Event& e);
  void apply_submit(const Event& e);
  void apply_begin_turn(const Event& e);
  void apply_batch(const Event& e);
  void apply_visit(const Event& e);
  void apply_visit_none(const Event& e);
  void apply_complete(const Event& e);
  void apply_take_all();
  // The model's begin_turn, counted; certain (and cheap) when nothing is queued.
  std::optional<ClassId> begin_model_turn(Nanos now);
  // The model's next dispatch by the loop Core::dispatch() runs, for a visit of a batch.
  std::optional<creditloop::model::Decision> visit_in_batch(const Event& e);
  // After a batch's last dispatch: one that stopped short must leave the model nothing to do.
  void end_batch(const Event& e);
  Place& place(const Event& e, const char* what);
  [[noreturn]] void diverge(const Event& e, const std::string& what);
  void watch(std::uint32_t place, Nanos now);
  void update_credit(std::uint32_t place, Nanos now);
  // After a re-plan or a scale: its P1 credit instant moved, or went beyond reach (watching
  // stops until it comes back).
  void rewatch(Place& p, const Event& e);
  void end_wait(std::uint32_t place, Nanos now);

  const Nanos slack_ns_;
  HandBacks& handbacks_;
  creditloop::model::Model model_;
  std::vector<Place> places_;
  std::vector<Flight> flights_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  Nanos now_ = 0;
  std::uint64_t queued_ = 0;      // requests the model holds queued, all participants
  std::uint64_t batch_left_ = 0;  // dispatches of the batch in progress not yet replayed
  bool batch_short_ = false;      // it found every queue empty before its span filled
  Summary summary_;
  std::atomic<std::uint64_t> replayed_{0};  // summary_.events, published
  std::atomic<bool> abandoned_{false};
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
};

}  // namespace creditloop::stress
