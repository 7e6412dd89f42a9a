// The loop, live: what the page at /ui draws, and the Server-Sent Events stream it draws from.
//
// Threads:
//  - record(): on the threads that finish requests (I/O and workers, never the runtime's
//    dispatcher), under a mutex held for one push_back.
//  - a sampler of its own: every kTick, the runtime's snapshots become one event, encoded once
//    for every stream; the events of the last kWindow are kept (at most kMaxRequests requests).
//  - streams: on their connection's thread; at most kMaxStreams, each with at most
//    kMaxBacklogBytes unsent (a client that does not keep up is dropped).
// Why: docs/server.md#the-live-picture-ui
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <nlohmann/json_fwd.hpp>

#include "scheduler.hpp"
#include "session.hpp"

namespace creditloop::server {

class Server;
class LiveStream;

class LiveView {
 public:
  static constexpr std::chrono::seconds kWindow{60};
  static constexpr std::chrono::milliseconds kTick{250};
  /// Most requests the kept events hold: above that the oldest events go, and the window a new
  /// page gets is shorter than a minute. One tick keeps at most this many (the rest are counted
  /// as dropped).
  static constexpr std::size_t kMaxRequests = 100'000;
  static constexpr std::size_t kMaxStreams = 8;
  /// Most bytes the kept events hold (about 60 a request, 150 a tenant active in a tick): above
  /// that too the oldest go.
  static constexpr std::size_t kMaxKeptBytes = 12 * 1024 * 1024;
  /// Most bytes of events queued for one stream before it is dropped: above the whole window's
  /// replay (kMaxKeptBytes), so that only a client that stops reading is dropped.
  static constexpr std::size_t kMaxBacklogBytes = 16 * 1024 * 1024;

  /// Does not start sampling: start() does.
  explicit LiveView(Server& server);
  ~LiveView();
  LiveView(const LiveView&) = delete;
  LiveView& operator=(const LiveView&) = delete;

  /// Starts the sampler thread. Call once.
  void start();
  /// Stops the sampler thread and closes every stream. Idempotent; call before the runtime stops
  /// being usable.
  void stop();

  /// One answered request. Any thread but the dispatcher's; takes the mutex for one push_back
  /// (which allocates only when the tick's buffer grows).
  void record(const Pending& p, Clock::time_point finished, double cost);

  /// The page, self-contained: the simulator's picture, told to read /ui/events.
  [[nodiscard]] static std::string page();

  /// Takes over an admin connection whose request asked for /ui/events (authorised by the caller):
  /// answers the stream's header, the window so far, then each tick; or 503 when kMaxStreams
  /// stream already. Any thread.
  void attach(boost::asio::ip::tcp::socket socket, const Request& request);

 private:
  struct Done {
    std::shared_ptr<Tenant> tenant;
    std::int64_t arrived = 0;  // microseconds since origin_
    std::int64_t started = 0;
    std::int64_t finished = 0;
    ClassId cls = 0;
    double cost = 0;
  };
  struct Kept {
    std::int64_t at = 0;  // microseconds since origin_
    std::size_t requests = 0;
    std::shared_ptr<const std::string> event;
  };

  void sample_loop();
  [[nodiscard]] std::shared_ptr<const std::string> tick_event(std::int64_t now,
                                                              const std::vector<Done>& done,
                                                              std::uint64_t dropped);
  [[nodiscard]] std::string hello_event() const;
  // The turns each class began since the last tick (and the count for the next).
  [[nodiscard]] nlohmann::json passes_since_last(const RuntimeSnapshot& loop, int k);
  // Requests by tenant, in columns: arrival, start, finish (microseconds), class, cost.
  [[nodiscard]] static nlohmann::json requests_by_tenant(const std::vector<Done>& done);
  [[nodiscard]] std::int64_t micros(Clock::time_point t) const;

  Server& server_;
  const Clock::time_point origin_;

  mutable std::mutex mutex_;  // guards what follows, up to the sampler's own state
  std::vector<Done> pending_;
  std::uint64_t dropped_ = 0;
  std::deque<Kept> kept_;
  std::size_t kept_requests_ = 0;
  std::size_t kept_bytes_ = 0;
  std::vector<std::shared_ptr<LiveStream>> streams_;
  bool stopping_ = false;
  std::condition_variable wake_;

  // The sampler thread's alone: the counters at the last sample, for the differences.
  std::map<std::string, std::array<std::uint64_t, kMaxClasses + 1>, std::less<>> last_dispatched_;
  std::array<std::uint64_t, kMaxClasses + 1> last_passes_{};
  std::thread sampler_;
};

/// Whether an admin request asks for the event stream and may have it (its Host, the admin key,
/// GET).
[[nodiscard]] bool wants_live_stream(const Server& server, const Request& request);

}  // namespace creditloop::server
