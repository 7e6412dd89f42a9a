// Who goes to the server next: creditloop's runtime, or (for comparison) one FIFO queue.
//
// The server hands every authenticated request to a Scheduler and is told, on some thread, when
// the request may start; it reports the request's cost when it has finished. The FIFO scheduler
// is the same pipeline with the decision taken out: the server's cost of scheduling is the
// difference between the two, measured under the same load (tools/loadtest).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <creditloop/capture.hpp>
#include <creditloop/runtime.hpp>

#include "config.hpp"

namespace prometheus {
class Histogram;
}

namespace creditloop::server {

using Clock = std::chrono::steady_clock;

/// A tenant as long as it is configured, across reloads: its identity and what is counted for its
/// metrics. What a reload may change (plan, shares, key, queue limit) lives in the Directory.
struct Tenant {
  std::string name;
  ParticipantId participant;  // the runtime's (creditloop scheduler only)
  std::atomic<bool> removed{false};
  /// Requests accepted and not yet started (the queue limit's measure).
  std::atomic<std::int64_t> queued{0};
  /// Of those, the ones whose client left and whose withdrawal is under way: they count in no
  /// limit.
  std::atomic<std::int64_t> leaving{0};
  /// When the tenant's next credit lands (Clock's nanoseconds; 0: one is there, or unknown), as
  /// last looked up off the I/O threads: a refusal's Retry-After reads it without a round trip
  /// to the dispatcher (Server::retry_after_for). Relaxed: a hint, read and written alone.
  std::atomic<std::int64_t> next_credit_at_ns{0};
  /// A look-up is under way; at most one per tenant is.
  std::atomic<bool> next_credit_looking{false};
  /// Responses served, per class the request went out under (index k, unmetered, holds every
  /// request in FIFO mode).
  std::array<std::atomic<std::uint64_t>, kMaxClasses + 1> served{};
  std::atomic<std::uint64_t> cost_charged_nano{0};
  /// Seconds from arrival to start. prometheus::Histogram is internally locked.
  std::shared_ptr<prometheus::Histogram> wait_seconds;
};

/// One request between its arrival and its response. The scheduler links it through its hook;
/// the server owns it.
struct Pending : RequestHook {
  std::shared_ptr<Tenant> tenant;
  Clock::time_point arrived;
  Clock::time_point started;
  Ticket ticket;
  /// The class it went out under; the unmetered class k in FIFO mode.
  ClassId out = 0;
  bool fifo = false;
  virtual ~Pending() = default;
};

class Scheduler {
 public:
  /// Called once per request when it may start: on the dispatcher thread (creditloop) or the
  /// submitting or completing thread (FIFO). Must not block.
  using Start = std::function<void(Pending&)>;
  virtual ~Scheduler() = default;

  virtual Result<ParticipantId> add(const TenantConfig& t) = 0;
  /// Requests `t` had queued, oldest first: theirs to answer.
  virtual std::vector<Pending*> remove(Tenant& t) = 0;
  virtual Status replan(Tenant& t, const TenantConfig& next) = 0;

  /// Errors: unknown_participant (the tenant was removed), shut_down.
  virtual Status submit(Tenant& t, Pending& p) = 0;
  /// Withdraws `p`, queued for `t` and not yet started: it takes no credit and is the caller's
  /// again. False when it was not queued any more (started, or handed back). May block for a
  /// round trip to the dispatcher: never on an I/O thread.
  virtual bool withdraw(Tenant& t, Pending& p) = 0;
  /// Reports the cost in credits of a started request. Afterwards `p` is the server's alone.
  virtual void complete(Pending& p, double cost) = 0;

  /// When `t`'s next credit of any class it holds lands, from now; nothing if one is there now
  /// or none will come (FIFO).
  virtual std::optional<std::chrono::nanoseconds> next_credit(Tenant& t) = 0;

  /// Stops accepting, hands back what is queued, and waits up to `deadline` for the requests in
  /// flight to complete. Returns the handed-back requests.
  virtual std::vector<Pending*> stop(std::chrono::milliseconds deadline) = 0;
  /// After stop(): settles whatever is still in flight at no cost, so that the runtime's threads
  /// end and the capture's last lines are written. For an exit that cannot wait any longer.
  virtual void abort() {}

  /// The runtime, for metrics and snapshots; null in FIFO mode.
  virtual Runtime* runtime() noexcept { return nullptr; }
  /// How the capture is going; nothing without one (or in FIFO mode). Any thread.
  [[nodiscard]] virtual std::optional<CaptureStats> capture_stats() const { return std::nullopt; }
  [[nodiscard]] virtual const char* name() const noexcept = 0;
};

[[nodiscard]] std::unique_ptr<Scheduler> make_creditloop_scheduler(const ServerConfig& config,
                                                                   Scheduler::Start start);
[[nodiscard]] std::unique_ptr<Scheduler> make_fifo_scheduler(const ServerConfig& config,
                                                             Scheduler::Start start);

/// Credits, clamped to what the runtime takes (0 to kMaxCost; not a number counts as 0), as
/// nano-credits for the server's counters. creditloop::to_nano_credits refuses what this clamps.
[[nodiscard]] std::int64_t clamp_to_nano_credits(double credits) noexcept;

}  // namespace creditloop::server
