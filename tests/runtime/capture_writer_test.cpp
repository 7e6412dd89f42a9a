// The capture's writer (creditloop/capture.hpp) on its own: the lines it formats, with exact times
// and costs, rotation, and an unwritable path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capture_support.hpp"
#include "creditloop/capture.hpp"

namespace creditloop {
namespace {

using namespace capture_tests;

CaptureSetup setup_at(Nanos origin) {
  CaptureSetup s;
  s.config = reference_config();
  s.slots = 8;
  s.origin = origin;
  s.origin_unix_ns = 1'764'629'000'123'456'789;
  return s;
}

TEST(CaptureWriter, WritesTheHeaderAndEachEventWithExactTimesAndCosts) {
  Scratch scratch;
  const std::string path = scratch.path("c.jsonl");
  {
    CaptureWriter w(CaptureFiles{path, 1 << 20, 2}, setup_at(1'000));
    w.plan(1'000, "alice", "pro", 1);
    w.plan(501'000, "carol \"q\"", "lite", 2);
    w.request(CaptureRequest{"alice", 2'200, 3'000, 100'003'000, 0, 1'250'000'000});
    w.request(CaptureRequest{"carol \"q\"", 2'000'001'000, 2'000'001'001, 2'500'001'000, 2, 7});
    w.remove(901'000, "carol \"q\"");
    w.dropped(3'200'001'000, 17);
  }
  const std::vector<json> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 7u);
  const json& h = lines[0];
  EXPECT_EQ(h["capture"], "creditloop");
  EXPECT_EQ(h["version"], 1);
  EXPECT_EQ(h["file"], 0);
  EXPECT_EQ(h["origin_unix_ns"].get<std::int64_t>(), 1'764'629'000'123'456'789);
  EXPECT_EQ(h["classes"], json::parse(R"(["P1", "P2"])"));
  EXPECT_EQ(h["plans"], json::parse(R"({"pro": {"P1": {"rate": 2, "burst": 4},
                                                  "P2": {"rate": 5, "burst": 10}},
                                         "lite": {"P2": {"rate": 5, "burst": 10}}})"));
  EXPECT_EQ(h["server"]["slots"], 8);
  EXPECT_EQ(h["participants"], json::array());
  EXPECT_EQ(lines[1], json::parse(R"({"ev": "plan", "t": 0, "participant": "alice",
                                      "plan": "pro", "shares": 1})"));
  EXPECT_EQ(lines[2]["participant"], "carol \"q\"");
  EXPECT_EQ(lines[2]["shares"], 2);
  // The exact text: nine decimals of seconds since the origin, six of credits.
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(R"({"ev": "request", "participant": "alice", "arrive": 0.000001200, )"
                      R"("dispatch": 0.000002000, "complete": 0.100002000, "class": "P1", )"
                      R"("cost": 1.250000})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("complete": 2.500000000, "class": "P3", "cost": 0.000000})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"({"ev": "remove", "t": 0.000900000, "participant": "carol \"q\""})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"({"ev": "dropped", "t": 3.200000000, "requests": 17})"), std::string::npos)
      << text;
}

TEST(CaptureWriter, RotationKeepsFilesFilesEachStartingWithAHeaderOfTheLiveParticipants) {
  Scratch scratch;
  const std::string path = scratch.path("c.jsonl");
  constexpr std::uint64_t kMaxBytes = 1'500;
  constexpr int kRequests = 200;
  {
    // An earlier capture at PATH is kept, as PATH.1 at first.
    std::ofstream(path) << "earlier\n";
    CaptureWriter w(CaptureFiles{path, kMaxBytes, 3}, setup_at(0));
    w.plan(0, "alice", "pro", 1);
    w.plan(0, "bob", "lite", 3);
    w.plan(5, "bob", "pro", 2);
    w.plan(6, "alice", "pro", 1, 250'000);
    for (int i = 0; i < kRequests; ++i) {
      w.request(CaptureRequest{i % 2 == 0 ? "alice" : "bob", 10 * i, 10 * i + 1, 10 * i + 2, 1,
                               1'000'000'000});
    }
    EXPECT_GE(w.stats().files, 4u);
    EXPECT_EQ(w.stats().errors, 0u);
  }
  ASSERT_TRUE(fs::exists(path));
  ASSERT_TRUE(fs::exists(path + ".1"));
  ASSERT_TRUE(fs::exists(path + ".2"));
  EXPECT_FALSE(fs::exists(path + ".3"));
  // Oldest first: PATH.2, PATH.1, PATH. Each stands alone, holds no more than max_bytes, and the
  // three together end with the last request, with no gap between them.
  std::int64_t file_number = -1;
  std::int64_t last_complete = -1;
  for (const std::string& p : {path + ".2", path + ".1", path}) {
    EXPECT_LE(fs::file_size(p), kMaxBytes) << p;
    const std::vector<json> lines = read_lines(p);
    ASSERT_GE(lines.size(), 2u) << p;
    const json& h = lines[0];
    EXPECT_EQ(h["capture"], "creditloop") << p;
    if (file_number >= 0) {
      EXPECT_EQ(h["file"].get<std::int64_t>(), file_number + 1) << p;
    }
    file_number = h["file"].get<std::int64_t>();
    EXPECT_EQ(h["participants"], json::parse(R"([{"name": "alice", "plan": "pro", "shares": 1,
                                                   "scale": 250000},
                                                  {"name": "bob", "plan": "pro", "shares": 2}])"))
        << p;
    for (std::size_t i = 1; i < lines.size(); ++i) {
      ASSERT_EQ(lines[i]["ev"], "request");
      const auto complete = std::llround(lines[i]["complete"].get<double>() * 1e9);
      if (last_complete >= 0) {
        EXPECT_EQ(complete, last_complete + 10);
      }
      last_complete = complete;
    }
  }
  EXPECT_EQ(last_complete, 10 * (kRequests - 1) + 2);
}

TEST(CaptureWriter, AnUnwritablePathIsReportedOnceCountedAndRetriedWithoutThrowing) {
  const std::string path = "/nonexistent-creditloop-dir/capture.jsonl";
  std::vector<std::string> reports;
  CaptureWriter w(CaptureFiles{path, 1 << 20, 2}, setup_at(0),
                  [&](const std::string& message) { reports.push_back(message); });
  w.plan(0, "alice", "pro", 1);
  w.request(CaptureRequest{"alice", 0, 1, 2, 0, 0});
  w.request(CaptureRequest{"alice", 0, 1, 2 * kNanosPerSecond, 0, 0});  // past the retry
  const CaptureStats s = w.stats();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find(path), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("No such file or directory"), std::string::npos) << reports[0];
  EXPECT_EQ(s.errors, 2u);  // the first open, and the retry's
  EXPECT_EQ(s.lost, 3u);
  EXPECT_EQ(s.lines, 0u);
  EXPECT_EQ(s.last_error, reports[0]);
}

}  // namespace
}  // namespace creditloop
