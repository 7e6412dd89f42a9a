// What crosses the proxy, header by header (RFC 9110 section 7.6.1; nginx and HAProxy as the
// references where the RFC leaves a choice):
//
// - Hop-by-hop headers belong to one connection and are dropped both ways: Connection,
//   Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-Authenticate,
//   Proxy-Authorization, and every header a Connection header names. Content-Length is framing,
//   set by the proxy for the side it writes to. Expect is answered by the proxy itself.
// - Toward the backend: the tenant's key (Authorization) stays with the proxy; every spelling of
//   the tenant header (case, and `_` for `-`, which CGI and WSGI backends read as the same
//   variable) is removed before the proxy adds its own; X-Forwarded-For gets the client's address
//   appended; X-Forwarded-Proto is set (a client's claim to https is not passed on); Host is the
//   client's (as HAProxy does) unless `proxy.host` names one; X-Request-Id is passed through or
//   made.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

namespace creditloop::server {

namespace http = boost::beast::http;

/// The header the backend reads the tenant from.
inline constexpr std::string_view kTenantHeader = "X-Creditloop-Tenant";

/// Whether the client wants its connection kept after this request (RFC 9112 section 9.3).
[[nodiscard]] bool keeps_alive(const http::request_header<>& req);

/// Whether `name` is the tenant header in any spelling a backend might read as it.
[[nodiscard]] bool is_tenant_header(std::string_view name) noexcept;

/// Copies the end-to-end headers among the first `count` fields of `from` into `to`: everything
/// but the hop-by-hop headers, those a Connection header of `from` names, framing
/// (Content-Length), and Expect. Fields past `count` are the trailers a parser appended; like
/// nginx, the proxy drops trailers rather than let a trailer pass as a header.
void copy_end_to_end(const http::fields& from, http::fields& to,
                     std::size_t count = static_cast<std::size_t>(-1));

/// Tests only: how many times this thread has compared a field's name with a name a Connection
/// header lists, so that a test can see the comparisons grow with the head, not its square.
[[nodiscard]] std::uint64_t connection_name_comparisons() noexcept;

/// What the proxy adds to a request it forwards.
struct Forwarded {
  std::string_view tenant;
  std::string_view client_address;
  std::string_view host;             // the Host to send; empty: the client's
  std::string_view backend_address;  // the Host when the client sent none (HTTP/1.0)
  std::string_view request_id;
  /// The client's header fields; what follows them are a read body's trailers, never passed.
  std::size_t header_fields = static_cast<std::size_t>(-1);
};

/// The request head the backend gets: method, target, HTTP/1.1, and the headers above. Framing
/// (Content-Length or chunked) is the caller's, who knows how the body will be sent.
void backend_head(const http::request_header<>& client, const Forwarded& added,
                  http::request_header<>& out);

/// Why a request's Host cannot be trusted to name one site (RFC 9112 section 3.2: none in
/// HTTP/1.1, two, or one with characters no authority has): such a request is answered 400.
[[nodiscard]] std::optional<std::string> bad_host(const http::request_header<>& req);

/// Whether a request's Transfer-Encoding is anything but exactly `chunked`: no other coding is
/// carried, and one the proxy did not decode would let the body's bytes be read as a request
/// (RFC 9112 section 6.3). Answered 501, as nginx does.
[[nodiscard]] bool unsupported_coding(const http::request_header<>& req);

/// A request id the client sent that may be passed on: 1 to 128 visible ASCII characters.
[[nodiscard]] bool usable_request_id(std::string_view id) noexcept;

/// A new request id: 32 hex digits from a per-thread generator seeded by the system.
[[nodiscard]] std::string make_request_id();

}  // namespace creditloop::server
