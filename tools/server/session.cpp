#include "session.hpp"

#include <poll.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <limits>
#include <span>
#include <stdexcept>
#include <system_error>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "admin.hpp"
#include "backend.hpp"
#include "forwarding.hpp"
#include "live.hpp"
#include "proxy.hpp"
#include "server.hpp"

namespace creditloop::server {

namespace beast = boost::beast;
namespace asio = boost::asio;

namespace {

auto redirect(beast::error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr std::size_t kReadAhead = 16 * 1024;
constexpr std::size_t kLingerBytes = 4 * 1024;
constexpr std::size_t kLingerMost = std::size_t{1} << 20;

bool expects_continue(const RequestHead& req) {
  const auto it = req.find(http::field::expect);
  return it != req.end() && beast::iequals(it->value(), "100-continue");
}

// The end of a connection, not a fault of the request: closed quietly.
bool gone(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == beast::error::timeout ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::operation_aborted || ec == http::error::partial_message;
}

// Whether the request line read so far is `METHOD TARGET HTTP/D.D`, refused by the parser for
// its version's number rather than its form.
bool well_formed_version(const beast::flat_buffer& buffer) {
  const std::string_view seen(static_cast<const char*>(buffer.data().data()), buffer.size());
  const std::string_view line = seen.substr(0, seen.find("\r\n"));
  if (line.size() < 9 || line.size() == seen.size()) return false;
  const std::string_view v = line.substr(line.size() - 8);
  return std::count(line.begin(), line.end(), ' ') == 2 && v.substr(0, 5) == "HTTP/" &&
         std::isdigit(static_cast<unsigned char>(v[5])) && v[6] == '.' &&
         std::isdigit(static_cast<unsigned char>(v[7])) && line[line.size() - 9] == ' ';
}

}  // namespace

Response make_response(const RequestHead& request, http::status status, std::string body,
                       const char* content_type) {
  Response res{status, request.version() == 0 ? 11 : request.version()};
  res.set(http::field::server, "creditloop-server");
  res.set(http::field::content_type, content_type);
  res.keep_alive(request.version() == 0 ? true : keeps_alive(request));
  res.body() = std::move(body);
  res.content_length(res.body().size());
  if (status == http::status::no_content || status == http::status::not_modified) {
    res.erase(http::field::content_length);
    res.body().clear();
  }
  return res;
}

Session::Session(asio::ip::tcp::socket socket, Server& server, bool admin, Backend* backend)
    : stream_(std::move(socket)),
      server_(server),
      backend_(backend),
      admin_(admin),
      wake_(stream_.get_executor()),
      queue_timer_(stream_.get_executor()),
      hangup_check_(stream_.get_executor()) {
  server_.connections_open.fetch_add(1, std::memory_order_relaxed);  // a gauge
  beast::error_code ec;
  const auto peer = stream_.socket().remote_endpoint(ec);
  address_ = ec ? std::string("unknown") : peer.address().to_string();
  // The departure watch reads whatever is waiting without blocking the thread.
  stream_.socket().non_blocking(true, ec);
}

Session::~Session() {
  server_.connections_open.fetch_sub(1, std::memory_order_relaxed);
  if (!admin_) server_.connection_closed(address_);
}

void Session::start() {
  asio::co_spawn(
      stream_.get_executor(), [self = shared_from_this()] { return self->serve(); },
      [](const std::exception_ptr& error) {
        // No exception may leave an I/O handler: one request's fault ends only its
        // connection.
        if (!error) return;
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "creditloop-server: a connection failed: %s\n", e.what());
        } catch (...) {
          std::fprintf(stderr, "creditloop-server: a connection failed\n");
        }
      });
}

void Session::notify(Event event) {
  asio::post(stream_.get_executor(), [self = shared_from_this(), event] { self->on_event(event); });
}

void Session::on_event(unsigned events) {
  events_ |= events;
  wake_.cancel();
}

asio::awaitable<unsigned> Session::next_event() {
  while (events_ == 0) {
    wake_.expires_at(asio::steady_timer::time_point::max());
    beast::error_code ec;
    co_await wake_.async_wait(redirect(ec));
  }
  turn_events_ |= events_;
  co_return std::exchange(events_, 0u);
}

void Session::close() {
  beast::error_code ignored;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  stream_.socket().close(ignored);
}

char* Session::scratch(std::size_t& size) {
  if (!scratch_) {
    const std::uint64_t wanted = server_.directory()->config->limits.body_bytes;
    scratch_size_ = static_cast<std::size_t>(std::clamp<std::uint64_t>(wanted, 16384, 65536));
    scratch_ = std::make_unique_for_overwrite<char[]>(
        scratch_size_);  // not zeroed: only read after written
  }
  size = scratch_size_;
  return scratch_.get();
}

asio::awaitable<void> Session::serve() {
  co_await serve_exchanges();
  // Here and not in write(): the exchange that closed has let go by now, so that its access
  // line is written and a shutdown does not wait out a lingering client.
  if (lingering_) co_await linger_close();
}

asio::awaitable<void> Session::serve_exchanges() {
  buffer_.max_size(server_.directory()->config->limits.header_bytes + kReadAhead);
  for (;;) {
    const std::shared_ptr<const Directory> dir = server_.directory();
    const Limits& limits = dir->config->limits;
    beast::error_code ec;
    if (buffer_.size() == 0) {
      // An idle connection holds no relay buffer: thousands of kept-alive clients would
      // otherwise keep up to 64 KiB each (one allocation a request is the cheaper cost).
      scratch_.reset();
      // Between requests a kept-alive connection may idle this long; once a byte arrives, the
      // whole head must follow within the read timeout, however slowly it trickles.
      stream_.expires_after(limits.idle_timeout);
      const std::size_t n = co_await stream_.async_read_some(buffer_.prepare(4096), redirect(ec));
      if (ec) {
        close();
        co_return;
      }
      buffer_.commit(n);
    }
    http::request_parser<http::empty_body> head;
    head.header_limit(limits.header_bytes);
    // The body's limits are checked once the head is authenticated (read_body, proxy.hpp).
    head.body_limit(std::numeric_limits<std::uint64_t>::max());
    request_deadline_ = Clock::now() + limits.read_timeout;
    stream_.expires_at(request_deadline_);
    co_await http::async_read_header(stream_, buffer_, head, redirect(ec));
    if (ec) {
      co_await refuse_head(ec);
      co_return;
    }
    bool more = false;
    if (admin_) {  // not a conditional expression: GCC 12 mis-sequences co_await in those
      more = co_await serve_admin(head);
    } else {
      more = co_await serve_tenant(head);
    }
    if (!more) co_return;
  }
}

asio::awaitable<void> Session::refuse_head(beast::error_code ec) {
  if (gone(ec)) {
    close();
    co_return;
  }
  server_.bad_requests.fetch_add(1, std::memory_order_relaxed);  // a statistic
  RequestHead blank;
  blank.version(11);
  http::status status = http::status::bad_request;
  std::string why = "malformed request: " + ec.message() + "\n";
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    status = http::status::request_header_fields_too_large;
    why = "request header too large\n";
  } else if (ec == http::error::bad_version && well_formed_version(buffer_)) {
    status = http::status::http_version_not_supported;  // nginx: 505 for HTTP/2.0
    why = "HTTP version not supported: 1.0 and 1.1 are\n";
  }
  Response res = make_response(blank, status, why);
  co_await write(res, true);
}

asio::awaitable<bool> Session::serve_admin(http::request_parser<http::empty_body>& head) {
  http::request_parser<http::string_body> parser{std::move(head)};
  parser.body_limit(64 * 1024);  // the admin endpoints take no body worth more
  beast::error_code ec;
  if (!parser.is_done()) {
    co_await http::async_read(stream_, buffer_, parser, redirect(ec));
    if (ec) {
      co_await refuse_head(ec == http::error::body_limit ? http::error::header_limit : ec);
      co_return false;
    }
  }
  stream_.expires_never();
  Request request = parser.release();
  if (wants_live_stream(server_, request)) {  // the connection becomes the event stream
    server_.live().attach(stream_.release_socket(), request);
    co_return false;
  }
  Response res;
  if (is_report(request)) {
    // It waits for the dispatcher's snapshots: on the reports' thread, while this one serves.
    res = co_await asio::co_spawn(
        server_.reports(),
        [&]() -> asio::awaitable<Response> { co_return admin_response(server_, request); },
        asio::use_awaitable);
  } else {
    res = admin_response(server_, request);
  }
  co_return co_await write(res, false);
}

asio::awaitable<bool> Session::serve_tenant(http::request_parser<http::empty_body>& head) {
  auto e = std::make_unique<Exchange>();
  e->session = shared_from_this();
  e->client_address = address_;
  e->parser.emplace(std::move(head));
  ++turn_;
  turn_events_ = 0;
  // From here until this coroutine leaves the exchange, a shutdown waits for its answer.
  const Server::Outstanding outstanding(server_);
  if (std::optional<Response> refusal = server_.admit(*e, keys_)) {
    const bool body_pending = !e->parser->is_done();
    const bool more = co_await write(*refusal, body_pending);
    server_.log_access(*e, refusal->result_int(), refusal->body().size());
    co_return more;
  }
  // The body is read before the request is queued: a client that trickles it holds its
  // connection, never a slot (nginx: proxy_request_buffering).
  const bool proxied = server_.mode() == ServeMode::proxy;
  if (!proxied || server_.directory()->config->proxy.request_buffering) {
    // Not in the condition: GCC 12 fails on a co_await in a short-circuit expression.
    const bool read = co_await read_body(*e, proxied);
    if (!read) co_return false;
  }
  if (std::optional<Response> refusal = server_.submit(*e)) {
    const bool more = co_await write(*refusal, !e->parser->is_done());
    server_.log_access(*e, refusal->result_int(), refusal->body().size());
    co_return more;
  }
  // Queued: the runtime holds `*e` until it hands it out or back, and then, work mode's worker
  // until the work is done. A fault meanwhile must not free it under them.
  std::optional<bool> ended;
  std::exception_ptr fault;
  try {
    ended = co_await wait_turn(e);
    if (!ended && server_.mode() == ServeMode::work) {
      while ((co_await next_event() & Event::answered) == 0) {
      }
    }
  } catch (...) {
    fault = std::current_exception();  // no co_await in a handler: reclaimed below
  }
  if (fault) {
    co_await reclaim(e);
    std::rethrow_exception(fault);
  }
  if (ended) co_return *ended;

  if (server_.mode() == ServeMode::work) {
    const bool more = co_await write(e->answer, false);
    server_.log_access(*e, e->answer.result_int(), e->answer.body().size());
    co_return more;
  }
  // Whatever ends this exchange, an exception included, its slot goes back to the runtime.
  struct SlotBack {
    Server& server;
    Exchange& e;
    ~SlotBack() {
      if (!e.cost) server.finish(e, 0);
    }
  } slot_back{server_, *e};
  std::size_t size = 0;
  char* buffer = scratch(size);
  const ProxyOutcome o =
      co_await proxy(server_, *backend_, ClientSide{stream_, buffer_, buffer, size}, *e);
  server_.log_access(*e, o.status, o.bytes);
  if (!o.keep_alive || server_.stopping()) {
    // A body not relayed (proxy.request_buffering off, answered before its end) is drained as
    // any other, or its unread bytes would reset the connection under the answer.
    end_answered(!e->parser->is_done());
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> Session::read_body(Exchange& e, bool keep) {
  auto& parser = *e.parser;
  e.body_buffered = keep;
  if (parser.is_done()) co_return true;
  const auto& fields = parser.get();
  e.header_fields = static_cast<std::size_t>(std::distance(fields.begin(), fields.end()));
  // Held for the whole read: a reload meanwhile must not free the limits being applied.
  const std::shared_ptr<const Directory> dir = server_.directory();
  const Limits& limits = dir->config->limits;
  parser.body_limit(limits.body_bytes);
  beast::error_code ec;
  if (parser.content_length() && *parser.content_length() > limits.body_bytes) {
    ec = http::error::body_limit;  // refused before a byte of it is read
  }
  if (!ec && expects_continue(parser.get())) {
    co_await asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                               redirect(ec));
  }
  std::error_code disk;
  if (!ec && keep) {
    const auto length = parser.content_length();
    disk = e.body.begin(limits.body_buffer_bytes, dir->config->proxy.body_temp_dir,
                        length ? std::optional<std::uint64_t>(*length) : std::nullopt);
  }
  // A kept body is read straight into its place, a piece at a time: a connection whose body
  // barely moves (or never gets past a chunk header) holds a piece, not the relay buffer.
  std::size_t scratch_size = 0;
  char* const dropped = keep ? nullptr : scratch(scratch_size);
  while (!ec && !disk && !parser.is_done()) {
    const std::span<char> into = keep ? e.body.room() : std::span<char>(dropped, scratch_size);
    parser.get().body().data = into.data();
    parser.get().body().size = into.size();
    // Each read within the body timeout, all of them within the request's deadline.
    stream_.expires_at(std::min(Clock::now() + limits.body_timeout, request_deadline_));
    co_await http::async_read_some(stream_, buffer_, parser, redirect(ec));
    if (ec == http::error::need_buffer) ec = {};
    if (keep) disk = e.body.commit(into.size() - parser.get().body().size);
  }
  if (!ec && !disk && keep && e.body.in_file()) {
    server_.bodies_spilled.fetch_add(1, std::memory_order_relaxed);  // a statistic
  }
  if (disk) {
    server_.body_spill_failures.fetch_add(1, std::memory_order_relaxed);  // a statistic
    // As nginx answers a temporary file it cannot write: the request ends, the server goes on.
    std::fprintf(stderr, "creditloop-server: cannot buffer a request body in \"%s\": %s\n",
                 dir->config->proxy.body_temp_dir.c_str(), disk.message().c_str());
    e.body.release();
    Response res = make_response(e.head(), http::status::internal_server_error,
                                 "cannot buffer the request body\n");
    co_await write(res, true);
    server_.log_access(e, res.result_int(), res.body().size());
    co_return false;
  }
  if (!ec) co_return true;
  e.body.release();
  if (gone(ec)) {
    // Too slow or gone: closed without an answer, as nginx ends a client_body_timeout.
    server_.log_access(e, ec == beast::error::timeout ? 408 : 499, 0);
    close();
    co_return false;
  }
  server_.bad_requests.fetch_add(1, std::memory_order_relaxed);  // a statistic
  const bool too_large = ec == http::error::body_limit;
  Response res = make_response(
      e.head(), too_large ? http::status::payload_too_large : http::status::bad_request,
      too_large ? "request body too large\n" : "malformed request body: " + ec.message() + "\n");
  co_await write(res, true);
  server_.log_access(e, res.result_int(), res.body().size());
  co_return false;
}

asio::awaitable<std::optional<bool>> Session::wait_turn(std::unique_ptr<Exchange>& e) {
  stream_.expires_never();  // the request may now wait its turn as long as it needs
  watch();
  if (const auto timeout = e->queue_timeout; timeout.count() > 0) {
    queue_timer_.expires_after(timeout);
    queue_timer_.async_wait([self = shared_from_this(), turn = turn_](beast::error_code ec) {
      if (!ec && turn == self->turn_) self->on_event(Event::timed_out);
    });
  }
  if (server_.faults_in_turn(*e, false)) throw std::runtime_error("test: a fault while queued");
  bool left = false;  // the client is gone, but the exchange was out of the queue already
  for (;;) {
    const unsigned ev = co_await next_event();
    if ((ev & (Event::departed | Event::timed_out)) != 0 && !left) {
      // Everything the answer needs is taken before the exchange is let go: once abandoned, the
      // dispatcher may free it at any moment.
      const bool client_left = (ev & Event::departed) != 0;
      std::optional<Response> res;
      if (!client_left) res = server_.queue_timeout_answer(*e);
      const std::string line =
          server_.access_line(*e, res ? res->result_int() : 499, res ? res->body().size() : 0);
      if (e->leave_queue(Exchange::Phase::abandoned)) {
        // Withdrawn from the queue off this thread; the session, its buffers and its descriptors
        // (its body's file among them) go now, whatever the withdrawal's outcome.
        e->body.release();
        e->session.reset();
        server_.withdraw(e.release());
        queue_timer_.cancel();
        co_await stop_watching();
        server_.write_access(line);
        if (client_left) {
          server_.departed.fetch_add(1, std::memory_order_relaxed);  // a statistic
          close();
          co_return std::optional<bool>(false);
        }
        server_.timed_out.fetch_add(1, std::memory_order_relaxed);  // a statistic
        co_await write(*res, true);
        co_return std::optional<bool>(false);
      }
      left = client_left;
    }
    if ((ev & Event::dispatched) != 0) break;  // proxy mode
    if ((ev & Event::answered) != 0 &&
        e->phase.load(std::memory_order_acquire) == Exchange::Phase::started) {
      events_ |= Event::answered;  // work mode: done already; written below
      break;
    }
    if ((ev & Event::answered) != 0) {  // handed back: its 503 is ready
      queue_timer_.cancel();
      co_await stop_watching();
      const bool more = co_await write(e->answer, !e->parser->is_done());
      server_.log_access(*e, e->answer.result_int(), e->answer.body().size());
      co_return std::optional<bool>(more);
    }
  }
  if (server_.faults_in_turn(*e, true)) throw std::runtime_error("test: a fault as its turn came");
  queue_timer_.cancel();
  co_await stop_watching();
  if (left) {
    // Its turn came as the client left: nothing is sent to the backend, nothing is charged.
    if (server_.mode() == ServeMode::proxy) {
      server_.finish(*e, 0);
    } else {
      // The work runs regardless; its exchange lives until it is done. (No co_await in a
      // short-circuit condition: GCC 12 evaluates it even when the left side is false.)
      while ((co_await next_event() & Event::answered) == 0) {
      }
    }
    server_.log_access(*e, 499, 0);
    close();
    co_return std::optional<bool>(false);
  }
  co_return std::nullopt;
}

asio::awaitable<void> Session::reclaim(std::unique_ptr<Exchange>& e) {
  queue_timer_.cancel();
  close();            // the fault ends the connection; the watch ends with it
  if (!e) co_return;  // withdrawn already
  if (e->leave_queue(Exchange::Phase::abandoned)) {
    e->body.release();
    e->session.reset();
    server_.withdraw(e.release());
    co_return;
  }
  // Out of the queue: the dispatcher (proxy mode), the worker (work mode) or a hand-back still
  // uses the exchange until the event it sends last. acquire: pairs with the winning acq_rel CAS
  // in leave_queue(), whose side's writes to the exchange this then reads.
  const bool started = e->phase.load(std::memory_order_acquire) == Exchange::Phase::started;
  const unsigned last =
      started && server_.mode() == ServeMode::proxy ? Event::dispatched : Event::answered;
  while ((turn_events_ & last) == 0) co_await next_event();
  if (started) server_.finish(*e, 0);  // its slot back, unless the work's cost settled it
}

void Session::watch() {
  watching_ = true;
  if (buffer_.size() >= buffer_.max_size()) {
    watch_for_hangup();
    return;
  }
  stream_.socket().async_wait(asio::ip::tcp::socket::wait_read,
                              [self = shared_from_this(), turn = turn_](beast::error_code ec) {
                                self->on_readable(ec, turn);
                              });
}

void Session::on_readable(beast::error_code ec, std::uint64_t turn) {
  if (ec || turn != turn_ || !watching_) {
    watching_ = false;
    on_event(Event::watch_ended);
    return;
  }
  // Whatever the client sends while it waits (its body, its next request) is kept for the
  // parser, up to the buffer's bound; the watch goes on while there is room.
  const std::size_t room = std::min<std::size_t>(4096, buffer_.max_size() - buffer_.size());
  const std::size_t n = stream_.socket().read_some(buffer_.prepare(room), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    watch();
    return;
  }
  if (ec) {
    watching_ = false;
    on_event(Event::departed | Event::watch_ended);
    return;
  }
  buffer_.commit(n);
  watching_ = false;
  watch();
  if (!watching_) on_event(Event::watch_ended);
}

void Session::watch_for_hangup() {
  pollfd p{};
  p.fd = stream_.socket().native_handle();
  p.events = POLLRDHUP;
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    watching_ = false;
    on_event(Event::departed | Event::watch_ended);
    return;
  }
  hangup_check_.expires_after(std::chrono::milliseconds(100));
  hangup_check_.async_wait([self = shared_from_this(), turn = turn_](beast::error_code ec) {
    if (ec || turn != self->turn_ || !self->watching_) {
      self->watching_ = false;
      self->on_event(Event::watch_ended);
      return;
    }
    self->watch_for_hangup();
  });
}

asio::awaitable<void> Session::stop_watching() {
  if (!watching_) co_return;
  watching_ = false;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
  hangup_check_.cancel();
  unsigned others = 0;  // what came meanwhile is kept for the caller's next look
  for (;;) {
    const unsigned ev = co_await next_event();
    others |= ev & ~static_cast<unsigned>(Event::watch_ended);
    if ((ev & Event::watch_ended) != 0) break;
  }
  events_ |= others;
}

asio::awaitable<bool> Session::write(Response& res, bool request_unread) {
  if (request_unread || server_.stopping()) res.keep_alive(false);
  const bool close_after = !res.keep_alive();
  beast::error_code ec;
  stream_.expires_after(server_.directory()->config->limits.send_timeout);
  co_await http::async_write(stream_, res, redirect(ec));
  if (ec) {
    close();
    co_return false;
  }
  if (close_after) {
    end_answered(request_unread);
    co_return false;
  }
  co_return true;
}

void Session::end_answered(bool request_unread) {
  // nginx's rule (ngx_http_set_lingering_close): linger only when more may come, that is when the
  // request was not read whole, or bytes are read ahead or wait in the socket. A connection with
  // nothing unread is closed at once: a client that keeps its end open would otherwise hold it
  // for a whole lingering timeout.
  beast::error_code ec;
  lingering_ = request_unread || buffer_.size() != 0 || stream_.socket().available(ec) != 0 || ec;
  if (!lingering_) {
    close();
    return;
  }
  // The answer's end, for the client, at once; what it still sends is drained by serve().
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
}

asio::awaitable<void> Session::linger_close() {
  beast::error_code ec;
  // Bytes read only to be dropped need no more room than nginx gives them (its lingering
  // buffer, 4 KiB): the relay buffer goes, and the read-ahead, whose bytes are dropped too, is
  // kept only if it is no larger.
  scratch_.reset();
  buffer_.clear();
  if (buffer_.capacity() > kLingerBytes) buffer_.shrink_to_fit();
  // nginx's rule: each read waits at most lingering_timeout, and all of them together
  // lingering_time. A drain also ends after kLingerMost bytes, which nginx does not bound: a
  // client that streams fast would otherwise keep this thread reading for the whole time.
  const std::shared_ptr<const Directory> dir = server_.directory();
  const Limits& limits = dir->config->limits;
  const auto until = std::chrono::steady_clock::now() + limits.lingering_time;
  std::size_t drained = 0;
  while (!ec && drained < kLingerMost) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    stream_.expires_after(std::min(left, limits.lingering_timeout));
    drained += co_await stream_.async_read_some(buffer_.prepare(kLingerBytes), redirect(ec));
  }
  stream_.socket().close(ec);
}

}  // namespace creditloop::server
