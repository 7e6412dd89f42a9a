// The runtime against the simulator on the same inputs: its next-credit instants
// (ParticipantSnapshot::next_credit) against the simulator's (`--reasons`, PassEntry::next_credit),
// and a captured run's replay against the run's own decisions. Expected values come from the rules
// of docs/contract.md §2-3, never from a previous run.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "capture_file.hpp"
#include "creditloop/capture.hpp"
#include "creditloop/runtime.hpp"
#include "replay.hpp"
#include "scenario.hpp"
#include "simulator.hpp"
#include "spin_until.hpp"

namespace sim = creditloop::sim;

namespace {

using creditloop::Nanos;
using creditloop::test::spin_until;
using sim::Capture;
using sim::CaptureText;
using sim::Refusal;

// Records every PassEntry the simulator reports, with its pass's instant.
class PassLog final : public sim::RunObserver {
 public:
  struct Seen {
    Nanos t;
    sim::PassEntry entry;
  };
  std::vector<Seen> ignored;
  void arrived(Nanos, std::uint32_t, std::uint64_t) override {}
  void passed(Nanos t, creditloop::ClassId, std::span<const sim::PassEntry> waiting) override {
    for (const sim::PassEntry& e : waiting) {
      if (!e.eligible && e.holds) ignored.push_back(Seen{t, e});
    }
  }
  void dispatched(Nanos, std::uint32_t, std::uint64_t, creditloop::ClassId,
                  const sim::Balances&) override {}
  void completed(Nanos, std::uint32_t, std::uint64_t, std::int64_t, const sim::Balances&) override {
  }
  void withdrawn(Nanos, std::uint32_t, std::uint64_t) override {}
};

// alice spends her one P1 credit at 0 and is charged 2.7 at 0.1, so that her next credit lands
// on an instant no decimal rounding hits (rate 3/s: 0.1 + (1 - (0 + 0.3 - 2.7)) / 3 s). Then
// bob, whose plan always has credit, arrives at 0.3, 0.5, 0.7 and 0.9 while alice has requests
// queued: each of his P1 turns ignores alice for want of a credit and says when it lands.
TEST(RuntimeAgreement, ASnapshotsNextCreditIsTheSimulatorsOnTheSameInputs) {
  constexpr const char* kScenario = R"({
    "classes": ["P1"],
    "plans": {"slow": {"P1": {"rate": 3, "burst": 1}}, "fast": {"P1": {"rate": 1000, "burst": 10}}},
    "server": {"slots": 1},
    "participants": [{"name": "alice", "plan": "slow"}, {"name": "bob", "plan": "fast"}],
    "arrivals": [
      {"at": 0, "participant": "alice", "service": 0.1, "cost": 2.7},
      {"at": 0.3, "participant": "alice", "count": 3, "service": 0.15},
      {"at": 0.3, "participant": "bob", "count": 4, "every": 0.2, "service": 0.01}
    ]})";
  auto parsed = sim::parse_scenario(kScenario);
  ASSERT_TRUE(std::holds_alternative<sim::Scenario>(parsed))
      << std::get<sim::Refusal>(parsed).message;
  const sim::Scenario scenario = std::get<sim::Scenario>(parsed);
  auto built = sim::Simulator::create(scenario);
  ASSERT_TRUE(std::holds_alternative<std::unique_ptr<sim::Simulator>>(built));
  PassLog log;
  std::get<0>(built)->observe(&log);
  (void)std::get<0>(built)->run(nullptr);
  std::vector<PassLog::Seen> alice;
  for (const auto& s : log.ignored) {
    if (s.entry.participant == 0) alice.push_back(s);
  }
  ASSERT_GE(alice.size(), 2u) << "the scenario must make turns that ignore alice";

  // The same inputs through the runtime, its clock moved by hand.
  std::atomic<Nanos> clock{0};
  std::atomic<int> dispatched{0};
  creditloop::Ticket first_ticket{};
  creditloop::RuntimeOptions o;
  o.config = scenario.config;
  o.slots = 1;
  o.clock = [&clock] { return clock.load(std::memory_order_relaxed); };  // a test knob: no pairing
  o.sink = [&](const creditloop::Decision& d) {
    if (dispatched.load(std::memory_order_relaxed) == 0) first_ticket = d.ticket;
    // Publishes first_ticket to the test thread's acquire load below.
    dispatched.fetch_add(1, std::memory_order_release);
  };
  creditloop::Runtime rt(std::move(o));
  const auto alice_id = rt.add("alice", "slow", 1);
  ASSERT_TRUE(alice_id.ok());
  ASSERT_TRUE(rt.add("bob", "fast", 1).ok());
  std::deque<creditloop::RequestHook> requests(1);
  ASSERT_TRUE(rt.submit(*alice_id, requests[0]).ok());
  spin_until([&] { return dispatched.load(std::memory_order_acquire) == 1; }, "the first dispatch");
  clock.store(100'000'000, std::memory_order_relaxed);
  ASSERT_TRUE(rt.complete_nano(first_ticket, 2'700'000'000).ok());
  spin_until(
      [&] {
        const auto c = rt.counters(*alice_id);
        return c && c->completed == 1;
      },
      "alice's completion");

  // Between 0.1 and the first credit, nothing else touches alice's P1 bucket in either run (her
  // later requests go out unmetered): each ignored pass's instant is a snapshot's instant.
  for (const PassLog::Seen& s : alice) {
    clock.store(s.t, std::memory_order_relaxed);
    const std::optional<creditloop::ParticipantSnapshot> snap = rt.snapshot(*alice_id);
    ASSERT_TRUE(snap.has_value());
    ASSERT_TRUE(snap->balance[0].has_value());
    EXPECT_EQ(*snap->balance[0], s.entry.balance) << "at " << s.t;
    ASSERT_TRUE(snap->next_credit[0].has_value()) << "at " << s.t;
    ASSERT_TRUE(s.entry.next_credit.has_value());
    EXPECT_EQ(*snap->next_credit[0], *s.entry.next_credit) << "at " << s.t;
  }
  // And the instant itself follows the rule: the balance after the charge, refilled at 3 per
  // second from 0.1, reaches one credit at 0.1 + 3.4 / 3 s, rounded up to the nanosecond.
  EXPECT_EQ(*alice.front().entry.next_credit, 100'000'000 + (3'400'000'000LL * 1000 + 2999) / 3000);
  (void)rt.shutdown();
}

// ---- a runtime's capture, replayed ------------------------------------------------------------

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The script: each step at an instant of its own.
struct Step {
  Nanos at;
  int who;  // 0 alice, 1 bob: a submission; -1: the request in the slot completes
  std::int64_t cost_nano;
};
constexpr Step kSteps[] = {{0, 0, 0},
                           {10'000'000, 0, 0},
                           {20'000'000, 1, 0},
                           {30'000'000, 0, 0},
                           {40'000'000, 1, 0},
                           {100'000'000, -1, 3'000'000'000},
                           {150'000'000, 0, 0},
                           {200'000'000, -1, 0},
                           {220'000'000, 1, 0},
                           {250'000'000, -1, 7'250'000'000},
                           {400'000'000, -1, 1'500'000},
                           {410'000'000, 0, 0},
                           {500'000'000, -1, 0},
                           {650'000'000, -1, 2'000'000'000},
                           {700'000'000, -1, 0},
                           {1'300'000'000, -1, 500'000'000}};

// The script's two plans: pro with P1 and P2, lite with P2 only, read as a scenario reads them.
creditloop::Config two_plans() {
  auto parsed = sim::parse_scenario(R"({
    "classes": ["P1", "P2"],
    "plans": {"pro": {"P1": {"rate": 2, "burst": 2}, "P2": {"rate": 5, "burst": 3}},
              "lite": {"P2": {"rate": 4, "burst": 2}}},
    "server": {"slots": 1}, "participants": [], "arrivals": []})");
  return std::get<sim::Scenario>(parsed).config;  // std::get throws if the scenario was refused
}

// Runs the script on a runtime with a hand-moved clock and one slot, recorded by its
// CaptureObserver into `path`: each event at an instant of its own, the test waiting for its
// effect before moving the clock, so that the capture holds everything the decisions depended on.
void record_the_script(const std::string& path) {
  std::atomic<Nanos> clock{0};
  std::mutex mutex;
  std::vector<creditloop::Ticket> tickets;  // in dispatch order
  creditloop::RuntimeOptions o;
  o.config = two_plans();
  o.slots = 1;
  o.clock = [&clock] { return clock.load(std::memory_order_relaxed); };  // a test knob: no pairing
  o.sink = [&](const creditloop::Decision& d) {
    const std::lock_guard<std::mutex> lock(mutex);
    tickets.push_back(d.ticket);
  };
  creditloop::CaptureOptions c;
  c.files.path = path;
  c.setup = creditloop::capture_setup(o);
  creditloop::CaptureObserver capture(std::move(c));
  o.observer = &capture;
  {
    creditloop::Runtime rt(std::move(o));
    const creditloop::ParticipantId alice = *rt.add("alice", "pro", 1);
    const creditloop::ParticipantId bob = *rt.add("bob", "lite", 2);
    const creditloop::ParticipantId ids[] = {alice, bob};
    std::deque<creditloop::RequestHook> hooks;
    std::uint64_t submitted[2] = {0, 0};
    std::uint64_t completed = 0;
    std::size_t next_to_complete = 0;
    // If an assertion ends the test early, what is in flight completes, so that the runtime's
    // destructor, which waits for it, returns.
    struct CompleteRest {
      std::function<void()> f;
      ~CompleteRest() { f(); }
    } complete_rest{[&] {
      const std::lock_guard<std::mutex> lock(mutex);
      for (; next_to_complete < tickets.size(); ++next_to_complete) {
        (void)rt.complete_nano(tickets[next_to_complete], 0);
      }
    }};
    // Everything the runtime has been told has happened: each request is queued (in the core, or
    // in its inbox while the slot is taken: the dispatcher takes it in, and so stamps its
    // arrival, when it next has room) or out, each completion applied, and the slot taken again
    // if anything waits.
    const auto settled = [&] {
      std::uint64_t out = 0;
      for (int p = 0; p < 2; ++p) {
        const auto cnt = rt.counters(ids[p]);
        const auto snap = rt.snapshot(ids[p]);
        std::uint64_t sent = 0;
        for (const std::uint64_t n : cnt->dispatched) sent += n;
        if (!snap || snap->queued + sent != submitted[p]) return false;
        out += sent;
      }
      const std::lock_guard<std::mutex> lock(mutex);
      return rt.counters().completed == completed &&
             out == std::min(submitted[0] + submitted[1], completed + 1) && tickets.size() == out;
    };
    for (const Step& step : kSteps) {
      clock.store(step.at, std::memory_order_relaxed);
      if (step.who >= 0) {
        hooks.emplace_back();
        ASSERT_TRUE(rt.submit(ids[step.who], hooks.back()).ok());
        ++submitted[step.who];
      } else {
        creditloop::Ticket t;
        {
          const std::lock_guard<std::mutex> lock(mutex);
          ASSERT_LT(next_to_complete, tickets.size());
          t = tickets[next_to_complete++];
        }
        ASSERT_TRUE(rt.complete_nano(t, step.cost_nano).ok());
        ++completed;
      }
      const std::string awaited = "the runtime to take in the step at " + std::to_string(step.at);
      spin_until(settled, awaited.c_str());
    }
    ASSERT_EQ(completed, submitted[0] + submitted[1]);
    (void)rt.shutdown();
  }
  capture.close();
}

// The capture at `path`, replayed under the same plans, makes the same decisions: the same waits
// and classes, request by request.
void expect_the_replay_to_agree(const std::string& path) {
  auto read = sim::read_capture({CaptureText{path, slurp(path)}});
  ASSERT_TRUE(std::holds_alternative<Capture>(read)) << std::get<Refusal>(read).message;
  const Capture& captured = std::get<Capture>(read);
  ASSERT_EQ(captured.requests.size(), 8u);
  auto scenario = sim::replay_scenario(captured, nullptr, std::nullopt, path);
  ASSERT_TRUE(std::holds_alternative<sim::Scenario>(scenario))
      << std::get<sim::Refusal>(scenario).message;
  auto built = sim::Simulator::create(std::get<sim::Scenario>(scenario));
  ASSERT_TRUE(std::holds_alternative<std::unique_ptr<sim::Simulator>>(built));
  sim::WaitRecorder replayed(std::get<sim::Scenario>(scenario));
  std::get<0>(built)->observe(&replayed);
  (void)std::get<0>(built)->run(nullptr);
  const sim::RunAccount want = sim::account_of(captured);
  ASSERT_EQ(replayed.account().rows.size(), want.rows.size());
  std::uint64_t unmetered = 0;
  for (std::size_t i = 0; i < want.rows.size(); ++i) {
    const auto& got = replayed.account().rows[i];
    EXPECT_EQ(got.name, want.rows[i].name);
    EXPECT_EQ(got.waits, want.rows[i].waits) << got.name;  // in dispatch order, each one
    EXPECT_EQ(got.by_class, want.rows[i].by_class) << got.name;
    unmetered += want.rows[i].by_class[2];
  }
  // The costs pushed some requests out of P1 and P2: the run exercised more than one class.
  std::uint64_t metered = 0;
  for (const auto& row : want.rows) metered += row.by_class[0] + row.by_class[1];
  EXPECT_GT(metered, 0u);
  EXPECT_GT(unmetered + want.rows[0].by_class[1], 0u);
}

// A runtime's capture replays to the same decisions (record_the_script,
// expect_the_replay_to_agree).
TEST(RuntimeAgreement, ACaptureReplaysToTheSameDecisions) {
  char dir_template[] = "/tmp/creditloop-replay-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path dir = dir_template;
  const std::string path = (dir / "c.jsonl").string();
  ASSERT_NO_FATAL_FAILURE(record_the_script(path));
  ASSERT_NO_FATAL_FAILURE(expect_the_replay_to_agree(path));
  std::filesystem::remove_all(dir);
}

}  // namespace
