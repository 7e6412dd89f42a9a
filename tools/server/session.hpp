// One client connection: reads requests under the size and time limits, hands each to the
// server, writes the answer, and keeps the connection alive while both sides want it.
#pragma once

#include <memory>
#include <string>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "scheduler.hpp"

namespace creditloop::server {

namespace http = boost::beast::http;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

class Server;
class Session;

/// A tenant's request from its arrival to its answer.
struct Exchange : Pending {
  std::shared_ptr<Session> session;
  Request request;
  double cpu_ms = 0;   // work mode: CPU the request asked for
  double wait_ms = 0;  // work mode: modelled device wait
};

/// A response with the server's usual headers.
[[nodiscard]] Response make_response(const Request& request, http::status status, std::string body,
                                     const char* content_type = "text/plain; charset=utf-8");

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(boost::asio::ip::tcp::socket socket, Server& server, bool admin);
  ~Session();
  void start();
  /// Writes the answer to a tenant's request (any thread), tells the server once it is written
  /// (Server::answered), then reads the next request or closes.
  void respond(Response response);

 private:
  void read_next();
  void read_request();
  void on_read(boost::beast::error_code ec);
  void write(Response response, bool close_after, bool tenants_answer);

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::unique_ptr<http::request_parser<http::string_body>> parser_;
  Server& server_;
  const bool admin_;
  std::shared_ptr<Response> in_write_;
};

}  // namespace creditloop::server
