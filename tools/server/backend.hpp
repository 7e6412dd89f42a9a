// Proxy mode's connections to its one HTTP backend: a pool of kept-alive connections.
//
// The scheduler's room is the backend's concurrency limit, so at most `slots` requests are out
// at once and the pool never holds more connections than that. A pooled connection is handed out
// only if it is young and sound:
// - it has been idle for less than `proxy.idle_timeout_ms`, which should be shorter than the
//   backend's own keep-alive timeout (Node's is 5 s, gunicorn's 2 s): otherwise the backend may
//   close it just as a request is sent on it, and a request that is not idempotent cannot be sent
//   again;
// - the kernel has neither the backend's close nor stray bytes waiting on it (a non-blocking
//   peek), since either means the next response read from it would not be this request's.
// A connection that ends a response with bytes left over is closed by the caller, never pooled.
#pragma once

#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "config.hpp"

namespace creditloop::server {

class Backend {
 public:
  /// Response headers from the backend larger than this are refused (502), as nginx refuses a
  /// header larger than proxy_buffer_size.
  static constexpr std::size_t kHeaderBytes = 32 * 1024;

  struct Connection {
    explicit Connection(boost::asio::io_context& io);
    boost::beast::tcp_stream stream;
    /// Bytes read from the backend and not yet parsed: bounded, so that no response can make it
    /// grow (a chunk header or a trailer longer than this is a malformed response).
    boost::beast::flat_buffer buffer{kHeaderBytes + 16 * 1024};
    std::chrono::steady_clock::time_point idle_since;
    bool reused = false;  // has carried a request before: the backend may have closed it since
    /// Counts its stays in the pool, so that the watch of an earlier stay cannot speak for this
    /// one.
    std::uint64_t stays = 0;
  };

  /// Throws std::runtime_error when the backend's address cannot be resolved.
  Backend(boost::asio::io_context& io, const ServerConfig& config);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  /// A sound pooled connection, or a new one connected within the timeout; null with `ec` set
  /// when the backend cannot be reached. The pool is its lane's alone (server.hpp): every call,
  /// and every handler of its connections, runs on that lane's one thread, so it takes no lock.
  boost::asio::awaitable<std::unique_ptr<Connection>> lease(boost::system::error_code& ec);
  /// Returns a connection that ended a response cleanly and may carry another.
  void recycle(std::unique_ptr<Connection> c);

  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  [[nodiscard]] const std::string& address() const noexcept { return address_; }

 private:
  [[nodiscard]] std::unique_ptr<Connection> take_sound();
  /// An idle connection the backend closed or sent bytes on (its watch fired): out of the pool
  /// and closed at once, as nginx does, rather than left in CLOSE_WAIT until a lease finds it.
  void drop_idle(const Connection* c, std::uint64_t stay);

  boost::asio::io_context& io_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  std::string address_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds idle_timeout_;
  std::vector<std::unique_ptr<Connection>> idle_;  // oldest first
};

}  // namespace creditloop::server
