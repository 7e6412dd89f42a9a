// tests/runtime/capture_support.hpp: what the capture's writer and observer tests share, a
// scratch directory of the test's own and the JSON Lines a capture wrote.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace creditloop::capture_tests {

namespace fs = std::filesystem;
using nlohmann::json;

// A directory of the test's own, removed afterwards.
class Scratch {
 public:
  Scratch() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("creditloop-capture-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  [[nodiscard]] std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

inline std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(json::parse(line));
  return lines;
}

}  // namespace creditloop::capture_tests
