// stress/recorder.hpp: the RuntimeObserver of creditloop-stress.
//
// On the dispatcher thread, for every core input, it
//  - checks order at once (check 2): a request reaches the core's queue after the ones its
//    producer submitted to the same participant before it, and leaves it in the order it entered
//    (each request is stamped with its place in the participant's on_submit order);
//  - keeps the ledger (check 3): per participant and class, the dispatches admitted and the costs
//    charged back or charged nowhere, following the core's rules for removed participants and
//    re-planned buckets; per ticket, that it is completed once, with the cost its completer
//    reported;
//  - appends the input to the event log for the replay thread (check 4) until the replay ends:
//    at the replay limit, or when the monitor finds the replay too far behind (cut());
//  - publishes counters for the watchdog (check 6).
// Everything it does is a few stores into memory it owns, so the dispatcher's timing is barely
// changed. After the run (the dispatcher has exited) the main thread reads the ledger.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common.hpp"
#include "event_log.hpp"
#include "options.hpp"

namespace creditloop::stress {

class Recorder final : public creditloop::RuntimeObserver {
 public:
  /// Why the log stopped before the end of the run.
  enum class Cut : int { none, limit, lag, memory };

  struct Account {  // one registration's ledger
    std::uint32_t generation = 0;
    bool live = false;
    std::uint32_t name = 0;
    creditloop::PlanId plan = 0;
    std::uint32_t shares = 0;
    // Bumped when a re-plan drops or adds the class: a new bucket, as the core sees it.
    std::array<std::uint32_t, creditloop::kMaxClasses> incarnation{};
    std::array<std::uint64_t, creditloop::kMaxClasses + 1> dispatched{};
    std::uint64_t completed = 0;
    Balance cost_charged = 0;
    Balance cost_uncharged = 0;
    std::uint64_t entered = 0;  // on_submit count: the last core_seq stamped
    std::uint64_t left = 0;     // dispatches: the last core_seq that left
  };

  Recorder(const creditloop::Config& config, const Options& options, EventLog* log);

  // ---- RuntimeObserver (dispatcher thread) ----
  void on_add(ParticipantId p, std::string_view name, creditloop::PlanId plan, std::uint32_t shares,
              Nanos now) override;
  void on_remove(ParticipantId p) override;
  void on_replan(ParticipantId p, creditloop::PlanId plan, std::uint32_t shares,
                 Nanos now) override;
  void on_scale(ParticipantId p, std::uint32_t millionths, Nanos now) override;
  void on_submit(ParticipantId p, const creditloop::RequestHook& request, Nanos now) override;
  [[nodiscard]] bool follows_batches() const override { return follows_batches_; }
  void on_begin_turn(std::optional<ClassId> pass, Nanos now) override;
  void on_dispatch(std::size_t asked, std::size_t got, Nanos now) override;
  void on_visit(const creditloop::Decision* d, Ticket ticket, Nanos now) override;
  void on_end_turn() override;
  void on_complete(Ticket ticket, std::int64_t cost_nano, Nanos now) override;
  void on_take_all() override;

  // ---- completers (any thread), before they complete a ticket ----
  /// The cost the completion of `t` will carry. Checked by on_complete.
  void expect_cost(Ticket t, std::int64_t cost_nano) noexcept;

  // ---- any thread, while running ----
  [[nodiscard]] std::uint64_t submits() const noexcept { return submits_.load(kRelaxed); }
  [[nodiscard]] std::uint64_t dispatches() const noexcept { return dispatches_.load(kRelaxed); }
  [[nodiscard]] std::uint64_t completions() const noexcept { return completions_.load(kRelaxed); }
  [[nodiscard]] Nanos last_now() const noexcept { return last_now_pub_.load(kRelaxed); }
  /// Whether the log still takes events.
  [[nodiscard]] bool recording() const noexcept { return recording_pub_.load(kRelaxed); }
  /// Ends the log before the next event: the replay then covers a prefix of the run, which is
  /// as valid an input sequence as the whole. The first reason given is kept.
  void cut(Cut why) noexcept {
    int none = 0;
    cut_requested_.compare_exchange_strong(none, static_cast<int>(why), kRelaxed);
  }
  /// A ticket whose completion was already applied, or nothing yet.
  [[nodiscard]] std::optional<Ticket> completed_sample(Rng& rng,
                                                       std::uint32_t issuer) const noexcept;

  // ---- after the run ----
  [[nodiscard]] const std::vector<Account>& accounts() const noexcept { return accounts_; }
  [[nodiscard]] const Account* account(ParticipantId p) const noexcept;
  /// Turns begun on class c; only when following visits (a batch does not report its turns).
  [[nodiscard]] std::uint64_t turns(ClassId c) const noexcept { return turns_[c]; }
  [[nodiscard]] std::uint64_t dispatched_in(ClassId c) const noexcept { return per_class_[c]; }
  [[nodiscard]] std::uint64_t in_flight() const noexcept { return in_flight_; }
  [[nodiscard]] bool truncated() const noexcept { return truncated_; }
  [[nodiscard]] Cut cut_reason() const noexcept { return cut_reason_; }
  /// The dispatcher's clock at the cut.
  [[nodiscard]] Nanos cut_at() const noexcept { return cut_at_; }
  [[nodiscard]] Balance cost_applied() const noexcept { return cost_applied_; }
  /// Completions whose ticket index lay beyond the table of reported costs (none expected: the
  /// indices stay below the slot count).
  [[nodiscard]] std::uint64_t unchecked_costs() const noexcept { return unchecked_costs_; }
  [[nodiscard]] Nanos max_queue_wait() const noexcept { return max_queue_wait_; }

 private:
  static constexpr std::memory_order kRelaxed = std::memory_order_relaxed;
  struct InFlight {
    std::uint64_t generation = 0;
    std::uint32_t place = 0;
    std::uint32_t participant_generation = 0;
    std::uint32_t incarnation = 0;
    ClassId out = 0;
    bool in_flight = false;
  };
  struct Expected {  // written by a completer, read by on_complete after the runtime's hand-off
    std::uint64_t generation = 0;
    std::int64_t cost_nano = 0;
  };

  Account& live_account(ParticipantId p, const char* event);
  void record(const Event& e);
  void stop_recording(Cut why) noexcept;
  void bump(std::atomic<std::uint64_t>& counter) noexcept {
    counter.store(counter.load(kRelaxed) + 1, kRelaxed);  // one writer: no read-modify-write
  }
  [[nodiscard]] bool holds(creditloop::PlanId plan, ClassId c) const noexcept {
    return config_.plans[plan].terms[c].has_value();
  }

  const creditloop::Config& config_;
  const int k_;
  const unsigned producers_;
  EventLog* const log_;  // nullptr: no replay
  const std::uint64_t replay_limit_;
  const bool follows_batches_;

  // Dispatcher only.
  std::vector<Account> accounts_;     // by ring place
  std::vector<std::uint64_t> order_;  // [place * producers + producer]: its last seq entered
  std::vector<InFlight> tickets_;     // by ticket index
  std::array<std::uint64_t, creditloop::kMaxClasses + 1> turns_{};
  std::array<std::uint64_t, creditloop::kMaxClasses + 1> per_class_{};
  std::uint64_t in_flight_ = 0;
  Balance cost_applied_ = 0;
  std::uint64_t unchecked_costs_ = 0;
  Nanos last_now_ = 0;
  Nanos max_queue_wait_ = 0;
  bool recording_;
  bool truncated_ = false;
  Cut cut_reason_ = Cut::none;
  Nanos cut_at_ = 0;
  std::uint64_t recorded_dispatches_ = 0;
  std::uint64_t sample_next_ = 0;

  // Completers write, the dispatcher reads.
  std::size_t expected_size_;
  std::unique_ptr<Expected[]> expected_;

  // Any thread reads.
  std::atomic<std::uint64_t> submits_{0};
  std::atomic<std::uint64_t> dispatches_{0};
  std::atomic<std::uint64_t> completions_{0};
  std::atomic<Nanos> last_now_pub_{0};
  std::atomic<bool> recording_pub_;
  std::atomic<int> cut_requested_{0};
  static constexpr std::size_t kSamples = 256;
  std::array<std::atomic<std::uint64_t>, kSamples> samples_{};
};

}  // namespace creditloop::stress
