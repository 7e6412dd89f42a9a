// The server's configuration file: tenants, plans, room, threads, and how requests are served.
//
// A file is validated whole before anything of it is used: the first problem is reported with
// the path of the field at fault (`tenants[2].plan: unknown plan "gold"`), and nothing changes.
// Unknown fields are refused too, so that a misspelt limit is never silently ignored.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <creditloop/plan.hpp>
#include <creditloop/room_controller.hpp>

#include "common/refusal.hpp"
#include "key_digest.hpp"

namespace creditloop::server {

enum class ServeMode : std::uint8_t { work, proxy };

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  [[nodiscard]] std::string text() const { return host + ":" + std::to_string(port); }
  bool operator==(const Endpoint&) const = default;
};

/// The SHA-256 of a bearer token: all the server keeps of a key, whichever way it was given.
using config_file::key_digest;
using config_file::KeyDigest;

/// A name the admin listener answers to, as `Host` gives it.
struct HostName {
  std::string host;                   // lower case; an IPv6 address in brackets
  std::optional<std::uint16_t> port;  // none: any port
  bool operator==(const HostName&) const = default;
};

/// `NAME`, `NAME:PORT`, `[IPV6]`, `[IPV6]:PORT`, or a bare IPv6 address; otherwise why not.
[[nodiscard]] tools::Parsed<HostName> parse_host_name(std::string_view text);

struct TenantConfig {
  std::string name;
  KeyDigest key{};  // the digest of its bearer token (given as key, key_sha256, key_file, key_env)
  std::string plan;
  std::uint32_t shares = 1;
  /// Most requests queued at once before 429 (0: no limit, the scheduler's own way).
  std::uint32_t queue_limit = 0;
  /// A request queued this long is answered 503 with Retry-After (0: never; the scheduler
  /// refuses nothing by itself).
  std::chrono::milliseconds queue_timeout{0};
};

struct WorkConfig {
  double max_cpu_ms = 100;    // most CPU a request may ask for
  double max_wait_ms = 1000;  // most wall-clock wait (a modelled device) it may ask for
};

struct ProxyConfig {
  Endpoint backend;
  /// Header the backend may set with the request's cost in credits; empty: always time it.
  std::string cost_header = "X-Cost";
  /// Connecting, and then each wait for the backend's next bytes (nginx's proxy_read_timeout):
  /// a stream that keeps sending may last longer.
  std::chrono::milliseconds timeout{10'000};
  /// A pooled connection idle this long is closed rather than reused: shorter than a typical
  /// backend's keep-alive timeout (Node's 5 s, gunicorn's 2 s).
  std::chrono::milliseconds idle_timeout{1'000};
  /// The Host the backend gets; empty: the client's.
  std::string host;
  /// A request's body is read whole before the request is queued (nginx's
  /// `proxy_request_buffering on`), so that a slow client never holds a slot; false: it streams
  /// to the backend once dispatched, and its slot is charged for the time it holds.
  bool request_buffering = true;
  /// Where a buffered body longer than `limits.body_buffer_bytes` goes, in a file with no name
  /// (nginx's client_body_temp_path). Given relative: from the configuration's directory; not
  /// given: the system's temporary directory ($TMPDIR, else /tmp).
  std::string body_temp_dir;
};

/// Fleet mode (docs/fleet.md): each tenant's plan holds across every server sharing one Redis.
struct FleetConfig {
  /// Redis: `host:port`, or `unix_path` when given as `unix:/path`.
  Endpoint redis;
  std::string unix_path;
  std::string user;      // ACL user for AUTH; empty: the default user
  std::string password;  // empty: no AUTH; never logged
  std::string prefix = "creditloop:";
  std::string server_id;  // empty: "<hostname>:<listen port>"
  std::chrono::milliseconds epoch{250};
  std::chrono::milliseconds grace{2000};
  std::uint32_t expected_servers = 1;

  [[nodiscard]] std::string redis_text() const {
    return unix_path.empty() ? redis.text() : "unix:" + unix_path;
  }
  bool operator==(const FleetConfig&) const = default;
};

struct Limits {
  std::uint32_t header_bytes = 8 * 1024;
  /// The largest request body (nginx's client_max_body_size), read before the request is queued.
  /// Proxy mode without request buffering: the buffer a body streams through.
  std::uint64_t body_bytes = 1024 * 1024;
  /// Proxy mode with request buffering: the most of a body kept in memory (nginx's
  /// client_body_buffer_size); a longer one goes to a file in `proxy.body_temp_dir`. At most
  /// `body_bytes`; not given, 16 KiB or `body_bytes` when that is less.
  std::uint64_t body_buffer_bytes = 16 * 1024;
  /// The whole request (headers and body) must arrive within this, or the connection is closed:
  /// a client that trickles bytes holds a connection no longer than this.
  std::chrono::milliseconds read_timeout{10'000};
  /// The longest pause between two reads of a body (nginx's client_body_timeout).
  std::chrono::milliseconds body_timeout{10'000};
  /// A kept-alive connection with no request in progress is closed after this.
  std::chrono::milliseconds idle_timeout{30'000};
  /// Each write to a client must make progress within this, or the connection is closed: a
  /// client that stops reading a stream holds its slot no longer.
  std::chrono::milliseconds send_timeout{30'000};
  /// A connection closed with bytes still to come (a body never read: a refusal, a 413) reads
  /// and drops them for at most this long in all, and stops at a pause longer than
  /// lingering_timeout: its unread bytes would otherwise reset the connection under the answer.
  /// nginx's lingering_time and lingering_timeout, with their defaults; a lingering_time of 0
  /// closes at once.
  std::chrono::milliseconds lingering_time{30'000};
  std::chrono::milliseconds lingering_timeout{5'000};
  /// The tenants' listener's connections open at once (the admin listener has none, so that an
  /// operator can look at a full server); beyond it a new one is answered 503 and closed.
  std::uint32_t max_connections = 10'000;
  /// The same from one client address (0: no limit of its own).
  std::uint32_t max_connections_per_address = 0;
};

/// One JSON line per answered request (docs/server.md); absent: none.
struct AccessLogConfig {
  std::string path;
  friend bool operator==(const AccessLogConfig&, const AccessLogConfig&) = default;
};

/// Where the runtime's capture goes (docs/capture.md); absent: no capture.
struct CaptureConfig {
  std::string path;
  std::uint64_t max_bytes = std::uint64_t{64} << 20;
  std::uint32_t files = 4;
  friend bool operator==(const CaptureConfig&, const CaptureConfig&) = default;
};

struct ServerConfig {
  ServeMode mode = ServeMode::work;
  Endpoint listen{"127.0.0.1", 8080};
  Endpoint admin_listen{"127.0.0.1", 9090};
  /// When set, the admin endpoints also demand `Authorization: Bearer ADMIN_KEY` (this is its
  /// digest). Never equal to a tenant's.
  std::optional<KeyDigest> admin_key;
  /// The names the admin listener answers to (`admin.hosts`, or the defaults); never empty.
  std::vector<HostName> admin_hosts;
  unsigned io_threads = 2;
  unsigned workers = 4;  // work mode: threads running requests
  /// Room: requests in flight at once (work: on the workers; proxy: the backend's concurrency
  /// limit, and the size of the kept-alive connection pool).
  std::uint32_t slots = 8;
  /// `"slots": "auto"` or `{"auto": {"min": N, "max": N}}`: a room learned from the latency of
  /// what is in flight, between these bounds (RuntimeOptions::learned_room); `slots` is unused.
  std::optional<RoomBounds> learned_room;
  /// One credit is this many milliseconds of a request's CPU (work), of a modelled wait, or of
  /// the backend's response time (proxy, when the backend names no cost).
  double cost_unit_ms = 1;
  std::chrono::milliseconds shutdown_deadline{10'000};
  Config plans;  // classes and plans, as the runtime takes them
  std::vector<TenantConfig> tenants;
  WorkConfig work;
  ProxyConfig proxy;
  Limits limits;
  std::optional<CaptureConfig> capture;
  std::optional<AccessLogConfig> access_log;
  std::optional<FleetConfig> fleet;
};

/// A configuration, or the reason it was refused (one line, naming the field).

/// `key_file` paths that are relative are taken from `base_dir` (the working directory when
/// it is empty); `key_env` names are looked up in the environment now.
[[nodiscard]] tools::Parsed<ServerConfig> parse_config(std::string_view json_text,
                                                       const std::string& base_dir = {});
/// Reads the file at `path` and the key files and variables it names.
[[nodiscard]] tools::Parsed<ServerConfig> load_config(const std::string& path);

/// Nothing when `next` can replace `current` in a running server (SIGHUP); otherwise why not.
/// Tenants, their plans, shares, keys and queue limits may change; plans' terms, classes, room,
/// threads, listeners, the mode and the capture need a restart.
[[nodiscard]] std::optional<std::string> reload_problem(const ServerConfig& current,
                                                        const ServerConfig& next);

}  // namespace creditloop::server
