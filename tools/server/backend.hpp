// Proxy mode: forwards dispatched requests to one HTTP backend over kept-alive connections.
//
// The scheduler's room is the backend's concurrency limit, so at most `slots` requests are out
// at once and the pool never holds more connections than that. A connection the backend closed
// while idle is noticed on its next use: an idempotent request (GET, HEAD, PUT, DELETE, ...) is
// sent again once on a fresh connection when nothing of a response had arrived; any other is
// answered 502, since the backend may have acted on it. Errors answer 502 (unreachable, broken,
// malformed response) or 504 (no full response within the timeout); either way the request's cost
// is the time it held its slot.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "config.hpp"
#include "session.hpp"

namespace creditloop::server {

struct BackendResult {
  std::optional<Response> response;  // nothing: the backend failed, `status` says how
  unsigned status = 502;
  std::string error;
  double elapsed_ms = 0;
  std::optional<double> cost;  // from the cost header, when the backend set a valid one
};

class Backend {
 public:
  /// Throws std::runtime_error when the backend's address cannot be resolved.
  Backend(boost::asio::io_context& io, const ServerConfig& config);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  /// Sends `request` (copied, with the tenant's name in place of its key) and calls `done` on an
  /// I/O thread with the outcome.
  void forward(const Request& request, const std::string& tenant,
               std::function<void(BackendResult)> done);

  struct Connection;

 private:
  std::unique_ptr<Connection> take();
  void give_back(std::unique_ptr<Connection> c);
  void attempt(std::unique_ptr<Connection> c, std::shared_ptr<Request> request,
               std::function<void(BackendResult)> done, std::chrono::steady_clock::time_point began,
               bool may_retry);

  boost::asio::io_context& io_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  std::string host_header_;
  std::string cost_header_;
  std::chrono::milliseconds timeout_;
  std::uint64_t body_limit_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace creditloop::server
