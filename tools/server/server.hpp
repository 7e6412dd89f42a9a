// creditloop-server: HTTP/1.1 in front of a creditloop runtime.
//
// Threads: `io_threads` run Asio (accepting, parsing, answering, and in proxy mode talking to the
// backend), each its own context, as nginx's workers run their own event loops; the runtime's
// dispatcher decides; in work mode `workers` threads run the requests. A request's life: its head
// parsed and authenticated on its connection's thread (session.hpp),
// its body read (work mode) or left for later (proxy mode), submitted to the scheduler, started by
// the dispatcher (posted to a worker, or its session told to proxy it), completed with its cost by
// whoever finished it, answered on its connection's thread.
//
// Tenants' listener: every request needs `Authorization: Bearer KEY`. Admin listener (loopback by
// default; only under its own names in `Host`; with an admin key, that key too): /metrics,
// /debug/participants, /health, and the live picture /ui with its event stream /ui/events
// (live.hpp). A tenant's key is never accepted there.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include "config.hpp"
#include "scheduler.hpp"
#include "session.hpp"

namespace creditloop::server {

class AccessLog;
class Backend;
class LiveView;
class Fleet;
struct Exchange;

using config_file::KeyDigestEqual;  // constant time
using config_file::KeyDigestHash;
using config_file::KeyDigestMemo;

/// A tenant as one configuration has it.
struct TenantEntry {
  std::shared_ptr<Tenant> tenant;
  std::string plan;
  std::uint32_t shares = 1;
  std::uint32_t queue_limit = 0;
  std::chrono::milliseconds queue_timeout{0};
};

/// The tenants in force and the configuration they came with; replaced whole by a reload, so a
/// request sees one or the other, never a mix.
struct Directory {
  std::shared_ptr<const ServerConfig> config;
  std::unordered_map<KeyDigest, TenantEntry, KeyDigestHash, KeyDigestEqual> by_key;
  std::map<std::string, TenantEntry, std::less<>> by_name;
};

struct ServerOptions {
  std::string config_path;
  bool fifo = false;  // pass-through FIFO instead of creditloop: the baseline for load tests
};

class Server {
 public:
  /// Throws std::runtime_error with the reason when the configuration is bad or a listener
  /// cannot be opened.
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Serves until SIGTERM or SIGINT, then stops as the configuration says. Returns the exit
  /// status.
  int run();

  // ---- for the admin endpoints and the sessions -----------------------------------------
  [[nodiscard]] std::shared_ptr<const Directory> directory() const;
  [[nodiscard]] Scheduler& scheduler() noexcept { return *scheduler_; }
  [[nodiscard]] LiveView& live() noexcept { return *live_; }
  /// Null unless the configuration has `fleet` (and the scheduler is creditloop's).
  [[nodiscard]] const Fleet* fleet() const noexcept { return fleet_.get(); }
  [[nodiscard]] bool stopping() const noexcept {
    return stopping_.load(std::memory_order_relaxed);  // advisory: a stale answer costs one 503
  }
  [[nodiscard]] const ServerOptions& options() const noexcept { return options_; }
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  [[nodiscard]] std::uint16_t admin_port() const noexcept { return admin_port_; }

  [[nodiscard]] ServeMode mode() const noexcept { return mode_; }
  /// Proxy mode's connection pool.
  /// Where the admin reports are made: they wait for the dispatcher's snapshots.
  [[nodiscard]] boost::asio::thread_pool::executor_type reports() noexcept {
    return reports_.get_executor();
  }

  /// Counts an exchange a shutdown must wait for, from its head to the end of its answer.
  struct Outstanding {
    explicit Outstanding(Server& server);
    ~Outstanding();
    Outstanding(const Outstanding&) = delete;
    Outstanding& operator=(const Outstanding&) = delete;
    Server& server;
  };

  /// Checks a tenant's request head: its key, its method and target, its tenant's queue limit.
  /// Returns the refusal to answer, or nothing with `e.tenant` and the request's id set. `keys`:
  /// the connection's own, which spares its requests after the first the key's digest.
  [[nodiscard]] std::optional<Response> admit(Exchange& e, KeyDigestMemo& keys);
  /// Queues an admitted request; the refusal when the runtime would not take it.
  [[nodiscard]] std::optional<Response> submit(Exchange& e);
  /// Settles a started request with its cost: the runtime's completion, the tenant's counters and
  /// the live view. Once per request; sets `e.cost`.
  void finish(Exchange& e, double cost);
  /// The scheduler's headers on an answer: class, queueing delay, and the cost once it is known.
  void decorate(http::fields& f, const Exchange& e) const;
  /// The 503 of a request whose tenant's queue timeout passed, with Retry-After from its next
  /// credit.
  [[nodiscard]] Response queue_timeout_answer(const Exchange& e);
  /// The access log's line for an answer; empty without an access log.
  [[nodiscard]] std::string access_line(const Exchange& e, unsigned status,
                                        std::uint64_t bytes) const;
  void write_access(const std::string& line);
  void log_access(const Exchange& e, unsigned status, std::uint64_t bytes) {
    write_access(access_line(e, status, bytes));
  }
  /// Withdraws an exchange its session abandoned while queued (its client left, or its queue
  /// timeout passed), on a thread of its own: the runtime's withdraw is a round trip to the
  /// dispatcher, which an I/O thread never waits for. `e` is the withdrawal's to let go.
  void withdraw(Exchange* e);
  /// Seconds a refused request of `t` should wait, from what was last published (at least 1);
  /// asks for a fresh look-up off the I/O threads. Never waits for the dispatcher.
  [[nodiscard]] long retry_after_for(const std::shared_ptr<Tenant>& t);
  /// Tests only (CREDITLOOP_SERVER_TEST_FAULT_IN_TURN): whether the request `e` is to throw, as a
  /// failed allocation might, while queued (X-Request-Id `test-fault-in-turn`) or once its turn
  /// has come (`test-fault-at-turn`; `started`).
  [[nodiscard]] bool faults_in_turn(const Exchange& e, bool started) const;
  /// A tenant's connection from `address` has closed.
  void connection_closed(const std::string& address);

  std::atomic<std::uint64_t> connections_open{0};
  std::atomic<std::uint64_t> bad_requests{0};
  // Statistics for /metrics: each counted with relaxed increments and read alone.
  std::atomic<std::uint64_t> departed{0};   // queued requests whose client left
  std::atomic<std::uint64_t> timed_out{0};  // queued requests past their queue timeout
  std::atomic<std::uint64_t> connections_refused{0};
  std::atomic<std::uint64_t> bodies_spilled{0};       // buffered bodies that went to a file
  std::atomic<std::uint64_t> body_spill_failures{0};  // bodies a file could not take: 500
  std::atomic<std::uint64_t> accept_pauses{0};
  /// Requests answered 401 (no key, an unknown one, another scheme), per listener.
  std::atomic<std::uint64_t> unauthorized_tenants{0};
  std::atomic<std::uint64_t> unauthorized_admin{0};

 private:
  void start_request(Pending& p);
  void run_work(Exchange& e);
  /// A queued request the runtime gave back (removal, shutdown): answered 503, or freed when its
  /// session had abandoned it.
  void hand_back(Pending* p, const char* why);
  [[nodiscard]] bool admit_connection(const boost::asio::ip::tcp::socket& s);
  void reload();
  Server(std::shared_ptr<const ServerConfig> config, ServerOptions&& options);
  void begin_stop();
  void listen();
  void join_fleet();
  void accept(boost::asio::ip::tcp::acceptor& acceptor, bool admin);
  // SIGHUP reloads and waits again; SIGUSR1 reopens the access log (after a rotation, as nginx
  // does) and waits again; SIGTERM or SIGINT stops.
  void wait_for_signal();
  /// Registers new tenants and re-plans changed ones; the removed ones are the caller's to take
  /// out once the new directory is in force.
  std::shared_ptr<Directory> build_directory(std::shared_ptr<const ServerConfig> config,
                                             const Directory* previous);
  void retire(const std::shared_ptr<Tenant>& tenant);

  ServerOptions options_;
  ServeMode mode_ = ServeMode::work;
  // The tenants' listener's connections, in all and per client address (the admin listener has
  // no limit: an operator must be able to look at a server whose tenants fill it). Before lanes_:
  // sessions still pending when a context is destroyed count themselves out here.
  std::mutex tenant_connections_mutex_;
  std::uint32_t tenant_connections_ = 0;
  std::unordered_map<std::string, std::uint32_t> per_address_;
  // An I/O thread's own context, and what its connections share. A connection lives on one lane
  // from accept to close, so its operations need no strand: a strand in Asio's type-erased
  // executor allocates on every operation (callgrind: 58 of the 117 allocations a proxied request
  // made, a fifth of its instructions).
  struct Lane {
    boost::asio::io_context context{1};  // run by one thread
    // A request waiting for its turn has no operation pending on its context; without this, the
    // context would run out of work while answers are still to be posted to it (at shutdown,
    // with the acceptors closed), and its thread would return.
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> keep_running{
        context.get_executor()};
    // Proxy mode: the backend's connections, each usable only on this lane's thread, as each
    // nginx worker keeps its own upstream connections. Last: closed before the context goes.
    std::unique_ptr<Backend> backend;
  };
  static std::vector<std::unique_ptr<Lane>> make_lanes(unsigned count);
  std::vector<std::unique_ptr<Lane>> lanes_;
  boost::asio::io_context& io_;  // the first lane's: the acceptors, the signals and the timers
  std::size_t next_lane_ = 0;    // on accept_strand_: where the next connection goes
  // The acceptors and their pause timers, and the close at shutdown, run on this strand: an
  // acceptor is not safe to use from two threads at once, and an I/O thread re-arms its accept
  // while the signal's thread closes it (ThreadSanitizer saw the two race in the connection tests,
  // now tests/server/test_connections.py).
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::ip::tcp::acceptor admin_acceptor_;
  boost::asio::signal_set signals_;
  std::unique_ptr<boost::asio::thread_pool> workers_;
  std::unique_ptr<AccessLog> access_log_;
  boost::asio::steady_timer accept_pause_;  // one per listener: each pauses on its own
  boost::asio::steady_timer admin_accept_pause_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<LiveView> live_;  // after scheduler_: its sampler uses the runtime
  std::unique_ptr<Fleet> fleet_;    // after scheduler_: stopped before the runtime it scales
  // What must wait for the dispatcher, off the I/O threads: withdrawals of abandoned requests
  // (withdraw()) and the next-credit look-ups refusals read (retry_after_for()). Joined before
  // the scheduler goes.
  boost::asio::thread_pool round_trips_{1};
  // The admin reports (admin.hpp), on a thread apart from round_trips_: a scrape waiting for a
  // held dispatcher delays the next scrape, never a withdrawal. Joined before the scheduler goes.
  boost::asio::thread_pool reports_{1};
  // Tests only (CREDITLOOP_SERVER_TEST_DISPATCH_GATE): a FIFO the dispatcher blocks on when it
  // starts a request with X-Request-Id `test-hold-dispatcher`, until a byte is written to it.
  std::string dispatch_gate_;
  bool fault_in_turn_ = false;  // CREDITLOOP_SERVER_TEST_FAULT_IN_TURN; see faults_in_turn()
  std::uint16_t port_ = 0;
  std::uint16_t admin_port_ = 0;

  mutable std::mutex directory_mutex_;
  std::shared_ptr<const Directory> directory_;
  std::mutex reload_mutex_;  // one reload at a time

  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> outstanding_{0};  // exchanges admitted and not yet answered
  std::mutex outstanding_mutex_;
  std::condition_variable outstanding_done_;
  std::thread stopper_;
  std::thread reloader_;
  int exit_status_ = 0;
};

}  // namespace creditloop::server
