#include "given_key.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string_view>
#include <system_error>

namespace creditloop::config_file {
namespace {

// Far above any token, far below what would hurt: a key_file naming /dev/zero or a log file is
// refused rather than read whole.
constexpr std::size_t kMaxKeyFile = 4096;

std::string read_key_file(const std::string& field, const std::string& file) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(file.c_str(), "rb"),
                                                           &std::fclose);
  if (!in) refuse(field, "cannot read \"" + file + "\": " + std::generic_category().message(errno));
  std::string content(kMaxKeyFile + 1, '\0');
  const std::size_t n = std::fread(content.data(), 1, content.size(), in.get());
  if (std::ferror(in.get())) {
    refuse(field, "cannot read \"" + file + "\": " + std::generic_category().message(errno));
  }
  if (n > kMaxKeyFile) {
    refuse(field, "\"" + file + "\" is larger than " + std::to_string(kMaxKeyFile) +
                      " bytes: not a key file");
  }
  content.resize(n);
  // What `echo KEY > file` and editors leave; anything more is refused below as white space.
  if (!content.empty() && content.back() == '\n') content.pop_back();
  return content;
}

}  // namespace

std::optional<GivenKey> given_key(Fields& f, const std::string& base_dir, bool required) {
  constexpr std::array<std::string_view, 4> kinds{"key", "key_sha256", "key_file", "key_env"};
  const nlohmann::json* value = nullptr;
  std::string_view kind;
  for (const std::string_view k : kinds) {
    const nlohmann::json* v = f.find(k);
    if (v == nullptr) continue;
    if (value != nullptr) {
      refuse(f.path(k), "give one of key, key_sha256, key_file, key_env, not two (" +
                            std::string(kind) + " is given too)");
    }
    value = v;
    kind = k;
  }
  if (value == nullptr) {
    if (required) refuse(f.path("key"), "is required (or key_sha256, key_file, key_env)");
    return std::nullopt;
  }
  GivenKey given;
  given.path = f.path(kind);
  if (!value->is_string()) refuse(given.path, "must be a string");
  const std::string& text = value->get_ref<const std::string&>();
  if (kind == "key_sha256") {
    const std::optional<KeyDigest> d = hex_digest(text);
    if (!d) {
      refuse(given.path, "must be 64 hex digits (the SHA-256 of the key), got " +
                             std::to_string(text.size()) + " characters");
    }
    given.digest = *d;
    return given;
  }
  std::string key;
  if (kind == "key") {
    key = text;
  } else if (kind == "key_file") {
    if (text.empty()) refuse(given.path, "must name a file");
    const std::filesystem::path file(text);
    key = read_key_file(given.path, file.is_relative() && !base_dir.empty()
                                        ? (std::filesystem::path(base_dir) / file).string()
                                        : text);
  } else {
    if (text.empty()) refuse(given.path, "must name an environment variable");
    // Read once, when the file is; nothing here sets variables.
    const char* v = std::getenv(text.c_str());
    if (v == nullptr) refuse(given.path, text + " is not set");
    key = v;
    if (key.empty()) refuse(given.path, text + " is empty");
  }
  if (key.empty()) refuse(given.path, "the key is empty");
  if (key.size() < 8) refuse(given.path, "the key must be at least 8 characters");
  // A bearer token is one word: a key with white space could never be presented.
  if (key.find_first_of(" \t\r\n\v\f") != std::string::npos) {
    refuse(given.path, "the key must not contain white space");
  }
  const std::optional<KeyDigest> d = key_digest(key);
  if (!d) refuse(given.path, "SHA-256 is unavailable (libcrypto)");
  given.digest = *d;
  return given;
}

}  // namespace creditloop::config_file
