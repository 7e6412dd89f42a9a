#include "server.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <prometheus/histogram.h>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <nlohmann/json.hpp>

#include "admin.hpp"
#include "backend.hpp"
#include "cpu_work.hpp"
#include "fleet.hpp"
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

// Tenants are found by the SHA-256 of their key, so that the lookup's timing says nothing about
// any key; the final comparison is constant-time too.
KeyDigest digest(std::string_view key) {
  KeyDigest d{};
  unsigned length = 0;
  if (EVP_Digest(key.data(), key.size(), d.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != d.size()) {
    throw std::runtime_error("SHA-256 unavailable");
  }
  return d;
}

std::optional<std::string_view> bearer(const Request& request) {
  const auto it = request.find(http::field::authorization);
  if (it == request.end()) return std::nullopt;
  std::string_view v(it->value().data(), it->value().size());
  constexpr std::string_view scheme = "bearer ";
  if (v.size() <= scheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(v[i])) != scheme[i]) return std::nullopt;
  }
  v.remove_prefix(scheme.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  if (v.empty()) return std::nullopt;
  return v;
}

struct WorkArgs {
  double cpu_ms = 0;
  double wait_ms = 0;
};

// `cpu_ms=5&wait_ms=20`; anything else is refused, so that a misspelt parameter is noticed.
std::variant<WorkArgs, std::string> parse_work(std::string_view query, const WorkConfig& limits) {
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
      return std::string(name) + ": must be a number of milliseconds, at least 0";
    }
    if (name == "cpu_ms") {
      if (v > limits.max_cpu_ms) {
        return "cpu_ms: at most " + std::to_string(limits.max_cpu_ms) + " here";
      }
      args.cpu_ms = v;
    } else if (name == "wait_ms") {
      if (v > limits.max_wait_ms) {
        return "wait_ms: at most " + std::to_string(limits.max_wait_ms) + " here";
      }
      args.wait_ms = v;
    } else {
      return "unknown parameter \"" + std::string(name) + "\" (cpu_ms, wait_ms)";
    }
  }
  return args;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::size_t KeyDigestHash::operator()(const KeyDigest& d) const noexcept {
  std::size_t h = 0;
  std::memcpy(&h, d.data(), sizeof h);
  return h;
}

bool KeyDigestEqual::operator()(const KeyDigest& a, const KeyDigest& b) const noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      keep_running_(io_.get_executor()),
      acceptor_(io_),
      admin_acceptor_(io_),
      signals_(io_, SIGHUP, SIGTERM, SIGINT) {
  ConfigResult loaded = load_config(options_.config_path);
  if (auto* why = std::get_if<std::string>(&loaded)) throw std::runtime_error(*why);
  auto config = std::make_shared<const ServerConfig>(std::get<ServerConfig>(std::move(loaded)));
  auto start = [this](Pending& p) { start_request(p); };
  scheduler_ = options_.fifo ? make_fifo_scheduler(*config, start)
                             : make_creditloop_scheduler(*config, start);
  if (config->mode == ServeMode::work) {
    workers_ = std::make_unique<asio::thread_pool>(config->workers);
  } else {
    backend_ = std::make_unique<Backend>(io_, *config);
  }
  directory_ = build_directory(config, nullptr);
  live_ = std::make_unique<LiveView>(*this);
  listen();
  join_fleet();
}

Server::~Server() {
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
    dir->by_key.emplace(digest(t.key), entry);
    dir->by_name.emplace(t.name, std::move(entry));
  }
  return dir;
}

void Server::retire(const std::shared_ptr<Tenant>& tenant) {
  tenant->removed.store(true, std::memory_order_relaxed);  // FIFO: read under its mutex
  std::vector<Pending*> handed_back = scheduler_->remove(*tenant);
  log("tenant " + tenant->name + " removed; " + std::to_string(handed_back.size()) +
      " queued requests answered 503");
  for (Pending* p : handed_back) {
    refuse(std::unique_ptr<Exchange>(static_cast<Exchange*>(p)), 503,
           "tenant removed from the configuration\n", 1);
  }
}

void Server::reload() {
  std::lock_guard one_at_a_time(reload_mutex_);
  ConfigResult loaded = load_config(options_.config_path);
  if (auto* why = std::get_if<std::string>(&loaded)) {
    log("reload refused, old configuration kept: " + *why);
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

void Server::accept_request(std::unique_ptr<Exchange> e) {
  outstanding_.fetch_add(1, std::memory_order_relaxed);  // read under outstanding_mutex_ at stop
  if (stopping()) {
    refuse(std::move(e), 503, "shutting down\n", 1);
    return;
  }
  const std::shared_ptr<const Directory> dir = directory();
  const std::optional<std::string_view> key = bearer(e->request);
  const auto found = key ? dir->by_key.find(digest(*key)) : dir->by_key.end();
  if (found == dir->by_key.end()) {
    refuse(std::move(e), 401, key ? "unknown key\n" : "Authorization: Bearer KEY required\n");
    return;
  }
  const TenantEntry& entry = found->second;
  e->tenant = entry.tenant;
  const ServerConfig& config = *dir->config;
  if (config.mode == ServeMode::work) {
    const std::string_view target(e->request.target().data(), e->request.target().size());
    const auto q = target.find('?');
    if (target.substr(0, q) != "/work") {
      refuse(std::move(e), 404, "not found: requests go to /work?cpu_ms=N&wait_ms=M\n");
      return;
    }
    auto args = parse_work(q == std::string_view::npos ? "" : target.substr(q + 1), config.work);
    if (auto* why = std::get_if<std::string>(&args)) {
      refuse(std::move(e), 400, *why + "\n");
      return;
    }
    e->cpu_ms = std::get<WorkArgs>(args).cpu_ms;
    e->wait_ms = std::get<WorkArgs>(args).wait_ms;
  }
  Tenant& tenant = *e->tenant;
  if (entry.queue_limit > 0 && tenant.queued.load(std::memory_order_relaxed) >= entry.queue_limit) {
    const auto next = scheduler_->next_credit(tenant);
    const long retry =
        next ? std::max<long>(
                   1, static_cast<long>(std::ceil(std::chrono::duration<double>(*next).count())))
             : 1;
    refuse(std::move(e), 429, "queue limit reached\n", retry);
    return;
  }
  e->arrived = Clock::now();
  const Status s = scheduler_->submit(tenant, *e);
  if (!s) {
    refuse(std::move(e), 503, s.error() == Errc::shut_down ? "shutting down\n" : "tenant removed\n",
           1);
    return;
  }
  (void)e.release();  // the scheduler's until start_request(), then the request's own path's
}

void Server::start_request(Pending& p) {
  auto& e = static_cast<Exchange&>(p);
  if (workers_) {
    asio::post(*workers_, [this, &e] { run_work(e); });
    return;
  }
  asio::post(io_, [this, &e] {
    backend_->forward(e.request, e.tenant->name, [this, &e](BackendResult r) {
      const double cost = r.cost ? *r.cost : r.elapsed_ms / directory()->config->cost_unit_ms;
      Response res;
      if (r.response) {
        res = std::move(*r.response);
        res.version(e.request.version());
        res.keep_alive(e.request.keep_alive());
      } else {
        res = make_response(e.request, static_cast<http::status>(r.status),
                            "backend " + std::string(r.status == 504 ? "timed out" : "failed") +
                                ": " + r.error + "\n");
      }
      finish(e, cost, std::move(res));
    });
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
    finish(e, cost,
           make_response(e.request, http::status::ok, body.dump() + "\n", "application/json"));
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

void Server::finish(Exchange& e, double cost, Response response) {
  scheduler_->complete(e, cost);  // from here the exchange is ours alone
  Tenant& t = *e.tenant;
  const double wait_ms = ms_between(e.arrived, e.started);
  t.served[e.out].fetch_add(1, std::memory_order_relaxed);  // statistics: no ordering
  t.cost_charged_nano.fetch_add(static_cast<std::uint64_t>(to_nano_credits(cost)),
                                std::memory_order_relaxed);
  t.wait_seconds->Observe(wait_ms / 1e3);
  live_->record(e, Clock::now(), cost);
  char buf[32];
  response.set("X-Creditloop-Class", e.fifo ? std::string("fifo") : class_name(e.out));
  std::snprintf(buf, sizeof buf, "%.3f", wait_ms);
  response.set("X-Creditloop-Wait-Ms", buf);
  std::snprintf(buf, sizeof buf, "%.6f", cost);
  response.set("X-Creditloop-Cost", buf);
  answer(std::unique_ptr<Exchange>(&e), std::move(response));
}

void Server::refuse(std::unique_ptr<Exchange> e, unsigned status, const std::string& why,
                    long retry_after_s) {
  Response res = make_response(e->request, static_cast<http::status>(status), why);
  if (retry_after_s > 0) res.set(http::field::retry_after, std::to_string(retry_after_s));
  if (status == 401) res.set(http::field::www_authenticate, "Bearer");
  answer(std::move(e), std::move(res));
}

void Server::answer(std::unique_ptr<Exchange> e, Response response) {
  std::shared_ptr<Session> session = std::move(e->session);
  e.reset();
  session->respond(std::move(response));  // calls answered() once written
}

void Server::answered() {
  // The last decrement is published by the mutex the notification takes, which the waiter in
  // begin_stop() holds while it reads the count: relaxed is enough for the count itself.
  if (outstanding_.fetch_sub(1, std::memory_order_relaxed) == 1 && stopping()) {
    std::lock_guard lock(outstanding_mutex_);
    outstanding_done_.notify_all();
  }
}

void Server::begin_stop() {
  if (stopping_.exchange(true, std::memory_order_relaxed)) return;  // advisory flag; see stopping()
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  admin_acceptor_.close(ignored);
  const auto deadline = directory()->config->shutdown_deadline;
  log("stopping: no new connections; queued requests are answered 503");
  stopper_ = std::thread([this, deadline] {
    const auto until = Clock::now() + deadline;
    if (fleet_) fleet_->stop();
    std::vector<Pending*> handed_back = scheduler_->stop(deadline);
    for (Pending* p : handed_back) {
      refuse(std::unique_ptr<Exchange>(static_cast<Exchange*>(p)), 503, "shutting down\n", 1);
    }
    std::unique_lock lock(outstanding_mutex_);
    const bool drained = outstanding_done_.wait_until(
        lock, until, [this] { return outstanding_.load(std::memory_order_relaxed) == 0; });
    lock.unlock();
    if (!drained) {
      log("deadline passed with " + std::to_string(outstanding_.load(std::memory_order_relaxed)) +
          " requests unanswered");
      std::fflush(nullptr);
      std::_Exit(1);  // what is in flight cannot complete without the threads we now stop
    }
    // Every answer has been written (answered() counts at the end of the write).
    asio::post(io_, [this] { io_.stop(); });
  });
}

void Server::accept(tcp::acceptor& acceptor, bool admin) {
  acceptor.async_accept(asio::make_strand(io_),
                        [this, &acceptor, admin](boost::system::error_code ec, tcp::socket s) {
                          if (ec == asio::error::operation_aborted)
                            return;  // closed: the server is stopping
                          if (!ec) {
                            boost::system::error_code ignored;
                            s.set_option(tcp::no_delay(true), ignored);
                            std::make_shared<Session>(std::move(s), *this, admin)->start();
                          }
                          accept(acceptor, admin);
                        });
}

void Server::wait_for_signal() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
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
  for (unsigned i = 1; i < c.io_threads; ++i) threads.emplace_back([this] { io_.run(); });
  io_.run();
  for (std::thread& t : threads) t.join();
  live_->stop();
  if (stopper_.joinable()) stopper_.join();
  if (reloader_.joinable()) reloader_.join();
  log("stopped");
  return exit_status_;
}

}  // namespace creditloop::server
