#include "http_get.hpp"

#include <cstdio>
#include <exception>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace creditloop::top {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

// A participants report grows by a few hundred bytes a tenant.
constexpr std::uint64_t kBodyLimit = 64u << 20;

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if ((text[i] | 0x20) != prefix[i]) return false;
  }
  return true;
}

GetResult exchange(boost::asio::io_context& io, const Url& url, std::string_view path,
                   const std::string& bearer, std::chrono::milliseconds timeout) {
  beast::error_code ec;
  tcp::resolver resolver(io);
  const tcp::resolver::results_type endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) return Failure{"resolve " + url.host + ": " + ec.message(), true};

  http::request<http::empty_body> request{http::verb::get, url.base + std::string(path), 11};
  // An IPv6 address goes back into its brackets, as Host wants it: `::1:9090` names no host, and
  // the admin listener answers only to names it knows.
  const bool ipv6 = url.host.find(':') != std::string::npos;
  request.set(http::field::host, (ipv6 ? "[" + url.host + "]" : url.host) + ":" + url.port);
  request.set(http::field::user_agent, "creditloop-top");
  request.set(http::field::accept, "application/json");
  request.keep_alive(false);
  if (!bearer.empty()) request.set(http::field::authorization, "Bearer " + bearer);

  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kBodyLimit);
  const char* stage = "connect";
  beast::error_code failed;
  // One deadline for connecting, sending and reading: the stream closes itself when it passes.
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](beast::error_code connect_ec, const tcp::endpoint&) {
    if (connect_ec) {
      failed = connect_ec;
      return;
    }
    stage = "send";
    http::async_write(stream, request, [&](beast::error_code write_ec, std::size_t) {
      if (write_ec) {
        failed = write_ec;
        return;
      }
      stage = "read";
      http::async_read(stream, buffer, parser,
                       [&](beast::error_code read_ec, std::size_t) { failed = read_ec; });
    });
  });
  io.restart();
  io.run();
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream.close();

  if (failed) {
    std::string what = std::string(stage) + ": ";
    if (failed == beast::error::timeout) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "no answer within %.1fs",
                    static_cast<double>(timeout.count()) / 1e3);
      what += buf;
    } else {
      what += failed.message();
    }
    // A malformed answer came from something that is listening; everything else is silence.
    const bool malformed =
        failed.category() == http::make_error_code(http::error::bad_version).category() &&
        failed != http::error::end_of_stream;
    return Failure{what, !malformed};
  }
  Reply reply;
  reply.status = parser.get().result_int();
  reply.body = std::move(parser.get().body());
  return reply;
}

}  // namespace

tools::Parsed<Url> parse_url(std::string_view text) {
  if (starts_with_nocase(text, "https://")) return tools::Refusal{"https is not supported"};
  if (starts_with_nocase(text, "http://")) text.remove_prefix(7);
  const std::size_t slash = text.find('/');
  std::string_view authority = text.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : text.substr(slash);
  Url url;
  if (authority.starts_with('[')) {  // [::1]:9090
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return tools::Refusal{"unclosed '[' in the address"};
    url.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && !authority.starts_with(':')) {
      return tools::Refusal{"expected ':' after the address"};
    }
  } else {
    url.host = std::string(authority.substr(0, authority.find(':')));
    authority.remove_prefix(url.host.size());
  }
  if (url.host.empty()) return tools::Refusal{"no host in the URL"};
  url.port = authority.empty() ? "80" : std::string(authority.substr(1));
  if (url.port.empty() || url.port.size() > 5 ||
      url.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(url.port) > 65535 || std::stoul(url.port) == 0) {
    return tools::Refusal{std::string("bad port \"") + url.port + "\""};
  }
  if (path.find_first_of("?# ") != std::string_view::npos) {
    return tools::Refusal{"the URL may hold a path prefix, not a query"};
  }
  while (path.ends_with('/')) path.remove_suffix(1);
  url.base = std::string(path);
  return url;
}

GetResult HttpClient::get(const Url& url, std::string_view path, const std::string& bearer,
                          std::chrono::milliseconds timeout) {
  try {
    return exchange(io_, url, path, bearer, timeout);
  } catch (const std::exception& e) {
    // Asio reports some failures (out of descriptors, say) only by throwing; a poll that fails
    // that way is one more failed poll, not the end of the program.
    return Failure{e.what(), true};
  }
}

}  // namespace creditloop::top
