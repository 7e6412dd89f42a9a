// A presented key's digest: computed afresh, or remembered from the connection's last request.
// The memo must never answer one key with another's digest.
#include <gtest/gtest.h>

#include <string>

#include "key_digest.hpp"

namespace {

using creditloop::config_file::key_digest;
using creditloop::config_file::KeyDigestMemo;

TEST(KeyDigestMemo, AnswersEachKeyWithItsOwnDigest) {
  KeyDigestMemo memo;
  const std::string a = "tenant-a-key";
  const std::string b = "tenant-b-key";  // the same length as a
  const std::string longer = "tenant-a-key-and-more";
  for (const std::string& key : {a, a, b, a, longer, longer, a}) {
    EXPECT_EQ(memo.digest(key), key_digest(key)) << key;
  }
}

TEST(KeyDigestMemo, TellsAnEmptyKeyFromNone) {
  KeyDigestMemo memo;
  EXPECT_EQ(memo.digest(""), key_digest(""));
  EXPECT_EQ(memo.digest("x"), key_digest("x"));
  EXPECT_EQ(memo.digest(""), key_digest(""));
  EXPECT_NE(key_digest(""), key_digest("x"));
}

}  // namespace
