// The allocation counter itself, and what the core and the runtime do when an allocation fails:
// the cases where the process goes on without memory, and the worker pool's steady state.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "alloc/counting_new.hpp"
#include "creditloop/core.hpp"
#include "creditloop/runtime.hpp"
#include "spin_until.hpp"

namespace creditloop {
namespace {

using test::g_allocations;
using test::g_counting;

using test::g_refusing_dispatcher;
using test::t_on_dispatcher;
using test::t_refusing;

struct Job : RequestHook {};

TEST(Allocation, TheCounterSeesAllocations) {
  g_counting.store(true, std::memory_order_relaxed);
  auto* probe = new std::string(100, 'x');  // longer than the small-string buffer
  g_counting.store(false, std::memory_order_relaxed);
  EXPECT_GE(g_allocations.exchange(0, std::memory_order_relaxed), 1);
  delete probe;
}

TEST(Allocation, TheCounterSeesOverAlignedAllocations) {
  struct alignas(256) Line {
    char bytes[256];
  };
  g_counting.store(true, std::memory_order_relaxed);
  auto* probe = new Line();
  g_counting.store(false, std::memory_order_relaxed);
  EXPECT_EQ(g_allocations.exchange(0, std::memory_order_relaxed), 1);
  delete probe;
}

// An allocation that fails inside a command on the dispatcher (here the name of a participant
// being added) makes that call throw std::bad_alloc to its caller; the process and the runtime
// go on. The dispatcher's allocations fail from the observer's on_submit of request 1 to that of
// request 2 (a thread-local switch, set on the dispatcher thread).
struct TaggedReq : RequestHook {
  int participant = 0;
};
class RefusingObserver : public RuntimeObserver {
 public:
  void on_submit(ParticipantId, const RequestHook& r, Nanos) override {
    t_refusing = static_cast<const TaggedReq&>(r).participant == 1;
  }
};

TEST(Allocation, AFailedAllocationInACommandIsThrownToItsCallerNotFatal) {
  RefusingObserver observer;
  std::atomic<int> dispatched{0};
  RuntimeOptions o;
  o.config = reference_config();
  o.observer = &observer;
  Runtime* rt_ptr = nullptr;
  o.sink = [&](const Decision& d) {
    ASSERT_TRUE(rt_ptr->complete(d.ticket, 0).ok());
    dispatched.fetch_add(1, std::memory_order_release);  // pairs with the test's acquire loads
  };
  Runtime rt(std::move(o));
  rt_ptr = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  TaggedReq first;
  first.participant = 1;  // from its intake on, the dispatcher's allocations fail
  ASSERT_TRUE(rt.submit(alice, first).ok());
  test::spin_until([&] { return dispatched.load(std::memory_order_acquire) >= 1; }, "a dispatch");
  const std::string long_name(200, 'x');  // no small-string storage: the core allocates it
  EXPECT_THROW((void)rt.add(long_name, "pro", 1), std::bad_alloc);
  TaggedReq second;
  second.participant = 2;  // its intake ends the failures
  ASSERT_TRUE(rt.submit(alice, second).ok());
  test::spin_until([&] { return dispatched.load(std::memory_order_acquire) >= 2; },
                   "a second dispatch");
  EXPECT_TRUE(rt.add(long_name, "pro", 1).ok()) << "a later add succeeds";
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
}

// The core's table of requests in flight grows past its reservation a chunk of records at a time,
// on the visit that needs one. A growth that cannot allocate must not end the process from inside
// noexcept dispatch(): nothing is dispatched, the turn ends as if the server had no room, and the
// shortage is counted. A completion frees a record without memory, and once memory is back the
// table grows and the queue goes out.
TEST(Allocation, ACoreThatCannotGrowItsInFlightRecordsDispatchesNothingMoreUntilItCan) {
  constexpr std::size_t kChunk = 4096;  // the smallest reservation: one chunk of records
  Core core{reference_config()};
  core.reserve(1, 1);
  const ParticipantId alice = *core.add("alice", "pro", 1, 0);
  std::vector<Job> jobs(kChunk + 3);
  for (Job& j : jobs) ASSERT_TRUE(core.submit(alice, j, 0).ok());
  std::vector<Decision> out(jobs.size());
  const std::span<Decision> all(out);
  std::size_t sent = 0;
  while (sent < kChunk) {
    const std::size_t n = core.dispatch(0, all.subspan(sent, kChunk - sent));
    ASSERT_GT(n, 0u);
    sent += n;
  }
  t_refusing = true;
  EXPECT_EQ(core.dispatch(0, all.subspan(sent, 1)), 0u) << "dispatched without a record";
  EXPECT_FALSE(core.in_turn()) << "no record ends the turn, as no room does";
  EXPECT_EQ(core.record_shortages(), 1u);
  ASSERT_TRUE(core.begin_turn(0).has_value());
  EXPECT_FALSE(core.visit(0).has_value()) << "visited without a record";
  EXPECT_FALSE(core.in_turn());
  EXPECT_EQ(core.record_shortages(), 2u);
  EXPECT_EQ(core.queued(alice), 3u) << "nothing was taken off the queue";
  ASSERT_TRUE(core.complete(out[0].ticket, 0, 0).ok());  // frees a record, allocating nothing
  ASSERT_EQ(core.dispatch(0, all.subspan(sent, 1)), 1u) << "the freed record went unused";
  ++sent;
  EXPECT_EQ(core.dispatch(0, all.subspan(sent, 1)), 0u);
  t_refusing = false;
  while (sent < out.size()) {
    const std::size_t n = core.dispatch(0, all.subspan(sent));
    ASSERT_GT(n, 0u) << "memory is back, and the table did not grow";
    sent += n;
  }
  EXPECT_EQ(core.queued(alice), 0u);
  EXPECT_EQ(core.record_shortages(), 3u);
  for (std::size_t i = 1; i < out.size(); ++i) ASSERT_TRUE(core.complete(out[i].ticket, 0, 0).ok());
}

// The runtime under a room test of the embedder's, which bounds nothing: past its reservation the
// dispatcher grows the ticket tables itself, between decisions. While that growth cannot allocate,
// the room counts as full: the process goes on, nothing queued is lost or dispatched twice, a
// completion frees a record for one more dispatch, and once memory is back the rest go out.
TEST(Allocation, ARuntimeThatCannotGrowItsTicketTablesWaitsForRoomInsteadOfEnding) {
  constexpr std::size_t kChunk = 4096;  // what expected_in_flight = 1 reserves
  constexpr std::size_t kTotal = kChunk + 100;
  std::vector<Decision> seen(kTotal);  // the sink's, read by the test after its count
  std::atomic<std::size_t> count{0};
  RuntimeOptions o;
  o.config = reference_config();
  o.expected_participants = 4;
  o.expected_in_flight = 1;
  o.room = [] {
    t_on_dispatcher = true;
    return true;
  };
  o.sink = [&](const Decision& d) {
    const std::size_t n = count.load(std::memory_order_relaxed);  // the sink's own
    if (n < seen.size()) seen[n] = d;
    // release: pairs with the test's acquire loads; publishes the entry just written.
    count.store(n + 1, std::memory_order_release);
  };
  Runtime rt(std::move(o));
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  auto dispatched = [&] { return count.load(std::memory_order_acquire); };
  auto failures = [&] { return rt.snapshot().ticket_growth_failures; };
  // relaxed: see refusing().
  g_refusing_dispatcher.store(true, std::memory_order_relaxed);
  std::vector<Job> jobs(kTotal);
  for (Job& j : jobs) ASSERT_TRUE(rt.submit(alice, j).ok());
  test::spin_until([&] { return failures() >= 2; }, "two growths to fail");
  EXPECT_EQ(dispatched(), kChunk) << "the records the tables have are all used, and no more";
  ASSERT_TRUE(rt.complete(seen[0].ticket, 0).ok());
  test::spin_until([&] { return dispatched() == kChunk + 1; }, "the freed record's dispatch");
  g_refusing_dispatcher.store(false, std::memory_order_relaxed);  // relaxed: see refusing()
  test::spin_until([&] { return dispatched() == kTotal; }, "the rest, once memory is back");
  std::vector<const RequestHook*> requests;
  for (std::size_t i = 0; i < kTotal; ++i) {
    requests.push_back(seen[i].request);
    if (i > 0) {
      ASSERT_TRUE(rt.complete(seen[i].ticket, 0).ok());
    }
  }
  std::sort(requests.begin(), requests.end());
  EXPECT_EQ(std::adjacent_find(requests.begin(), requests.end()), requests.end())
      << "a request went out twice";
  const ShutdownReport report = rt.shutdown(ShutdownMode::drain, std::chrono::seconds(60));
  EXPECT_TRUE(report.finished);
  EXPECT_TRUE(report.handed_back.empty());
  EXPECT_EQ(dispatched(), kTotal);
}

// The worker pool in steady state: the test submits, the dispatcher hands batches to the pool's
// queue (moodycamel's, whose blocks come through operator new), the workers run the handler and
// complete through their blocks. A request whose handler has not run yet is refused as
// already_queued, and the test tries it again.
TEST(Allocation, SteadyStateThroughTheWorkerPoolAllocatesNothing) {
  constexpr std::size_t kRequests = 16;
  std::atomic<long> handled{0};
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = kRequests;
  o.workers = 2;
  o.expected_participants = 64;
  o.expected_in_flight = kRequests;
  o.handler = [&handled](const Decision&) {
    handled.fetch_add(1, std::memory_order_relaxed);  // a count, read after the joins
    return 0.5;
  };
  Runtime rt(std::move(o));
  std::vector<ParticipantId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(*rt.add("t" + std::to_string(i), "pro", 1));
  std::vector<Job> requests(kRequests);
  std::size_t next = 0;
  auto submit = [&](int n) {
    for (int i = 0; i < n; ++i, ++next) {
      Job& r = requests[next % kRequests];
      test::spin_until([&] { return rt.submit(ids[next % ids.size()], r).ok(); },
                       "a submit to be taken");
    }
  };
  submit(20'000);  // warm up: the queue's blocks, the workers' tokens and completion blocks
  g_counting.store(true, std::memory_order_relaxed);
  submit(50'000);
  g_counting.store(false, std::memory_order_relaxed);
  EXPECT_EQ(g_allocations.exchange(0, std::memory_order_relaxed), 0);
  EXPECT_TRUE(rt.shutdown(ShutdownMode::hand_back, std::chrono::seconds(60)).finished);
  EXPECT_LE(handled.load(std::memory_order_relaxed), 70'000);
  EXPECT_GE(handled.load(std::memory_order_relaxed), 70'000 - static_cast<long>(kRequests));
}

}  // namespace
}  // namespace creditloop
