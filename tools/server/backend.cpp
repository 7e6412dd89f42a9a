#include "backend.hpp"

#include <cmath>
#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace creditloop::server {

namespace beast = boost::beast;
namespace asio = boost::asio;

struct Backend::Connection {
  explicit Connection(asio::io_context& io) : stream(asio::make_strand(io)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  bool connected = false;
  bool used = false;  // has carried a request: the backend may have closed it since
};

Backend::Backend(asio::io_context& io, const ServerConfig& config)
    : io_(io),
      host_header_(config.proxy.backend.text()),
      cost_header_(config.proxy.cost_header),
      timeout_(config.proxy.timeout),
      body_limit_(64ull * 1024 * 1024) {
  asio::ip::tcp::resolver resolver(io);
  beast::error_code ec;
  const auto results =
      resolver.resolve(config.proxy.backend.host, std::to_string(config.proxy.backend.port), ec);
  if (ec || results.empty()) {
    throw std::runtime_error("proxy.backend: cannot resolve \"" + config.proxy.backend.host +
                             "\": " + ec.message());
  }
  for (const auto& r : results) endpoints_.push_back(r.endpoint());
}

Backend::~Backend() = default;

std::unique_ptr<Backend::Connection> Backend::take() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<Connection>(io_);
}

void Backend::give_back(std::unique_ptr<Connection> c) {
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(c));
}

void Backend::forward(const Request& request, const std::string& tenant,
                      std::function<void(BackendResult)> done) {
  auto out = std::make_shared<Request>(request);
  out->erase(http::field::authorization);  // the tenant's key stays with the proxy
  out->erase(http::field::connection);
  out->set(http::field::host, host_header_);
  out->set("X-Creditloop-Tenant", tenant);
  out->keep_alive(true);
  out->prepare_payload();
  // A request sent on a kept-alive connection the backend had closed may have reached it before
  // the close; sending it again is safe only where repeating it is (RFC 9110, 9.2.2).
  const http::verb m = out->method();
  const bool idempotent = m == http::verb::get || m == http::verb::head ||
                          m == http::verb::options || m == http::verb::put ||
                          m == http::verb::delete_ || m == http::verb::trace;
  attempt(take(), std::move(out), std::move(done), std::chrono::steady_clock::now(), idempotent);
}

void Backend::attempt(std::unique_ptr<Connection> c, std::shared_ptr<Request> request,
                      std::function<void(BackendResult)> done,
                      std::chrono::steady_clock::time_point began, bool may_retry) {
  Connection& conn = *c;
  // Each step's continuation owns the connection; whoever ends the exchange gives it back.
  struct Flight {
    Backend* backend;
    std::unique_ptr<Connection> conn;
    std::shared_ptr<Request> request;
    std::function<void(BackendResult)> done;
    std::chrono::steady_clock::time_point began;
    bool may_retry;
    std::unique_ptr<http::response_parser<http::string_body>> parser;

    void fail(beast::error_code ec, bool nothing_received) {
      beast::error_code ignored;
      conn->stream.socket().close(ignored);
      conn->connected = false;
      conn->buffer.clear();
      const bool retry = may_retry && conn->used && nothing_received && ec != beast::error::timeout;
      conn->used = false;
      if (retry) {
        backend->attempt(std::move(conn), std::move(request), std::move(done), began, false);
        return;
      }
      BackendResult r;
      r.status = ec == beast::error::timeout ? 504 : 502;
      r.error = ec.message();
      r.elapsed_ms = elapsed();
      backend->give_back(std::move(conn));
      done(std::move(r));
    }
    [[nodiscard]] double elapsed() const {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began)
          .count();
    }
  };
  auto flight = std::make_shared<Flight>(
      Flight{this, std::move(c), std::move(request), std::move(done), began, may_retry, nullptr});

  auto send = [flight] {
    Connection& cn = *flight->conn;
    cn.stream.expires_after(flight->backend->timeout_);
    http::async_write(cn.stream, *flight->request, [flight](beast::error_code ec, std::size_t) {
      if (ec) {
        flight->fail(ec, true);
        return;
      }
      Connection& cn2 = *flight->conn;
      flight->parser = std::make_unique<http::response_parser<http::string_body>>();
      flight->parser->body_limit(flight->backend->body_limit_);
      http::async_read(cn2.stream, cn2.buffer, *flight->parser,
                       [flight](beast::error_code ec2, std::size_t) {
                         if (ec2) {
                           flight->fail(ec2, !flight->parser->got_some());
                           return;
                         }
                         Connection& cn3 = *flight->conn;
                         BackendResult r;
                         r.elapsed_ms = flight->elapsed();
                         Response res = flight->parser->release();
                         const std::string& name = flight->backend->cost_header_;
                         if (!name.empty()) {
                           const auto it = res.find(name);
                           if (it != res.end()) {
                             try {
                               const double v = std::stod(std::string(it->value()));
                               if (std::isfinite(v) && v >= 0) r.cost = v;
                             } catch (const std::exception&) {
                               // a malformed header counts as absent: the time is charged
                             }
                           }
                         }
                         r.status = res.result_int();
                         cn3.used = true;
                         if (!res.keep_alive()) {
                           beast::error_code ignored;
                           cn3.stream.socket().close(ignored);
                           cn3.connected = false;
                           cn3.used = false;
                           cn3.buffer.clear();
                         }
                         cn3.stream.expires_never();
                         r.response = std::move(res);
                         flight->backend->give_back(std::move(flight->conn));
                         flight->done(std::move(r));
                       });
    });
  };

  if (conn.connected) {
    asio::dispatch(conn.stream.get_executor(), send);
    return;
  }
  conn.stream.expires_after(timeout_);
  conn.stream.async_connect(endpoints_,
                            [flight, send](beast::error_code ec, const asio::ip::tcp::endpoint&) {
                              if (ec) {
                                flight->conn->used = false;
                                flight->fail(ec, false);
                                return;
                              }
                              flight->conn->connected = true;
                              send();
                            });
}

}  // namespace creditloop::server
