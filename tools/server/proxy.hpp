// Proxy mode's exchange: one dispatched request carried to the backend and its response back.
//
// In order, on the client connection's strand:
// 1. `Expect: 100-continue` is answered by the proxy once the request is dispatched (never
//    before: a queued request's body would only wait in buffers), and not passed on.
// 2. The request head goes to the backend (forwarding.hpp), then its body: a buffered one with its
//    length, from memory or read back from its temporary file through one buffer of the
//    session's (buffered_body.hpp), which then goes; else streamed through that buffer as it
//    arrives, re-framed chunked when the client's length was not known: `limits.body_bytes`
//    bounds what is held, not what may pass.
// 3. Interim responses (100, 102, 103) are read and dropped, as nginx 1.22 drops them; 101 is
//    refused (the proxy forwards no Upgrade). HEAD, 204 and 304 responses have no body, whatever
//    their Content-Length says.
// 4. A response whose body is all there at once is answered with a Content-Length and its cost in
//    X-Creditloop-Cost; any other is relayed piece by piece as the backend sends it (SSE, long
//    downloads), with the client's pace holding the backend back: one buffer, never more. Its
//    framing for the client is the backend's length, else chunked (HTTP/1.1), else the close of
//    the connection (HTTP/1.0). Its cost is charged when the backend has finished sending.
// 5. The slot is returned the moment the backend's part is over, before the last bytes reach the
//    client. The backend connection is pooled again only after a response that ended exactly at
//    its framing with nothing left over.
// Errors before any of the response reached the client answer 502 (unreachable, broken,
// malformed) or 504 (no response within proxy.timeout_ms); after, the client's connection is
// closed, as nginx does. Either way the request's cost is the time it held its slot.
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
