// A key as the file gives it: exactly one of `key`, `key_sha256`, `key_file` (relative to the
// file's directory), `key_env` (read from the environment when the file is read). No message
// ever holds a key or a digest: they end up in logs, and a key pasted into key_sha256 by mistake
// is still a key.
#pragma once

#include <optional>
#include <string>

#include "json_fields.hpp"
#include "key_digest.hpp"

namespace creditloop::config_file {

struct GivenKey {
  KeyDigest digest{};
  std::string path;  // the field it came from, for the messages that must name it
};

/// The key of the object `f` reads; nothing when it has none and none is `required`.
[[nodiscard]] std::optional<GivenKey> given_key(Fields& f, const std::string& base_dir,
                                                bool required);

}  // namespace creditloop::config_file
