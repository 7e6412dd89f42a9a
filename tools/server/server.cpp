#include "server.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <prometheus/histogram.h>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <nlohmann/json.hpp>

#include "access_log.hpp"
#include "admin.hpp"
#include "backend.hpp"
#include "cpu_work.hpp"
#include "fleet.hpp"
#include "forwarding.hpp"
#include "live.hpp"
#include "session.hpp"

namespace creditloop::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

void log(const std::string& line) {
  std::fprintf(stderr, "creditloop-server: %s\n", line.c_str());
  std::fflush(stderr);
}

struct WorkArgs {
  double cpu_ms = 0;
  double wait_ms = 0;
};

// `cpu_ms=5&wait_ms=20`; anything else is refused, so that a misspelt parameter is noticed.
tools::Parsed<WorkArgs> parse_work(std::string_view query, const WorkConfig& limits) {
  WorkArgs args;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    double v = 0;
    try {
      std::size_t used = 0;
      v = std::stod(value, &used);
      if (used != value.size() || !std::isfinite(v) || v < 0) throw std::invalid_argument("");
    } catch (const std::exception&) {
      return tools::Refusal{std::string(name) + ": must be a number of milliseconds, at least 0"};
    }
    if (name == "cpu_ms") {
      if (v > limits.max_cpu_ms) {
        return tools::Refusal{"cpu_ms: at most " + std::to_string(limits.max_cpu_ms) + " here"};
      }
      args.cpu_ms = v;
    } else if (name == "wait_ms") {
      if (v > limits.max_wait_ms) {
        return tools::Refusal{"wait_ms: at most " + std::to_string(limits.max_wait_ms) + " here"};
      }
      args.wait_ms = v;
    } else {
      return tools::Refusal{"unknown parameter \"" + std::string(name) + "\" (cpu_ms, wait_ms)"};
    }
  }
  return args;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// to_chars, not snprintf: every answer carries two of these, and glibc's printf took about 1,500
// instructions for each (callgrind). The buffer holds the longest double in fixed notation (309
// digits and the decimals), so the conversion cannot fail.
using FixedText = std::array<char, 352>;

boost::beast::string_view fixed(FixedText& buf, double v, int decimals) {
  const auto end =
      std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::fixed, decimals).ptr;
  return {buf.data(), static_cast<std::size_t>(end - buf.data())};
}

std::shared_ptr<const ServerConfig> load_or_throw(const std::string& path) {
  tools::Parsed<ServerConfig> loaded = load_config(path);
  if (auto* why = std::get_if<tools::Refusal>(&loaded)) throw std::runtime_error(why->message);
  return std::make_shared<const ServerConfig>(std::get<ServerConfig>(std::move(loaded)));
}

}  // namespace

std::vector<std::unique_ptr<Server::Lane>> Server::make_lanes(unsigned count) {
  std::vector<std::unique_ptr<Lane>> lanes;
  for (unsigned i = 0; i < count; ++i) lanes.push_back(std::make_unique<Lane>());
  return lanes;
}

// The configuration is read first: it says how many lanes there are, and io_ is the first's.
Server::Server(ServerOptions options)
    : Server(load_or_throw(options.config_path), std::move(options)) {}

Server::Server(std::shared_ptr<const ServerConfig> config, ServerOptions&& options)
    : options_(std::move(options)),
      lanes_(make_lanes(config->io_threads)),
      io_(lanes_.front()->context),
      accept_strand_(asio::make_strand(io_)),
      acceptor_(accept_strand_),
      admin_acceptor_(accept_strand_),
      signals_(io_, SIGHUP, SIGTERM, SIGINT),
      accept_pause_(accept_strand_),
      admin_accept_pause_(accept_strand_) {
  mode_ = config->mode;
  if (const char* gate = std::getenv("CREDITLOOP_SERVER_TEST_DISPATCH_GATE")) dispatch_gate_ = gate;
  fault_in_turn_ = std::getenv("CREDITLOOP_SERVER_TEST_FAULT_IN_TURN") != nullptr;
  signals_.add(SIGUSR1);
  if (config->access_log) access_log_ = std::make_unique<AccessLog>(config->access_log->path);
  auto start = [this](Pending& p) { start_request(p); };
  scheduler_ = options_.fifo ? make_fifo_scheduler(*config, start)
                             : make_creditloop_scheduler(*config, start);
  if (config->mode == ServeMode::work) {
    workers_ = std::make_unique<asio::thread_pool>(config->workers);
  } else {
    for (auto& lane : lanes_) lane->backend = std::make_unique<Backend>(lane->context, *config);
  }
  directory_ = build_directory(config, nullptr);
  live_ = std::make_unique<LiveView>(*this);
  listen();
  join_fleet();
}

Server::~Server() {
  round_trips_.join();
  reports_.join();
  if (stopper_.joinable()) stopper_.join();
  if (fleet_) fleet_->stop();
  if (workers_) workers_->join();
}

std::shared_ptr<const Directory> Server::directory() const {
  std::lock_guard lock(directory_mutex_);
  return directory_;
}

std::shared_ptr<Directory> Server::build_directory(std::shared_ptr<const ServerConfig> config,
                                                   const Directory* previous) {
  auto dir = std::make_shared<Directory>();
  dir->config = config;
  for (const TenantConfig& t : config->tenants) {
    TenantEntry entry;
    entry.plan = t.plan;
    entry.shares = t.shares;
    entry.queue_limit = t.queue_limit;
    entry.queue_timeout = t.queue_timeout;
    const auto old =
        previous ? previous->by_name.find(t.name) : decltype(previous->by_name.end()){};
    if (previous != nullptr && old != previous->by_name.end()) {
      entry.tenant = old->second.tenant;
      if (old->second.plan != t.plan || old->second.shares != t.shares) {
        const Status s = scheduler_->replan(*entry.tenant, t);
        if (!s) {
          throw std::runtime_error("tenants." + t.name +
                                   ": cannot re-plan: " + std::string(describe(s.error())));
        }
        log("tenant " + t.name + " re-planned: " + t.plan + " x" + std::to_string(t.shares));
      }
    } else {
      auto tenant = std::make_shared<Tenant>();
      tenant->name = t.name;
      tenant->wait_seconds = std::make_shared<prometheus::Histogram>(wait_buckets());
      const Result<ParticipantId> id = scheduler_->add(t);
      if (!id) {
        throw std::runtime_error("tenants." + t.name +
                                 ": cannot add: " + std::string(describe(id.error())));
      }
      tenant->participant = id.value();
      // Before this directory lists it: a fleet's new tenant never holds its whole plan here.
      if (fleet_) fleet_->admit(tenant->participant);
      entry.tenant = std::move(tenant);
      if (previous != nullptr) log("tenant " + t.name + " added");
    }
    dir->by_key.emplace(t.key, entry);
    dir->by_name.emplace(t.name, std::move(entry));
  }
  return dir;
}

void Server::retire(const std::shared_ptr<Tenant>& tenant) {
  tenant->removed.store(true, std::memory_order_relaxed);  // FIFO: read under its mutex
  std::vector<Pending*> handed_back = scheduler_->remove(*tenant);
  log("tenant " + tenant->name + " removed; " + std::to_string(handed_back.size()) +
      " queued requests answered 503");
  for (Pending* p : handed_back) hand_back(p, "tenant removed from the configuration\n");
}

void Server::reload() {
  std::lock_guard one_at_a_time(reload_mutex_);
  tools::Parsed<ServerConfig> loaded = load_config(options_.config_path);
  if (auto* why = std::get_if<tools::Refusal>(&loaded)) {
    log("reload refused, old configuration kept: " + why->message);
    return;
  }
  auto next = std::make_shared<const ServerConfig>(std::get<ServerConfig>(std::move(loaded)));
  const std::shared_ptr<const Directory> current = directory();
  if (const auto problem = reload_problem(*current->config, *next)) {
    log("reload refused, old configuration kept: " + *problem);
    return;
  }
  std::shared_ptr<Directory> dir;
  try {
    dir = build_directory(next, current.get());
  } catch (const std::exception& e) {
    log(std::string("reload failed part-way: ") + e.what());
    return;
  }
  {
    std::lock_guard lock(directory_mutex_);
    directory_ = dir;
  }
  for (const auto& [name, entry] : current->by_name) {
    if (dir->by_name.count(name) == 0) retire(entry.tenant);
  }
  log("configuration reloaded: " + std::to_string(dir->by_name.size()) + " tenants");
}

void Server::listen() {
  const auto open = [this](tcp::acceptor& a, const Endpoint& at, const char* what) {
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(at.host, ec);
    if (ec)
      throw std::runtime_error(std::string(what) + ": \"" + at.host + "\" is not an IP address");
    const tcp::endpoint ep(address, at.port);
    a.open(ep.protocol(), ec);
    if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) a.bind(ep, ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      throw std::runtime_error(std::string(what) + ": cannot listen on " + at.text() + ": " +
                               ec.message());
    return a.local_endpoint().port();
  };
  const ServerConfig& c = *directory_->config;
  port_ = open(acceptor_, c.listen, "listen");
  admin_port_ = open(admin_acceptor_, c.admin_listen, "admin.listen");
}

void Server::join_fleet() {
  const ServerConfig& c = *directory_->config;
  if (!c.fleet) return;
  Runtime* runtime = scheduler_->runtime();
  if (runtime == nullptr) {
    log("fleet: off with --fifo (no plans to share)");
    return;
  }
  const std::string id = c.fleet->server_id.empty() ? default_server_id(port_) : c.fleet->server_id;
  fleet_ = std::make_unique<Fleet>(*c.fleet, id, *runtime, [this] {
    std::vector<Fleet::Member> members;
    const std::shared_ptr<const Directory> dir = directory();
    for (const auto& [name, entry] : dir->by_name) {
      members.push_back({name, entry.tenant->participant});
    }
    return members;
  });
  fleet_->start();
}

Server::Outstanding::Outstanding(Server& s) : server(s) {
  server.outstanding_.fetch_add(1, std::memory_order_relaxed);  // see the destructor
}

Server::Outstanding::~Outstanding() {
  // The last decrement is published by the mutex the notification takes, which the waiter in
  // begin_stop() holds while it reads the count: relaxed is enough for the count itself.
  if (server.outstanding_.fetch_sub(1, std::memory_order_relaxed) == 1 && server.stopping()) {
    std::lock_guard lock(server.outstanding_mutex_);
    server.outstanding_done_.notify_all();
  }
}

namespace {

Response refusal(const RequestHead& head, http::status status, const std::string& why,
                 long retry_after_s = 0) {
  Response res = make_response(head, status, why);
  if (retry_after_s > 0) res.set(http::field::retry_after, std::to_string(retry_after_s));
  if (status == http::status::unauthorized) res.set(http::field::www_authenticate, "Bearer");
  return res;
}

std::int64_t clock_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

long Server::retry_after_for(const std::shared_ptr<Tenant>& t) {
  // Relaxed: the flag only keeps look-ups to one at a time; nothing is published through it.
  if (!t->next_credit_looking.exchange(true, std::memory_order_relaxed)) {
    asio::post(round_trips_, [this, t] {
      const std::optional<std::chrono::nanoseconds> next = scheduler_->next_credit(*t);
      t->next_credit_at_ns.store(next ? clock_ns(Clock::now() + *next) : 0,
                                 std::memory_order_relaxed);  // a hint; see Tenant
      t->next_credit_looking.store(false, std::memory_order_relaxed);
    });
  }
  const std::int64_t left =
      t->next_credit_at_ns.load(std::memory_order_relaxed) - clock_ns(Clock::now());
  return std::max<long>(1, static_cast<long>((left + 999'999'999) / 1'000'000'000));
}

std::optional<Response> Server::admit(Exchange& e, KeyDigestMemo& keys) {
  const RequestHead& head = e.head();
  if (const std::optional<std::string> why = bad_host(head)) {
    bad_requests.fetch_add(1, std::memory_order_relaxed);  // a statistic
    Response res = refusal(head, http::status::bad_request, *why + "\n");
    res.keep_alive(false);
    return res;
  }
  if (unsupported_coding(head)) {
    bad_requests.fetch_add(1, std::memory_order_relaxed);  // a statistic
    Response res =
        refusal(head, http::status::not_implemented, "Transfer-Encoding: only chunked is taken\n");
    res.keep_alive(false);
    return res;
  }
  if (stopping()) return refusal(head, http::status::service_unavailable, "shutting down\n", 1);
  const std::shared_ptr<const Directory> dir = directory();
  const auto id = head.find("X-Request-Id");
  e.request_id = id != head.end() &&
                         usable_request_id(std::string_view(id->value().data(), id->value().size()))
                     ? std::string(id->value())
                     : make_request_id();
  // Tenants are found by the SHA-256 of their key, so that the lookup's timing says nothing
  // about any key; the final comparison is constant-time too.
  const std::optional<std::string_view> key = bearer_token(head);
  const std::optional<KeyDigest> digest = key ? keys.digest(*key) : std::nullopt;
  const auto found = digest ? dir->by_key.find(*digest) : dir->by_key.end();
  if (found == dir->by_key.end()) {
    // relaxed: a statistic; pairs with the relaxed load in metrics_text(), nothing else.
    unauthorized_tenants.fetch_add(1, std::memory_order_relaxed);
    Response res = refusal(head, http::status::unauthorized,
                           key ? "unknown key\n" : "Authorization: Bearer KEY required\n");
    // Closed: a client guessing keys opens a connection per guess, which the per-address
    // connection limit sees, instead of guessing at will on one.
    res.keep_alive(false);
    return res;
  }
  const TenantEntry& entry = found->second;
  e.tenant = entry.tenant;
  e.queue_timeout = entry.queue_timeout;
  const ServerConfig& config = *dir->config;
  if (config.mode == ServeMode::work) {
    const std::string_view target(head.target().data(), head.target().size());
    const auto q = target.find('?');
    if (target.substr(0, q) != "/work") {
      return refusal(head, http::status::not_found,
                     "not found: requests go to /work?cpu_ms=N&wait_ms=M\n");
    }
    auto args = parse_work(q == std::string_view::npos ? "" : target.substr(q + 1), config.work);
    if (auto* why = std::get_if<tools::Refusal>(&args)) {
      return refusal(head, http::status::bad_request, why->message + "\n");
    }
    e.cpu_ms = std::get<WorkArgs>(args).cpu_ms;
    e.wait_ms = std::get<WorkArgs>(args).wait_ms;
  } else if (head.method() == http::verb::trace || head.method() == http::verb::connect) {
    // TRACE would echo the tenant's credentials back to a script (cross-site tracing), and
    // CONNECT asks for a tunnel: nginx refuses both with 405 too.
    Response res = refusal(head, http::status::method_not_allowed, "method not allowed\n");
    res.set(http::field::allow, "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS");
    return res;
  }
  Tenant& tenant = *e.tenant;
  // Relaxed: gauges; a withdrawal under way may count for a moment, never a departed request
  // once its withdrawal has returned.
  const std::int64_t waiting = tenant.queued.load(std::memory_order_relaxed) -
                               tenant.leaving.load(std::memory_order_relaxed);
  if (entry.queue_limit > 0 && waiting >= entry.queue_limit) {
    return refusal(head, http::status::too_many_requests, "queue limit reached\n",
                   retry_after_for(e.tenant));
  }
  return std::nullopt;
}

std::optional<Response> Server::submit(Exchange& e) {
  e.arrived = Clock::now();
  const Status s = scheduler_->submit(*e.tenant, e);
  if (s) return std::nullopt;
  return refusal(e.head(), http::status::service_unavailable,
                 s.error() == Errc::shut_down ? "shutting down\n" : "tenant removed\n", 1);
}

Response Server::queue_timeout_answer(const Exchange& e) {
  return refusal(e.head(), http::status::service_unavailable, "queue timeout passed\n",
                 retry_after_for(e.tenant));
}

void Server::start_request(Pending& p) {
  auto& e = static_cast<Exchange&>(p);
  if (!e.leave_queue(Exchange::Phase::started)) {
    // Its session let it go while it was queued (the client left, or its queue timeout passed):
    // nothing runs, nothing is charged, and it is freed off the dispatcher's thread.
    scheduler_->complete(e, 0);
    asio::post(io_, [&e] { Exchange::let_go(&e); });
    return;
  }
  if (!dispatch_gate_.empty() && e.request_id == "test-hold-dispatcher") {
    const int fd = ::open(dispatch_gate_.c_str(), O_RDWR | O_CLOEXEC);  // RDWR: never EOF
    log("test: dispatcher held");
    char byte = 0;
    if (fd >= 0 && ::read(fd, &byte, 1) < 0) log("test: dispatch gate unreadable");
    if (fd >= 0) ::close(fd);
  }
  // Work mode tells the session once the work is done (Session::answered); proxy mode now.
  if (workers_) {
    asio::post(*workers_, [this, &e] { run_work(e); });
  } else {
    e.session->notify(Session::dispatched);
  }
}

bool Server::faults_in_turn(const Exchange& e, bool started) const {
  return fault_in_turn_ && e.request_id == (started ? "test-fault-at-turn" : "test-fault-in-turn");
}

void Server::hand_back(Pending* p, const char* why) {
  auto* e = static_cast<Exchange*>(p);
  if (!e->leave_queue(Exchange::Phase::handed_back)) {
    Exchange::let_go(e);  // abandoned by its session: nobody waits for an answer
    return;
  }
  e->answer = refusal(e->head(), http::status::service_unavailable, why, 1);
  e->session->notify(Session::answered);
}

void Server::withdraw(Exchange* e) {
  Tenant& tenant = *e->tenant;
  tenant.leaving.fetch_add(1, std::memory_order_relaxed);  // a gauge; see admit()
  asio::post(round_trips_, [this, e, &tenant] {
    const bool withdrawn = scheduler_->withdraw(tenant, *e);
    tenant.leaving.fetch_sub(1, std::memory_order_relaxed);
    if (withdrawn) {
      delete e;  // the runtime let it go: its side will never see it again
    } else {
      Exchange::let_go(e);  // started or handed back meanwhile: that side lets go too
    }
  });
}

void Server::run_work(Exchange& e) {
  const double cpu_used = e.cpu_ms > 0 ? burn_cpu(e.cpu_ms) : 0.0;
  const auto done = [this, &e, cpu_used](double waited_ms) {
    const double unit = directory()->config->cost_unit_ms;
    const double cost = (cpu_used + waited_ms) / unit;
    nlohmann::json body = {{"tenant", e.tenant->name},
                           {"class", e.fifo ? "fifo" : class_name(e.out)},
                           {"queue_wait_ms", ms_between(e.arrived, e.started)},
                           {"cpu_ms", cpu_used},
                           {"device_wait_ms", waited_ms},
                           {"cost", cost}};
    Response res =
        make_response(e.head(), http::status::ok, body.dump() + "\n", "application/json");
    finish(e, cost);
    decorate(res, e);
    e.answer = std::move(res);
    e.session->notify(Session::answered);
  };
  if (e.wait_ms <= 0) {
    done(0);
    return;
  }
  // The modelled device wait holds the request's slot but no thread.
  auto timer = std::make_shared<asio::steady_timer>(io_);
  const auto began = Clock::now();
  timer->expires_after(std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(e.wait_ms)));
  timer->async_wait(
      [timer, began, done](boost::system::error_code) { done(ms_between(began, Clock::now())); });
}

void Server::finish(Exchange& e, double cost) {
  if (e.cost) return;
  e.cost = cost;
  scheduler_->complete(e, cost);
  Tenant& t = *e.tenant;
  t.served[e.out].fetch_add(1, std::memory_order_relaxed);  // statistics: no ordering
  t.cost_charged_nano.fetch_add(static_cast<std::uint64_t>(clamp_to_nano_credits(cost)),
                                std::memory_order_relaxed);
  t.wait_seconds->Observe(ms_between(e.arrived, e.started) / 1e3);
  live_->record(e, Clock::now(), cost);
}

void Server::decorate(http::fields& f, const Exchange& e) const {
  FixedText buf;
  f.set("X-Creditloop-Class", e.fifo ? std::string("fifo") : class_name(e.out));
  f.set("X-Creditloop-Wait-Ms", fixed(buf, ms_between(e.arrived, e.started), 3));
  if (e.cost) f.set("X-Creditloop-Cost", fixed(buf, *e.cost, 6));
  f.set("X-Request-Id", e.request_id);
}

std::string Server::access_line(const Exchange& e, unsigned status, std::uint64_t bytes) const {
  if (!access_log_) return {};
  const RequestHead& head = e.head();
  nlohmann::json line = {{"time_unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count()},
                         {"request_id", e.request_id},
                         {"client", e.client_address},
                         {"method", std::string(head.method_string())},
                         {"target", std::string(head.target())},
                         {"status", status},
                         {"bytes", bytes}};
  line["tenant"] = e.tenant ? nlohmann::json(e.tenant->name) : nlohmann::json(nullptr);
  const bool ran = e.started != Clock::time_point{};
  line["class"] = !ran ? nlohmann::json(nullptr)
                       : nlohmann::json(e.fifo ? std::string("fifo") : class_name(e.out));
  // The queueing delay: to the start, or (never started) to this answer.
  const Clock::time_point waited_until = ran ? e.started : Clock::now();
  line["wait_ms"] = e.arrived != Clock::time_point{} ? ms_between(e.arrived, waited_until) : 0.0;
  line["cost"] = e.cost ? nlohmann::json(*e.cost) : nlohmann::json(nullptr);
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Server::write_access(const std::string& line) {
  if (access_log_ && !line.empty()) access_log_->write(line);
}

void Server::begin_stop() {
  if (stopping_.exchange(true, std::memory_order_relaxed)) return;  // advisory flag; see stopping()
  asio::dispatch(accept_strand_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    admin_acceptor_.close(ignored);
    // A paused listener would otherwise accept again, on a closed acceptor.
    accept_pause_.cancel();
    admin_accept_pause_.cancel();
  });
  const auto deadline = directory()->config->shutdown_deadline;
  log("stopping: no new connections; queued requests are answered 503");
  stopper_ = std::thread([this, deadline] {
    const auto until = Clock::now() + deadline;
    if (fleet_) fleet_->stop();
    // The queue first, at once: a queued request has nothing to wait for.
    for (Pending* p : scheduler_->stop(std::chrono::milliseconds(0))) {
      hand_back(p, "shutting down\n");
    }
    std::unique_lock lock(outstanding_mutex_);
    const bool drained = outstanding_done_.wait_until(
        lock, until, [this] { return outstanding_.load(std::memory_order_relaxed) == 0; });
    lock.unlock();
    if (!drained) {
      log("deadline passed with " + std::to_string(outstanding_.load(std::memory_order_relaxed)) +
          " requests unanswered");
      // What is in flight cannot complete without the threads we now stop. Settling it at no
      // cost lets the runtime end, and with it the capture, whose last lines are then written.
      scheduler_->abort();
      std::fflush(nullptr);
      std::_Exit(1);
    }
    (void)scheduler_->stop(std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(Clock::duration::zero(), until - Clock::now())));
    // Every answer has been written (Outstanding ends after the write).
    asio::post(io_, [this] {
      for (auto& lane : lanes_) lane->context.stop();
    });
  });
}

bool Server::admit_connection(const tcp::socket& s) {
  const Limits& limits = directory()->config->limits;
  boost::system::error_code ec;
  const auto peer = s.remote_endpoint(ec);
  const std::string address = ec ? std::string("unknown") : peer.address().to_string();
  std::lock_guard lock(tenant_connections_mutex_);
  if (tenant_connections_ >= limits.max_connections) return false;
  // Counted even without a limit of its own, so that a reload that sets one finds true counts.
  std::uint32_t& n = per_address_[address];
  if (limits.max_connections_per_address > 0 && n >= limits.max_connections_per_address) {
    if (n == 0) per_address_.erase(address);
    return false;
  }
  ++n;
  ++tenant_connections_;
  return true;
}

void Server::connection_closed(const std::string& address) {
  std::lock_guard lock(tenant_connections_mutex_);
  --tenant_connections_;
  const auto it = per_address_.find(address);
  if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
}

void Server::accept(tcp::acceptor& acceptor, bool admin) {
  Lane& lane = *lanes_[next_lane_++ % lanes_.size()];  // round robin, as accepts come
  acceptor.async_accept(
      lane.context, [this, &acceptor, admin, &lane](boost::system::error_code ec, tcp::socket s) {
        if (ec == asio::error::operation_aborted) return;  // closed: the server is stopping
        if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
            ec == asio::error::no_memory || ec.value() == ENFILE) {
          // Out of descriptors: accepting again at once would fail at once, and spin. Like
          // nginx, stop accepting for a moment; connections wait in the listen backlog.
          if (accept_pauses.fetch_add(1, std::memory_order_relaxed) % 100 == 0) {  // a statistic
            log("accept: " + ec.message() + "; new connections wait 100 ms (" +
                std::to_string(connections_open.load(std::memory_order_relaxed)) + " open)");
          }
          auto& pause = admin ? admin_accept_pause_ : accept_pause_;
          pause.expires_after(std::chrono::milliseconds(100));
          pause.async_wait([this, &acceptor, admin](boost::system::error_code e) {
            if (!e) accept(acceptor, admin);
          });
          return;
        }
        if (!ec) {
          if (!admin && !admit_connection(s)) {
            // Refused cleanly: a short 503 the client can read, then the close. A non-blocking
            // send of a few bytes on a fresh socket either fits or is dropped with the socket.
            connections_refused.fetch_add(1, std::memory_order_relaxed);  // a statistic
            static constexpr std::string_view busy =
                "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
                "Content-Length: 0\r\n\r\n";
            boost::system::error_code ignored;
            s.non_blocking(true, ignored);
            s.write_some(asio::buffer(busy.data(), busy.size()), ignored);
            s.shutdown(tcp::socket::shutdown_send, ignored);
            s.close(ignored);
          } else {
            boost::system::error_code ignored;
            s.set_option(tcp::no_delay(true), ignored);
            std::make_shared<Session>(std::move(s), *this, admin, lane.backend.get())->start();
          }
        }
        accept(acceptor, admin);
      });
}

void Server::wait_for_signal() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (sig == SIGUSR1) {
      if (access_log_)
        log(access_log_->reopen() ? "access log reopened" : "access log: cannot reopen");
      wait_for_signal();
      return;
    }
    if (sig == SIGHUP) {
      // A reload takes round trips to the dispatcher: off the I/O threads.
      if (reloader_.joinable()) reloader_.join();
      reloader_ = std::thread([this] { reload(); });
      wait_for_signal();
      return;
    }
    begin_stop();
  });
}

int Server::run() {
  accept(acceptor_, false);
  accept(admin_acceptor_, true);
  wait_for_signal();
  live_->start();
  const ServerConfig& c = *directory()->config;
  std::printf(
      "creditloop-server: %s mode, %s scheduler, %zu tenants; listening on %s:%u, admin %s:%u\n",
      c.mode == ServeMode::work ? "work" : "proxy", scheduler_->name(), c.tenants.size(),
      c.listen.host.c_str(), port_, c.admin_listen.host.c_str(), admin_port_);
  std::fflush(stdout);
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < lanes_.size(); ++i) {
    threads.emplace_back([&lane = *lanes_[i]] { lane.context.run(); });
  }
  io_.run();
  for (std::thread& t : threads) t.join();
  live_->stop();
  if (stopper_.joinable()) stopper_.join();
  if (reloader_.joinable()) reloader_.join();
  log("stopped");
  return exit_status_;
}

}  // namespace creditloop::server
