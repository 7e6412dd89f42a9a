// The part of creditloop-server's JSON that every reader of it shares: `classes`, `plans`, and
// `tenants` with their keys. The server (tools/server/config.cpp) reads its other fields from
// the same top-level object; the C API (capi/) reads this part alone. One reader, so that a file
// one accepts the other accepts alike.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <creditloop/plan.hpp>

#include "json_fields.hpp"
#include "key_digest.hpp"

namespace creditloop::config_file {

struct Tenant {
  std::string name;
  KeyDigest key{};       // the digest of its bearer key
  std::string key_path;  // the field its key came from ("tenants[2].key_file")
  std::string plan;
  std::uint32_t shares = 1;
  std::uint32_t queue_limit = 0;       // 0: none
  std::uint64_t queue_timeout_ms = 0;  // 0: none
};

struct TenantFile {
  Config plans;                 // classes and plans, checked as a core checks them
  std::vector<Tenant> tenants;  // in file order; names and keys unique
};

/// Reads `classes`, `plans` and `tenants` from the top-level object `top` (which the caller
/// finishes, or not, when it has read its own fields). `key_file` paths that are relative are
/// taken from `base_dir` (the working directory when it is empty). Throws BadField.
[[nodiscard]] TenantFile read_tenant_file(Fields& top, const std::string& base_dir);

/// `text` parsed as JSON and read as above, ignoring the top-level fields that are not its
/// (the server's listeners, proxy, fleet...). Throws BadField, "not JSON" included.
[[nodiscard]] TenantFile parse_tenant_file(std::string_view text, const std::string& base_dir);

/// The file at `path` read whole; BadField "PATH: cannot be read: why" otherwise (a directory
/// says so).
[[nodiscard]] std::string read_config_text(const std::string& path);

/// The file at `path` read as parse_tenant_file reads text, its relative `key_file` paths taken
/// from the file's directory, as the server loads it.
[[nodiscard]] TenantFile load_tenant_file(const std::string& path);

/// The names the file allows: 1 to 64 of [A-Za-z0-9._-].
[[nodiscard]] bool valid_name(std::string_view name) noexcept;

}  // namespace creditloop::config_file
