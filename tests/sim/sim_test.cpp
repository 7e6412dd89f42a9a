// The simulator, run as a user runs it: a child process with its own stdout and stderr, scenario
// files on disk. Expected values come from docs/contract.md §6 (its quoted lines) or from the rules
// of sections 2-3 applied to the trace, never from a previous run of the simulator.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
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

extern char** environ;

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    std::fprintf(stderr, "%s is not set: run these tests through ctest\n", name);
    std::exit(2);
  }
  return v;
}

const std::string& sim_path() {
  static const std::string path = env("CREDITLOOP_SIM");
  return path;
}

fs::path scenarios_dir() { return fs::path(env("CREDITLOOP_SCENARIOS")); }

struct Output {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs the simulator with `args`, stdin from /dev/null, collecting stdout and stderr apart.
// Both pipes are drained together so that a large trace cannot block the child.
Output run_sim(const std::vector<std::string>& args) {
  Output result;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<std::string> all = {sim_path()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, sim_path().c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    ADD_FAILURE() << "posix_spawn " << sim_path() << ": " << std::strerror(spawned);
    return result;
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buf[1 << 16];
  // A simulator that never finishes must fail the test, not hang it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int ready = poll(fds, 2, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (ready == 0) {
      ADD_FAILURE() << "the simulator ran for more than 120 s";
      kill(pid, SIGKILL);
      for (pollfd& p : fds) {
        if (p.fd >= 0) close(p.fd);
      }
      break;
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << "poll: " << std::strerror(errno);
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The contract's example scenario, verbatim.
constexpr const char* kContractExample = R"({
  "classes": ["P1", "P2"],
  "plans": {
    "pro":  {"P1": {"rate": 2, "burst": 4}, "P2": {"rate": 5, "burst": 10}},
    "lite": {"P2": {"rate": 5, "burst": 10}}
  },
  "server": {"slots": 1},
  "participants": [
    {"name": "alice", "plan": "pro",  "shares": 1},
    {"name": "bob",   "plan": "lite", "shares": 1}
  ],
  "arrivals": [
    {"at": 0, "participant": "alice", "count": 40, "every": 0, "service": 0.1, "cost": 0},
    {"at": 0.55, "participant": "bob", "count": 3, "every": 0.5, "service": 0.1, "cost": 2}
  ],
  "until": 5
})";

constexpr double kEps = 1e-9;

struct Trace {
  std::vector<json> lines;

  [[nodiscard]] std::vector<json> events(const std::string& ev) const {
    std::vector<json> out;
    for (const json& l : lines) {
      if (l.value("ev", "") == ev) out.push_back(l);
    }
    return out;
  }
  [[nodiscard]] const json& summary() const { return lines.back(); }
  [[nodiscard]] json participant(const std::string& name) const {
    return summary()["participants"][name];
  }
};

class SimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "creditloop-sim-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

  // Runs `file` (with `args` first) and parses its trace; fails the test on a bad exit.
  static Trace trace_of(const std::string& file, std::vector<std::string> args = {}) {
    args.push_back(file);
    const Output o = run_sim(args);
    EXPECT_EQ(o.status, 0) << o.err;
    EXPECT_EQ(o.err, "");
    Trace t;
    for (const std::string& line : split_lines(o.out)) {
      try {
        t.lines.push_back(json::parse(line));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "not JSON: " << line << " (" << e.what() << ")";
      }
    }
    EXPECT_FALSE(t.lines.empty());
    if (t.lines.empty()) t.lines.push_back(json::object());
    return t;
  }

  static std::string example(const std::string& name) { return (scenarios_dir() / name).string(); }

  fs::path dir_;
};

// ---- the contract's own example
// -------------------------------------------------------------------

TEST_F(SimTest, ContractExampleQuotedLines) {
  const Trace t = trace_of(write("contract.json", kContractExample));
  ASSERT_GE(t.lines.size(), 43u);
  EXPECT_EQ(t.events("arrive").front(),
            json::parse(R"({"t": 0.0, "ev": "arrive", "participant": "alice", "req": 0})"));
  EXPECT_EQ(
      t.events("pass").front(),
      json::parse(
          R"({"t": 0.0, "ev": "pass", "class": "P1", "eligible": ["alice"], "ignored": []})"));
  EXPECT_EQ(t.events("dispatch").front(),
            json::parse(R"({"t": 0.0, "ev": "dispatch", "participant": "alice", "req": 0,
                            "class": "P1", "balances": {"P1": 3.0, "P2": 10.0}})"));
  EXPECT_EQ(t.events("complete").front(),
            json::parse(R"({"t": 0.1, "ev": "complete", "participant": "alice", "req": 0,
                            "cost": 0.0, "bucket": "P1", "balances": {"P1": 3.2, "P2": 10.0}})"));
  EXPECT_EQ(t.summary(), json::parse(R"({"ev": "summary", "participants": {
      "alice": {"dispatched": {"P1": 12, "P2": 28, "P3": 0}, "completed": 40, "waiting": 0,
                "wait_max": 4.2},
      "bob": {"dispatched": {"P1": 0, "P2": 3, "P3": 0}, "completed": 3, "waiting": 0,
              "wait_max": 0.05}}})"));
  // "its first pass and dispatch (which follow all forty of alice's arrivals at 0)"
  for (std::size_t i = 0; i < 40; ++i) {
    EXPECT_EQ(t.lines[i]["ev"], "arrive") << i;
    EXPECT_EQ(t.lines[i]["req"], i);
  }
  EXPECT_EQ(t.lines[40]["ev"], "pass");
  EXPECT_EQ(t.lines[41]["ev"], "dispatch");
}

TEST_F(SimTest, QuickstartIsTheContractExample) {
  std::ifstream in(example("quickstart.json"));
  ASSERT_TRUE(in) << example("quickstart.json");
  EXPECT_EQ(json::parse(in), json::parse(kContractExample));
}

TEST_F(SimTest, SummaryListsParticipantsInRingOrder) {
  json s = json::parse(kContractExample);
  // Names out of alphabetical order, so that a sorted map would show.
  s["participants"] =
      json::parse(R"([{"name": "zed", "plan": "lite"}, {"name": "amy", "plan": "pro"},
                                      {"name": "mo", "plan": "pro"}])");
  s["arrivals"] = json::parse(R"([{"at": 0, "participant": "mo"}])");
  const Output o = run_sim({write("ring.json", s.dump())});
  ASSERT_EQ(o.status, 0) << o.err;
  const auto lines = split_lines(o.out);
  const ordered_json summary = ordered_json::parse(lines.back());
  std::vector<std::string> names;
  for (const auto& item : summary["participants"].items()) names.push_back(item.key());
  EXPECT_EQ(names, (std::vector<std::string>{"zed", "amy", "mo"}));
  EXPECT_EQ(summary["participants"]["zed"]["wait_max"], nullptr);
  EXPECT_EQ(summary["participants"]["zed"]["dispatched"],
            ordered_json::parse(R"({"P1": 0, "P2": 0, "P3": 0})"));
}

// Every line carries exactly the keys the contract shows for its kind.
TEST_F(SimTest, LinesHaveExactlyTheContractsKeys) {
  const std::map<std::string, std::set<std::string>> keys = {
      {"arrive", {"t", "ev", "participant", "req"}},
      {"pass", {"t", "ev", "class", "eligible", "ignored"}},
      {"dispatch", {"t", "ev", "participant", "req", "class", "balances"}},
      {"complete", {"t", "ev", "participant", "req", "cost", "bucket", "balances"}},
      {"summary", {"ev", "participants"}}};
  for (const char* name : {"quickstart.json", "heavy_work.json"}) {
    const Trace t = trace_of(example(name));
    for (const json& l : t.lines) {
      const auto want = keys.find(l.value("ev", ""));
      ASSERT_NE(want, keys.end()) << l;
      std::set<std::string> have;
      for (const auto& item : l.items()) have.insert(item.key());
      EXPECT_EQ(have, want->second) << l;
    }
    EXPECT_EQ(t.summary()["ev"], "summary");
    EXPECT_EQ(t.events("summary").size(), 1u);
  }
}

TEST_F(SimTest, ByteForByteDeterministic) {
  for (const char* name : {"quickstart.json", "shares.json", "heavy_work.json"}) {
    for (const std::vector<std::string>& mode :
         {std::vector<std::string>{}, std::vector<std::string>{"--table"}}) {
      std::vector<std::string> args = mode;
      args.push_back(example(name));
      const Output a = run_sim(args);
      const Output b = run_sim(args);
      ASSERT_EQ(a.status, 0) << name << a.err;
      EXPECT_FALSE(a.out.empty());
      EXPECT_EQ(a.out, b.out) << name;
    }
  }
}

// ---- bad scenarios ----------------------------------------------------------------------------

struct BadCase {
  const char* name;
  std::function<std::string()> text;
  const char* field;  // the path the one stderr line must name, followed by ':'
};

// Names the case in test listings instead of a dump of its bytes.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

std::function<std::string()> edit(std::function<void(json&)> f) {
  return [f] {
    json s = json::parse(kContractExample);
    f(s);
    return s.dump(2);
  };
}

std::function<std::string()> raw(std::string text) {
  return [text] { return text; };
}

json seven_classes() { return json::parse(R"(["P1", "P2", "P3", "P4", "P5", "P6", "P7"])"); }

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      // keys the format does not define, anywhere
      {"UnknownTopKey", edit([](json& s) { s["colour"] = 1; }), "colour"},
      {"UnknownServerKey", edit([](json& s) { s["server"]["cores"] = 2; }), "server.cores"},
      {"UnknownTermsKey", edit([](json& s) { s["plans"]["pro"]["P1"]["speed"] = 1; }),
       "plans.pro.P1.speed"},
      {"UnknownParticipantKey", edit([](json& s) { s["participants"][0]["weight"] = 1; }),
       "participants[0].weight"},
      {"UnknownArrivalKey", edit([](json& s) { s["arrivals"][1]["size"] = 1; }),
       "arrivals[1].size"},
      {"UnmeteredClassInPlan",
       edit([](json& s) { s["plans"]["lite"]["P3"] = s["plans"]["lite"]["P2"]; }), "plans.lite.P3"},
      // negative times
      {"NegativeAt", edit([](json& s) { s["arrivals"][0]["at"] = -1; }), "arrivals[0].at"},
      {"NegativeEvery", edit([](json& s) { s["arrivals"][1]["every"] = -0.5; }),
       "arrivals[1].every"},
      {"NegativeService", edit([](json& s) { s["arrivals"][1]["service"] = -0.1; }),
       "arrivals[1].service"},
      {"NegativeUntil", edit([](json& s) { s["until"] = -5; }), "until"},
      // whole numbers
      {"FractionalCount", edit([](json& s) { s["arrivals"][1]["count"] = 2.5; }),
       "arrivals[1].count"},
      {"NegativeCount", edit([](json& s) { s["arrivals"][1]["count"] = -1; }), "arrivals[1].count"},
      {"FractionalSlots", edit([](json& s) { s["server"]["slots"] = 1.5; }), "server.slots"},
      {"ZeroSlots", edit([](json& s) { s["server"]["slots"] = 0; }), "server.slots"},
      {"FractionalShares", edit([](json& s) { s["participants"][0]["shares"] = 2.5; }),
       "participants[0].shares"},
      // classes
      {"ClassesSkipOne", edit([](json& s) { s["classes"] = json::parse(R"(["P1", "P3"])"); }),
       "classes[1]"},
      {"ClassesLowercase", edit([](json& s) { s["classes"] = json::parse(R"(["p1"])"); }),
       "classes[0]"},
      {"ClassesEmpty", edit([](json& s) { s["classes"] = json::array(); }), "classes"},
      {"ClassesEight", edit([](json& s) {
         s["classes"] = seven_classes();
         s["classes"].push_back("P8");
       }),
       "classes"},
      {"ClassesNotArray", edit([](json& s) { s["classes"] = "P1"; }), "classes"},
      // names
      {"UnknownPlan", edit([](json& s) { s["participants"][1]["plan"] = "gold"; }),
       "participants[1].plan"},
      {"UnknownParticipant", edit([](json& s) { s["arrivals"][0]["participant"] = "carol"; }),
       "arrivals[0].participant"},
      {"DuplicateParticipant", edit([](json& s) { s["participants"][1]["name"] = "alice"; }),
       "participants[1].name"},
      // shares, rate, burst, cost, slots
      {"ZeroShares", edit([](json& s) { s["participants"][0]["shares"] = 0; }),
       "participants[0].shares"},
      {"SharesAboveLimit", edit([](json& s) { s["participants"][1]["shares"] = 1000001; }),
       "participants[1].shares"},
      {"ZeroRate", edit([](json& s) { s["plans"]["pro"]["P1"]["rate"] = 0; }), "plans.pro.P1.rate"},
      {"NegativeRate", edit([](json& s) { s["plans"]["lite"]["P2"]["rate"] = -2; }),
       "plans.lite.P2.rate"},
      {"RateRoundsToZero", edit([](json& s) { s["plans"]["pro"]["P2"]["rate"] = 1e-12; }),
       "plans.pro.P2.rate"},
      {"InfiniteRate",
       raw(R"({"plans": {"pro": {"P1": {"rate": 1e999, "burst": 4}}}, "server": {"slots": 1},
               "participants": [], "arrivals": []})"),
       "plans.pro.P1.rate"},
      {"BurstBelowOne", edit([](json& s) { s["plans"]["pro"]["P1"]["burst"] = 0.5; }),
       "plans.pro.P1.burst"},
      {"NegativeCost", edit([](json& s) { s["arrivals"][1]["cost"] = -1; }), "arrivals[1].cost"},
      {"CostAboveLimit", edit([](json& s) { s["arrivals"][0]["cost"] = 2e6; }), "arrivals[0].cost"},
      {"NegativeWithdrawAfter", edit([](json& s) { s["arrivals"][1]["withdraw_after"] = -0.5; }),
       "arrivals[1].withdraw_after"},
      {"WithdrawAfterString", edit([](json& s) { s["arrivals"][0]["withdraw_after"] = "1"; }),
       "arrivals[0].withdraw_after"},
      {"WithdrawAfterBeyondTheClock", edit([](json& s) {
         s["arrivals"][0]["count"] = 10;
         s["arrivals"][0]["every"] = 1e9;  // the tenth arrives at 9e18 ns, within the clock
         s["arrivals"][0]["withdraw_after"] = 1e9;
         s.erase("until");
       }),
       "arrivals[0].withdraw_after"},
      // wrong JSON types
      {"PlansArray", edit([](json& s) { s["plans"] = json::array(); }), "plans"},
      {"ParticipantsObject", edit([](json& s) { s["participants"] = json::object(); }),
       "participants"},
      {"ArrivalNumber", edit([](json& s) { s["arrivals"][0] = 3; }), "arrivals[0]"},
      {"NameNumber", edit([](json& s) { s["participants"][0]["name"] = 7; }),
       "participants[0].name"},
      {"SlotsBoolean", edit([](json& s) { s["server"]["slots"] = true; }), "server.slots"},
      {"CountString", edit([](json& s) { s["arrivals"][1]["count"] = "3"; }), "arrivals[1].count"},
      {"UntilString", edit([](json& s) { s["until"] = "5"; }), "until"},
      {"TermsNumber", edit([](json& s) { s["plans"]["pro"]["P2"] = 5; }), "plans.pro.P2"},
      {"TopLevelArray", raw("[1, 2]"), "scenario"},
      // missing required fields
      {"MissingAt", edit([](json& s) { s["arrivals"][0].erase("at"); }), "arrivals[0].at"},
      {"MissingServer", edit([](json& s) { s.erase("server"); }), "server"},
      {"MissingSlots", edit([](json& s) { s["server"].erase("slots"); }), "server.slots"},
      // the learned room and the backend (an extension of contract §6)
      {"SlotsNeitherNumberNorAuto", edit([](json& s) { s["server"]["slots"] = "many"; }),
       "server.slots"},
      {"AutoUnknownBound",
       edit([](json& s) { s["server"]["slots"] = json::parse(R"({"auto": {"least": 2}})"); }),
       "server.slots.auto.least"},
      {"AutoMaxBelowMin", edit([](json& s) {
         s["server"]["slots"] = json::parse(R"({"auto": {"min": 8, "max": 4}})");
       }),
       "server.slots.auto.max"},
      {"AutoMinZero",
       edit([](json& s) { s["server"]["slots"] = json::parse(R"({"auto": {"min": 0}})"); }),
       "server.slots.auto.min"},
      {"BackendUnknownKey",
       edit([](json& s) { s["server"]["backend"] = json::parse(R"({"latency": 1})"); }),
       "server.backend.latency"},
      {"BackendNoSteps",
       edit([](json& s) { s["server"]["backend"] = json::parse(R"({"capacity": []})"); }),
       "server.backend.capacity"},
      {"BackendFirstStepLate", edit([](json& s) {
         s["server"]["backend"] = json::parse(R"({"capacity": [{"at": 1, "capacity": 2}]})");
       }),
       "server.backend.capacity[0].at"},
      {"BackendStepsOutOfOrder", edit([](json& s) {
         s["server"]["backend"] =
             json::parse(R"({"capacity": [{"at": 0, "capacity": 2}, {"at": 0, "capacity": 3}]})");
       }),
       "server.backend.capacity[1].at"},
      {"BackendCapacityZero", edit([](json& s) {
         s["server"]["backend"] = json::parse(R"({"capacity": [{"at": 0, "capacity": 0}]})");
       }),
       "server.backend.capacity[0].capacity"},
      {"BackendSlowdownZero", edit([](json& s) {
         s["server"]["backend"] =
             json::parse(R"({"capacity": [{"at": 0, "capacity": 1, "slowdown": 0}]})");
       }),
       "server.backend.capacity[0].slowdown"},
      {"MissingPlan", edit([](json& s) { s["participants"][1].erase("plan"); }),
       "participants[1].plan"},
      {"MissingBurst", edit([](json& s) { s["plans"]["lite"]["P2"].erase("burst"); }),
       "plans.lite.P2.burst"},
      {"MissingArrivalParticipant", edit([](json& s) { s["arrivals"][1].erase("participant"); }),
       "arrivals[1].participant"},
      // malformed JSON, and a key given twice (which a plain parse would hide)
      {"Truncated", raw(R"({"plans": {}, "server": {"slots": 1)"), "scenario"},
      {"TrailingComma", raw(R"({"plans": {}, "server": {"slots": 1},})"), "scenario"},
      {"Empty", raw(""), "scenario"},
      {"DuplicateKey", raw(R"({"plans": {}, "server": {"slots": 1, "slots": 2}, "participants": [],
               "arrivals": []})"),
       "server.slots"},
      {"DuplicateKeyInArray",
       raw(R"({"plans": {"p": {}}, "server": {"slots": 1}, "participants": [{"name": "a", "plan": "p"}],
               "arrivals": [{"at": 0, "participant": "a"},
                            {"at": 1, "participant": "a", "cost": 2, "cost": 3}]})"),
       "arrivals[1].cost"},
  };
  return cases;
}

class BadScenario : public SimTest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(BadScenario, OneStderrLineNamingTheFieldAndNoStdout) {
  const BadCase& c = GetParam();
  const Output o = run_sim({write("bad.json", c.text())});
  EXPECT_NE(o.status, 0);
  EXPECT_EQ(o.out, "") << "stdout must stay empty";
  ASSERT_FALSE(o.err.empty());
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_EQ(o.err.back(), '\n');
  EXPECT_NE(o.err.find(std::string(" ") + c.field + ":"), std::string::npos)
      << "stderr does not name " << c.field << ": " << o.err;
}

INSTANTIATE_TEST_SUITE_P(Sim, BadScenario, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& param) {
                           return std::string(param.param.name);
                         });

TEST_F(SimTest, ValidEdgesAreAccepted) {
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

TEST_F(SimTest, UnreadableFiles) {
  for (const std::string& path : {(dir_ / "missing.json").string(), dir_.string()}) {
    const Output o = run_sim({path});
    EXPECT_NE(o.status, 0) << path;
    EXPECT_EQ(o.out, "");
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(path), std::string::npos) << o.err;
  }
}

TEST_F(SimTest, CommandLine) {
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

// ---- time and order ---------------------------------------------------------------------------

const char* kOnePlan = R"({"classes": ["P1"], "plans": {"p": {"P1": {"rate": 1, "burst": 10}}},
                            "server": {"slots": 1}, "participants": [], "arrivals": []})";

json one_plan(const std::vector<std::string>& names) {
  json s = json::parse(kOnePlan);
  for (const std::string& n : names) s["participants"].push_back({{"name", n}, {"plan", "p"}});
  return s;
}

TEST_F(SimTest, UntilStopsBeforeTheFirstLaterEvent) {
  json s = one_plan({"a"});
  s["arrivals"].push_back(
      {{"at", 0}, {"participant", "a"}, {"count", 10}, {"every", 1}, {"service", 0.5}});
  s["until"] = 3;
  const Trace t = trace_of(write("until.json", s.dump()));
  double latest = 0;
  for (const json& l : t.lines) {
    if (l.contains("t")) latest = std::max(latest, l["t"].get<double>());
  }
  EXPECT_DOUBLE_EQ(latest, 3.0) << "events at exactly `until` are handled";
  EXPECT_EQ(t.events("arrive").size(), 4u);    // 0, 1, 2, 3
  EXPECT_EQ(t.events("dispatch").size(), 4u);  // each at its arrival
  EXPECT_EQ(t.events("complete").size(), 3u);  // 0.5, 1.5, 2.5; 3.5 is later than until
  EXPECT_EQ(t.participant("a")["completed"], 3);
  EXPECT_EQ(t.participant("a")["waiting"], 0);

  // A withdrawal after `until` never happens: the request is still waiting at the stop.
  json w = one_plan({"a"});
  w["arrivals"].push_back({{"at", 0}, {"participant", "a"}, {"count", 2}, {"service", 5}});
  w["arrivals"][0]["withdraw_after"] = 3.5;
  w["until"] = 3;
  const Trace wt = trace_of(write("until_withdraw.json", w.dump()));
  EXPECT_TRUE(wt.events("withdraw").empty());
  EXPECT_EQ(wt.participant("a")["withdrawn"], 0);
  EXPECT_EQ(wt.participant("a")["waiting"], 1);

  // Queued work at the stop counts as waiting; arrivals after `until` never happen.
  json q = one_plan({"a"});
  q["arrivals"].push_back({{"at", 0}, {"participant", "a"}, {"count", 3}, {"service", 2}});
  q["arrivals"].push_back({{"at", 3.5}, {"participant", "a"}, {"service", 2}});
  q["until"] = 3.999999999;
  // Dispatches at 0 and 2, one completion at 2; the completion due at 4 is past `until`, the
  // arrival at 3.5 is not.
  const Trace u = trace_of(write("until2.json", q.dump()));
  EXPECT_EQ(u.events("arrive").size(), 4u);
  EXPECT_EQ(u.participant("a")["dispatched"]["P1"], 2);
  EXPECT_EQ(u.participant("a")["completed"], 1);
  EXPECT_EQ(u.participant("a")["waiting"], 2);
  q["until"] = 3.4;
  const Trace v = trace_of(write("until2b.json", q.dump()));
  EXPECT_EQ(v.events("arrive").size(), 3u);
  EXPECT_EQ(v.participant("a")["waiting"], 1);

  // Without `until`, the run goes on until every request is dispatched and completed.
  q.erase("until");
  const Trace all = trace_of(write("until3.json", q.dump()));
  EXPECT_EQ(all.participant("a")["completed"], 4);
  EXPECT_EQ(all.lines[all.lines.size() - 2]["ev"], "complete");
  EXPECT_DOUBLE_EQ(all.lines[all.lines.size() - 2]["t"].get<double>(), 8.0);
}

// Service 0: every event happens at t = 0, and the order is the contract's alone.
TEST_F(SimTest, SameInstantOrderWithServiceZero) {
  json s = one_plan({"alice", "bob"});
  s["arrivals"].push_back({{"at", 0}, {"participant", "alice"}, {"count", 3}});
  s["arrivals"].push_back({{"at", 0}, {"participant", "bob"}});
  const Trace t = trace_of(write("zero.json", s.dump()));
  const char* expected[] = {
      R"({"t": 0.0, "ev": "arrive", "participant": "alice", "req": 0})",
      R"({"t": 0.0, "ev": "arrive", "participant": "alice", "req": 1})",
      R"({"t": 0.0, "ev": "arrive", "participant": "alice", "req": 2})",
      R"({"t": 0.0, "ev": "arrive", "participant": "bob", "req": 3})",
      R"({"t": 0.0, "ev": "pass", "class": "P1", "eligible": ["alice", "bob"], "ignored": []})",
      R"({"t": 0.0, "ev": "dispatch", "participant": "alice", "req": 0, "class": "P1", "balances": {"P1": 9.0}})",
      // the slot is full: the loop stops, the instant is handled again, completions first
      R"({"t": 0.0, "ev": "complete", "participant": "alice", "req": 0, "cost": 0.0, "bucket": "P1", "balances": {"P1": 9.0}})",
      // a new turn: P1's cursor starts just after alice
      R"({"t": 0.0, "ev": "pass", "class": "P1", "eligible": ["alice", "bob"], "ignored": []})",
      R"({"t": 0.0, "ev": "dispatch", "participant": "bob", "req": 3, "class": "P1", "balances": {"P1": 9.0}})",
      R"({"t": 0.0, "ev": "complete", "participant": "bob", "req": 3, "cost": 0.0, "bucket": "P1", "balances": {"P1": 9.0}})",
      R"({"t": 0.0, "ev": "pass", "class": "P1", "eligible": ["alice"], "ignored": []})",
      R"({"t": 0.0, "ev": "dispatch", "participant": "alice", "req": 1, "class": "P1", "balances": {"P1": 8.0}})",
      R"({"t": 0.0, "ev": "complete", "participant": "alice", "req": 1, "cost": 0.0, "bucket": "P1", "balances": {"P1": 8.0}})",
      R"({"t": 0.0, "ev": "pass", "class": "P1", "eligible": ["alice"], "ignored": []})",
      R"({"t": 0.0, "ev": "dispatch", "participant": "alice", "req": 2, "class": "P1", "balances": {"P1": 7.0}})",
      R"({"t": 0.0, "ev": "complete", "participant": "alice", "req": 2, "cost": 0.0, "bucket": "P1", "balances": {"P1": 7.0}})",
      R"({"ev": "summary", "participants": {"alice": {"dispatched": {"P1": 3, "P2": 0}, "completed": 3, "waiting": 0, "wait_max": 0.0}, "bob": {"dispatched": {"P1": 1, "P2": 0}, "completed": 1, "waiting": 0, "wait_max": 0.0}}})",
  };
  ASSERT_EQ(t.lines.size(), std::size(expected));
  for (std::size_t i = 0; i < t.lines.size(); ++i)
    EXPECT_EQ(t.lines[i], json::parse(expected[i])) << i;
}

TEST_F(SimTest, CompletionsBeforeArrivalsInDispatchAndScenarioOrder) {
  json s = one_plan({"a", "b", "c"});
  s["server"]["slots"] = 3;
  // Entry 0 arrives at 0, 1, 2; entry 1 twice at 1; entry 2 at 1 ns rounded (0.4 ns -> 0).
  s["arrivals"].push_back(
      {{"at", 0}, {"participant", "a"}, {"count", 3}, {"every", 1}, {"service", 1}});
  s["arrivals"].push_back({{"at", 1}, {"participant", "b"}, {"count", 2}, {"service", 1}});
  s["arrivals"].push_back({{"at", 4e-10}, {"participant", "c"}, {"service", 1}});
  s["arrivals"].push_back({{"at", 0.9999999996}, {"participant", "c"}, {"service", 1}});
  const Trace t = trace_of(write("order.json", s.dump()));
  std::vector<std::pair<std::string, int>> arrivals;
  for (const json& a : t.events("arrive")) {
    arrivals.emplace_back(a["participant"].get<std::string>(), a["req"].get<int>());
  }
  // Times round to the nearest nanosecond: 0.4 ns is instant 0 and 0.9999999996 s is instant
  // 1 s, so c's requests arrive after a's and b's of the same instant (scenario order).
  const std::vector<std::pair<std::string, int>> want = {{"a", 0}, {"c", 1}, {"a", 2}, {"b", 3},
                                                         {"b", 4}, {"c", 5}, {"a", 6}};
  EXPECT_EQ(arrivals, want);

  // At t = 1 the two requests dispatched at 0 complete first, in dispatch order, then arrivals.
  std::vector<json> at_one;
  for (const json& l : t.lines) {
    if (l.contains("t") && std::abs(l["t"].get<double>() - 1.0) < kEps) at_one.push_back(l);
  }
  ASSERT_GE(at_one.size(), 6u);
  std::vector<int> dispatched_at_zero;
  for (const json& d : t.events("dispatch")) {
    if (d["t"].get<double>() < kEps) dispatched_at_zero.push_back(d["req"].get<int>());
  }
  ASSERT_EQ(dispatched_at_zero.size(), 2u);
  EXPECT_EQ(at_one[0]["ev"], "complete");
  EXPECT_EQ(at_one[0]["req"], dispatched_at_zero[0]);
  EXPECT_EQ(at_one[1]["ev"], "complete");
  EXPECT_EQ(at_one[1]["req"], dispatched_at_zero[1]);
  EXPECT_EQ(at_one[2]["ev"], "arrive");
  EXPECT_EQ(at_one[3]["ev"], "arrive");
  EXPECT_EQ(at_one[4]["ev"], "arrive");
  EXPECT_EQ(at_one[5]["ev"], "arrive");
}

TEST_F(SimTest, PlanHoldingNothingGoesOutUnmetered) {
  json s = json::parse(R"({"plans": {"free": {}}, "server": {"slots": 1},
      "participants": [{"name": "f", "plan": "free"}],
      "arrivals": [{"at": 0, "participant": "f", "count": 2, "service": 0.5, "cost": 1.5}]})");
  const Trace t = trace_of(write("free.json", s.dump()));
  const auto passes = t.events("pass");
  ASSERT_FALSE(passes.empty());
  EXPECT_EQ(passes[0]["class"], "P3");
  for (const json& d : t.events("dispatch")) {
    EXPECT_EQ(d["class"], "P3");
    EXPECT_EQ(d["balances"], json::object());
  }
  for (const json& c : t.events("complete")) {
    EXPECT_EQ(c["bucket"], nullptr);
    EXPECT_DOUBLE_EQ(c["cost"].get<double>(), 1.5);
  }
  EXPECT_EQ(t.participant("f")["dispatched"], json::parse(R"({"P1": 0, "P2": 0, "P3": 2})"));
  EXPECT_DOUBLE_EQ(t.participant("f")["wait_max"].get<double>(), 0.5);
}

TEST_F(SimTest, NumbersRoundToSixDecimals) {
  // 1/3 credit per second for 1 s from an empty-ish bucket: balances print as x.333333.
  json s =
      json::parse(R"({"classes": ["P1"], "plans": {"p": {"P1": {"rate": 0.333333333, "burst": 1}}},
      "server": {"slots": 1}, "participants": [{"name": "a", "plan": "p"}],
      "arrivals": [{"at": 0, "participant": "a", "service": 1.0000004, "cost": 0.0000015}]})");
  const Output o = run_sim({write("round.json", s.dump())});
  ASSERT_EQ(o.status, 0) << o.err;
  // Completion at 1.0000004 s -> 1.0 (half a micro-unit rounds away from zero only at .5).
  EXPECT_NE(o.out.find(R"({"t": 1.0, "ev": "complete")"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(R"("cost": 0.000002)"), std::string::npos) << o.out;  // 1.5e-6 -> 2e-6
  // 0 + 1.0000004 * 0.333333333 - 0.0000015 = 0.333331... -> 0.333332
  EXPECT_NE(o.out.find(R"("balances": {"P1": 0.333332})"), std::string::npos) << o.out;
}

// ---- each example scenario shows its rule -----------------------------------------------------

struct Decision {
  double t;
  std::string who;
  int req;
  std::string cls;
  json balances;
};

std::vector<Decision> dispatches(const Trace& t) {
  std::vector<Decision> out;
  for (const json& d : t.events("dispatch")) {
    out.push_back({d["t"].get<double>(), d["participant"].get<std::string>(), d["req"].get<int>(),
                   d["class"].get<std::string>(), d["balances"]});
  }
  return out;
}

std::map<int, double> arrival_times(const Trace& t) {
  std::map<int, double> out;
  for (const json& a : t.events("arrive")) out[a["req"].get<int>()] = a["t"].get<double>();
  return out;
}

json load(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// Rule 4 and the completion rule, checked on any trace: a request goes out under the highest
// class with a credit, the admitting bucket is the one charged, and the summary counts agree.
void check_rules(const Trace& t, int k) {
  std::map<int, std::string> admitted;
  std::map<std::string, std::map<std::string, int>> counts;
  for (const Decision& d : dispatches(t)) {
    EXPECT_FALSE(admitted.count(d.req)) << "req " << d.req << " dispatched twice";
    admitted[d.req] = d.cls;
    ++counts[d.who][d.cls];
    const int out = std::stoi(d.cls.substr(1)) - 1;
    for (const auto& [name, value] : d.balances.items()) {
      const int c = std::stoi(name.substr(1)) - 1;
      const double v = value.get<double>();
      if (c < out) {
        EXPECT_LT(v, 1.0) << "req " << d.req << " skipped a credit in " << name;
      }
      if (c == out) {
        EXPECT_GE(v, 0.0) << "req " << d.req << " went out without a credit";
      }
    }
    if (out == k) {
      for (const auto& item : d.balances.items()) EXPECT_LT(item.value().get<double>(), 1.0);
    }
  }
  for (const json& c : t.events("complete")) {
    const int req = c["req"];
    ASSERT_TRUE(admitted.count(req)) << "req " << req << " completed before its dispatch";
    const std::string cls = admitted[req];
    if (std::stoi(cls.substr(1)) - 1 == k) {
      EXPECT_EQ(c["bucket"], nullptr);
    } else {
      EXPECT_EQ(c["bucket"], cls);
    }
  }
  std::map<std::string, int> withdrawn;
  for (const json& c : t.events("withdraw")) {
    const int req = c["req"];
    EXPECT_FALSE(admitted.count(req)) << "req " << req << " withdrawn after its dispatch";
    admitted[req] = "withdrawn";  // a second withdrawal or a later dispatch fails above
    ++withdrawn[c["participant"].get<std::string>()];
  }
  for (const auto& [name, p] : t.summary()["participants"].items()) {
    for (const auto& [cls, n] : p["dispatched"].items()) EXPECT_EQ(n, counts[name][cls]) << name;
    EXPECT_EQ(p.value("withdrawn", 0), withdrawn[name]) << name;
  }
}

TEST_F(SimTest, ExampleScenariosFollowTheRules) {
  for (const char* name :
       {"quickstart.json", "interleave.json", "shares.json", "descend_climb.json",
        "bounded_wait.json", "heavy_work.json", "hang_up.json"}) {
    SCOPED_TRACE(name);
    const json s = load(example(name));
    check_rules(trace_of(example(name)),
                s.contains("classes") ? static_cast<int>(s["classes"].size()) : 2);
  }
}

// A client that hangs up: its requests still queued `withdraw_after` after their arrival leave the
// queue undispatched, take no credit, and its later requests keep their turn.
TEST_F(SimTest, HangUpScenario) {
  const Trace t = trace_of(example("hang_up.json"));
  const auto arrived = arrival_times(t);
  const auto withdrawals = t.events("withdraw");
  ASSERT_FALSE(withdrawals.empty());
  std::set<int> withdrawn;
  for (const json& c : withdrawals) {
    EXPECT_EQ(c["participant"], "impatient");
    const int req = c["req"];
    EXPECT_NEAR(c["t"].get<double>(), arrived.at(req) + 1.0, 1e-9) << req;
    withdrawn.insert(req);
  }
  std::map<std::string, int> sent;
  std::vector<double> later_waits;
  for (const Decision& d : dispatches(t)) {
    EXPECT_FALSE(withdrawn.count(d.req)) << d.req;
    if (d.who != "impatient") continue;
    ++sent[d.who];
    if (d.t >= 3.0) {
      later_waits.push_back(d.t - arrived.at(d.req));
      // Withdrawals took no credit: the bucket is full but for this dispatch's own credit.
      EXPECT_DOUBLE_EQ(d.balances["P2"].get<double>(), 9.0);
    }
  }
  // Every one of impatient's 20 first requests either went out within its second, or left.
  EXPECT_EQ(static_cast<int>(withdrawn.size()) + sent["impatient"] - 3, 20);
  ASSERT_EQ(later_waits.size(), 3u);
  for (const double w : later_waits) EXPECT_LE(w, 0.1 + 1e-9);
  const json& impatient = t.participant("impatient");
  EXPECT_EQ(impatient["withdrawn"], static_cast<int>(withdrawn.size()));
  EXPECT_EQ(impatient["waiting"], 0);
  EXPECT_EQ(t.participant("flood")["withdrawn"], 0);
  // A withdraw line has exactly these keys; a scenario without withdraw_after keeps the summary of
  // docs/contract.md §6 as it is.
  for (const json& c : withdrawals) {
    std::set<std::string> have;
    for (const auto& item : c.items()) have.insert(item.key());
    EXPECT_EQ(have, (std::set<std::string>{"t", "ev", "participant", "req"}));
  }
  EXPECT_FALSE(trace_of(example("quickstart.json")).participant("alice").contains("withdrawn"));
}

// A request dispatched before its withdrawal falls due is served as any other, and its moot
// withdrawal is no instant of the run: the run ends at the last completion.
TEST_F(SimTest, AWithdrawalOfADispatchedRequestIsMoot) {
  json s = one_plan({"a"});
  s["arrivals"].push_back(
      {{"at", 0}, {"participant", "a"}, {"count", 2}, {"service", 1}, {"withdraw_after", 5}});
  const Trace t = trace_of(write("moot.json", s.dump()));
  EXPECT_TRUE(t.events("withdraw").empty());
  EXPECT_EQ(t.participant("a")["completed"], 2);
  EXPECT_EQ(t.participant("a")["withdrawn"], 0);
  EXPECT_DOUBLE_EQ(t.lines[t.lines.size() - 2]["t"].get<double>(), 2.0);
  const Output table = run_sim({"--table", write("moot_table.json", s.dump())});
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("0 withdrawn"), std::string::npos) << table.out;
}

TEST_F(SimTest, InterleaveScenario) {
  const Trace t = trace_of(example("interleave.json"));
  const auto ds = dispatches(t);
  // From trickle's first dispatch to its last, flood and trickle alternate: flood's hundred
  // queued requests do not hold the class.
  std::size_t first = ds.size();
  std::size_t last = 0;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    if (ds[i].who == "trickle") {
      first = std::min(first, i);
      last = i;
    }
  }
  ASSERT_LT(first, ds.size());
  EXPECT_EQ(ds[first - 1].who, "flood");
  for (std::size_t i = first; i <= last; ++i) {
    EXPECT_NE(ds[i].who, ds[i - 1].who) << "two in a row at dispatch " << i;
    EXPECT_EQ(ds[i].cls, "P1");
  }
  EXPECT_EQ(t.participant("trickle")["completed"], 10);
  // trickle's last request went out long before flood's queue emptied.
  EXPECT_LT(last, 25u);
}

TEST_F(SimTest, SharesScenario) {
  const json s = load(example("shares.json"));
  const Trace t = trace_of(example("shares.json"));
  // Every turn in which both qualify gives each of them exactly one visit while room lasts.
  int both_turns = 0;
  for (std::size_t i = 0; i < t.lines.size(); ++i) {
    const json& l = t.lines[i];
    if (l["ev"] != "pass" || l["eligible"].size() != 2) continue;
    std::map<std::string, int> visits;
    for (std::size_t j = i + 1; j < t.lines.size() && t.lines[j]["ev"] != "pass"; ++j) {
      if (t.lines[j]["ev"] == "dispatch") ++visits[t.lines[j]["participant"]];
    }
    for (const auto& [who, n] : visits) EXPECT_EQ(n, 1) << who << " at t=" << l["t"];
    if (visits.size() == 2) ++both_turns;
  }
  EXPECT_GT(both_turns, 100);
  // Ten shares hold ten times more: the first debits leave burst*shares - 1.
  const double burst = s["plans"]["std"]["P1"]["burst"];
  const auto ds = dispatches(t);
  const auto first_of = [&](const std::string& who) {
    return *std::find_if(ds.begin(), ds.end(), [&](const Decision& d) { return d.who == who; });
  };
  EXPECT_DOUBLE_EQ(first_of("one").balances["P1"].get<double>(), burst * 1 - 1);
  EXPECT_DOUBLE_EQ(first_of("ten").balances["P1"].get<double>(), burst * 10 - 1);
  // ... and refill ten times faster: about ten times the P1 dispatches over the run.
  const double one = t.participant("one")["dispatched"]["P1"];
  const double ten = t.participant("ten")["dispatched"]["P1"];
  ASSERT_GT(one, 0);
  EXPECT_GT(ten / one, 8.0);
  EXPECT_LT(ten / one, 12.0);
}

TEST_F(SimTest, DescendClimbScenario) {
  const Trace t = trace_of(example("descend_climb.json"));
  std::vector<std::string> cls;
  for (const Decision& d : dispatches(t)) cls.push_back(d.cls);
  const auto first = [&](const std::string& c) {
    return static_cast<std::size_t>(std::find(cls.begin(), cls.end(), c) - cls.begin());
  };
  ASSERT_LT(first("P3"), cls.size());
  EXPECT_EQ(first("P1"), 0u);
  EXPECT_LT(first("P1"), first("P2"));
  EXPECT_LT(first("P2"), first("P3"));
  // After the first P3, credits land while work waits: the run climbs back to P2 and P1.
  const auto after = cls.begin() + static_cast<std::ptrdiff_t>(first("P3"));
  EXPECT_NE(std::find(after, cls.end(), "P1"), cls.end());
  EXPECT_NE(std::find(after, cls.end(), "P2"), cls.end());
}

TEST_F(SimTest, BoundedWaitScenario) {
  const json s = load(example("bounded_wait.json"));
  const Trace t = trace_of(example("bounded_wait.json"));
  const double rate = s["plans"]["gold"]["P1"]["rate"];
  double service = 0;
  for (const json& a : s["arrivals"]) service = std::max(service, a.value("service", 0.0));
  const auto arrived = arrival_times(t);
  std::optional<double> previous;
  int n = 0;
  for (const Decision& d : dispatches(t)) {
    if (d.who != "steady") continue;
    ++n;
    EXPECT_EQ(d.cls, "P1");
    // Its own P1 bucket's time to a credit, plus one turn of the room the server frees.
    const double since =
        previous ? d.t - std::max(*previous, arrived.at(d.req)) : d.t - arrived.at(d.req);
    EXPECT_LE(since, 1.0 / rate + service + kEps) << "req " << d.req << " at " << d.t;
    previous = d.t;
  }
  EXPECT_EQ(n, 12);
  for (const char* bulk : {"bulk1", "bulk2", "bulk3"}) {
    EXPECT_GT(t.participant(bulk)["wait_max"].get<double>(), 5.0) << bulk;
  }
}

TEST_F(SimTest, HeavyWorkScenario) {
  const Trace t = trace_of(example("heavy_work.json"));
  const auto arrived = arrival_times(t);
  const double service = 0.02;
  std::vector<double> heavy;
  std::vector<double> light;
  for (const Decision& d : dispatches(t)) {
    if (d.who == "heavy") heavy.push_back(d.t - arrived.at(d.req));
    if (d.who == "light") light.push_back(d.t - arrived.at(d.req));
  }
  ASSERT_GE(heavy.size(), 3u);
  ASSERT_EQ(light.size(), 10u);
  // Never blocked in advance: heavy's first request goes out like anyone's.
  EXPECT_LE(heavy[0], 2 * service + kEps);
  // Its costs delay its own later returns; light, on the same plan, is never held up.
  EXPECT_GT(*std::max_element(heavy.begin(), heavy.end()), 25 * service);
  for (const double w : light) EXPECT_LE(w, 2 * service + kEps);
}

TEST_F(SimTest, TableHasOneRowPerParticipant) {
  for (const auto& [name, people] : std::vector<std::pair<const char*, std::vector<std::string>>>{
           {"quickstart.json", {"alice", "bob"}},
           {"bounded_wait.json", {"steady", "bulk1", "bulk2", "bulk3"}}}) {
    const Output o = run_sim({"--table", example(name)});
    ASSERT_EQ(o.status, 0) << o.err;
    EXPECT_EQ(o.err, "");
    const auto lines = split_lines(o.out);
    EXPECT_EQ(o.out.find("\"ev\""), std::string::npos) << "no trace with --table";
    for (const std::string& who : people) {
      const auto rows = std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
        return l.rfind(who + " ", 0) == 0;
      });
      EXPECT_EQ(rows, 1) << who;
    }
  }
  // The figures are the summary's: alice's row shows 12 P1 and 28 P2 dispatches.
  const Output o = run_sim({"--table", example("quickstart.json")});
  for (const std::string& l : split_lines(o.out)) {
    if (l.rfind("alice ", 0) != 0) continue;
    EXPECT_NE(l.find(" 12 (30.0%)"), std::string::npos) << l;
    EXPECT_NE(l.find(" 28 (70.0%)"), std::string::npos) << l;
  }
}

// `total` requests from 12 participants of both plans, spread evenly, arriving together.
json many_requests(int total) {
  json s = json::parse(kContractExample);
  s.erase("until");
  s["server"]["slots"] = 8;
  s["participants"] = json::array();
  s["arrivals"] = json::array();
  for (int i = 0; i < 12; ++i) {
    const std::string name = "p" + std::to_string(i);
    s["participants"].push_back(
        {{"name", name}, {"plan", i % 2 ? "pro" : "lite"}, {"shares", i + 1}});
    s["arrivals"].push_back({{"at", 0.001 * i},
                             {"participant", name},
                             {"count", total / 12 + (i < total % 12 ? 1 : 0)},
                             {"every", 0.0005},
                             {"service", 0.001},
                             {"cost", 0.25}});
  }
  return s;
}

TEST_F(SimTest, LargeScenarioRuns) {
  // 120,000 requests from 12 participants: every one is dispatched and completed.
  const json s = many_requests(120000);
  const Output o = run_sim({"--summary", write("large.json", s.dump())});
  ASSERT_EQ(o.status, 0) << o.err;
  const json summary = json::parse(o.out);
  for (const auto& [name, p] : summary["participants"].items()) {
    int total = 0;
    for (const auto& item : p["dispatched"].items()) total += item.value().get<int>();
    EXPECT_EQ(total, 10000) << name;
    EXPECT_EQ(p["completed"], 10000) << name;
    EXPECT_EQ(p["waiting"], 0) << name;
  }
}

}  // namespace

// ---- --reasons: why each ignored participant was passed over -----------------------------------

TEST_F(SimTest, ReasonsExplainEveryIgnoredParticipantAndChangeNothingElse) {
  std::size_t below = 0;
  std::size_t no_bucket = 0;
  for (const char* name : {"quickstart.json", "shares.json", "heavy_work.json",
                           "descend_climb.json", "bounded_wait.json", "interleave.json"}) {
    const json scenario = json::parse(std::ifstream(example(name)));
    const Trace plain = trace_of(example(name));
    const Trace explained = trace_of(example(name), {"--reasons"});
    ASSERT_EQ(plain.lines.size(), explained.lines.size()) << name;
    // participant -> class -> the earliest instant it may qualify again, from its last reason
    std::map<std::string, std::map<std::string, double>> not_before;
    for (std::size_t i = 0; i < plain.lines.size(); ++i) {
      json line = explained.lines[i];
      if (line.value("ev", "") != "pass") {
        EXPECT_EQ(line, plain.lines[i]) << name;
        continue;
      }
      const json reasons = line["reasons"];
      line.erase("reasons");
      EXPECT_EQ(line, plain.lines[i]) << name;  // the contract's keys are untouched
      const std::string cls = line["class"];
      const double t = line["t"];
      for (const json& p : line["eligible"]) {
        const auto it = not_before[p.get<std::string>()].find(cls);
        if (it != not_before[p.get<std::string>()].end()) {
          // Only refill raises a balance, so nobody qualifies before its stated next credit.
          EXPECT_GE(t + kEps, it->second) << name << ": " << p << " eligible for " << cls;
        }
      }
      ASSERT_EQ(reasons.size(), line["ignored"].size()) << line;
      for (const json& p : line["ignored"]) {
        const std::string who = p;
        ASSERT_TRUE(reasons.contains(who)) << line;
        const json& r = reasons[who];
        std::string plan;
        for (const json& q : scenario["participants"]) {
          if (q["name"] == who) plan = q["plan"];
        }
        const bool holds = scenario["plans"][plan].contains(cls);
        if (r["why"] == "no_bucket") {
          ++no_bucket;
          EXPECT_FALSE(holds) << line;
        } else {
          ++below;
          EXPECT_EQ(r["why"], "below_one_credit") << line;
          EXPECT_TRUE(holds) << line;
          EXPECT_LT(r["balance"].get<double>(), 1.0) << line;
          EXPECT_GT(r["next_credit"].get<double>(), t) << line;
          not_before[who][cls] = r["next_credit"].get<double>() - 1e-6;  // 6-decimal rounding
        }
      }
    }
  }
  // The examples exercise both reasons.
  EXPECT_GT(below, 0u);
  EXPECT_GT(no_bucket, 0u);
}

// ---- --html and --svg: pictures of the run ------------------------------------------------------

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Checks that every element is closed in order, as an XML reader needs; returns the first
// problem, or "" when there is none.
std::string xml_problem(const std::string& text) {
  std::vector<std::string> open;
  for (std::size_t at = text.find('<'); at != std::string::npos; at = text.find('<', at + 1)) {
    const std::size_t end = text.find('>', at);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = text.substr(at + 1, end - at - 1);
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return "</" + tag.substr(1) + "> closes nothing open";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
  }
  return open.empty() ? "" : "<" + open.back() + "> is never closed";
}

// The text of the <g> element with the given id, from its start tag to its end tag.
std::string group(const std::string& svg, const std::string& id) {
  const std::size_t named = svg.find(" id=\"" + id + "\"");
  if (named == std::string::npos) return "";
  const std::size_t at = svg.rfind("<g", named);
  if (at == std::string::npos) return "";
  int depth = 0;
  for (std::size_t i = at; i < svg.size(); ++i) {
    if (svg.compare(i, 2, "<g") == 0) ++depth;
    if (svg.compare(i, 4, "</g>") == 0 && --depth == 0) return svg.substr(at, i + 4 - at);
  }
  return "";
}

}  // namespace

TEST_F(SimTest, PicturesLeaveStandardOutputAsItWas) {
  for (const char* name : {"quickstart.json", "shares.json", "heavy_work.json",
                           "descend_climb.json", "bounded_wait.json", "interleave.json"}) {
    for (const std::vector<std::string>& mode :
         {std::vector<std::string>{}, std::vector<std::string>{"--reasons"},
          std::vector<std::string>{"--table"}}) {
      std::vector<std::string> plain = mode;
      plain.push_back(example(name));
      std::vector<std::string> drawn = mode;
      const fs::path html = dir_ / "run.html";
      const fs::path svg = dir_ / "run.svg";
      drawn.insert(drawn.end(), {"--html", html.string(), "--svg=" + svg.string(), example(name)});
      const Output a = run_sim(plain);
      const Output b = run_sim(drawn);
      ASSERT_EQ(b.status, 0) << name << b.err;
      EXPECT_EQ(b.err, "");
      EXPECT_EQ(a.out, b.out) << name << ": the pictures changed standard output";
      ASSERT_TRUE(fs::is_regular_file(html));
      ASSERT_TRUE(fs::is_regular_file(svg));
      // Written whole and moved into place: no temporary is left beside them.
      EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 2);
      fs::remove(html);
      fs::remove(svg);
    }
  }
}

TEST_F(SimTest, HtmlIsOnePageThatNeedsNothingElse) {
  const fs::path html = dir_ / "q.html";
  ASSERT_EQ(run_sim({"--html", html.string(), example("quickstart.json")}).status, 0);
  const std::string page = slurp(html);
  EXPECT_EQ(page.rfind("<!doctype html>", 0), 0u);
  EXPECT_EQ(page.find("/*@CREDITLOOP_DATA@*/"), std::string::npos) << "the data went in";
  EXPECT_NE(page.find("<canvas"), std::string::npos);
  EXPECT_NE(page.find("window.creditloopView"), std::string::npos);
  // Nothing from elsewhere: no linked script, style, font or image.
  for (const char* outside : {" src=", "<link", "@import", "url(", "http://", "https://"}) {
    EXPECT_EQ(page.find(outside), std::string::npos) << outside;
  }
  // The data: the run's counts, as the trace has them.
  const std::string open = "<script id=\"creditloop-data\" type=\"application/json\">";
  const std::size_t from = page.find(open);
  ASSERT_NE(from, std::string::npos);
  const std::size_t to = page.find("</script>", from);
  const json data = json::parse(page.substr(from + open.size(), to - from - open.size()));
  EXPECT_EQ(data["format"], "creditloop-picture/1");
  EXPECT_EQ(data["title"], "quickstart.json");
  ASSERT_EQ(data["participants"].size(), 2u);
  EXPECT_EQ(data["participants"][0]["name"], "alice");
  EXPECT_EQ(data["participants"][0]["a"].size(), 40u);
  EXPECT_EQ(data["participants"][1]["a"].size(), 3u);
  const Trace t = trace_of(example("quickstart.json"));
  EXPECT_EQ(data["passes"]["t"].size(), t.events("pass").size());
}

TEST_F(SimTest, HtmlKeepsNamesInsideItsScript) {
  // A participant named like the end of a script element must not end the data early.
  json s = json::parse(kContractExample);
  s["participants"][0]["name"] = "</script><b>x";
  for (json& a : s["arrivals"]) {
    if (a["participant"] == "alice") a["participant"] = "</script><b>x";
  }
  const fs::path html = dir_ / "names.html";
  ASSERT_EQ(run_sim({"--summary", "--html", html.string(), write("n.json", s.dump())}).status, 0);
  const std::string page = slurp(html);
  EXPECT_EQ(count_of(page, "</script>"), 2u);  // the data's and the code's
  EXPECT_NE(page.find("\\u003c/script>\\u003cb>x"), std::string::npos);
}

TEST_F(SimTest, SvgShowsLanesPassesLegendAndHeader) {
  const fs::path svg_path = dir_ / "q.svg";
  ASSERT_EQ(run_sim({"--summary", "--svg", svg_path.string(), example("quickstart.json")}).status,
            0);
  const std::string svg = slurp(svg_path);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(xml_problem(svg), "");
  for (const char* id : {"header", "legend", "axis", "passes", "lane-0", "lane-1"}) {
    EXPECT_EQ(count_of(svg, std::string("id=\"") + id + "\""), 1u) << id;
  }
  EXPECT_EQ(count_of(svg, "class=\"lane\""), 2u);
  EXPECT_EQ(count_of(svg, "class=\"requests\""), 2u);
  EXPECT_EQ(count_of(svg, "class=\"balances\""), 2u);
  const std::string header = group(svg, "header");
  for (const char* text : {"quickstart.json", "plan pro:", "P1 2/s burst 4",
                           "plan lite:", "alice (pro, 1 share)", "bob (lite, 1 share)", "1 slot"}) {
    EXPECT_NE(header.find(text), std::string::npos) << text;
  }
  const std::string legend = group(svg, "legend");
  for (const char* text : {">P1<", ">P2<", ">P3 (unmetered)<", "one credit", "waiting"}) {
    EXPECT_NE(legend.find(text), std::string::npos) << text;
  }
  // One mark a pass (43 passes, few enough to draw each), and in alice's lane one waiting and
  // one service segment a request.
  const Trace t = trace_of(example("quickstart.json"));
  EXPECT_EQ(count_of(group(svg, "passes"), "M"), t.events("pass").size());
  const std::string alice = group(svg, "lane-0");
  const std::string requests = alice.substr(0, alice.find("class=\"balances\""));
  EXPECT_EQ(count_of(requests, "M"), 2 * 40u);
  EXPECT_NE(alice.find(">alice<"), std::string::npos);
}

TEST_F(SimTest, PicturesShowEachWithdrawal) {
  const fs::path svg_path = dir_ / "h.svg";
  const fs::path html_path = dir_ / "h.html";
  ASSERT_EQ(run_sim({"--summary", "--svg", svg_path.string(), "--html", html_path.string(),
                     example("hang_up.json")})
                .status,
            0);
  const std::size_t withdrawn = trace_of(example("hang_up.json")).events("withdraw").size();
  const std::string svg = slurp(svg_path);
  EXPECT_EQ(xml_problem(svg), "");
  // One tick a withdrawal, in impatient's lane alone.
  const std::string impatient = group(svg, "lane-1");
  const auto at = impatient.find("class=\"withdrawals\"");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(count_of(impatient.substr(at, impatient.find("</g>", at) - at), "M"), withdrawn);
  EXPECT_EQ(group(svg, "lane-0").find("withdrawals"), std::string::npos);
  EXPECT_NE(group(svg, "legend").find("withdrawn while queued"), std::string::npos);
  // The page's data keeps them apart from the lane's requests.
  const std::string html = slurp(html_path);
  EXPECT_NE(html.find("\"xreq\":["), std::string::npos);

  const fs::path plain = dir_ / "q.svg";
  ASSERT_EQ(run_sim({"--summary", "--svg", plain.string(), example("quickstart.json")}).status, 0);
  EXPECT_EQ(slurp(plain).find("withdraw"), std::string::npos);
}

TEST_F(SimTest, SvgStaysSmallFor100000Requests) {
  const fs::path svg_path = dir_ / "big.svg";
  const Output o = run_sim(
      {"--summary", "--svg", svg_path.string(), write("big.json", many_requests(100000).dump())});
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string svg = slurp(svg_path);
  // The bound docs/pictures.md states: under 2 MB for 100,000 requests among 12 participants.
  EXPECT_LT(svg.size(), 2'000'000u);
  std::printf("SVG of 100000 requests: %zu bytes\n", svg.size());
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count_of(svg, "class=\"lane\""), 12u);
  EXPECT_NE(svg.find("aggregated"), std::string::npos);
  EXPECT_NE(svg.find("100000 requests"), std::string::npos);
}

TEST_F(SimTest, PicturePathsThatCannotBeWrittenStopTheRunFirst) {
  const std::string missing = (dir_ / "no" / "such" / "dir" / "x.html").string();
  const std::string good = (dir_ / "good.html").string();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--html", missing},
        std::vector<std::string>{"--svg", dir_.string()},
        std::vector<std::string>{"--html", good, "--svg", missing}}) {
    std::vector<std::string> all = args;
    all.push_back(example("quickstart.json"));
    const Output o = run_sim(all);
    EXPECT_EQ(o.status, 3) << o.err;
    EXPECT_EQ(o.out, "") << "nothing on standard output";
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(args[args.size() - 1]), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(args[args.size() - 2]), std::string::npos) << o.err;
    EXPECT_TRUE(fs::is_empty(dir_)) << "nothing else written";
  }
  // A bad scenario is found before any picture is started.
  const Output bad = run_sim({"--html", good, write("bad.json", "{}")});
  EXPECT_EQ(bad.status, 1);
  EXPECT_FALSE(fs::exists(good));
  // The command line.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{example("quickstart.json"), "--html"},
        std::vector<std::string>{"--svg=", example("quickstart.json")},
        std::vector<std::string>{"--check", "--html", good, example("quickstart.json")}}) {
    const Output o = run_sim(args);
    EXPECT_EQ(o.status, 2) << o.err;
    EXPECT_EQ(o.out, "");
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
  fs::remove(dir_ / "bad.json");
  EXPECT_TRUE(fs::is_empty(dir_));
  const Output help = run_sim({"--help"});
  EXPECT_NE(help.out.find("--html FILE"), std::string::npos);
  EXPECT_NE(help.out.find("--svg FILE"), std::string::npos);
}

TEST_F(SimTest, PicturesRefuseRunsTooLargeToHoldBeforeWritingAnything) {
  json s = one_plan({"a"});
  s["arrivals"].push_back({{"at", 0}, {"participant", "a"}, {"count", 5'000'001}});
  const std::string html = (dir_ / "huge.html").string();
  const Output o = run_sim({"--html", html, write("huge.json", s.dump())});
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_EQ(o.out, "");
  EXPECT_NE(o.err.find("5000000"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(html));
}

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
TEST_F(SimTest, ReplayOfASimulatedCaptureReproducesItExactly) {
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
TEST_F(SimTest, ReplayUnderMoreSharesLowersThatParticipantsWaits) {
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
TEST_F(SimTest, LearnedRoomOrBackendHasNoCaptureNorSecondRun) {
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
TEST_F(SimTest, ScenarioUnderOtherPlansComparesTwoRuns) {
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

TEST_F(SimTest, CaptureLeavesTheTraceAsItWas) {
  const Output plain = run_sim({"--reasons", example("heavy_work.json")});
  const Output captured =
      run_sim({"--reasons", "--capture", (dir_ / "c").string(), example("heavy_work.json")});
  ASSERT_EQ(plain.status, 0);
  EXPECT_EQ(captured.status, 0) << captured.err;
  EXPECT_EQ(plain.out, captured.out);
  EXPECT_TRUE(fs::exists(dir_ / "c"));
}

TEST_F(SimTest, ReplayCommandLineAndBadCaptures) {
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
