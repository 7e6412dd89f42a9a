// creditloop-demo-backend: an HTTP/1.1 service for creditloop-server's proxy mode to sit in front
// of, in load tests and demonstrations. Each request says how much work it is:
//
//   GET /anything?cpu_ms=N&wait_ms=M[&cost=C][&status=S][&fail=1]
//
//  - cpu_ms: N ms of CPU on a worker thread; wait_ms: then M ms on a timer, holding no thread.
//  - answers 200 with `X-Cost`: the milliseconds used, or C credits when `cost` is given.
//  - status: answers S instead (200 to 599, framed as HTTP/1.1 says); anything else is a 400.
//  - fail=1: closes the connection without answering, after the work.
//  - any path and method; HEAD without its body; connections kept alive as HTTP/1.1 says.
//  - `--listen HOST:PORT` (port 0: any free port) prints `... listening on HOST:PORT` on standard
//    output once it accepts. SIGINT or SIGTERM stops it.
// Why: docs/loadtest.md#the-demo-backend
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "common/command_line.hpp"
#include "common/refusal.hpp"
#include "cpu_work.hpp"

namespace {

using creditloop::tools::Parsed;
using creditloop::tools::Refusal;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

struct Limits {
  double max_cpu_ms = 1000;
  double max_wait_ms = 60'000;
  // A kept-alive connection that sends nothing for this long is closed, so that a client that
  // vanished without a FIN does not hold a socket for ever.
  std::chrono::seconds idle{60};
};

struct Work {
  double cpu_ms = 0;
  double wait_ms = 0;
  std::optional<double> cost;
  unsigned status = 200;
  bool fail = false;
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::optional<double> number(const std::string& text) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(v) || v < 0) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Unknown parameters are ignored: a proxy in front may add its own. A known one with a bad value
// is refused, so that a load test's typo does not silently measure nothing.
Parsed<Work> parse_work(std::string_view target, const Limits& limits) {
  Work w;
  const auto q = target.find('?');
  std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    if (name != "cpu_ms" && name != "wait_ms" && name != "cost" && name != "status" &&
        name != "fail") {
      continue;
    }
    if (name == "status") {
      // Digits only: "2e2" or "204.0" name no status code.
      const bool digits = !value.empty() && value.size() <= 3 &&
                          value.find_first_not_of("0123456789") == std::string::npos;
      const unsigned code = digits ? static_cast<unsigned>(std::stoul(value)) : 0;
      if (code >= 100 && code <= 199) {
        return Refusal{"status: " + value +
                       " is an interim status (1xx), never a final answer; ask for 200 to 599"};
      }
      if (code < 200 || code > 599) {
        return Refusal{"status: must be a final status, a whole number from 200 to 599, got \"" +
                       value + "\""};
      }
      w.status = code;
      continue;
    }
    const std::optional<double> v = number(value);
    if (!v) return Refusal{std::string(name) + ": must be a number, at least 0"};
    if (name == "cpu_ms") {
      if (*v > limits.max_cpu_ms)
        return Refusal{"cpu_ms: at most " + std::to_string(limits.max_cpu_ms)};
      w.cpu_ms = *v;
    } else if (name == "wait_ms") {
      if (*v > limits.max_wait_ms) {
        return Refusal{"wait_ms: at most " + std::to_string(limits.max_wait_ms)};
      }
      w.wait_ms = *v;
    } else if (name == "cost") {
      w.cost = *v;
    } else {
      w.fail = *v != 0;
    }
  }
  return w;
}

// Whether a response with this status may have content at all (RFC 9110, 15.3.5, 15.3.6, 15.4.5).
bool has_content(unsigned status) { return status != 204 && status != 205 && status != 304; }

// The headers RFC 9110 says a response with this status must carry. Values that fit any request:
// the backend takes every method, and a client that asked for one of these asked for it by name.
void add_required_headers(Response& res, unsigned status) {
  switch (status) {
    case 206:  // 14.4: the range sent; here the whole body, which is never empty
      if (!res.body().empty()) {
        res.set(http::field::content_range, "bytes 0-" + std::to_string(res.body().size() - 1) +
                                                "/" + std::to_string(res.body().size()));
      }
      break;
    case 401:  // 11.6.1
      res.set(http::field::www_authenticate, "Bearer");
      break;
    case 405:  // 10.2.1
      res.set(http::field::allow, "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS");
      break;
    case 407:  // 11.7.1
      res.set(http::field::proxy_authenticate, "Bearer");
      break;
    case 426:  // 15.5.22; "Connection: upgrade" goes with it (7.8)
      res.set(http::field::upgrade, "HTTP/2.0");
      res.set(http::field::connection, "upgrade");
      break;
    default:
      break;
  }
}

// Throws only what allocation throws. Beast's framing (prepare_payload) is asked only about a
// status that may have content: it throws on a body for a 204 or a 304, and without one it would
// still give them a Content-Length, which a 204 must not carry (RFC 9110, 8.6) and which on a 304
// would misstate the length of the content it stands for.
Response make_response(const Request& request, unsigned status, std::string body) {
  Response res{static_cast<http::status>(status), request.version()};
  res.set(http::field::server, "creditloop-demo-backend");
  res.keep_alive(request.keep_alive());
  if (has_content(status)) {
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = std::move(body);
    res.prepare_payload();
  } else if (status == 205) {
    res.content_length(0);  // 15.3.6: no content, said so
  }
  add_required_headers(res, status);
  if (request.method() == http::verb::head) {
    // The headers a GET would get, Content-Length included, and no body (RFC 9110, 9.3.2).
    res.body().clear();
  }
  return res;
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, asio::thread_pool& workers, const Limits& limits)
      : stream_(std::move(socket)), workers_(workers), limits_(limits) {}

  void start() {
    asio::dispatch(stream_.get_executor(),
                   [self = shared_from_this()] { self->guarded([&] { self->read(); }); });
  }

 private:
  // Every handler runs through this: an exception out of one would end the process, and with it
  // every connection. What can throw here is allocation; this connection is dropped for it.
  template <class F>
  void guarded(F&& f) noexcept {
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "creditloop-demo-backend: connection dropped: %s\n", e.what());
      close();
    }
  }

  void read() {
    request_ = {};
    stream_.expires_after(limits_.idle);
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->guarded([&] { self->on_read(ec); });
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      close();  // the client left, idled out or sent garbage: nothing to answer
      return;
    }
    stream_.expires_never();
    const std::string_view target(request_.target().data(), request_.target().size());
    auto parsed = parse_work(target, limits_);
    if (auto* why = std::get_if<Refusal>(&parsed)) {
      write(make_response(request_, 400, why->message + "\n"));
      return;
    }
    work_ = std::get<Work>(parsed);
    began_ = Clock::now();
    if (work_.cpu_ms > 0) {
      // CPU runs on the workers so that a long burn never delays another connection's I/O.
      asio::post(workers_, [self = shared_from_this()] {
        (void)creditloop::server::burn_cpu(self->work_.cpu_ms);
        try {
          asio::post(self->stream_.get_executor(),
                     [self] { self->guarded([&] { self->wait(); }); });
        } catch (const std::exception& e) {
          // Off the connection's strand, so not closed here: nothing else is pending on it, and
          // the last reference, dropped with this handler, closes it.
          std::fprintf(stderr, "creditloop-demo-backend: connection dropped: %s\n", e.what());
        }
      });
    } else {
      wait();
    }
  }

  void wait() {
    if (work_.wait_ms <= 0) {
      done();
      return;
    }
    timer_ = std::make_unique<asio::steady_timer>(stream_.get_executor());
    timer_->expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(work_.wait_ms)));
    timer_->async_wait(
        [self = shared_from_this()](beast::error_code) { self->guarded([&] { self->done(); }); });
  }

  void done() {
    if (work_.fail) {
      close();
      return;
    }
    const double used_ms = ms_since(began_);
    const double cost = work_.cost.value_or(used_ms);
    char body[64];
    std::snprintf(body, sizeof body, "used_ms=%.3f cost=%.3f\n", used_ms, cost);
    char credits[32];
    std::snprintf(credits, sizeof credits, "%.3f", cost);
    Response res = make_response(request_, work_.status, body);
    res.set("X-Cost", credits);  // on a 204 or a 304 too: the proxy charges it all the same
    write(std::move(res));
  }

  void write(Response res) {
    response_ = std::make_unique<Response>(std::move(res));
    http::async_write(stream_, *response_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->guarded([&] {
                          const bool keep = self->response_->keep_alive();
                          self->response_.reset();
                          if (ec || !keep) {
                            self->close();
                            return;
                          }
                          self->read();
                        });
                      });
  }

  void close() noexcept {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  asio::thread_pool& workers_;
  const Limits& limits_;
  beast::flat_buffer buffer_;
  Request request_;
  Work work_;
  Clock::time_point began_;
  std::unique_ptr<asio::steady_timer> timer_;
  std::unique_ptr<Response> response_;
};

void accept(tcp::acceptor& acceptor, asio::io_context& io, asio::thread_pool& workers,
            const Limits& limits) {
  acceptor.async_accept(asio::make_strand(io), [&](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      try {
        std::make_shared<Session>(std::move(socket), workers, limits)->start();
      } catch (const std::exception& e) {  // out of memory: this connection only
        std::fprintf(stderr, "creditloop-demo-backend: connection refused: %s\n", e.what());
      }
    }
    accept(acceptor, io, workers, limits);
  });
}

tcp::endpoint parse_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("--listen: HOST:PORT expected");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const unsigned long port = std::stoul(text.substr(colon + 1));
  if (port > 65535) throw std::runtime_error("--listen: port above 65535");
  return {asio::ip::make_address(host), static_cast<std::uint16_t>(port)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"creditloop-demo-backend: a backend whose requests say how much work they are"};
  std::string listen = "127.0.0.1:0";
  unsigned threads = 2;
  unsigned workers = 2;
  Limits limits;
  app.add_option("--listen", listen, "HOST:PORT to listen on (port 0: any free port)");
  app.add_option("--threads", threads, "I/O threads")->check(CLI::Range(1u, 256u));
  app.add_option("--workers", workers, "threads that burn the CPU requests ask for")
      ->check(CLI::Range(1u, 256u));
  app.add_option("--max-cpu-ms", limits.max_cpu_ms, "most CPU a request may ask for");
  app.add_option("--max-wait-ms", limits.max_wait_ms, "most wait a request may ask for");
  if (const std::optional<int> status = creditloop::tools::parse_command_line(app, argc, argv)) {
    return *status;
  }
  try {
    asio::io_context io;
    asio::thread_pool pool(workers);
    tcp::acceptor acceptor(io);
    const tcp::endpoint at = parse_endpoint(listen);
    acceptor.open(at.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(at);
    acceptor.listen(asio::socket_base::max_listen_connections);
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](beast::error_code, int) {
      beast::error_code ignored;
      acceptor.close(ignored);
      io.stop();
    });
    accept(acceptor, io, pool, limits);
    const tcp::endpoint bound = acceptor.local_endpoint();
    std::printf("creditloop-demo-backend: listening on %s:%u\n",
                bound.address().to_string().c_str(), static_cast<unsigned>(bound.port()));
    std::fflush(stdout);
    std::vector<std::thread> runners;
    for (unsigned i = 1; i < threads; ++i) runners.emplace_back([&io] { io.run(); });
    io.run();
    for (std::thread& t : runners) t.join();
    pool.stop();
    pool.join();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "creditloop-demo-backend: %s\n", e.what());
    return 3;
  }
  return 0;
}
