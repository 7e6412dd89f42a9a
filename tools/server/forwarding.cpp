#include "forwarding.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <optional>
#include <random>
#include <tuple>
#include <unordered_set>
#include <utility>

#include <boost/beast/http/rfc7230.hpp>

namespace creditloop::server {
namespace {

bool same_token(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

bool hop_by_hop(http::field f) noexcept {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::content_length:  // framing: the writing side sets its own
    case http::field::expect:          // answered by the proxy, never passed on
      return true;
    default:
      return false;
  }
}

thread_local std::uint64_t connection_name_comparisons_made = 0;

char ascii_lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

// Field names compare without regard to case (RFC 9110 section 5.1).
struct NameHash {
  std::size_t operator()(std::string_view name) const noexcept {
    std::size_t h = 14695981039346656037ull;  // FNV-1a
    for (const char c : name) {
      h = (h ^ static_cast<unsigned char>(ascii_lower(c))) * 1099511628211ull;
    }
    return h;
  }
};
struct NameEqual {
  bool operator()(std::string_view a, std::string_view b) const noexcept {
    ++connection_name_comparisons_made;
    return same_token(a, b);
  }
};

// The names a head's Connection headers list (RFC 9110 section 7.6.1), read once: each field is
// then looked up among them, so that a long list in a head of many fields costs the sum of the
// two, not their product. Views into the head's values: valid while the head is.
class ConnectionNames {
 public:
  explicit ConnectionNames(const http::fields& head) {
    for (auto it = head.find(http::field::connection);
         it != head.end() && it->name() == http::field::connection; ++it) {
      for (const auto token : http::token_list{it->value()}) {
        const std::string_view name(token.data(), token.size());
        // Keep-Alive is dropped as hop-by-hop anyway: the usual `Connection: keep-alive` costs
        // no set.
        if (!same_token(name, "keep-alive")) names_.insert(name);
      }
    }
  }
  [[nodiscard]] bool lists(std::string_view name) const {
    return !names_.empty() && names_.contains(name);
  }

 private:
  std::unordered_set<std::string_view, NameHash, NameEqual> names_;
};

boost::beast::string_view text(std::string_view s) noexcept { return {s.data(), s.size()}; }

}  // namespace

std::uint64_t connection_name_comparisons() noexcept { return connection_name_comparisons_made; }

bool keeps_alive(const http::request_header<>& req) {
  bool close = false;
  bool keep = false;
  for (auto it = req.find(http::field::connection);
       it != req.end() && it->name() == http::field::connection; ++it) {
    for (const auto token : http::token_list{it->value()}) {
      const std::string_view t(token.data(), token.size());
      close = close || same_token(t, "close");
      keep = keep || same_token(t, "keep-alive");
    }
  }
  return req.version() >= 11 ? !close : keep && !close;
}

bool is_tenant_header(std::string_view name) noexcept {
  if (name.size() != kTenantHeader.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i] == '_' ? '-' : name[i];
    if (std::tolower(static_cast<unsigned char>(c)) !=
        std::tolower(static_cast<unsigned char>(kTenantHeader[i]))) {
      return false;
    }
  }
  return true;
}

void copy_end_to_end(const http::fields& from, http::fields& to, std::size_t count) {
  const ConnectionNames named(from);
  for (const auto& f : from) {
    if (count-- == 0) break;  // the rest came as trailers
    if (hop_by_hop(f.name())) continue;
    if (named.lists({f.name_string().data(), f.name_string().size()})) continue;
    to.insert(f.name_string(), f.value());
  }
}

namespace {

// The authority of an absolute-form target (RFC 9112 section 3.2.2), and the origin form left
// after it; nothing for any other form.
std::optional<std::pair<std::string_view, std::string_view>> absolute_form(
    std::string_view target) {
  for (const std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && same_token(target.substr(0, scheme.size()), scheme)) {
      const std::string_view rest = target.substr(scheme.size());
      const auto slash = rest.find_first_of("/?");
      return std::pair{rest.substr(0, slash), slash == std::string_view::npos
                                                  ? std::string_view("/")
                                                  : rest.substr(slash)};
    }
  }
  return std::nullopt;
}

// host[:port], with a host of name characters or a bracketed IPv6 address: what nginx takes.
bool usable_authority(std::string_view a) {
  const auto colon = a.front() == '[' ? a.find(':', a.find(']')) : a.rfind(':');
  std::string_view host = a.substr(0, colon);
  if (colon != std::string_view::npos) {
    const std::string_view port = a.substr(colon + 1);
    if (port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    return std::all_of(host.begin(), host.end(), [](char c) {
      return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
    });
  }
  return !host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
           c == '~' || c == '%';
  });
}

}  // namespace

void backend_head(const http::request_header<>& client, const Forwarded& added,
                  http::request_header<>& out) {
  if (client.method() == http::verb::unknown) {
    out.method_string(client.method_string());  // a method Beast has no name for, passed as is
  } else {
    out.method(client.method());
  }
  // An absolute-form target (RFC 9112 section 3.2.2) names the host itself, which then wins over
  // any Host header; the backend gets the origin form.
  std::string_view target(client.target().data(), client.target().size());
  std::string_view target_host;
  if (const auto absolute = absolute_form(target)) std::tie(target_host, target) = *absolute;
  if (!target.empty() && target.front() == '?') {
    out.target(text("/" + std::string(target)));
  } else {
    out.target(text(target));
  }
  out.version(11);
  const ConnectionNames named(client);
  std::string forwarded_for;
  std::size_t index = 0;
  for (const auto& f : client) {
    if (index++ == added.header_fields) break;
    const std::string_view name(f.name_string().data(), f.name_string().size());
    if (hop_by_hop(f.name()) || named.lists(name)) continue;
    switch (f.name()) {
      case http::field::authorization:  // the tenant's key stays with the proxy
      case http::field::host:
        continue;
      default:
        break;
    }
    if (same_token(name, "X-Forwarded-Proto")) continue;
    // nginx's default (underscores_in_headers off): CGI and WSGI backends read `_` and `-` as
    // one, so such a name could pose as one the proxy sets or removes.
    if (name.find('_') != std::string_view::npos) continue;
    if (same_token(name, "X-Forwarded-For")) {
      if (!forwarded_for.empty()) forwarded_for += ", ";
      forwarded_for.append(f.value().data(), f.value().size());
      continue;
    }
    if (is_tenant_header(name) || same_token(name, "X-Request-Id")) continue;
    out.insert(f.name_string(), f.value());
  }
  if (!added.host.empty()) {
    out.set(http::field::host, text(added.host));
  } else if (!target_host.empty()) {
    out.set(http::field::host, text(target_host));
  } else if (const auto host = client.find(http::field::host); host != client.end()) {
    out.set(http::field::host, host->value());
  } else {
    out.set(http::field::host, text(added.backend_address));  // HTTP/1.0 may send none
  }
  if (!forwarded_for.empty()) forwarded_for += ", ";
  forwarded_for += added.client_address;
  out.set("X-Forwarded-For", forwarded_for);
  out.set("X-Forwarded-Proto", "http");
  out.set(text(kTenantHeader), text(added.tenant));
  out.set("X-Request-Id", text(added.request_id));
}

std::optional<std::string> bad_host(const http::request_header<>& req) {
  // An absolute-form target's authority becomes the backend's Host: it passes the same check.
  if (const auto absolute = absolute_form({req.target().data(), req.target().size()});
      absolute && (absolute->first.empty() || !usable_authority(absolute->first))) {
    return std::string("a malformed authority in the request target");
  }
  const auto first = req.find(http::field::host);
  if (first == req.end()) {
    if (req.version() >= 11) return std::string("an HTTP/1.1 request needs a Host header");
    return std::nullopt;
  }
  auto next = first;
  if (++next != req.end() && next->name() == http::field::host) {
    return std::string("more than one Host header");
  }
  for (const char c : first->value()) {
    if (c == ' ' || c == '\t' || c == '/' || c == '@')
      return std::string("a malformed Host header");
  }
  return std::nullopt;
}

bool unsupported_coding(const http::request_header<>& req) {
  const auto first = req.find(http::field::transfer_encoding);
  if (first == req.end()) return false;
  auto next = first;
  if (++next != req.end() && next->name() == http::field::transfer_encoding) return true;
  std::string_view v(first->value().data(), first->value().size());
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return !same_token(v, "chunked");
}

bool usable_request_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > 128) return false;
  for (const char c : id) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

std::string make_request_id() {
  // Unpredictable enough that ids from two processes or threads do not collide; not a secret.
  thread_local std::mt19937_64 generator{[] {
    std::random_device device;
    return (std::uint64_t{device()} << 32) ^ device();
  }()};
  static constexpr std::array<char, 16> hex{'0', '1', '2', '3', '4', '5', '6', '7',
                                            '8', '9', 'a', 'b', 'c', 'd', 'e', 'f'};
  std::string id(32, '0');
  for (std::size_t half = 0; half < 2; ++half) {
    std::uint64_t bits = generator();
    for (std::size_t i = 0; i < 16; ++i, bits >>= 4) id[half * 16 + i] = hex[bits & 0xf];
  }
  return id;
}

}  // namespace creditloop::server
