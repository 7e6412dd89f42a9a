// The capture's observer on a runtime (creditloop/capture.hpp): on a manual clock its capture says
// exactly what happened; a full ring drops and says so; an unwritable capture never stops the
// runtime; and producers, a worker pool and the writer thread at once lose no completed request.
// The tests synchronise on what the runtime does (a sink that records each dispatch, snapshots
// that round trip through the dispatcher); a deadline only turns a hang into a failure.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "capture_support.hpp"
#include "creditloop/capture.hpp"
#include "creditloop/runtime.hpp"
#include "runtime_support.hpp"
#include "spin_until.hpp"

namespace creditloop {
namespace {

using namespace std::chrono_literals;
using namespace capture_tests;

struct Req : RequestHook {};

// Whether the request is its submitter's again. acquire: pairs with the runtime's release store
// when it completes the request, so the runtime's last use of it happens before the caller's.
bool returned(const Req& q) { return q.held.load(std::memory_order_acquire) == RequestHook::kIdle; }

using runtime_tests::Recorder;

// Waits until the runtime has applied `n` completions (a snapshot round-trips through the
// dispatcher).
void wait_completed(Runtime& rt, std::uint64_t n) {
  test::spin_until([&] { return rt.snapshot().completed >= n; }, "the runtime's completions");
}

// Long by nature: one scripted run at set instants, then each line it wrote, top to bottom.
TEST(CaptureObserver, TheLinesSayWhoWasDispatchedUnderWhichClassWhenAndAtWhatCost) {
  Scratch scratch;
  const std::string path = scratch.path("c.jsonl");
  std::atomic<Nanos> clock{1'000};
  Recorder recorder;
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 8;
  o.clock = [&clock] { return clock.load(std::memory_order_relaxed); };  // a test knob
  o.sink = [&recorder](const Decision& d) { recorder(d); };
  CaptureOptions c;
  c.files.path = path;
  c.setup = capture_setup(o);
  EXPECT_EQ(c.setup.origin, 1'000);
  CaptureObserver capture(std::move(c));
  o.observer = &capture;
  std::array<Req, 3> r;
  {
    Runtime rt(std::move(o));
    const ParticipantId alice = *rt.add("alice", "pro", 1);
    const ParticipantId bob = *rt.add("bob", "lite", 2);
    clock.store(2'000, std::memory_order_relaxed);
    ASSERT_TRUE(rt.submit(alice, r[0]));
    ASSERT_TRUE(rt.submit(bob, r[1]));
    ASSERT_TRUE(rt.submit(alice, r[2]));
    ASSERT_TRUE(recorder.wait_for(3));
    clock.store(5'000, std::memory_order_relaxed);
    const std::vector<Decision> seen = recorder.seen();
    const auto ticket_of = [&](const Req& q) {
      for (const Decision& d : seen) {
        if (d.request == &q) return d.ticket;
      }
      ADD_FAILURE() << "not dispatched";
      return Ticket{};
    };
    ASSERT_TRUE(rt.complete(ticket_of(r[0]), 1.25));
    wait_completed(rt, 1);
    clock.store(7'000, std::memory_order_relaxed);
    ASSERT_TRUE(rt.complete(ticket_of(r[1]), 0.5));
    wait_completed(rt, 2);
    ASSERT_TRUE(rt.scale(bob, 500'000));
    // Removed with a request in flight: its completion still names it.
    ASSERT_TRUE(rt.remove(alice));
    clock.store(9'000, std::memory_order_relaxed);
    ASSERT_TRUE(rt.complete(ticket_of(r[2]), 2));
    wait_completed(rt, 3);
    rt.shutdown();
  }
  capture.close();
  const std::vector<Decision> seen = recorder.seen();
  const auto dispatched = [&](const Req& q) -> const Decision& {
    for (const Decision& d : seen) {
      if (d.request == &q) return d;
    }
    throw std::logic_error("not dispatched");
  };
  const auto seconds = [](Nanos t) { return static_cast<double>(t - 1'000) / 1e9; };

  const std::vector<json> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0]["server"]["slots"], 8);
  EXPECT_EQ(lines[1], json::parse(R"({"ev": "plan", "t": 0, "participant": "alice",
                                      "plan": "pro", "shares": 1})"));
  EXPECT_EQ(lines[2], json::parse(R"({"ev": "plan", "t": 0, "participant": "bob",
                                      "plan": "lite", "shares": 2})"));
  struct Expected {
    const Req* request;
    const char* participant;
    Nanos complete;
    double cost;
  };
  const Expected expected[] = {
      {&r[0], "alice", 5'000, 1.25}, {&r[1], "bob", 7'000, 0.5}, {&r[2], "alice", 9'000, 2}};
  const std::size_t at[] = {3, 4, 7};
  for (int i = 0; i < 3; ++i) {
    const json& l = lines[at[i]];
    const Decision& d = dispatched(*expected[i].request);
    SCOPED_TRACE(l.dump());
    EXPECT_EQ(l["ev"], "request");
    EXPECT_EQ(l["participant"], expected[i].participant);
    EXPECT_EQ(l["class"], class_name(d.out));
    EXPECT_DOUBLE_EQ(l["arrive"].get<double>(), seconds(2'000));
    EXPECT_DOUBLE_EQ(l["dispatch"].get<double>(), seconds(d.at));
    EXPECT_DOUBLE_EQ(l["complete"].get<double>(), seconds(expected[i].complete));
    EXPECT_DOUBLE_EQ(l["cost"].get<double>(), expected[i].cost);
  }
  // With a frozen clock alice's first request takes one of pro's four P1 credits; bob's lite
  // plan holds P2 only.
  EXPECT_EQ(lines[3]["class"], "P1");
  EXPECT_EQ(lines[4]["class"], "P2");
  // A fraction of its plan: the same plan and shares, and the scale.
  EXPECT_EQ(lines[5], json::parse(R"({"ev": "plan", "t": 0.000006, "participant": "bob",
                                      "plan": "lite", "shares": 2, "scale": 500000})"));
  EXPECT_EQ(lines[6], json::parse(R"({"ev": "remove", "t": 0.000006, "participant": "alice"})"));
  EXPECT_EQ(capture.stats().requests, 3u);
  EXPECT_EQ(capture.stats().dropped, 0u);
}

TEST(CaptureObserver, AFullRingDropsCountsAndReportsWhatItCouldNotHandOver) {
  Scratch scratch;
  const std::string path = scratch.path("c.jsonl");
  constexpr int kRequests = 40;
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 64;
  o.clock = [] { return Nanos{0}; };
  Runtime* self = nullptr;
  o.sink = [&self](const Decision& d) { (void)self->complete(d.ticket, 0); };
  CaptureOptions c;
  c.files.path = path;
  c.setup = capture_setup(o);
  c.ring_records = 4;
  // The writer looks at the ring once when it starts and then not before close(): the ring fills.
  c.idle_poll = std::chrono::hours(1);
  CaptureObserver capture(std::move(c));
  o.observer = &capture;
  std::array<Req, kRequests> r;
  {
    Runtime rt(std::move(o));
    self = &rt;
    const ParticipantId alice = *rt.add("alice", "pro", 1);
    for (Req& q : r) ASSERT_TRUE(rt.submit(alice, q));
    wait_completed(rt, kRequests);
    rt.shutdown();
  }
  capture.close();
  const std::vector<json> lines = read_lines(path);
  std::uint64_t requests = 0;
  std::uint64_t dropped = 0;
  for (const json& l : lines) {
    if (l.value("ev", "") == "request") ++requests;
    if (l.value("ev", "") == "dropped") dropped += l["requests"].get<std::uint64_t>();
  }
  EXPECT_GT(dropped, 0u);
  // What the ring held when the writer first looked (if the dispatcher was quicker) and at
  // close(): the add's record takes a slot.
  EXPECT_LE(requests, 2 * 4u - 1);
  EXPECT_EQ(requests + dropped, static_cast<std::uint64_t>(kRequests));
  EXPECT_EQ(capture.stats().dropped, dropped);
}

TEST(CaptureObserver, AnUnwritableCaptureNeverStopsTheRuntime) {
  std::vector<std::string> reports;
  std::mutex reports_mutex;
  RuntimeOptions o;
  o.config = reference_config();
  Runtime* self = nullptr;
  o.sink = [&self](const Decision& d) { (void)self->complete(d.ticket, 1); };
  CaptureOptions c;
  c.files.path = "/nonexistent-creditloop-dir/capture.jsonl";
  c.setup = capture_setup(o);
  c.on_error = [&](const std::string& message) {
    std::lock_guard lock(reports_mutex);
    reports.push_back(message);
  };
  CaptureObserver capture(std::move(c));
  o.observer = &capture;
  std::array<Req, 10> r;
  {
    Runtime rt(std::move(o));
    self = &rt;
    const ParticipantId alice = *rt.add("alice", "pro", 1);
    for (Req& q : r) ASSERT_TRUE(rt.submit(alice, q));
    wait_completed(rt, r.size());
    rt.shutdown();
  }
  capture.close();
  const CaptureStats s = capture.stats();
  EXPECT_GE(s.errors, 1u);
  EXPECT_EQ(s.lines, 0u);
  EXPECT_EQ(s.lost, 1u + r.size());  // the plan line and every request
  std::lock_guard lock(reports_mutex);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("cannot open"), std::string::npos) << reports[0];
}

// Producers, a worker pool and the capture's writer thread at once; run under ThreadSanitizer by
// the tsan preset. A small ring and a fast poll make the writer both keep up and fall behind:
// every completed request is either written or counted as dropped, and each line is consistent.
TEST(CaptureObserver, EveryCompletedRequestIsWrittenOrCountedAsDropped) {
  Scratch scratch;
  const std::string path = scratch.path("c.jsonl");
  constexpr int kProducers = 2;
  constexpr int kPerProducer = 20'000;
  constexpr int kParticipants = 4;
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 32;
  o.workers = 2;
  o.handler = [](const Decision&) { return 0.25; };
  CaptureOptions c;
  c.files = CaptureFiles{path, 256 * 1024, 50};
  c.setup = capture_setup(o);
  c.ring_records = 256;
  c.idle_poll = 1ms;
  CaptureObserver capture(std::move(c));
  o.observer = &capture;
  {
    Runtime rt(std::move(o));
    std::vector<ParticipantId> ids;
    for (int i = 0; i < kParticipants; ++i) {
      ids.push_back(*rt.add("p" + std::to_string(i), i % 2 == 0 ? "pro" : "lite", 1));
    }
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([&rt, &ids, p] {
        std::vector<Req> own(64);
        for (int i = 0; i < kPerProducer; ++i) {
          Req& q = own[static_cast<std::size_t>(i) % own.size()];
          // A request is submitted again once its completion made it the caller's.
          test::spin_until([&] { return returned(q); }, "a request to come back");
          test::spin_until(
              [&] { return rt.submit(ids[static_cast<std::size_t>(i + p) % ids.size()], q).ok(); },
              "a submit to be taken");
        }
        for (Req& q : own) test::spin_until([&] { return returned(q); }, "a request to come back");
      });
    }
    for (std::thread& t : producers) t.join();
    wait_completed(rt, kProducers * kPerProducer);
    rt.shutdown();
  }
  capture.close();
  std::uint64_t requests = 0;
  std::uint64_t dropped = 0;
  const CaptureStats s = capture.stats();
  EXPECT_EQ(s.errors, 0u) << s.last_error;
  std::vector<std::string> files;
  for (std::uint64_t i = s.files; i-- > 0;) {
    const std::string p = i == 0 ? path : path + "." + std::to_string(i);
    if (fs::exists(p)) files.push_back(p);
  }
  for (const std::string& p : files) {
    const std::vector<json> lines = read_lines(p);
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines[0]["capture"], "creditloop");
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const json& l = lines[i];
      if (l["ev"] == "dropped") dropped += l["requests"].get<std::uint64_t>();
      if (l["ev"] != "request") continue;
      ++requests;
      ASSERT_LE(l["arrive"].get<double>(), l["dispatch"].get<double>()) << l.dump();
      ASSERT_LE(l["dispatch"].get<double>(), l["complete"].get<double>()) << l.dump();
      ASSERT_EQ(l["participant"].get<std::string>()[0], 'p') << l.dump();
      ASSERT_EQ(l["cost"], 0.25) << l.dump();
    }
  }
  EXPECT_EQ(requests, s.requests);
  EXPECT_EQ(dropped, s.dropped);
  EXPECT_EQ(requests + dropped, static_cast<std::uint64_t>(kProducers * kPerProducer));
}

}  // namespace
}  // namespace creditloop
