// The trace of docs/contract.md §6: its lines and keys, the order of events at one instant, the
// rounding of numbers, --table, --reasons, and byte-for-byte repeatability.
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

class SimTrace : public SimTest {};

// ---- the contract's own example
// -------------------------------------------------------------------

TEST_F(SimTrace, ContractExampleQuotedLines) {
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

TEST_F(SimTrace, QuickstartIsTheContractExample) {
  std::ifstream in(example("quickstart.json"));
  ASSERT_TRUE(in) << example("quickstart.json");
  EXPECT_EQ(json::parse(in), json::parse(kContractExample));
}

TEST_F(SimTrace, SummaryListsParticipantsInRingOrder) {
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
TEST_F(SimTrace, LinesHaveExactlyTheContractsKeys) {
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

TEST_F(SimTrace, ByteForByteDeterministic) {
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

// ---- time and order ---------------------------------------------------------------------------

TEST_F(SimTrace, UntilStopsBeforeTheFirstLaterEvent) {
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
TEST_F(SimTrace, SameInstantOrderWithServiceZero) {
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

TEST_F(SimTrace, CompletionsBeforeArrivalsInDispatchAndScenarioOrder) {
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

TEST_F(SimTrace, PlanHoldingNothingGoesOutUnmetered) {
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

TEST_F(SimTrace, NumbersRoundToSixDecimals) {
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

TEST_F(SimTrace, TableHasOneRowPerParticipant) {
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

TEST_F(SimTrace, LargeScenarioRuns) {
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

// ---- --reasons: why each ignored participant was passed over -----------------------------------

TEST_F(SimTrace, ReasonsExplainEveryIgnoredParticipantAndChangeNothingElse) {
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

}  // namespace
}  // namespace creditloop::sim_test
