#include "scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <limits>
#include <stdexcept>
#include <thread>

#include <creditloop/capture.hpp>

namespace creditloop::server {
namespace {

std::vector<Pending*> to_vector(RequestList list) {
  std::vector<Pending*> out;
  out.reserve(list.size());
  while (RequestHook* r = list.pop_front()) out.push_back(static_cast<Pending*>(r));
  return out;
}

class CreditloopScheduler final : public Scheduler {
 public:
  CreditloopScheduler(const ServerConfig& config, Start start) : start_(std::move(start)) {
    RuntimeOptions o;
    o.config = config.plans;
    o.slots = config.slots;
    o.learned_room = config.learned_room;
    o.thread_name = "cl-dispatch";
    // The runtime spins before it sleeps only when a CPU is spare beyond its own threads; the
    // server's I/O threads (and work mode's workers) are busy on the same CPUs, and a spin that
    // takes one from them costs more requests than the wake-up it saves.
    const unsigned busy =
        config.io_threads + 1 + (config.mode == ServeMode::work ? config.workers : 0);
    if (std::thread::hardware_concurrency() <= busy) o.spin = std::chrono::nanoseconds(0);
    o.expected_participants = std::max<std::size_t>(64, config.tenants.size() * 2);
    o.expected_in_flight = config.learned_room ? config.learned_room->most : config.slots;
    o.sink = [this](const Decision& d) {
      auto& p = static_cast<Pending&>(*d.request);
      p.ticket = d.ticket;
      p.out = d.out;
      p.started = Clock::now();
      p.tenant->queued.fetch_sub(1, std::memory_order_relaxed);  // a gauge: no ordering needed
      start_(p);
    };
    o.on_error = [](const CallbackError& e) {
      try {
        if (e.error) std::rethrow_exception(e.error);
      } catch (const std::exception& x) {
        std::fprintf(stderr, "creditloop-server: starting a request failed: %s\n", x.what());
      } catch (...) {
        std::fprintf(stderr, "creditloop-server: starting a request failed\n");
      }
    };
    if (config.capture) {
      CaptureOptions c;
      c.files =
          CaptureFiles{config.capture->path, config.capture->max_bytes, config.capture->files};
      c.setup = capture_setup(o);
      c.expected_in_flight = o.expected_in_flight;
      c.expected_participants = o.expected_participants;
      c.on_error = [](const std::string& message) {
        std::fprintf(stderr, "creditloop-server: %s (later errors are only counted)\n",
                     message.c_str());
      };
      capture_ = std::make_unique<CaptureObserver>(std::move(c));
      o.observer = capture_.get();
    }
    runtime_ = std::make_unique<Runtime>(std::move(o));
  }

  Result<ParticipantId> add(const TenantConfig& t) override {
    return runtime_->add(t.name, t.plan, t.shares);
  }

  std::vector<Pending*> remove(Tenant& t) override {
    Result<RequestList> r = runtime_->remove(t.participant);
    if (!r) return {};
    std::vector<Pending*> out = to_vector(std::move(r.value()));
    t.queued.fetch_sub(static_cast<std::int64_t>(out.size()), std::memory_order_relaxed);
    return out;
  }

  Status replan(Tenant& t, const TenantConfig& next) override {
    return runtime_->replan(t.participant, next.plan, next.shares);
  }

  Status submit(Tenant& t, Pending& p) override {
    t.queued.fetch_add(1, std::memory_order_relaxed);  // before the sink may take it off again
    const Status s = runtime_->submit(t.participant, p);
    if (!s) t.queued.fetch_sub(1, std::memory_order_relaxed);
    return s;
  }

  bool withdraw(Tenant& t, Pending& p) override {
    if (!runtime_->withdraw(t.participant, p)) return false;
    t.queued.fetch_sub(1, std::memory_order_relaxed);  // a gauge: no ordering needed
    return true;
  }

  void complete(Pending& p, double cost) override {
    const Status s = runtime_->complete(p.ticket, std::clamp(cost, 0.0, kMaxCost));
    if (!s) {
      std::fprintf(stderr, "creditloop-server: completion refused: %s\n",
                   describe(s.error()).data());
    }
  }

  std::optional<std::chrono::nanoseconds> next_credit(Tenant& t) override {
    const std::optional<ParticipantSnapshot> s = runtime_->snapshot(t.participant);
    if (!s) return std::nullopt;
    std::optional<Nanos> soonest;
    for (std::size_t c = 0; c < kMaxClasses; ++c) {
      if (!s->balance[c]) continue;
      if (!s->next_credit[c]) return std::nullopt;  // a credit is there now
      soonest = soonest ? std::min(*soonest, *s->next_credit[c]) : *s->next_credit[c];
    }
    if (!soonest) return std::nullopt;
    const Nanos now = runtime_->snapshot().at;
    return std::chrono::nanoseconds(std::max<Nanos>(0, *soonest - now));
  }

  std::vector<Pending*> stop(std::chrono::milliseconds deadline) override {
    // The hand-back itself is waited for, however short `deadline` (0 for "the queue at once"):
    // the sink never holds the dispatcher, so its answer comes in moments. Only what is in
    // flight is waited for up to the deadline, by a second call.
    ShutdownReport r =
        runtime_->shutdown(ShutdownMode::hand_back, std::nullopt, ShutdownWait::answered);
    RequestList back = std::move(r.handed_back);
    if (!r.finished && deadline.count() > 0) {
      r = runtime_->shutdown(ShutdownMode::hand_back, deadline);
      back.splice_back(std::move(r.handed_back));
    }
    return to_vector(std::move(back));
  }

  void abort() override {
    // Answered first, so that nothing more goes out and every ticket in flight is listed.
    ShutdownReport r = runtime_->shutdown(ShutdownMode::hand_back, std::chrono::seconds(1),
                                          ShutdownWait::answered);
    for (const Ticket& t : r.in_flight) (void)runtime_->complete(t, 0);
    r = runtime_->shutdown(ShutdownMode::hand_back, std::chrono::seconds(1));
    if (r.finished && capture_) capture_->close();
  }

  Runtime* runtime() noexcept override { return runtime_.get(); }
  [[nodiscard]] std::optional<CaptureStats> capture_stats() const override {
    if (!capture_) return std::nullopt;
    return capture_->stats();
  }
  [[nodiscard]] const char* name() const noexcept override { return "creditloop"; }

 private:
  Start start_;
  // Before the runtime: it must outlive it, and its destructor writes the capture's last lines.
  std::unique_ptr<CaptureObserver> capture_;
  std::unique_ptr<Runtime> runtime_;
};

// The baseline: one queue in arrival order, the same room. A mutex is what a server without a
// scheduler would use; it is held only to link or unlink. It stands for a server without
// creditloop, whose room is a number an operator sets: a learned room is refused.
class FifoScheduler final : public Scheduler {
 public:
  FifoScheduler(const ServerConfig& config, Start start)
      : start_(std::move(start)),
        slots_(config.slots),
        unmetered_(static_cast<ClassId>(config.plans.classes)) {
    if (config.learned_room) {
      throw std::invalid_argument(
          R"(slots: "auto" needs creditloop's scheduler; --fifo takes a number of slots)");
    }
  }

  Result<ParticipantId> add(const TenantConfig& /*t*/) override { return ParticipantId{}; }

  std::vector<Pending*> remove(Tenant& t) override {
    std::vector<Pending*> out;
    std::lock_guard lock(mutex_);
    RequestList kept;
    while (RequestHook* r = queue_.pop_front()) {
      auto* p = static_cast<Pending*>(r);
      if (p->tenant.get() == &t) {
        out.push_back(p);
      } else {
        kept.push_back(*p);
      }
    }
    queue_ = std::move(kept);
    t.queued.fetch_sub(static_cast<std::int64_t>(out.size()), std::memory_order_relaxed);
    return out;
  }

  Status replan(Tenant& /*t*/, const TenantConfig& /*next*/) override { return {}; }

  Status submit(Tenant& t, Pending& p) override {
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return Errc::shut_down;
      if (t.removed.load(std::memory_order_relaxed)) return Errc::unknown_participant;
      if (in_flight_ >= slots_) {
        t.queued.fetch_add(1, std::memory_order_relaxed);
        queue_.push_back(p);
        return {};
      }
      ++in_flight_;
    }
    begin(p);
    return {};
  }

  bool withdraw(Tenant& t, Pending& p) override {
    std::lock_guard lock(mutex_);
    RequestList kept;
    bool found = false;
    while (RequestHook* r = queue_.pop_front()) {
      if (r == &p) {
        found = true;
      } else {
        kept.push_back(*r);
      }
    }
    queue_ = std::move(kept);
    if (found) t.queued.fetch_sub(1, std::memory_order_relaxed);
    return found;
  }

  void complete(Pending& /*p*/, double /*cost*/) override {
    Pending* next = nullptr;
    {
      std::lock_guard lock(mutex_);
      next = static_cast<Pending*>(queue_.pop_front());
      if (next == nullptr) {
        --in_flight_;
        if (in_flight_ == 0) idle_.notify_all();
      }
    }
    if (next != nullptr) {
      next->tenant->queued.fetch_sub(1, std::memory_order_relaxed);
      begin(*next);
    }
  }

  std::optional<std::chrono::nanoseconds> next_credit(Tenant& /*t*/) override {
    return std::nullopt;
  }

  std::vector<Pending*> stop(std::chrono::milliseconds deadline) override {
    std::unique_lock lock(mutex_);
    stopped_ = true;
    std::vector<Pending*> out;
    while (RequestHook* r = queue_.pop_front()) {
      auto* p = static_cast<Pending*>(r);
      p->tenant->queued.fetch_sub(1, std::memory_order_relaxed);
      out.push_back(p);
    }
    idle_.wait_for(lock, deadline, [&] { return in_flight_ == 0; });
    return out;
  }

  [[nodiscard]] const char* name() const noexcept override { return "fifo"; }

 private:
  void begin(Pending& p) {
    p.out = unmetered_;  // nobody's credit is looked at
    p.fifo = true;
    p.started = Clock::now();
    start_(p);
  }

  Start start_;
  const std::uint32_t slots_;
  const ClassId unmetered_;
  std::mutex mutex_;
  std::condition_variable idle_;
  RequestList queue_;
  std::uint32_t in_flight_ = 0;
  bool stopped_ = false;
};

}  // namespace

std::int64_t clamp_to_nano_credits(double credits) noexcept {
  if (std::isnan(credits)) return 0;
  return creditloop::to_nano_credits(std::clamp(credits, 0.0, kMaxCost), kMaxCost).value_or(0);
}

std::unique_ptr<Scheduler> make_creditloop_scheduler(const ServerConfig& config,
                                                     Scheduler::Start start) {
  return std::make_unique<CreditloopScheduler>(config, std::move(start));
}

std::unique_ptr<Scheduler> make_fifo_scheduler(const ServerConfig& config, Scheduler::Start start) {
  return std::make_unique<FifoScheduler>(config, std::move(start));
}

}  // namespace creditloop::server
