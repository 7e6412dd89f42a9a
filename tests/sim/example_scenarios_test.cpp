// Each example scenario of tools/scenarios shows the rule its README claims for it, on the trace.
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

class SimExampleScenarios : public SimTest {};

// ---- each example scenario shows its rule -----------------------------------------------------

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

TEST_F(SimExampleScenarios, ExampleScenariosFollowTheRules) {
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
TEST_F(SimExampleScenarios, HangUpScenario) {
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
TEST_F(SimExampleScenarios, AWithdrawalOfADispatchedRequestIsMoot) {
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

TEST_F(SimExampleScenarios, InterleaveScenario) {
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

TEST_F(SimExampleScenarios, SharesScenario) {
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

TEST_F(SimExampleScenarios, DescendClimbScenario) {
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

TEST_F(SimExampleScenarios, BoundedWaitScenario) {
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

TEST_F(SimExampleScenarios, HeavyWorkScenario) {
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

}  // namespace
}  // namespace creditloop::sim_test
