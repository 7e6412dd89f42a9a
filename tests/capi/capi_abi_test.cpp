// The C API as a stable ABI: the version number, structs that carry their size, a null argument
// refused as such rather than answered "nothing", and the tenant file loaded from disk as
// creditloop-server loads it (key_file beside the file, key_env from the environment), with
// tenants found by the key a client presents.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "creditloop/creditloop.h"

namespace {

namespace fs = std::filesystem;

// A directory of its own per test, removed after it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "creditloop-capi-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
  }

 private:
  fs::path path_;
};

constexpr const char* kPlans = R"("plans": {"pro": {"P1": {"rate": 2, "burst": 4}}})";

TEST(CapiVersion, TheNumberMatchesTheStringAndTheHeader) {
  EXPECT_EQ(creditloop_version_number(), static_cast<unsigned>(CREDITLOOP_VERSION_NUMBER));
  const std::string expected = std::to_string(CREDITLOOP_VERSION_MAJOR) + "." +
                               std::to_string(CREDITLOOP_VERSION_MINOR) + "." +
                               std::to_string(CREDITLOOP_VERSION_PATCH);
  EXPECT_EQ(creditloop_version(), expected);
  EXPECT_EQ(
      CREDITLOOP_VERSION_NUMBER,
      CREDITLOOP_VERSION_MAJOR * 10000 + CREDITLOOP_VERSION_MINOR * 100 + CREDITLOOP_VERSION_PATCH);
}

TEST(CapiNullArguments, AreRefusedAndNeverAnsweredNothing) {
  size_t count = 0;
  creditloop_decision decision{};
  creditloop_request* chain = nullptr;
  EXPECT_EQ(creditloop_dispatch(nullptr, 0, &decision, 1, &count), CREDITLOOP_BAD_ARGUMENT);
  EXPECT_EQ(creditloop_take_all_queued(nullptr, &chain), CREDITLOOP_BAD_ARGUMENT);
  EXPECT_EQ(creditloop_size(nullptr), CREDITLOOP_BAD_COUNT);
  EXPECT_EQ(creditloop_waiting(nullptr), CREDITLOOP_BAD_COUNT);
  EXPECT_EQ(creditloop_in_flight(nullptr), CREDITLOOP_BAD_COUNT);
  EXPECT_EQ(creditloop_config_tenants(nullptr), CREDITLOOP_BAD_COUNT);
  EXPECT_EQ(creditloop_classes(nullptr), -1);
  EXPECT_EQ(creditloop_config_classes(nullptr), -1);
  EXPECT_EQ(creditloop_ring_size(nullptr), UINT32_MAX);
  EXPECT_EQ(creditloop_turns(nullptr, 0), UINT64_MAX);
  EXPECT_EQ(creditloop_request_idle(nullptr), -1);
  creditloop_participant p{};
  EXPECT_EQ(creditloop_remove(nullptr, p, &chain), CREDITLOOP_BAD_ARGUMENT);
  EXPECT_EQ(creditloop_replan(nullptr, p, "pro", 1, 0), CREDITLOOP_BAD_ARGUMENT);
  EXPECT_EQ(creditloop_find(nullptr, "x", &p), CREDITLOOP_BAD_ARGUMENT);
  creditloop_config* config = nullptr;
  EXPECT_EQ(creditloop_config_load(nullptr, &config, nullptr, 0), CREDITLOOP_BAD_ARGUMENT);
  EXPECT_EQ(creditloop_config_find_key(nullptr, "k", 1, &count), CREDITLOOP_BAD_ARGUMENT);

  // With a core, the same readings answer a count, and dispatch its status.
  config = creditloop_config_new(1);
  ASSERT_NE(config, nullptr);
  ASSERT_EQ(creditloop_config_add_plan(config, "pro"), CREDITLOOP_OK);
  ASSERT_EQ(creditloop_config_set_class(config, "pro", 0, 1, 1), CREDITLOOP_OK);
  creditloop_core* core = nullptr;
  ASSERT_EQ(creditloop_core_new(config, &core, nullptr, 0), CREDITLOOP_OK);
  EXPECT_EQ(creditloop_size(core), 0u);
  EXPECT_EQ(creditloop_dispatch(core, 0, nullptr, 0, &count), CREDITLOOP_OK);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(creditloop_dispatch(core, 0, nullptr, 1, &count), CREDITLOOP_BAD_ARGUMENT);
  EXPECT_EQ(creditloop_dispatch(core, 0, &decision, 1, nullptr), CREDITLOOP_BAD_ARGUMENT);
  EXPECT_EQ(creditloop_take_all_queued(core, &chain), CREDITLOOP_OK);
  EXPECT_EQ(chain, nullptr);
  EXPECT_EQ(creditloop_turns(core, 2), UINT64_MAX);  // class 1 is the unmetered one
  EXPECT_EQ(creditloop_turns(core, 1), 0u);
  creditloop_core_free(core);
  creditloop_config_free(config);
}

// An older caller's struct is the first version's: filled as far as it reaches and no further.
TEST(CapiSizedStructs, AreFilledAsFarAsTheCallerSaysAndRefusedBelowTheFirstVersion) {
  const std::string text = std::string("{") + kPlans +
                           R"(, "tenants": [{"name": "t", "key": "t-key-123", "plan": "pro",
                               "shares": 3, "queue_timeout_ms": 7}]})";
  creditloop_config* config = nullptr;
  ASSERT_EQ(creditloop_config_parse_json(text.data(), text.size(), &config, nullptr, 0),
            CREDITLOOP_OK);
  creditloop_tenant_config t{};
  t.size = sizeof t;
  ASSERT_EQ(creditloop_config_tenant(config, 0, &t), CREDITLOOP_OK);
  EXPECT_EQ(t.size, sizeof t);
  EXPECT_STREQ(t.name, "t");
  EXPECT_EQ(t.shares, 3u);
  EXPECT_EQ(t.queue_timeout_ms, 7u);
  creditloop_tenant_config small{};
  small.size = offsetof(creditloop_tenant_config, queue_timeout_ms);
  EXPECT_EQ(creditloop_config_tenant(config, 0, &small), CREDITLOOP_BAD_ARGUMENT);
  EXPECT_EQ(small.name, nullptr);  // nothing written
  // A newer caller's larger struct: the bytes past ours are left alone.
  struct {
    creditloop_tenant_config t;
    unsigned char later[16];
  } larger{};
  std::memset(larger.later, 0xab, sizeof larger.later);
  larger.t.size = sizeof larger;
  ASSERT_EQ(creditloop_config_tenant(config, 0, &larger.t), CREDITLOOP_OK);
  EXPECT_EQ(larger.t.size, sizeof larger);
  EXPECT_EQ(larger.later[0], 0xab);
  EXPECT_EQ(larger.later[15], 0xab);

  creditloop_core* core = nullptr;
  ASSERT_EQ(creditloop_core_new(config, &core, nullptr, 0), CREDITLOOP_OK);
  creditloop_participant p{};
  ASSERT_EQ(creditloop_add(core, "t", "pro", 3, 0, &p), CREDITLOOP_OK);
  creditloop_participant_snapshot s{};
  EXPECT_EQ(creditloop_snapshot(core, p, 0, &s), CREDITLOOP_BAD_ARGUMENT);  // size unset
  s.size = sizeof s;
  ASSERT_EQ(creditloop_snapshot(core, p, 0, &s), CREDITLOOP_OK);
  EXPECT_EQ(s.shares, 3u);
  EXPECT_STREQ(s.name, "t");
  creditloop_core_free(core);
  creditloop_config_free(config);
}

TEST(CapiConfigLoad, TakesKeyFilesBesideTheFileAndVariablesFromTheEnvironment) {
  const TempDir dir;
  dir.write("carol.key", "carol-secret-1\n");
  ASSERT_EQ(::setenv("CREDITLOOP_CAPI_TEST_KEY", "dave-secret-22", 1), 0);
  dir.write("tenants.json", std::string("{") + kPlans + R"(, "listen": "127.0.0.1:1",
      "tenants": [{"name": "alice", "key": "alice-secret", "plan": "pro"},
                  {"name": "bob", "key_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b", "plan": "pro"},
                  {"name": "carol", "key_file": "carol.key", "plan": "pro"},
                  {"name": "dave", "key_env": "CREDITLOOP_CAPI_TEST_KEY", "plan": "pro"}]})");
  // Read from elsewhere: the key file is found beside the JSON, not in the working directory.
  creditloop_config* config = nullptr;
  char message[256] = "";
  ASSERT_EQ(creditloop_config_load((dir.path() / "tenants.json").c_str(), &config, message,
                                   sizeof message),
            CREDITLOOP_OK)
      << message;
  ASSERT_EQ(creditloop_config_tenants(config), 4u);
  const auto index_of = [&](const std::string& key) {
    size_t index = 99;
    const creditloop_status s = creditloop_config_find_key(config, key.data(), key.size(), &index);
    return s == CREDITLOOP_OK ? static_cast<int>(index) : -static_cast<int>(s);
  };
  EXPECT_EQ(index_of("alice-secret"), 0);
  EXPECT_EQ(index_of("secret"), 1);          // bob's key, given as its SHA-256
  EXPECT_EQ(index_of("carol-secret-1"), 2);  // the file's newline is not the key's
  EXPECT_EQ(index_of("carol-secret-1\n"), -CREDITLOOP_NOT_FOUND);
  EXPECT_EQ(index_of("dave-secret-22"), 3);
  EXPECT_EQ(index_of("alice"), -CREDITLOOP_NOT_FOUND);  // a name is not a key
  creditloop_config_free(config);
  ASSERT_EQ(::unsetenv("CREDITLOOP_CAPI_TEST_KEY"), 0);
}

TEST(CapiConfigLoad, RefusalsNameTheFieldAndNeverTheKey) {
  const TempDir dir;
  creditloop_config* config = nullptr;
  char message[256] = "";
  EXPECT_EQ(creditloop_config_load(dir.path().c_str(), &config, message, sizeof message),
            CREDITLOOP_BAD_CONFIG);
  EXPECT_EQ(std::string(message), dir.path().string() + ": cannot be read: Is a directory");
  EXPECT_EQ(config, nullptr);

  dir.write("short.json", std::string("{") + kPlans +
                              R"(, "tenants": [{"name": "a", "key": "hunter2", "plan": "pro"}]})");
  EXPECT_EQ(
      creditloop_config_load((dir.path() / "short.json").c_str(), &config, message, sizeof message),
      CREDITLOOP_BAD_CONFIG);
  EXPECT_STREQ(message, "tenants[0].key: the key must be at least 8 characters");

  ASSERT_EQ(::unsetenv("CREDITLOOP_CAPI_TEST_UNSET"), 0);
  dir.write("env.json", std::string("{") + kPlans +
                            R"(, "tenants": [{"name": "a", "key_env": "CREDITLOOP_CAPI_TEST_UNSET",
                                "plan": "pro"}]})");
  EXPECT_EQ(
      creditloop_config_load((dir.path() / "env.json").c_str(), &config, message, sizeof message),
      CREDITLOOP_BAD_CONFIG);
  EXPECT_STREQ(message, "tenants[0].key_env: CREDITLOOP_CAPI_TEST_UNSET is not set");

  dir.write("twice.json", std::string("{") + kPlans + R"(, "tenants": [
      {"name": "a", "key": "same-key-1", "plan": "pro"},
      {"name": "b", "key": "same-key-1", "plan": "pro"}]})");
  EXPECT_EQ(
      creditloop_config_load((dir.path() / "twice.json").c_str(), &config, message, sizeof message),
      CREDITLOOP_BAD_CONFIG);
  EXPECT_STREQ(message, "tenants[1].key: is the key of tenant \"a\" too");
  EXPECT_EQ(std::string(message).find("same-key-1"), std::string::npos);
}

}  // namespace
