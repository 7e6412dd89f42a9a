#include "key_digest.hpp"

#include <cstring>

// SHA256_Init/Update/Final work on a context on the stack; OpenSSL 3 deprecates them for the EVP
// interface, whose every digest allocates a context (EVP_Digest, and SHA256() through it). A key
// looked up per request must not allocate, and SHA-256 itself will not change.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace creditloop::config_file {

std::optional<KeyDigest> key_digest(std::string_view key) noexcept {
  KeyDigest d{};
  SHA256_CTX context;
  if (SHA256_Init(&context) != 1 || SHA256_Update(&context, key.data(), key.size()) != 1 ||
      SHA256_Final(d.data(), &context) != 1) {
    return std::nullopt;
  }
  return d;
}

std::optional<KeyDigest> KeyDigestMemo::digest(std::string_view key) {
  if (digest_ && key.size() == key_.size() &&
      CRYPTO_memcmp(key.data(), key_.data(), key.size()) == 0) {
    return digest_;
  }
  digest_ = key_digest(key);
  key_.assign(key);
  return digest_;
}

std::optional<KeyDigest> hex_digest(std::string_view text) noexcept {
  KeyDigest d{};
  if (text.size() != 2 * d.size()) return std::nullopt;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < d.size(); ++i) {
    const int hi = nibble(text[2 * i]);
    const int lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    d[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return d;
}

std::size_t KeyDigestHash::operator()(const KeyDigest& d) const noexcept {
  std::size_t h = 0;
  std::memcpy(&h, d.data(), sizeof h);
  return h;
}

bool KeyDigestEqual::operator()(const KeyDigest& a, const KeyDigest& b) const noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace creditloop::config_file
