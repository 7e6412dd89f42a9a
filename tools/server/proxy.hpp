// Proxy mode's exchange: one dispatched request carried to the backend and its response back, in
// this order on the client connection's thread:
//  1. `Expect: 100-continue` is answered once the request is dispatched, and not passed on.
//  2. The head goes to the backend (forwarding.hpp), then the body: buffered (buffered_body.hpp),
//     with its length; or streamed through one buffer, chunked when its length was not known.
//  3. Interim responses (100, 102, 103) are dropped; 101 is refused. HEAD, 204 and 304 responses
//     have no body, whatever their Content-Length says.
//  4. A response all there at once gets a Content-Length and X-Creditloop-Cost; any other is
//     relayed through one buffer at the client's pace, its cost charged when the backend is done.
//  5. The slot is returned when the backend's part is over; the backend connection is pooled
//     again only after a response that ended exactly at its framing with nothing left over.
// Errors: 502 or 504 before any of the response reached the client, a closed connection after;
// either way the cost is the time the request held its slot.
// Why: docs/server.md#proxy-mode-as-a-reverse-proxy
#pragma once

#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include <cstddef>
#include <cstdint>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace creditloop::server {

class Server;
class Backend;
struct Exchange;

/// The client's side of the exchange: its connection, what was read from it and not parsed, and
/// a buffer the body passes through both ways.
struct ClientSide {
  boost::beast::tcp_stream& stream;
  boost::beast::flat_buffer& buffer;
  char* scratch;
  std::size_t scratch_size;
};

struct ProxyOutcome {
  unsigned status = 0;
  std::uint64_t bytes = 0;  // of the response body, to the client
  bool keep_alive = false;  // the client's connection may carry its next request
};

/// Carries `e` (dispatched) through the backend and answers it; settles its cost exactly once.
boost::asio::awaitable<ProxyOutcome> proxy(Server& server, Backend& backend, ClientSide client,
                                           Exchange& e);

}  // namespace creditloop::server
