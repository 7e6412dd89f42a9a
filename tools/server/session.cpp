#include "session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "admin.hpp"
#include "live.hpp"
#include "server.hpp"

namespace creditloop::server {

namespace beast = boost::beast;
namespace asio = boost::asio;

Response make_response(const Request& request, http::status status, std::string body,
                       const char* content_type) {
  Response res{status, request.version() == 0 ? 11 : request.version()};
  res.set(http::field::server, "creditloop-server");
  res.set(http::field::content_type, content_type);
  res.keep_alive(request.version() == 0 ? true : request.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

Session::Session(asio::ip::tcp::socket socket, Server& server, bool admin)
    : stream_(std::move(socket)), server_(server), admin_(admin) {
  server_.connections_open.fetch_add(1, std::memory_order_relaxed);  // a gauge
}

Session::~Session() { server_.connections_open.fetch_sub(1, std::memory_order_relaxed); }

void Session::start() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_next(); });
}

void Session::read_next() {
  const std::shared_ptr<const Directory> dir = server_.directory();
  const Limits& limits = dir->config->limits;
  parser_ = std::make_unique<http::request_parser<http::string_body>>();
  parser_->header_limit(limits.header_bytes);
  parser_->body_limit(limits.body_bytes);
  if (buffer_.size() > 0) {  // the next request's first bytes came with the last one
    read_request();
    return;
  }
  // Between requests a kept-alive connection may idle this long; once a byte arrives, the whole
  // request must follow within the read timeout, however slowly it trickles.
  stream_.expires_after(limits.idle_timeout);
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                            if (ec) {
                              self->stream_.socket().close(ec);
                              return;
                            }
                            self->buffer_.commit(n);
                            self->read_request();
                          });
}

void Session::read_request() {
  stream_.expires_after(server_.directory()->config->limits.read_timeout);
  http::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t /*n*/) { self->on_read(ec); });
}

void Session::on_read(beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
      ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
    beast::error_code ignored;
    stream_.socket().close(ignored);
    return;
  }
  if (ec) {
    server_.bad_requests.fetch_add(1, std::memory_order_relaxed);  // a statistic
    Request blank;
    blank.version(11);
    http::status status = http::status::bad_request;
    std::string why = "malformed request: " + ec.message() + "\n";
    if (ec == http::error::header_limit) {
      status = http::status::request_header_fields_too_large;
      why = "request header too large\n";
    } else if (ec == http::error::body_limit) {
      status = http::status::payload_too_large;
      why = "request body too large\n";
    }
    Response res = make_response(blank, status, why);
    res.keep_alive(false);
    write(std::move(res), true, false);
    return;
  }
  stream_.expires_never();  // the request may now wait its turn as long as it needs
  Request request = parser_->release();
  if (admin_) {
    if (wants_live_stream(server_, request)) {  // the connection becomes the event stream
      server_.live().attach(stream_.release_socket(), request);
      return;
    }
    Response res = admin_response(server_, request);
    const bool close = !res.keep_alive();
    write(std::move(res), close, false);
    return;
  }
  auto exchange = std::make_unique<Exchange>();
  exchange->session = shared_from_this();
  exchange->request = std::move(request);
  server_.accept_request(std::move(exchange));
}

void Session::respond(Response response) {
  asio::post(stream_.get_executor(),
             [self = shared_from_this(), res = std::move(response)]() mutable {
               const bool close = !res.keep_alive() || self->server_.stopping();
               if (close) res.keep_alive(false);
               self->write(std::move(res), close, true);
             });
}

void Session::write(Response response, bool close_after, bool tenants_answer) {
  in_write_ = std::make_shared<Response>(std::move(response));
  stream_.expires_after(server_.directory()->config->limits.read_timeout);
  http::async_write(
      stream_, *in_write_,
      [self = shared_from_this(), close_after, tenants_answer](beast::error_code ec, std::size_t) {
        self->in_write_.reset();
        // Only now is the answer on its way: a shutdown waits for this, not for
        // the answer to be handed to the session.
        if (tenants_answer) self->server_.answered();
        if (ec || close_after) {
          beast::error_code ignored;
          self->stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
          self->stream_.socket().close(ignored);
          return;
        }
        self->read_next();
      });
}

}  // namespace creditloop::server
