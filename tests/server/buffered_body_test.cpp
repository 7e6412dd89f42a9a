// A buffered request body: in memory up to its bound, then in a temporary file with no name,
// read back byte for byte, and its file closed when it is released.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "buffered_body.hpp"

namespace {

using creditloop::server::BufferedBody;

class BufferedBodyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "buffered-body-XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Descriptors of this process on files in the directory: the body's file, once it has one.
  [[nodiscard]] int files_open() const {
    int count = 0;
    for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      const auto target = std::filesystem::read_symlink(fd.path(), ec);
      if (!ec && target.string().rfind(dir_ + "/", 0) == 0) ++count;
    }
    return count;
  }

  // Feeds `bytes` in reads of at most `read_size`, as a socket would give them.
  static std::error_code feed(BufferedBody& body, const std::string& bytes, std::size_t read_size) {
    std::size_t at = 0;
    while (at < bytes.size()) {
      const std::span<char> room = body.room();
      const std::size_t n = std::min({room.size(), read_size, bytes.size() - at});
      bytes.copy(room.data(), n, at);
      at += n;
      if (const std::error_code ec = body.commit(n)) return ec;
    }
    return {};
  }

  static std::string read_back(BufferedBody& body) {
    if (!body.in_file()) return {body.memory().data(), body.memory().size()};
    std::string out;
    std::vector<char> piece(7000);  // not a divisor of anything written: reads cross writes
    std::size_t got = 0;
    while (out.size() < body.size()) {
      EXPECT_FALSE(body.read_at(out.size(), piece, got));
      if (got == 0) break;
      out.append(piece.data(), got);
    }
    return out;
  }

  static std::string bytes(std::size_t n) {
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 251) & 0xff);
    return s;
  }

  std::string dir_;
};

TEST_F(BufferedBodyTest, ABodyWithinTheBoundStaysInMemory) {
  BufferedBody body;
  const std::string sent = bytes(16 * 1024);
  ASSERT_FALSE(body.begin(16 * 1024, dir_, std::nullopt));
  ASSERT_FALSE(feed(body, sent, 1000));
  EXPECT_FALSE(body.in_file());
  EXPECT_EQ(files_open(), 0);
  EXPECT_EQ(read_back(body), sent);
}

TEST_F(BufferedBodyTest, AnUnknownLengthPastTheBoundGoesToTheFile) {
  BufferedBody body;
  const std::string sent = bytes(300 * 1024 + 17);
  ASSERT_FALSE(body.begin(16 * 1024, dir_, std::nullopt));
  ASSERT_FALSE(feed(body, sent, 5000));
  EXPECT_TRUE(body.in_file());
  EXPECT_EQ(body.size(), sent.size());
  EXPECT_EQ(files_open(), 1);
  EXPECT_TRUE(std::filesystem::is_empty(dir_));  // the file has no name
  EXPECT_EQ(read_back(body), sent);
  body.release();
  EXPECT_EQ(files_open(), 0);
}

TEST_F(BufferedBodyTest, AKnownLengthPastTheBoundGoesToTheFileFromItsFirstByte) {
  BufferedBody body;
  const std::string sent = bytes(100 * 1024);
  ASSERT_FALSE(body.begin(16 * 1024, dir_, sent.size()));
  EXPECT_TRUE(body.in_file());
  ASSERT_FALSE(feed(body, sent, 64 * 1024));
  EXPECT_EQ(read_back(body), sent);
}

TEST_F(BufferedBodyTest, ABoundOfZeroSendsEveryByteToTheFile) {
  BufferedBody body;
  ASSERT_FALSE(body.begin(0, dir_, std::nullopt));
  ASSERT_FALSE(feed(body, "x", 1));
  EXPECT_TRUE(body.in_file());
  EXPECT_EQ(read_back(body), "x");
}

TEST_F(BufferedBodyTest, TheFileGoesWithTheBody) {
  {
    BufferedBody body;
    ASSERT_FALSE(body.begin(0, dir_, 10));
    EXPECT_EQ(files_open(), 1);
  }
  EXPECT_EQ(files_open(), 0);
  BufferedBody again;  // and with a body begun anew
  ASSERT_FALSE(again.begin(0, dir_, 10));
  ASSERT_FALSE(again.begin(0, dir_, 10));
  EXPECT_EQ(files_open(), 1);
}

TEST_F(BufferedBodyTest, ADirectoryThatIsNotThereIsAnError) {
  BufferedBody body;
  EXPECT_TRUE(body.begin(0, dir_ + "/missing", 10));
  EXPECT_FALSE(body.in_file());
}

}  // namespace
