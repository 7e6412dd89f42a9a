// creditloop-demo-backend: an HTTP/1.1 service for creditloop-server's proxy mode to sit in front
// of, in load tests and demonstrations. Each request says how much work it is:
//
//   GET /anything?cpu_ms=N&wait_ms=M[&cost=C][&status=S][&fail=1]
//
// burns N ms of CPU on a worker thread, then waits M ms on a timer (a modelled database or disk:
// the wait holds the request, not a thread, so a few threads serve any concurrency), and answers
// 200 with `X-Cost: credits`, the milliseconds used unless `cost` names the credits. `status`
// answers that status instead; `fail=1` closes the connection without answering, after the work,
// as a backend that dies part-way does. Any path is taken, so that a proxy may forward whatever its
// clients asked for. Connections are kept alive as HTTP/1.1 says.
//
// `--listen HOST:PORT` (port 0: any free port) prints `... listening on HOST:PORT` on standard
// output once it accepts. SIGINT or SIGTERM stops it.
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

#include "cpu_work.hpp"

namespace {

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
std::variant<Work, std::string> parse_work(std::string_view target, const Limits& limits) {
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
    const std::optional<double> v = number(value);
    if (!v) return std::string(name) + ": must be a number, at least 0";
    if (name == "cpu_ms") {
      if (*v > limits.max_cpu_ms) return "cpu_ms: at most " + std::to_string(limits.max_cpu_ms);
      w.cpu_ms = *v;
    } else if (name == "wait_ms") {
      if (*v > limits.max_wait_ms) return "wait_ms: at most " + std::to_string(limits.max_wait_ms);
      w.wait_ms = *v;
    } else if (name == "cost") {
      w.cost = *v;
    } else if (name == "status") {
      if (*v < 200 || *v > 599 || *v != std::floor(*v)) return "status: from 200 to 599";
      w.status = static_cast<unsigned>(*v);
    } else {
      w.fail = *v != 0;
    }
  }
  return w;
}

Response make_response(const Request& request, unsigned status, std::string body) {
  Response res{static_cast<http::status>(status), request.version()};
  res.set(http::field::server, "creditloop-demo-backend");
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.keep_alive(request.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, asio::thread_pool& workers, const Limits& limits)
      : stream_(std::move(socket)), workers_(workers), limits_(limits) {}

  void start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

 private:
  void read() {
    request_ = {};
    stream_.expires_after(limits_.idle);
    http::async_read(
        stream_, buffer_, request_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      close();  // the client left, idled out or sent garbage: nothing to answer
      return;
    }
    stream_.expires_never();
    const std::string_view target(request_.target().data(), request_.target().size());
    auto parsed = parse_work(target, limits_);
    if (auto* why = std::get_if<std::string>(&parsed)) {
      write(make_response(request_, 400, *why + "\n"));
      return;
    }
    work_ = std::get<Work>(parsed);
    began_ = Clock::now();
    if (work_.cpu_ms > 0) {
      // CPU runs on the workers so that a long burn never delays another connection's I/O.
      asio::post(workers_, [self = shared_from_this()] {
        (void)creditloop::server::burn_cpu(self->work_.cpu_ms);
        asio::post(self->stream_.get_executor(), [self] { self->wait(); });
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
    timer_->async_wait([self = shared_from_this()](beast::error_code) { self->done(); });
  }

  void done() {
    if (work_.fail) {
      close();
      return;
    }
    const double used_ms = ms_since(began_);
    const double cost = work_.cost.value_or(used_ms);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", cost);
    Response res = make_response(request_, work_.status, "");
    res.set("X-Cost", buf);
    std::snprintf(buf, sizeof buf, "used_ms=%.3f cost=%.3f\n", used_ms, cost);
    res.body() = buf;
    res.prepare_payload();
    write(std::move(res));
  }

  void write(Response res) {
    response_ = std::make_unique<Response>(std::move(res));
    http::async_write(stream_, *response_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        const bool keep = self->response_->keep_alive();
                        self->response_.reset();
                        if (ec || !keep) {
                          self->close();
                          return;
                        }
                        self->read();
                      });
  }

  void close() {
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
      std::make_shared<Session>(std::move(socket), workers, limits)->start();
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
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
