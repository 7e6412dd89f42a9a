// A bearer key's SHA-256: all that creditloop-server and the C API keep of a tenant's key,
// whichever way the file gives it, and what a presented key is looked up by.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace creditloop::config_file {

using KeyDigest = std::array<unsigned char, 32>;

/// The SHA-256 of `key`. Allocates nothing, so that a lookup on a request path does not either.
/// Nothing only when libcrypto fails, which leaves nothing to compare.
[[nodiscard]] std::optional<KeyDigest> key_digest(std::string_view key) noexcept;

/// The digest of the key a connection presented last: its next request, with the same key, costs
/// a constant-time comparison instead of a SHA-256 (about 2,000 instructions, 3 % of a proxied
/// request's). It holds one connection's own key, so what its timing could tell that connection's
/// client is what the client sent itself.
class KeyDigestMemo {
 public:
  [[nodiscard]] std::optional<KeyDigest> digest(std::string_view key);

 private:
  std::string key_;
  std::optional<KeyDigest> digest_;
};

/// 64 hex digits as a digest (`key_sha256`), or nothing.
[[nodiscard]] std::optional<KeyDigest> hex_digest(std::string_view text) noexcept;

/// A digest is already uniform: its first bytes are its hash.
struct KeyDigestHash {
  std::size_t operator()(const KeyDigest& d) const noexcept;
};

/// Constant time (CRYPTO_memcmp), so that the final comparison says nothing about either key.
struct KeyDigestEqual {
  bool operator()(const KeyDigest& a, const KeyDigest& b) const noexcept;
};

}  // namespace creditloop::config_file
