// One reader of creditloop-server's tenant file (config/tenant_file.cpp): the server and the C
// API refuse the same files with the same message, and accept the same ones alike. Each refusal
// below is one the two once disagreed on (the C API ignored misspelt fields and missing keys).
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <variant>

#include "config.hpp"
#include "creditloop/creditloop.h"

namespace {

constexpr const char* kPlans = R"("plans": {"pro": {"P1": {"rate": 2, "burst": 4}}})";

std::string file_with_tenant(const std::string& tenant_fields) {
  return std::string("{") + kPlans + R"(, "tenants": [{"name": "a", )" + tenant_fields + "}]}";
}

std::string server_refusal(const std::string& text) {
  auto parsed = creditloop::server::parse_config(text);
  const auto* refusal = std::get_if<creditloop::tools::Refusal>(&parsed);
  return refusal == nullptr ? "(accepted)" : refusal->message;
}

std::string capi_refusal(const std::string& text) {
  creditloop_config* config = nullptr;
  char message[512] = "";
  const creditloop_status s =
      creditloop_config_parse_json(text.data(), text.size(), &config, message, sizeof message);
  creditloop_config_free(config);
  if (s == CREDITLOOP_OK) return "(accepted)";
  return s == CREDITLOOP_BAD_CONFIG ? std::string(message) : creditloop_strerror(s);
}

struct Case {
  const char* what;  // the test's name
  std::string file;
  const char* refusal;
};

// The case's name, rather than its bytes, in the listing.
void PrintTo(const Case& c, std::ostream* os) { *os << c.what; }

class BothReaders : public testing::TestWithParam<Case> {};

TEST_P(BothReaders, RefuseWithTheSameMessage) {
  const Case& c = GetParam();
  EXPECT_EQ(server_refusal(c.file), c.refusal) << c.what;
  EXPECT_EQ(capi_refusal(c.file), c.refusal) << c.what;
}

INSTANTIATE_TEST_SUITE_P(
    TenantFile, BothReaders,
    testing::Values(
        Case{"MisspeltTenantField",
             file_with_tenant(R"("key": "a-key-1234", "plan": "pro", "sharez": 2)"),
             "tenants[0].sharez: unknown field"},
        Case{"MisspeltClassField",
             std::string(R"({"plans": {"pro": {"P1": {"rate": 2, "burst": 4, "brust": 1}}}})"),
             "plans.pro.P1.brust: unknown field"},
        Case{"TenantWithoutKey", file_with_tenant(R"("plan": "pro")"),
             "tenants[0].key: is required (or key_sha256, key_file, key_env)"},
        Case{"SharesOfThreePointZero",
             file_with_tenant(R"("key": "a-key-1234", "plan": "pro", "shares": 3.0)"),
             "tenants[0].shares: must be a whole number from 1 to 1000000"},
        Case{"ClassesOfThreePointZero", std::string(R"({"classes": 3.0, )") + kPlans + "}",
             "classes: must be a whole number from 1 to 7"},
        Case{"TwoKeysAtOnce",
             file_with_tenant(R"("key": "a-key-1234", "key_env": "HOME", "plan": "pro")"),
             "tenants[0].key_env: give one of key, key_sha256, key_file, key_env, not two (key "
             "is given too)"},
        Case{"DigestThatIsNotOne", file_with_tenant(R"("key_sha256": "abc", "plan": "pro")"),
             "tenants[0].key_sha256: must be 64 hex digits (the SHA-256 of the key), got 3 "
             "characters"}),
    [](const testing::TestParamInfo<Case>& param) { return std::string(param.param.what); });

TEST(TenantFile, BothReadersAcceptTheServersWholeFileAndTheCApiLeavesTheRestUnread) {
  const std::string text = std::string(R"({"mode": "proxy", "listen": "127.0.0.1:8080",
      "proxy": {"backend": "127.0.0.1:9000"}, )") +
                           kPlans + R"(, "tenants": [{"name": "a", "key": "a-key-1234",
      "plan": "pro", "shares": 3, "queue_limit": 5}]})";
  EXPECT_EQ(server_refusal(text), "(accepted)");
  EXPECT_EQ(capi_refusal(text), "(accepted)");
}

}  // namespace
