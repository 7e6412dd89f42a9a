// stress/run.hpp: the state one stress run shares between its threads, and the threads' bodies
// (workload.cpp, churn.cpp, watch.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "common.hpp"
#include "event_log.hpp"
#include "options.hpp"
#include "recorder.hpp"
#include "replay.hpp"

namespace creditloop::stress {

/// One producer: its requests, and the stack through which others hand them back.
struct Producer {
  enum State : int { running, out_of_requests, done };

  explicit Producer(std::uint32_t pool) : requests(new Req[pool]), size(pool) {
    free.reserve(pool);
  }

  std::unique_ptr<Req[]> requests;
  std::uint32_t size;
  std::vector<Req*> free;  // the producer's own
  Req wake;                // pushed by the main thread at the end: not a request

  alignas(64) std::atomic<Req*> returned{nullptr};
  alignas(64) std::atomic<std::uint64_t> accepted{0};  // submits that returned ok
  std::atomic<int> state{running};

  // The producer's own counters, read after it is joined.
  std::uint64_t refused_unknown = 0;   // unknown_participant
  std::uint64_t refused_removed = 0;   // of those, to an id whose removal had returned
  std::uint64_t refused_shutdown = 0;  // shut_down
  std::uint64_t bursts = 0;
};

/// Dispatches on their way from the sink (the dispatcher thread) to one completer thread.
/// Single producer, single consumer; never fuller than the slot count, since that many
/// requests at most are in flight.
class SinkRing {
 public:
  explicit SinkRing(std::uint32_t slots) {
    std::uint32_t cap = 2;
    while (cap < slots + 2) cap *= 2;
    items_.reset(new creditloop::Decision[cap]);
    mask_ = cap - 1;
  }
  /// The sink's side. False when full.
  bool push(const creditloop::Decision& d) noexcept {
    const std::uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) > mask_) return false;
    items_[t & mask_] = d;
    tail_.store(t + 1, std::memory_order_release);  // publishes the item
    tail_.notify_one();
    return true;
  }
  bool try_pop(creditloop::Decision& d) noexcept {
    const std::uint32_t h = head_.load(std::memory_order_relaxed);
    if (h == tail_.load(std::memory_order_acquire)) return false;
    d = items_[h & mask_];
    head_.store(h + 1, std::memory_order_release);  // the cell may be reused
    return true;
  }
  void wait_nonempty() noexcept {
    const std::uint32_t h = head_.load(std::memory_order_relaxed);
    tail_.wait(h, std::memory_order_acquire);
  }
  [[nodiscard]] std::uint32_t depth() const noexcept {
    return tail_.load(std::memory_order_relaxed) - head_.load(std::memory_order_relaxed);
  }

 private:
  std::unique_ptr<creditloop::Decision[]> items_;
  std::uint32_t mask_ = 0;
  alignas(64) std::atomic<std::uint32_t> head_{0};
  alignas(64) std::atomic<std::uint32_t> tail_{0};
};

struct Run {
  explicit Run(Options options);

  Options o;
  creditloop::Config config;
  std::unique_ptr<EventLog> log;  // nullptr without replay
  Recorder recorder;
  HandBacks handbacks;
  std::unique_ptr<Replayer> replayer;
  std::unique_ptr<std::atomic<std::uint64_t>[]> directory;  // by name: directory::pack()
  std::vector<std::unique_ptr<Producer>> producers;
  std::vector<std::unique_ptr<SinkRing>> rings;
  std::uint32_t next_ring = 0;  // the sink's (dispatcher thread)
  std::unique_ptr<creditloop::Runtime> rt;
  std::atomic<Nanos> clock_last{0};  // the runtime's latest reading of the clock

  std::latch gate{1};
  StopSignal stop;  // paced threads: churn, pranks, monitor, watchdog
  std::atomic<bool> producers_stop{false};
  std::atomic<bool> shutting_down{false};  // set before shutdown() is called

  // Shared counters (relaxed: read for the watchdog, and after the threads are joined).
  alignas(64) std::atomic<std::uint64_t> dispatched_seen{0};  // by handlers and completers
  alignas(64) std::atomic<std::uint64_t> cost_reported{0};    // nano-credits, modulo 2^64
  std::atomic<std::uint64_t> handler_refusals{0};  // handler costs the runtime must refuse
  std::atomic<std::uint64_t> handler_throws{0};    // handlers that threw, as asked
  std::atomic<std::uint64_t> throws_reported{0};   // on_error's reports of them
  std::atomic<std::uint64_t> handed_back_remove{0};
  std::atomic<std::uint64_t> handed_back_shutdown{0};
  std::atomic<std::uint64_t> completer_calls{0};   // complete / complete_nano / batch adds
  std::atomic<std::uint64_t> refusals_checked{0};  // refused completions, as required
  std::atomic<std::uint64_t> churn_ops{0};
  std::atomic<std::uint64_t> churn_refusals{0};  // lifecycle calls refused, as required
  std::atomic<std::uint64_t> removes{0};
  std::atomic<std::uint64_t> adds{0};
  std::atomic<std::uint64_t> replans{0};
  std::atomic<std::uint64_t> scales{0};
  std::atomic<std::uint64_t> snapshots{0};
};

// Thread bodies.
void producer_main(Run& run, std::uint32_t index);
void completer_main(Run& run, std::uint32_t index);
void churn_main(Run& run);
void pranks_main(Run& run);
void monitor_main(Run& run);
void watchdog_main(Run& run);

// What handlers and the sink do (installed in RuntimeOptions).
double handle(Run& run, creditloop::RequestHook& request, ParticipantId p);
void sink(Run& run, const creditloop::Decision& d);

/// Returns a request to its producer's pool. Any thread.
void hand_back(Run& run, Req& r) noexcept;

/// Checks and records the hand-back of one list (by remove() of `from`, or by shutdown() when
/// `from` is empty). Returns the requests' ids in the list's order.
std::vector<std::uint64_t> take_handed_back(Run& run, creditloop::RequestList list,
                                            std::optional<ParticipantId> from,
                                            const std::string& subject, std::size_t& queued);

}  // namespace creditloop::stress
