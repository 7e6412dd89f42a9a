// The admin listener's endpoints: /metrics (Prometheus text format), /debug/participants (JSON),
// /health. Both reports read the server's per-tenant counters without locks and take two
// snapshot round trips to the dispatcher (the loop's, and the participants' in O(tenants)),
// however many tenants: cheap enough to scrape every second under full load. They are made on a
// thread of the server's (Server::reports), never an I/O thread, which would wait for the
// dispatcher with every connection it serves. The live page, /ui, is served here too; its event
// stream, /ui/events, by live.hpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "session.hpp"

namespace prometheus {
class Histogram;
}

namespace creditloop::server {

class Server;

/// The token of `Authorization: Bearer TOKEN` (the scheme in any case, spaces around the token
/// ignored); nothing for another scheme or none.
[[nodiscard]] std::optional<std::string_view> bearer_token(const RequestHead& request);

/// Whether the request's `Host` is one of `admin.hosts`: case-insensitive, and any port for a
/// name given without one. HTTP/1.0 may leave it out; HTTP/1.1 may not.
[[nodiscard]] bool admin_host_allowed(const std::vector<HostName>& names, const Request& request);

/// Whether the admin listener may serve the request: a `Host` of its own and, when one is
/// configured, the admin key (compared in constant time, as a digest).
[[nodiscard]] bool admin_admitted(const Server& server, const Request& request);

[[nodiscard]] Response admin_response(Server& server, const Request& request);
/// Whether admin_response() may wait for the dispatcher to answer the request (the reports).
[[nodiscard]] bool is_report(const Request& request);

[[nodiscard]] std::string metrics_text(Server& server);
[[nodiscard]] std::string participants_json(Server& server);

/// The queueing-delay histogram's upper bounds, in seconds.
[[nodiscard]] const std::vector<double>& wait_buckets();

/// The q-quantile (0..1) of a histogram, interpolated within its bucket; 0 when it is empty.
[[nodiscard]] double quantile(const prometheus::Histogram& h, double q);

}  // namespace creditloop::server
