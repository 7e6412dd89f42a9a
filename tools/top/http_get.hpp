// A blocking HTTP/1.1 GET with a deadline, on Boost.Beast.
//
// The caller waits for the answer as with Beast's synchronous calls, but the exchange runs as
// asynchronous operations under one deadline: Asio's synchronous reads wait for ever on a server
// that accepts and never answers, and creditloop-top must go on drawing and polling whatever the
// server does. Name resolution is the exception: it is getaddrinfo's, without a deadline, and
// instant for the numeric addresses admin listeners have.
//
// One connection per request (Connection: close): a poll a second costs the server one accept,
// and nothing has to tell a stale kept-alive connection from a dead server.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <variant>

#include <boost/asio/io_context.hpp>

#include "common/refusal.hpp"

namespace creditloop::top {

struct Url {
  std::string host;
  std::string port;
  std::string base;  // a path prefix without its trailing '/', usually empty

  [[nodiscard]] std::string text() const { return "http://" + host + ":" + port + base; }
};

/// "http://host[:port][/prefix]" (the scheme may be left out; the port defaults to 80), or why
/// not.
[[nodiscard]] tools::Parsed<Url> parse_url(std::string_view text);

struct Reply {
  unsigned status = 0;
  std::string body;
};

struct Failure {
  std::string what;          // one line: "connect: Connection refused"
  bool unreachable = false;  // no HTTP answer came (as opposed to a refusal or a bad answer)
};

using GetResult = std::variant<Reply, Failure>;

class HttpClient {
 public:
  /// Blocks for at most about `timeout` after the name is resolved. `bearer`, when not empty, is
  /// sent as `Authorization: Bearer ...`. Never throws for anything the network or the server
  /// does. Not thread-safe: one client per thread.
  [[nodiscard]] GetResult get(const Url& url, std::string_view path, const std::string& bearer,
                              std::chrono::milliseconds timeout);

 private:
  boost::asio::io_context io_;
};

}  // namespace creditloop::top
