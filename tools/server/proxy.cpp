#include "proxy.hpp"

#include <sys/ioctl.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <system_error>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include "backend.hpp"
#include "forwarding.hpp"
#include "server.hpp"
#include "session.hpp"

namespace creditloop::server {

namespace asio = boost::asio;
namespace beast = boost::beast;

namespace {

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

auto redirect(beast::error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

bool expects_continue(const RequestHead& req) {
  const auto it = req.find(http::field::expect);
  return it != req.end() && beast::iequals(it->value(), "100-continue");
}

// Sending a request again on a fresh connection is safe only where repeating it is (RFC 9110
// section 9.2.2), and only when it had no body (a streamed body cannot be sent twice).
bool repeatable(const RequestHead& req, bool body) {
  const http::verb m = req.method();
  return !body && (m == http::verb::get || m == http::verb::head || m == http::verb::options ||
                   m == http::verb::put || m == http::verb::delete_);
}

// Whether the socket has bytes the kernel already holds: a response still arriving in one burst,
// as opposed to a backend that paused (a stream).
bool more_waiting(Backend::Connection& c) {
  int n = 0;
  return ::ioctl(c.stream.socket().native_handle(), FIONREAD, &n) == 0 && n > 0;
}

std::optional<double> cost_from(const http::fields& f, const std::string& name) {
  if (name.empty()) return std::nullopt;
  const auto it = f.find(name);
  if (it == f.end()) return std::nullopt;
  try {
    std::size_t used = 0;
    const std::string text(it->value());
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v) && v >= 0) return v;
  } catch (const std::exception&) {
    // a malformed header counts as absent: the time is charged
  }
  return std::nullopt;
}

bool bodiless(unsigned status) { return status == 204 || status == 304 || status < 200; }

// A head as Beast's serializer would send it (its own `writer`, so the bytes are the same), copied
// into `room`; 0 when it does not fit. A message whose body is all in hand then goes out as head
// and body in one gathered write: Beast's serializer walks its view of every field's buffer again
// on each step of a write, and that walk was about a sixth of a proxied request's instructions
// (callgrind).
template <bool isRequest>
std::size_t copy_head(const http::header<isRequest>& h, char* room, std::size_t size) {
  const auto writer = [&h] {
    if constexpr (isRequest) {
      return http::fields::writer(h, h.version(), h.method());
    } else {
      return http::fields::writer(h, h.version(), h.result_int());
    }
  };
  const http::fields::writer w = writer();
  const auto pieces = w.get();
  if (beast::buffer_bytes(pieces) > size) return 0;
  return asio::buffer_copy(asio::buffer(room, size), pieces);
}

// One exchange's state: what is needed to settle it on whatever path it ends.
class Exchanger {
 public:
  Exchanger(Server& server, Backend& backend, ClientSide client, Exchange& e)
      : server_(server),
        backend_(backend),
        client_(client),
        e_(e),
        config_(*server.directory()->config) {}

  asio::awaitable<ProxyOutcome> run();

 private:
  asio::awaitable<bool> send_request();
  void frame_request(http::request<http::buffer_body>& forward, bool body) const;
  asio::awaitable<bool> send_body_from_file(http::request<http::buffer_body>& forward,
                                            http::request_serializer<http::buffer_body>& sr,
                                            beast::error_code& ec);
  asio::awaitable<bool> stream_client_body(http::request<http::buffer_body>& forward,
                                           http::request_serializer<http::buffer_body>& sr,
                                           beast::error_code& ec);
  void expect_response();
  asio::awaitable<void> answer_backend_failure(const beast::error_code& ec);
  asio::awaitable<bool> read_response_head();
  asio::awaitable<void> relay_response();
  bool frame_response(http::response<http::buffer_body>& res, boost::optional<std::uint64_t> length,
                      std::size_t got, bool whole) const;
  asio::awaitable<std::size_t> fill(beast::error_code& ec);
  asio::awaitable<void> answer_error(unsigned status, const std::string& why);

  void settle() {
    if (e_.cost) return;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - e_.started).count();
    server_.finish(e_, named_cost_ ? *named_cost_ : ms / config_.cost_unit_ms);
  }
  void drop_connection() {
    if (!conn_) return;
    beast::error_code ignored;
    conn_->stream.socket().close(ignored);
    conn_.reset();
  }
  [[nodiscard]] bool client_body_pending() const { return !e_.parser->is_done(); }

  Server& server_;
  Backend& backend_;
  ClientSide client_;
  Exchange& e_;
  const ServerConfig& config_;
  std::unique_ptr<Backend::Connection> conn_;
  std::optional<http::response_parser<http::buffer_body>> response_;
  std::optional<double> named_cost_;
  std::size_t header_fields_ = 0;  // of the final response: what follows them are trailers
  bool backend_timed_out_ = false;
  ProxyOutcome out_;
};

asio::awaitable<ProxyOutcome> Exchanger::run() {
  const RequestHead& req = e_.head();
  if (client_body_pending() && expects_continue(req)) {
    beast::error_code ec;
    client_.stream.expires_after(config_.limits.send_timeout);
    co_await asio::async_write(client_.stream, asio::buffer(kContinue.data(), kContinue.size()),
                               redirect(ec));
    if (ec) {
      settle();
      co_return out_;  // the client is gone
    }
  }
  if (!co_await send_request()) co_return out_;
  if (!co_await read_response_head()) co_return out_;
  co_await relay_response();
  co_return out_;
}

// Sends the head and streams the body; a reused connection that fails before any response byte
// is replaced once for a repeatable request. The retry must see the whole attempt (what was
// sent, on which connection): the attempt's loop stays here, its steps are the helpers below.
asio::awaitable<bool> Exchanger::send_request() {
  const RequestHead& req = e_.head();
  // A buffered body goes with its length: in one write from memory, or a scratch buffer at a
  // time from its file; a pending one streams as it arrives.
  const bool buffered = e_.body_buffered;
  const bool body = buffered ? !e_.body.empty() : client_body_pending();
  const bool from_file = buffered && e_.body.in_file();
  http::request<http::buffer_body> forward;
  frame_request(forward, body);
  beast::error_code ec;
  for (int attempt = 0;; ++attempt) {
    conn_ = co_await backend_.lease(ec);
    if (!conn_) {
      backend_timed_out_ = ec == beast::error::timeout;
      co_await answer_error(backend_timed_out_ ? 504 : 502, "cannot connect: " + ec.message());
      co_return false;
    }
    const bool retry = conn_->reused && attempt == 0 && repeatable(req, body);
    http::request_serializer<http::buffer_body> sr{forward};
    const bool in_memory = buffered && body && !from_file;
    forward.body().data = in_memory ? e_.body.memory().data() : nullptr;
    forward.body().size = in_memory ? e_.body.memory().size() : 0;
    forward.body().more = body && (!buffered || from_file);
    conn_->stream.expires_after(backend_.timeout());
    // All in hand (no body, or one in memory): head and body in one write, the head in the
    // scratch buffer, which nothing else uses before the response.
    const std::size_t head = forward.body().more || forward.chunked()
                                 ? 0
                                 : copy_head(forward.base(), client_.scratch, client_.scratch_size);
    if (head > 0) {
      const std::array<asio::const_buffer, 2> whole{
          asio::buffer(client_.scratch, head),
          asio::buffer(forward.body().data, forward.body().size)};
      co_await asio::async_write(conn_->stream, whole, redirect(ec));
    } else {
      co_await http::async_write(conn_->stream, sr, redirect(ec));
    }
    if (ec == http::error::need_buffer) ec = {};
    if (from_file) {
      if (!co_await send_body_from_file(forward, sr, ec)) co_return false;
    }
    if (body) {
      if (!co_await stream_client_body(forward, sr, ec)) co_return false;
    }
    if (!ec) {
      // Sent whole: its memory and its file are not needed for the response, however long.
      if (buffered) e_.body.release();
      expect_response();
      conn_->stream.expires_after(backend_.timeout());
      co_await http::async_read_header(conn_->stream, conn_->buffer, *response_, redirect(ec));
      if (!ec) co_return true;
      if (retry && !response_->got_some() && ec != beast::error::timeout) {
        drop_connection();
        continue;
      }
    } else if (retry && ec != beast::error::timeout) {
      drop_connection();
      continue;
    }
    co_await answer_backend_failure(ec);
    co_return false;
  }
}

// The backend's head for the request, framed as its body will be sent: a buffered body goes
// with its length, a pending one with the client's length or else chunked.
void Exchanger::frame_request(http::request<http::buffer_body>& forward, bool body) const {
  backend_head(e_.head(),
               Forwarded{e_.tenant->name, e_.client_address, config_.proxy.host, backend_.address(),
                         e_.request_id, e_.header_fields},
               forward.base());
  if (e_.body_buffered) {
    if (e_.parser->content_length() || e_.parser->chunked()) forward.content_length(e_.body.size());
  } else if (const auto length = e_.parser->content_length()) {
    forward.content_length(*length);
  } else if (body) {
    forward.chunked(true);
  }
}

// A buffered body's file, a scratch buffer at a time; false when the exchange is answered.
asio::awaitable<bool> Exchanger::send_body_from_file(
    http::request<http::buffer_body>& forward, http::request_serializer<http::buffer_body>& sr,
    beast::error_code& ec) {
  for (std::uint64_t sent = 0; !ec && sent < e_.body.size();) {
    std::size_t got = 0;
    if (const std::error_code disk =
            e_.body.read_at(sent, {client_.scratch, client_.scratch_size}, got)) {
      // The backend has part of a request it will never see whole: its connection goes.
      drop_connection();
      std::fprintf(stderr, "creditloop-server: cannot read a buffered request body back: %s\n",
                   disk.message().c_str());
      co_await answer_error(500, "cannot read the buffered request body");
      co_return false;
    }
    sent += got;
    forward.body().data = client_.scratch;
    forward.body().size = got;
    forward.body().more = sent < e_.body.size();
    conn_->stream.expires_after(backend_.timeout());
    co_await http::async_write(conn_->stream, sr, redirect(ec));
    if (ec == http::error::need_buffer) ec = {};
  }
  co_return true;
}

// A pending body, as it arrives from the client; false when the exchange is answered.
asio::awaitable<bool> Exchanger::stream_client_body(http::request<http::buffer_body>& forward,
                                                    http::request_serializer<http::buffer_body>& sr,
                                                    beast::error_code& ec) {
  while (!ec && !e_.parser->is_done()) {
    auto& in = e_.parser->get().body();
    in.data = client_.scratch;
    in.size = client_.scratch_size;
    client_.stream.expires_after(config_.limits.read_timeout);
    beast::error_code client_ec;
    co_await http::async_read_some(client_.stream, client_.buffer, *e_.parser, redirect(client_ec));
    if (client_ec == http::error::need_buffer) client_ec = {};
    if (client_ec) {
      // The client's body broke off or was malformed: the backend got part of a request.
      drop_connection();
      server_.bad_requests.fetch_add(1, std::memory_order_relaxed);  // a statistic
      const bool malformed = client_ec != beast::error::timeout && client_ec != asio::error::eof &&
                             client_ec != http::error::partial_message &&
                             client_ec != asio::error::connection_reset;
      if (malformed) {
        co_await answer_error(client_ec == http::error::body_limit ? 413 : 400,
                              "malformed request body: " + client_ec.message());
      } else {
        settle();
      }
      co_return false;
    }
    const std::size_t n = client_.scratch_size - in.size;
    forward.body().data = n > 0 ? client_.scratch : nullptr;
    forward.body().size = n;
    forward.body().more = !e_.parser->is_done();
    conn_->stream.expires_after(backend_.timeout());
    co_await http::async_write(conn_->stream, sr, redirect(ec));
    if (ec == http::error::need_buffer) ec = {};
  }
  co_return true;
}

// A fresh parser for the backend's next response head.
void Exchanger::expect_response() {
  response_.emplace();
  response_->header_limit(static_cast<std::uint32_t>(Backend::kHeaderBytes));
  response_->body_limit(std::numeric_limits<std::uint64_t>::max());
  if (e_.head().method() == http::verb::head) response_->skip(true);
}

asio::awaitable<void> Exchanger::answer_backend_failure(const beast::error_code& ec) {
  backend_timed_out_ = ec == beast::error::timeout;
  drop_connection();
  co_await answer_error(backend_timed_out_ ? 504 : 502, "backend failed: " + ec.message());
}

// Past the interim responses to the final one's head.
asio::awaitable<bool> Exchanger::read_response_head() {
  beast::error_code ec;
  for (;;) {
    const unsigned status = response_->get().result_int();
    if (status == 101) {
      drop_connection();
      co_await answer_error(502, "backend switched protocols, which this proxy does not carry");
      co_return false;
    }
    if (status >= 200) break;
    // An interim answer (100, 102, 103) is dropped; the final one follows on the same connection.
    expect_response();
    conn_->stream.expires_after(backend_.timeout());
    co_await http::async_read_header(conn_->stream, conn_->buffer, *response_, redirect(ec));
    if (ec) {
      co_await answer_backend_failure(ec);
      co_return false;
    }
  }
  named_cost_ = cost_from(response_->get(), config_.proxy.cost_header);
  const auto& fields = response_->get();
  header_fields_ = static_cast<std::size_t>(std::distance(fields.begin(), fields.end()));
  co_return true;
}

// Reads response body into the scratch buffer until it is full, the body has ended, or (after at
// least one byte) nothing more is in hand: one write to the client per burst of the backend's,
// not one per segment, and a stream's pieces go out as soon as the backend pauses.
asio::awaitable<std::size_t> Exchanger::fill(beast::error_code& ec) {
  auto& body = response_->get().body();
  std::size_t got = 0;
  while (!response_->is_done() && got < client_.scratch_size) {
    body.data = client_.scratch + got;
    body.size = client_.scratch_size - got;
    conn_->stream.expires_after(backend_.timeout());
    co_await http::async_read_some(conn_->stream, conn_->buffer, *response_, redirect(ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) break;
    got = client_.scratch_size - body.size;
    if (response_->is_done()) break;  // not asking the kernel: the usual response ends here
    // Nothing more in hand (at most a chunk's closing CRLF, which the parser keeps for the next
    // chunk's header) and nothing in the kernel: the backend paused.
    if (got > 0 && conn_->buffer.size() <= 2 && !more_waiting(*conn_)) break;
  }
  co_return got;
}

// Answers the client: whole when the backend's response is all here, else streamed as it
// arrives, framed as the client can read it. The framing chosen at the head governs every later
// write, so the writes stay in one coroutine.
asio::awaitable<void> Exchanger::relay_response() {
  const RequestHead& req = e_.head();
  auto& backend_res = response_->get();
  const unsigned status = backend_res.result_int();
  const auto length = response_->content_length();  // before the body is read: the whole length
  const bool head_only = req.method() == http::verb::head || bodiless(status);
  beast::error_code ec;

  // Gather what the backend has already sent: a response that is all here is answered whole.
  std::size_t got = co_await fill(ec);
  const bool whole = !ec && response_->is_done();

  http::response<http::buffer_body> res;
  const bool keep_alive = frame_response(res, length, got, whole);

  const auto finish_backend = [this, &ec] {
    // The backend's part is over: its slot goes back before the client has the last bytes.
    settle();
    if (conn_ && !ec && response_->is_done() && response_->keep_alive() &&
        conn_->buffer.size() == 0) {
      backend_.recycle(std::move(conn_));
    } else {
      drop_connection();
    }
  };
  if (whole) finish_backend();
  if (ec && got == 0) {
    backend_timed_out_ = ec == beast::error::timeout;
    finish_backend();
    co_await answer_error(backend_timed_out_ ? 504 : 502, "backend failed: " + ec.message());
    co_return;
  }
  server_.decorate(res, e_);
  res.keep_alive(keep_alive);
  out_.status = status;
  out_.keep_alive = keep_alive;

  http::response_serializer<http::buffer_body> sr{res};
  res.body().data = got > 0 ? client_.scratch : nullptr;
  res.body().size = got;
  res.body().more = !whole && !ec && !head_only;
  client_.stream.expires_after(config_.limits.send_timeout);
  beast::error_code client_ec;
  // All here and framed by its length: head and body in one write, the head in the scratch
  // buffer behind the body.
  const std::size_t head = whole && !res.chunked() ? copy_head(res.base(), client_.scratch + got,
                                                               client_.scratch_size - got)
                                                   : 0;
  if (head > 0) {
    const std::array<asio::const_buffer, 2> answer{asio::buffer(client_.scratch + got, head),
                                                   asio::buffer(client_.scratch, got)};
    co_await asio::async_write(client_.stream, answer, redirect(client_ec));
  } else {
    co_await http::async_write(client_.stream, sr, redirect(client_ec));
    if (client_ec == http::error::need_buffer) client_ec = {};
  }
  out_.bytes += got;
  // Then piece by piece: the next read from the backend waits for the client to take this one.
  while (!client_ec && !ec && !whole && !head_only && !response_->is_done()) {
    const std::size_t n = co_await fill(ec);
    if (ec) break;
    if (response_->is_done()) finish_backend();
    res.body().data = n > 0 ? client_.scratch : nullptr;
    res.body().size = n;
    res.body().more = !response_->is_done();
    client_.stream.expires_after(config_.limits.send_timeout);
    co_await http::async_write(client_.stream, sr, redirect(client_ec));
    if (client_ec == http::error::need_buffer) client_ec = {};
    out_.bytes += n;
  }
  if (ec || client_ec) {
    // Broken off mid-body, by either side: the client cannot be told but by the connection's end.
    out_.keep_alive = false;
    if (ec) backend_timed_out_ = ec == beast::error::timeout;
    drop_connection();
    settle();
  } else if (!e_.cost) {
    finish_backend();
  }
}

// The client's head for the backend's response, framed as the client can read it: `length` as
// the backend announced it, `got` bytes in hand, `whole` when they are all. Returns whether the
// connection is kept alive.
bool Exchanger::frame_response(http::response<http::buffer_body>& res,
                               boost::optional<std::uint64_t> length, std::size_t got,
                               bool whole) const {
  const RequestHead& req = e_.head();
  const auto& backend_res = response_->get();
  const unsigned status = backend_res.result_int();
  const bool head_only = req.method() == http::verb::head || bodiless(status);
  res.result(backend_res.result_int());
  res.reason(backend_res.reason());
  res.version(11);
  copy_end_to_end(backend_res, res, header_fields_);
  bool keep_alive = keeps_alive(req) && !client_body_pending();
  if (head_only) {
    // HEAD keeps the length the backend announced; 204 and 304 carry none.
    if (req.method() == http::verb::head && status >= 200 && !bodiless(status)) {
      if (const auto cl = backend_res.find(http::field::content_length); cl != backend_res.end()) {
        res.set(http::field::content_length, cl->value());
      }
    }
  } else if (whole) {
    res.content_length(got);
  } else if (length) {
    res.content_length(*length);
  } else if (req.version() >= 11) {
    res.chunked(true);
  } else {
    keep_alive = false;  // HTTP/1.0: the close marks the end
  }
  return keep_alive;
}

asio::awaitable<void> Exchanger::answer_error(unsigned status, const std::string& why) {
  settle();
  const bool body_pending = client_body_pending();
  Response res = make_response(e_.head(), static_cast<http::status>(status),
                               (status >= 502 ? "backend: " : "") + why + "\n");
  server_.decorate(res, e_);
  // A body the client is still sending would be read as its next request: close instead.
  if (body_pending) res.keep_alive(false);
  out_.status = status;
  out_.bytes = res.body().size();
  out_.keep_alive = res.keep_alive();
  beast::error_code ec;
  client_.stream.expires_after(config_.limits.send_timeout);
  co_await http::async_write(client_.stream, res, redirect(ec));
  if (ec) out_.keep_alive = false;
}

}  // namespace

asio::awaitable<ProxyOutcome> proxy(Server& server, Backend& backend, ClientSide client,
                                    Exchange& e) {
  Exchanger x(server, backend, client, e);
  co_return co_await x.run();
}

}  // namespace creditloop::server
