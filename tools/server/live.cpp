#include "live.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/write.hpp>  // operator<< for the header
#include <nlohmann/json.hpp>

#include "admin.hpp"
#include "picture_template.hpp"
#include "server.hpp"

namespace creditloop::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using nlohmann::json;

/// One client of /ui/events: what it has not yet been sent, written in order on its connection's
/// thread.
class LiveStream : public std::enable_shared_from_this<LiveStream> {
 public:
  explicit LiveStream(tcp::socket socket) : socket_(std::move(socket)) {}

  /// Queues bytes for the client. Any thread.
  void send(std::shared_ptr<const std::string> bytes) {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), bytes = std::move(bytes)]() mutable {
                 self->enqueue(std::move(bytes));
               });
  }
  /// Closes the connection once what is queued is written. Any thread.
  void finish() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->finish_after_ = true;
      if (!self->writing_) self->shut();
    });
  }
  /// Closes it now. Any thread.
  void close() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->shut(); });
  }
  /// Advisory: a stream found closed is let go at the next tick; a stale answer costs one tick.
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_relaxed); }

 private:
  void enqueue(std::shared_ptr<const std::string> bytes) {
    if (closed()) return;
    backlog_ += bytes->size();
    if (backlog_ > LiveView::kMaxBacklogBytes) {  // it does not keep up: drop it
      shut();
      return;
    }
    queue_.push_back(std::move(bytes));
    if (!writing_) write_next();
  }
  void write_next() {
    if (queue_.empty()) {
      writing_ = false;
      if (finish_after_) shut();
      return;
    }
    writing_ = true;
    asio::async_write(socket_, asio::buffer(*queue_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (self->queue_.empty()) return;  // shut() while writing
                        self->backlog_ -= self->queue_.front()->size();
                        self->queue_.pop_front();
                        if (ec) {
                          self->shut();
                          return;
                        }
                        self->write_next();
                      });
  }
  void shut() {
    closed_.store(true, std::memory_order_relaxed);  // read by closed(); advisory
    queue_.clear();
    backlog_ = 0;
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  std::deque<std::shared_ptr<const std::string>> queue_;
  std::size_t backlog_ = 0;
  bool writing_ = false;
  bool finish_after_ = false;
  std::atomic<bool> closed_{false};
};

namespace {

std::string path_of(const Request& request) {
  const std::string_view target(request.target().data(), request.target().size());
  return std::string(target.substr(0, target.find('?')));
}

// Credits to 6 decimals, as the simulator's trace prints them.
double six_places(double v) { return std::round(v * 1e6) / 1e6; }

std::shared_ptr<const std::string> bytes(std::string s) {
  return std::make_shared<const std::string>(std::move(s));
}

std::string sse(std::string_view event, const std::string& data) {
  std::string out;
  out.reserve(data.size() + event.size() + 16);
  out += "event: ";
  out += event;
  out += "\ndata: ";
  out += data;  // JSON dumped on one line: no newline to split
  out += "\n\n";
  return out;
}

std::string stream_header(const Request& request, http::status status, const char* type) {
  http::response<http::empty_body> res{status, request.version() == 0 ? 11 : request.version()};
  res.set(http::field::server, "creditloop-server");
  res.set(http::field::content_type, type);
  res.set(http::field::cache_control, "no-cache");
  res.keep_alive(false);  // the body ends with the connection
  std::ostringstream os;
  os << res.base();
  return os.str();
}

}  // namespace

bool wants_live_stream(const Server& server, const Request& request) {
  return request.method() == http::verb::get && path_of(request) == "/ui/events" &&
         admin_admitted(server, request);
}

LiveView::LiveView(Server& server) : server_(server), origin_(Clock::now()) {
  pending_.reserve(1024);
}

LiveView::~LiveView() { stop(); }

void LiveView::start() {
  sampler_ = std::thread([this] { sample_loop(); });
}

void LiveView::stop() {
  std::vector<std::shared_ptr<LiveStream>> streams;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    streams.swap(streams_);
  }
  wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
  for (const auto& s : streams) s->close();
}

std::int64_t LiveView::micros(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

void LiveView::record(const Pending& p, Clock::time_point finished, double cost) {
  Done d;
  d.tenant = p.tenant;
  d.arrived = micros(p.arrived);
  d.started = micros(p.started);
  d.finished = micros(finished);
  d.cls = p.out;
  d.cost = cost;
  std::lock_guard lock(mutex_);
  if (pending_.size() >= kMaxRequests) {
    ++dropped_;
    return;
  }
  pending_.push_back(std::move(d));
}

std::string LiveView::page() {
  constexpr std::string_view marker = "/*@CREDITLOOP_DATA@*/";
  const std::string_view html = sim::kPictureHtml;
  const auto at = html.find(marker);
  if (at == std::string_view::npos) throw std::logic_error("picture.html has no data marker");
  const json data = {
      {"format", "creditloop-picture/1"}, {"title", "creditloop-server"}, {"live", "/ui/events"}};
  std::string out(html.substr(0, at));
  out += data.dump();
  out += html.substr(at + marker.size());
  return out;
}

std::string LiveView::hello_event() const {
  const std::shared_ptr<const Directory> dir = server_.directory();
  const ServerConfig& config = *dir->config;
  const int k = config.plans.classes;
  json classes = json::array();
  for (int c = 0; c <= k; ++c) classes.push_back(class_name(static_cast<ClassId>(c)));
  json plans = json::array();
  for (const Plan& plan : config.plans.plans) {
    json terms = json::array();
    for (int c = 0; c < k; ++c) {
      const auto& t = plan.terms[static_cast<std::size_t>(c)];
      terms.push_back(t ? json::array({t->rate, t->burst}) : json(nullptr));
    }
    plans.push_back({{"name", plan.name}, {"terms", terms}});
  }
  const json hello = {
      {"format", "creditloop-live/1"},
      {"scheduler", server_.scheduler().name()},
      {"classes", classes},
      {"k", k},
      {"slots", config.learned_room ? json("auto") : json(config.slots)},
      {"plans", plans},
      {"window_us", std::chrono::duration_cast<std::chrono::microseconds>(kWindow).count()},
      {"tick_us", std::chrono::duration_cast<std::chrono::microseconds>(kTick).count()},
      {"max_requests", kMaxRequests},
      {"now", micros(Clock::now())}};
  return sse("hello", hello.dump(-1, ' ', false, json::error_handler_t::replace));
}

void LiveView::attach(tcp::socket socket, const Request& request) {
  auto stream = std::make_shared<LiveStream>(std::move(socket));
  const std::string hello = hello_event();
  std::lock_guard lock(mutex_);
  std::erase_if(streams_, [](const auto& s) { return s->closed(); });
  if (stopping_ || streams_.size() >= kMaxStreams) {
    std::string refusal =
        stream_header(request, http::status::service_unavailable, "text/plain; charset=utf-8");
    refusal += "too many live streams (at most " + std::to_string(kMaxStreams) + ")\n";
    stream->send(bytes(std::move(refusal)));
    stream->finish();
    return;
  }
  // Under the mutex, so that no tick is sent between the window and the stream's registration:
  // the client gets each event once, in order.
  stream->send(bytes(stream_header(request, http::status::ok, "text/event-stream") +
                     "retry: 2000\n\n" + hello));
  for (const Kept& k : kept_) stream->send(k.event);
  streams_.push_back(std::move(stream));
}

json LiveView::passes_since_last(const RuntimeSnapshot& loop, int k) {
  json passes = json::array();
  for (int c = 0; c <= k; ++c) {
    const auto i = static_cast<std::size_t>(c);
    passes.push_back(loop.per_class[i].turns - std::min(loop.per_class[i].turns, last_passes_[i]));
    last_passes_[i] = loop.per_class[i].turns;
  }
  return passes;
}

json LiveView::requests_by_tenant(const std::vector<Done>& done) {
  json requests = json::object();
  for (const Done& d : done) {
    json& r = requests[d.tenant->name];
    if (r.is_null()) {
      r = {{"a", json::array()},
           {"d", json::array()},
           {"c", json::array()},
           {"k", json::array()},
           {"cost", json::array()}};
    }
    r["a"].push_back(d.arrived);
    r["d"].push_back(d.started);
    r["c"].push_back(d.finished);
    r["k"].push_back(d.cls);
    r["cost"].push_back(six_places(d.cost));
  }
  return requests;
}

std::shared_ptr<const std::string> LiveView::tick_event(std::int64_t now,
                                                        const std::vector<Done>& done,
                                                        std::uint64_t dropped) {
  const std::shared_ptr<const Directory> dir = server_.directory();
  const int k = dir->config->plans.classes;
  const std::vector<Plan>& plans = dir->config->plans.plans;
  Runtime* rt = server_.scheduler().runtime();
  std::map<std::string, ParticipantSnapshot, std::less<>> snaps;
  RuntimeSnapshot loop;
  if (rt != nullptr) {
    for (ParticipantSnapshot& s : rt->snapshot_participants()) snaps[s.name] = std::move(s);
    loop = rt->snapshot();
  }
  const json passes = passes_since_last(loop, k);
  json tenants = json::array();
  decltype(last_dispatched_) dispatched_now;
  for (const auto& [name, entry] : dir->by_name) {
    const Tenant& t = *entry.tenant;
    json j = {{"name", name}, {"plan", entry.plan}, {"shares", entry.shares}};
    std::array<std::uint64_t, kMaxClasses + 1> counts{};
    bool full = true;  // every bucket at its capacity
    json balance = json::object();
    json next = json::object();
    const auto s = snaps.find(name);
    if (s != snaps.end()) {
      j["queued"] = s->second.queued;
      counts = s->second.stats.dispatched;
      for (int c = 0; c < k; ++c) {
        const auto i = static_cast<std::size_t>(c);
        const std::string cls = class_name(static_cast<ClassId>(c));
        if (const auto& b = s->second.balance[i]) {
          balance[cls] = six_places(to_credits(*b));
          const auto plan = std::find_if(plans.begin(), plans.end(),
                                         [&](const Plan& p) { return p.name == entry.plan; });
          const auto& terms = plan == plans.end() ? std::nullopt : plan->terms[i];
          if (!terms || to_credits(*b) < terms->burst * entry.shares) full = false;
        }
        if (const auto& n = s->second.next_credit[i]) {
          next[cls] = now + (*n - loop.at + 999) / 1000;  // the microsecond it has landed by
        }
      }
    } else {  // FIFO: no runtime, the server's own counters
      j["queued"] = std::max<std::int64_t>(0, t.queued.load(std::memory_order_relaxed));
      for (int c = 0; c <= k; ++c) {
        counts[static_cast<std::size_t>(c)] =
            t.served[static_cast<std::size_t>(c)].load(std::memory_order_relaxed);  // a statistic
      }
    }
    json delta = json::array();
    bool dispatched = false;
    const auto before = last_dispatched_.find(name);
    for (int c = 0; c <= k; ++c) {
      const auto i = static_cast<std::size_t>(c);
      const std::uint64_t was = before == last_dispatched_.end() ? 0 : before->second[i];
      delta.push_back(counts[i] - std::min(counts[i], was));
      dispatched = dispatched || counts[i] > was;
    }
    dispatched_now.emplace(name, counts);
    // An idle tenant (nothing queued or dispatched, full buckets) is left out: with many tenants,
    // the ticks carry the active ones only.
    if (!dispatched && j["queued"].get<std::uint64_t>() == 0 && full) continue;
    j["balance"] = std::move(balance);
    j["next"] = std::move(next);
    j["dispatched"] = std::move(delta);
    tenants.push_back(std::move(j));
  }
  last_dispatched_ = std::move(dispatched_now);

  json tick = {{"t", now},
               {"passes", passes},
               {"tenants", tenants},
               {"requests", requests_by_tenant(done)},
               {"dropped", dropped}};
  if (rt != nullptr && dir->config->learned_room) {
    tick["room"] = {{"slots", rt->room_slots()}, {"latency_us", rt->room_latency() / 1000}};
  }
  return bytes(sse("tick", tick.dump(-1, ' ', false, json::error_handler_t::replace)));
}

void LiveView::sample_loop() {
  std::vector<Done> batch;
  batch.reserve(1024);
  auto next = Clock::now() + kTick;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (wake_.wait_until(lock, next, [this] { return stopping_; })) return;
    next = std::max(next + kTick, Clock::now());
    batch.swap(pending_);  // pending_ keeps the capacity batch had
    const std::uint64_t dropped = std::exchange(dropped_, 0);
    lock.unlock();
    const std::int64_t now = micros(Clock::now());
    std::shared_ptr<const std::string> event = tick_event(now, batch, dropped);
    const std::size_t requests = batch.size();
    batch.clear();
    lock.lock();
    if (stopping_) return;
    kept_.push_back(Kept{now, requests, event});
    kept_requests_ += requests;
    kept_bytes_ += event->size();
    const std::int64_t oldest =
        now - std::chrono::duration_cast<std::chrono::microseconds>(kWindow).count();
    while (!kept_.empty() && (kept_.front().at < oldest || kept_requests_ > kMaxRequests ||
                              kept_bytes_ > kMaxKeptBytes)) {
      kept_requests_ -= kept_.front().requests;
      kept_bytes_ -= kept_.front().event->size();
      kept_.pop_front();
    }
    std::erase_if(streams_, [](const auto& s) { return s->closed(); });
    for (const auto& s : streams_) s->send(event);
  }
}

}  // namespace creditloop::server
