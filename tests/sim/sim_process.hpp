// tests/sim/sim_process.hpp: the simulator, run as a user runs it, for the tests of
// creditloop_sim_tests: a child process with its own stdout and stderr, scenario files on disk.
// Expected values come from docs/contract.md §6 (its quoted lines) or from the rules of sections
// 2-3 applied to the trace, never from a previous run of the simulator.
#pragma once

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

namespace creditloop::sim_test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    std::fprintf(stderr, "%s is not set: run these tests through ctest\n", name);
    std::exit(2);
  }
  return v;
}

inline const std::string& sim_path() {
  static const std::string path = env("CREDITLOOP_SIM");
  return path;
}

inline fs::path scenarios_dir() { return fs::path(env("CREDITLOOP_SCENARIOS")); }

struct Output {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs the simulator with `args`, stdin from /dev/null, collecting stdout and stderr apart.
// Both pipes are drained together so that a large trace cannot block the child.
inline Output run_sim(const std::vector<std::string>& args) {
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

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The contract's example scenario, verbatim.
inline constexpr const char* kContractExample = R"({
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

inline constexpr double kEps = 1e-9;

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

inline const char* kOnePlan =
    R"({"classes": ["P1"], "plans": {"p": {"P1": {"rate": 1, "burst": 10}}},
                            "server": {"slots": 1}, "participants": [], "arrivals": []})";

inline json one_plan(const std::vector<std::string>& names) {
  json s = json::parse(kOnePlan);
  for (const std::string& n : names) s["participants"].push_back({{"name", n}, {"plan", "p"}});
  return s;
}

inline json seven_classes() { return json::parse(R"(["P1", "P2", "P3", "P4", "P5", "P6", "P7"])"); }

struct Decision {
  double t;
  std::string who;
  int req;
  std::string cls;
  json balances;
};

inline std::vector<Decision> dispatches(const Trace& t) {
  std::vector<Decision> out;
  for (const json& d : t.events("dispatch")) {
    out.push_back({d["t"].get<double>(), d["participant"].get<std::string>(), d["req"].get<int>(),
                   d["class"].get<std::string>(), d["balances"]});
  }
  return out;
}

// `total` requests from 12 participants of both plans, spread evenly, arriving together.
inline json many_requests(int total) {
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

}  // namespace creditloop::sim_test
