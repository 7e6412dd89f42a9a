// What the simulator accepts at the edges of the format, unreadable files, and its command line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim_process.hpp"

namespace creditloop::sim_test {
namespace {

class SimInput : public SimTest {};

TEST_F(SimInput, ValidEdgesAreAccepted) {
  // 3.0 is a whole number, classes may be omitted, k = 7 works and names P8 unmetered.
  json s = json::parse(kContractExample);
  s.erase("classes");
  s["server"]["slots"] = 3.0;
  s["arrivals"][1]["count"] = 2.0;
  EXPECT_EQ(run_sim({write("a.json", s.dump())}).status, 0);

  json k7 =
      json::parse(R"({"plans": {"low": {"P7": {"rate": 1, "burst": 1}}}, "server": {"slots": 1},
      "participants": [{"name": "x", "plan": "low"}],
      "arrivals": [{"at": 0, "participant": "x", "count": 2}]})");
  k7["classes"] = seven_classes();
  const Trace t = trace_of(write("k7.json", k7.dump()));
  EXPECT_EQ(t.participant("x")["dispatched"],
            json::parse(R"({"P1": 0, "P2": 0, "P3": 0, "P4": 0, "P5": 0, "P6": 0, "P7": 1,
                            "P8": 1})"));
}

TEST_F(SimInput, UnreadableFiles) {
  for (const std::string& path : {(dir_ / "missing.json").string(), dir_.string()}) {
    const Output o = run_sim({path});
    EXPECT_NE(o.status, 0) << path;
    EXPECT_EQ(o.out, "");
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(path), std::string::npos) << o.err;
  }
}

TEST_F(SimInput, CommandLine) {
  const Output help = run_sim({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("usage: creditloop-sim"), std::string::npos);
  EXPECT_EQ(help.err, "");

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{},
        std::vector<std::string>{"--frobnicate", example("quickstart.json")},
        std::vector<std::string>{example("quickstart.json"), example("shares.json")}}) {
    const Output o = run_sim(args);
    EXPECT_NE(o.status, 0);
    EXPECT_EQ(o.out, "");
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }

  const Output check = run_sim({"--check", example("quickstart.json")});
  EXPECT_EQ(check.status, 0);
  EXPECT_EQ(check.out, "");

  const Output summary = run_sim({"--summary", example("quickstart.json")});
  EXPECT_EQ(summary.status, 0);
  const auto lines = split_lines(summary.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(json::parse(lines[0])["participants"]["alice"]["completed"], 40);
}

}  // namespace
}  // namespace creditloop::sim_test
