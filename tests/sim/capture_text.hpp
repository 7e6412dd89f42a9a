// Capture text for the capture reader's tests: a header of file 0, request lines, and the reader
// run on them.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "capture_file.hpp"

namespace creditloop::test {

using sim::Capture;
using sim::CaptureText;
using sim::Refusal;

inline constexpr const char* kHeader =
    R"({"capture": "creditloop", "version": 1, "file": 0, "origin_unix_ns": 1764629000123456789,)"
    R"( "classes": ["P1", "P2"],)"
    R"( "plans": {"pro": {"P1": {"rate": 2, "burst": 4}, "P2": {"rate": 5, "burst": 10}},)"
    R"( "lite": {"P2": {"rate": 5, "burst": 10}}}, "server": {"slots": 64},)"
    R"( "participants": [{"name": "alice", "plan": "pro", "shares": 1},)"
    R"( {"name": "bob", "plan": "lite", "shares": 1}]})";

inline std::string header_with(const std::string& from, const std::string& to) {
  std::string h = kHeader;
  const std::size_t at = h.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) h.replace(at, from.size(), to);
  return h;
}

inline std::string request(const std::string& who, const std::string& arrive,
                           const std::string& dispatch, const std::string& complete,
                           const std::string& cls = "P1", const std::string& cost = "1.25") {
  return R"({"ev": "request", "participant": ")" + who + R"(", "arrive": )" + arrive +
         R"(, "dispatch": )" + dispatch + R"(, "complete": )" + complete + R"(, "class": ")" + cls +
         R"(", "cost": )" + cost + "}";
}

inline ::testing::AssertionResult starts(const std::string& message, const std::string& prefix) {
  if (message.rfind(prefix, 0) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << message << "\" does not start with \"" << prefix << "\"";
}

inline sim::Parsed<Capture> read_one(const std::string& text) {
  return sim::read_capture({CaptureText{"a.cap", text}});
}

// The one-line error, or a failure if the capture was accepted.
inline std::string error_of(const std::vector<CaptureText>& files) {
  auto r = sim::read_capture(files);
  if (const auto* bad = std::get_if<Refusal>(&r)) return bad->message;
  ADD_FAILURE() << "accepted";
  return "";
}

// The header as the first line of a file.
inline const std::string kH = std::string(kHeader) + "\n";

}  // namespace creditloop::test
