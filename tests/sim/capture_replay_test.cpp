// --capture, --replay and SCENARIO --plans through the program: two runs compared.
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

class SimCaptureReplay : public SimTest {};

// ---- capture and replay -----------------------------------------------------------------------

// Five participants on two plans with different shares, costs and service times, three slots:
// completions and arrivals share instants, requests go out in every class.
json mixed_scenario() {
  json s = json::parse(R"({
    "classes": ["P1", "P2"],
    "plans": {"pro": {"P1": {"rate": 3, "burst": 2}, "P2": {"rate": 7.5, "burst": 4}},
              "lite": {"P2": {"rate": 4, "burst": 3}}},
    "server": {"slots": 3}, "participants": [], "arrivals": []})");
  for (int i = 0; i < 5; ++i) {
    const std::string name = "p" + std::to_string(i);
    s["participants"].push_back(
        {{"name", name}, {"plan", i % 2 ? "pro" : "lite"}, {"shares", i + 1}});
    s["arrivals"].push_back({{"at", 0.001 * i},
                             {"participant", name},
                             {"count", 150},
                             {"every", 0.01 + 0.002 * i},
                             {"service", 0.02 + 0.01 * (i % 3)},
                             {"cost", 0.5 * (i + 1)}});
  }
  return s;
}

// A run's per-participant record of the capture, from its lines.
struct Captured {
  std::map<std::string, std::map<std::string, int>> classes;
  std::map<std::string, double> wait_max;
  int requests = 0;
};

Captured read_capture_file(const fs::path& file) {
  Captured c;
  std::ifstream in(file);
  std::string line;
  EXPECT_TRUE(std::getline(in, line));
  const json header = json::parse(line);
  EXPECT_EQ(header["capture"], "creditloop");
  EXPECT_EQ(header["version"], 1);
  while (std::getline(in, line)) {
    const json r = json::parse(line);
    // The participants register at 0, in scenario order, before any request completes.
    if (r["ev"] == "plan") {
      EXPECT_EQ(c.requests, 0) << line;
      EXPECT_EQ(r["t"], 0) << line;
      continue;
    }
    EXPECT_EQ(r["ev"], "request");
    ++c.requests;
    const std::string who = r["participant"];
    ++c.classes[who][r["class"]];
    const double wait = r["dispatch"].get<double>() - r["arrive"].get<double>();
    c.wait_max[who] = std::max(c.wait_max[who], wait);
    EXPECT_LE(r["dispatch"].get<double>(), r["complete"].get<double>());
  }
  return c;
}

// Scenario -> --capture -> --replay under the same plans: the replay's waits and class mix are
// the capture's, exactly. The capture itself holds what the run's summary says.
TEST_F(SimCaptureReplay, ReplayOfASimulatedCaptureReproducesItExactly) {
  std::vector<std::string> files;
  for (const char* name : {"quickstart.json", "interleave.json", "shares.json",
                           "descend_climb.json", "bounded_wait.json", "heavy_work.json"}) {
    files.push_back(example(name));
  }
  files.push_back(write("mixed.json", mixed_scenario().dump()));
  for (const std::string& file : files) {
    const fs::path cap = dir_ / "run.capture";
    const Output run = run_sim({"--summary", "--capture", cap.string(), file});
    ASSERT_EQ(run.status, 0) << file << run.err;
    const json summary = json::parse(run.out);
    const Captured c = read_capture_file(cap);
    int completed = 0;
    for (const auto& [who, p] : summary["participants"].items()) {
      completed += p["completed"].get<int>();
      // Everything this participant dispatched completed: the capture has each of them.
      int dispatched = 0;
      for (const auto& [cls, n] : p["dispatched"].items()) dispatched += n.get<int>();
      if (dispatched != p["completed"].get<int>()) continue;
      for (const auto& [cls, n] : p["dispatched"].items()) {
        const auto it = c.classes.find(who);
        EXPECT_EQ(it == c.classes.end()   ? 0
                  : it->second.count(cls) ? it->second.at(cls)
                                          : 0,
                  n.get<int>())
            << file << " " << who << " " << cls;
      }
      if (!p["wait_max"].is_null()) {
        EXPECT_NEAR(c.wait_max.at(who), p["wait_max"].get<double>(), 1e-6) << file << " " << who;
      }
    }
    EXPECT_EQ(c.requests, completed) << file;

    const Output replay = run_sim({"--replay", "--json", cap.string()});
    ASSERT_EQ(replay.status, 0) << file << replay.err;
    EXPECT_EQ(replay.err, "");
    const json r = json::parse(replay.out);
    EXPECT_EQ(r["runs"], json::parse(R"(["captured", "replayed"])"));
    ASSERT_EQ(r["participants"].size(), summary["participants"].size()) << file;
    for (const json& p : r["participants"]) {
      EXPECT_EQ(p["captured"], p["replayed"]) << file << " " << p["name"];
      EXPECT_EQ(p["captured"]["requests"], p["captured"]["dispatched"]);
    }
  }
}

// More shares for `one` in shares.json gives it ten times the P1 credits: under the rules more of
// its requests go out in P1, ahead of the unmetered ones, so it waits less; `ten` keeps its
// shares and so its P1 share, now shared with a peer, and waits longer.
TEST_F(SimCaptureReplay, ReplayUnderMoreSharesLowersThatParticipantsWaits) {
  const fs::path cap = dir_ / "shares.capture";
  ASSERT_EQ(run_sim({"--summary", "--capture", cap.string(), example("shares.json")}).status, 0);
  const std::string plans =
      write("plans.json", R"({"plans": {"std": {"P1": {"rate": 1, "burst": 2}}},
                              "participants": [{"name": "one", "shares": 10}]})");
  const Output o = run_sim({"--replay", cap.string(), "--plans", plans, "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const json r = json::parse(o.out);
  ASSERT_EQ(r["participants"][0]["name"], "one");
  const json& before = r["participants"][0]["captured"];
  const json& after = r["participants"][0]["replayed"];
  EXPECT_EQ(before["shares"], 1);
  EXPECT_EQ(after["shares"], 10);
  EXPECT_EQ(after["requests"], before["requests"]);
  EXPECT_LT(after["wait"]["mean"].get<double>(), before["wait"]["mean"].get<double>());
  EXPECT_LT(after["wait"]["p99"].get<double>(), before["wait"]["p99"].get<double>());
  EXPECT_GT(after["classes"]["P1"].get<int>(), before["classes"]["P1"].get<int>());
  const json& ten = r["participants"][1];
  EXPECT_GT(ten["replayed"]["wait"]["mean"].get<double>(),
            ten["captured"]["wait"]["mean"].get<double>());
}

// A capture's header records a fixed slot count and no backend, so a scenario with a learned
// room or a backend has neither a capture nor a second run under other plans.
TEST_F(SimCaptureReplay, LearnedRoomOrBackendHasNoCaptureNorSecondRun) {
  json learned = json::parse(kContractExample);
  learned["server"]["slots"] = "auto";
  json backend = json::parse(kContractExample);
  backend["server"]["backend"] = json::parse(R"({"capacity": [{"at": 0, "capacity": 1}]})");
  const std::string plans = write("plans.json", json({{"plans", learned["plans"]}}).dump());
  for (const json& s : {learned, backend}) {
    const std::string file = write("s.json", s.dump());
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--capture", (dir_ / "c").string(), file},
          std::vector<std::string>{file, "--plans", plans}}) {
      const Output o = run_sim(args);
      EXPECT_NE(o.status, 0) << s["server"];
      EXPECT_EQ(o.out, "");
      EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
      EXPECT_NE(o.err.find(args[0] == file ? "--plans: " : "--capture: "), std::string::npos)
          << o.err;
      EXPECT_NE(o.err.find(s["server"].contains("backend") ? "backend" : "learned"),
                std::string::npos)
          << o.err;
    }
    EXPECT_FALSE(fs::exists(dir_ / "c"));
  }
}

// SCENARIO --plans OTHER: the same arrivals under both; each side is what its own scenario's
// run says.
TEST_F(SimCaptureReplay, ScenarioUnderOtherPlansComparesTwoRuns) {
  json other = json::parse(kContractExample);
  other["participants"][1]["shares"] = 4;
  other["plans"]["lite"]["P2"]["rate"] = 1;
  const Output b = run_sim({"--summary", write("other.json", other.dump())});
  const Output a = run_sim({"--summary", write("contract.json", kContractExample)});
  ASSERT_EQ(a.status, 0);
  ASSERT_EQ(b.status, 0);
  const std::string plans =
      write("plans.json",
            json({{"plans", other["plans"]}, {"participants", {{{"name", "bob"}, {"shares", 4}}}}})
                .dump());
  const Output o = run_sim({(dir_ / "contract.json").string(), "--plans", plans, "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const json r = json::parse(o.out);
  EXPECT_EQ(r["runs"], json::parse(R"(["scenario", "plans"])"));
  for (const json& p : r["participants"]) {
    const std::string who = p["name"];
    for (const auto& [key, out] : {std::pair{"scenario", &a}, std::pair{"plans", &b}}) {
      const json want = json::parse(out->out)["participants"][who];
      EXPECT_EQ(p[key]["classes"], want["dispatched"]) << key << " " << who;
      EXPECT_NEAR(p[key]["wait"]["max"].get<double>(), want["wait_max"].get<double>(), 1e-6);
    }
  }
  EXPECT_EQ(r["participants"][1]["plans"]["shares"], 4);
  // The table says the same, readable.
  const Output table = run_sim({(dir_ / "contract.json").string(), "--plans", plans});
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("wait p99"), std::string::npos) << table.out;
  EXPECT_EQ(std::count(table.out.begin(), table.out.end(), '\n'), 8) << table.out;
}

TEST_F(SimCaptureReplay, CaptureLeavesTheTraceAsItWas) {
  const Output plain = run_sim({"--reasons", example("heavy_work.json")});
  const Output captured =
      run_sim({"--reasons", "--capture", (dir_ / "c").string(), example("heavy_work.json")});
  ASSERT_EQ(plain.status, 0);
  EXPECT_EQ(captured.status, 0) << captured.err;
  EXPECT_EQ(plain.out, captured.out);
  EXPECT_TRUE(fs::exists(dir_ / "c"));
}

TEST_F(SimCaptureReplay, ReplayCommandLineAndBadCaptures) {
  const fs::path cap = dir_ / "q.capture";
  ASSERT_EQ(run_sim({"--summary", "--capture", cap.string(), example("quickstart.json")}).status,
            0);
  std::ifstream in(cap);
  std::string header;
  std::getline(in, header);
  json edited = json::parse(header);
  edited["version"] = 2;
  const std::string v2 = write("v2.capture", edited.dump());
  const std::string bad_plans =
      write("bad.json", R"({"plans": {"pro": {"P1": {"rate": 0, "burst": 4}}, "lite": {}}})");
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string names;  // what the one stderr line must contain
  };
  const std::vector<Case> cases = {
      {{"--replay"}, 2, "needs at least one capture file"},
      {{"--replay", (dir_ / "missing").string()}, 1, (dir_ / "missing").string() + ": cannot open"},
      {{"--replay", v2}, 1, v2 + ":1: version: unknown capture version 2"},
      {{"--replay", cap.string(), "--table"}, 2, "--table"},
      {{"--replay", cap.string(), "--svg", (dir_ / "x.svg").string()}, 2, "--svg"},
      {{"--replay", cap.string(), "--slots", "0"}, 2, "--slots must be a whole number"},
      {{"--replay", cap.string(), "--plans", bad_plans}, 1, bad_plans + ": plans.pro.P1.rate"},
      {{"--json", example("quickstart.json")}, 2, "--json is for --replay or --plans"},
      {{"--slots", "3", example("quickstart.json")}, 2, "--slots is for --replay or --plans"},
      {{"--capture", dir_.string(), example("quickstart.json")}, 3, "is a directory"},
      {{"--check", "--capture", (dir_ / "c2").string(), example("quickstart.json")}, 2, "--check"},
  };
  for (const Case& c : cases) {
    const Output o = run_sim(c.args);
    std::string all;
    for (const std::string& a : c.args) all += a + " ";
    EXPECT_EQ(o.status, c.status) << all << o.err;
    EXPECT_EQ(o.out, "") << all;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << all << o.err;
    EXPECT_NE(o.err.find(c.names), std::string::npos) << all << o.err;
  }
  EXPECT_FALSE(fs::exists(dir_ / "c2"));
  const Output check = run_sim({"--check", "--replay", cap.string()});
  EXPECT_EQ(check.status, 0) << check.err;
  EXPECT_EQ(check.out, "");
  // A capture with no slot count replays with --slots.
  edited = json::parse(header);
  edited["server"]["slots"] = nullptr;
  write("noslots.capture", edited.dump() + "\n");
  const Output noslots = run_sim({"--replay", (dir_ / "noslots.capture").string()});
  EXPECT_EQ(noslots.status, 1);
  EXPECT_NE(noslots.err.find("server.slots: is null"), std::string::npos) << noslots.err;
  EXPECT_EQ(run_sim({"--replay", (dir_ / "noslots.capture").string(), "--slots", "4"}).status, 0);
  const Output help = run_sim({"--help"});
  for (const char* option : {"--replay", "--plans", "--slots", "--json", "--capture"}) {
    EXPECT_NE(help.out.find(option), std::string::npos) << option;
  }
}

}  // namespace
}  // namespace creditloop::sim_test
