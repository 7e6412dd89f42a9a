#include "backend.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace creditloop::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Whether the backend has closed the connection or sent something unasked, without blocking.
bool sound(Backend::Connection& c) {
  if (!c.stream.socket().is_open()) return false;
  char byte = 0;
  const ssize_t n = ::recv(c.stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// A pooled connection that will carry nothing more: whatever its socket says on closing changes
// nothing.
void close_quietly(Backend::Connection& c) {
  boost::system::error_code ignored;
  c.stream.socket().close(ignored);
}

}  // namespace

Backend::Connection::Connection(asio::io_context& io) : stream(asio::make_strand(io)) {}

Backend::Backend(asio::io_context& io, const ServerConfig& config)
    : io_(io),
      address_(config.proxy.backend.text()),
      timeout_(config.proxy.timeout),
      idle_timeout_(config.proxy.idle_timeout) {
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto results =
      resolver.resolve(config.proxy.backend.host, std::to_string(config.proxy.backend.port), ec);
  if (ec || results.empty()) {
    throw std::runtime_error("proxy.backend: cannot resolve \"" + config.proxy.backend.host +
                             "\": " + ec.message());
  }
  for (const auto& r : results) endpoints_.push_back(r.endpoint());
}

Backend::~Backend() = default;

std::unique_ptr<Backend::Connection> Backend::take_sound() {
  const auto now = std::chrono::steady_clock::now();
  // Oldest first: everything idle too long is at the front.
  auto young = idle_.begin();
  while (young != idle_.end() && now - (*young)->idle_since >= idle_timeout_) {
    close_quietly(**young++);
  }
  idle_.erase(idle_.begin(), young);
  while (!idle_.empty()) {
    std::unique_ptr<Connection> c = std::move(idle_.back());  // the warmest
    idle_.pop_back();
    if (sound(*c)) return c;
    close_quietly(*c);
  }
  return nullptr;
}

asio::awaitable<std::unique_ptr<Backend::Connection>> Backend::lease(
    boost::system::error_code& ec) {
  ec = {};
  if (std::unique_ptr<Connection> c = take_sound()) co_return c;
  auto c = std::make_unique<Connection>(io_);
  c->stream.expires_after(timeout_);
  co_await c->stream.async_connect(endpoints_, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return nullptr;
  boost::system::error_code ignored;
  c->stream.socket().set_option(tcp::no_delay(true), ignored);
  co_return c;
}

void Backend::recycle(std::unique_ptr<Connection> c) {
  c->stream.expires_never();
  c->idle_since = std::chrono::steady_clock::now();
  c->reused = true;
  const std::uint64_t stay = ++c->stays;
  // Readable while idle means closed or unasked bytes: either way it must not carry a request.
  // The handler never touches `*raw` unless it finds it still in the pool in the same stay; a
  // lease leaves the wait pending, and it then completes with the response as a no-op.
  const Connection* raw = c.get();
  c->stream.socket().async_wait(tcp::socket::wait_read,
                                [this, raw, stay](const boost::system::error_code& ec) {
                                  if (ec != asio::error::operation_aborted) drop_idle(raw, stay);
                                });
  idle_.push_back(std::move(c));
}

void Backend::drop_idle(const Connection* c, std::uint64_t stay) {
  const auto it = std::find_if(idle_.begin(), idle_.end(),
                               [&](const std::unique_ptr<Connection>& p) { return p.get() == c; });
  if (it == idle_.end() || (*it)->stays != stay) return;
  close_quietly(**it);
  idle_.erase(it);
}

}  // namespace creditloop::server
