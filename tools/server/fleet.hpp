// Fleet mode: each tenant's plan holds across every creditloop-server sharing one Redis.
//
// Once per epoch a thread of its own reports each active tenant's demand (requests dispatched in
// the last epoch plus requests queued now) to Redis in one pipelined round trip, and scales the
// tenant here to the fraction Redis's function answers (docs/fleet.md). Nothing on the request
// path waits for Redis: when it is slow or gone, the last fractions hold for a grace period, then
// every tenant falls back to 1/n of its plan, and the server keeps serving throughout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct redisReply;  // hiredis's: only fleet.cpp reads one

#include <creditloop/runtime.hpp>
#include <nlohmann/json_fwd.hpp>

#include "config.hpp"

namespace prometheus {
class Histogram;
struct MetricFamily;
}  // namespace prometheus

namespace creditloop::server {

enum class FleetState : std::uint8_t {
  connected,  // the last round trip was answered
  grace,      // it failed: the last fractions hold until the grace period is over
  fallback,   // every tenant at 1/n of its plan until Redis answers again
};

[[nodiscard]] const char* state_name(FleetState s) noexcept;

/// One tenant as this server last saw it in the fleet.
struct FleetTenantView {
  std::uint32_t fraction = kWholePlan;  // millionths of the plan, in force here
  std::uint64_t demand = 0;             // this server's last report
  std::uint64_t fleet_demand = 0;       // D: every live entry's demand, as Redis last answered
  std::uint32_t live_entries = 0;       // servers with a live entry for the tenant
  bool reported = false;                // whether the last epoch reported it
};

struct FleetView {
  std::string server_id;
  std::string redis;
  FleetState state = FleetState::connected;
  std::uint32_t live_servers = 1;
  std::chrono::milliseconds epoch{0};
  std::uint64_t epochs = 0;  // round trips attempted
  /// Failures by kind: connect, timeout, connection, reply, function_missing, duplicate_id.
  std::map<std::string, std::uint64_t> errors;
  std::map<std::string, FleetTenantView> tenants;
};

class Fleet {
 public:
  struct Member {
    std::string name;
    ParticipantId participant;
  };
  /// The tenants in force; called on the fleet's thread once per epoch.
  using Members = std::function<std::vector<Member>()>;

  /// Allocates; does not contact Redis (start() does). `server_id` is this server's field in
  /// Redis.
  Fleet(FleetConfig config, std::string server_id, Runtime& runtime, Members members);
  ~Fleet();
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  /// Claims the server id, learns n from a first heartbeat (or takes `expected_servers` if Redis
  /// is unreachable), scales every tenant to 1/n, then starts the epoch thread. Call once, before
  /// serving. Blocks for the connect and command timeouts (epoch / 2 each), and, when the id is
  /// held, until that claim expires (at most 3 s and an epoch). Throws std::runtime_error when
  /// another live server holds the id: it renews its claim while this one waits.
  void start();
  /// A tenant added by a reload, before its requests can reach it: scaled to 1/n at once, n as
  /// the last epoch counted it, rather than holding its whole plan until the next epoch. Any
  /// thread; blocks for a round trip to the dispatcher.
  void admit(ParticipantId participant);
  /// Stops the epoch thread and, if Redis answers, takes this server's entries out at once.
  /// Blocks up to one round trip's timeout. Idempotent; any thread but the fleet's.
  void stop();

  /// A copy of what the fleet thread last saw. Any thread; takes a mutex the fleet thread holds
  /// only to publish, once per epoch.
  [[nodiscard]] FleetView view() const;
  /// Round-trip times of the epochs answered, in seconds (internally locked).
  [[nodiscard]] const prometheus::Histogram& round_trip_seconds() const noexcept {
    return *round_trip_;
  }

 private:
  struct Track;
  struct Redis;
  struct Report;

  void run();
  /// Brings the tracked tenants in line with the members (new ones at 1/n) and measures each
  /// one's demand over the epoch just ended; returns those to report.
  std::vector<Report> gather();
  void epoch();
  /// The claim on the server id, then (unless `claim_only`) one report per entry of `reports`
  /// and the heartbeat, pipelined; false on any failure (recorded). Sets `claimed_`; when the id
  /// turns out to be held by another server, no report counts as answered. Reloads the function
  /// and tries once more if Redis has lost it.
  bool round_trip(std::vector<Report>& reports, std::uint32_t& live_servers, bool claim_only);
  // round_trip()'s replies, one of each kind: false (recorded) for a reply not as it should be.
  bool read_claim(const redisReply* r, bool& held);
  bool read_heartbeat(const redisReply* r, std::uint32_t& live_servers);
  bool read_report(const redisReply* reply, Report& r);
  /// start()'s claim: false if Redis does not answer; throws if a live server holds the id.
  bool claim_at_start();
  bool connect();
  void fail(const std::string& kind, const std::string& why);
  void set_fraction(Track& t, std::uint32_t millionths);
  [[nodiscard]] std::uint32_t even_share() const noexcept;
  void publish();

  const FleetConfig config_;
  const std::string server_id_;
  const std::string servers_key_;
  const std::string claim_key_;
  /// This process's claim on the id: a restart under the same id is another process, so that a
  /// server's claim is never mistaken for the one it left when it died.
  const std::string token_;
  Runtime& runtime_;
  const Members members_;
  std::shared_ptr<prometheus::Histogram> round_trip_;

  // The fleet thread's own (and start()'s, before it exists).
  std::unique_ptr<Redis> redis_;
  std::map<std::string, Track, std::less<>> tracks_;
  FleetState state_ = FleetState::connected;
  std::chrono::steady_clock::time_point failing_since_;
  std::uint32_t live_servers_ = 1;
  std::uint64_t epochs_ = 0;
  std::map<std::string, std::uint64_t> errors_;
  std::string last_error_;
  bool claimed_ = false;     // whether Redis last said this process holds the id
  bool id_refused_ = false;  // another server held the id at the last answer (logged once)
  std::string holder_;       // that server's token, when refused
  long long holder_ttl_ms_ = 0;

  mutable std::mutex view_mutex_;
  FleetView view_;

  std::mutex stop_mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread thread_;
};

/// Appends the fleet's Prometheus families to `out` (/metrics).
void add_fleet_metrics(std::vector<prometheus::MetricFamily>& out, const Fleet& fleet);
/// Adds "fleet" to a /debug/participants answer, and to each of its tenants.
void describe_fleet(nlohmann::json& participants, const Fleet& fleet);

/// "<hostname>:<port>", the default server id.
[[nodiscard]] std::string default_server_id(std::uint16_t port);

}  // namespace creditloop::server
