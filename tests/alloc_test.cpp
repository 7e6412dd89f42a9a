// The hot paths allocate nothing once capacity is reserved: the core's submit, begin_turn, visit,
// dispatch and complete, and the runtime's submit, dispatch and complete (with and without a
// capture recording them), run for many rounds
// under a global operator new (plain and over-aligned) that counts on every thread, and the count
// must stay at zero. Its own binary, because replacing operator new affects everything linked
// with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/capture.hpp"
#include "creditloop/core.hpp"
#include "creditloop/runtime.hpp"
#include "spin_until.hpp"

namespace {
// Atomics only because operator new may run on any thread; every access is relaxed since the
// test reads them on the thread that wrote them, after the measured section.
std::atomic<long> g_allocations{0};
std::atomic<bool> g_counting{false};
// Set on a thread, makes that thread's allocations through the plain operator new fail.
thread_local bool t_refusing = false;
// Marks the dispatcher thread (its room test sets it), whose allocations fail while
// g_refusing_dispatcher is raised: the test switches the dispatcher's memory off and on from its
// own thread.
thread_local bool t_on_dispatcher = false;
std::atomic<bool> g_refusing_dispatcher{false};
bool refusing() {
  // relaxed: a switch, pairing with nothing; the test learns what the dispatcher did under it
  // through the sink's counter and the snapshot's round trip, which order it themselves.
  return t_refusing || (t_on_dispatcher && g_refusing_dispatcher.load(std::memory_order_relaxed));
}
}  // namespace

// GCC inlines these into callers and then sees malloc'd memory freed by a replaced operator
// delete, warning of a mismatch that is not one: both halves of the pair are replaced here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (refusing()) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// The worker pool's queue allocates its blocks here (runtime/worker_pool.cpp).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// Over-aligned types (the core's records, the runtime's cache-line structures) come here.
void* operator new(std::size_t n, std::align_val_t align) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (refusing()) throw std::bad_alloc();
  const auto a = static_cast<std::size_t>(align);
  // aligned_alloc wants a size that is a multiple of the alignment.
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace creditloop {
namespace {

struct Job : RequestHook {
  ParticipantId owner;
};

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

constexpr int kParticipants = 3000;
constexpr int kDepth = 3;
constexpr std::size_t kInFlight = 32;

struct Flight {
  Ticket ticket;
  Job* job = nullptr;
};

// A fleet (both plans, varied shares) with every queue kDepth deep, whose dispatched requests go
// back into their queues as soon as they are completed (a request is the caller's again only then).
class MixedRun : public ::testing::Test {
 protected:
  void SetUp() override {
    core.reserve(kParticipants, kInFlight + 1);
    jobs.resize(kParticipants * kDepth);
    in_flight.reserve(kInFlight);
    for (int i = 0; i < kParticipants; ++i) {
      const auto id = core.add("t" + std::to_string(i), i % 3 == 0 ? "lite" : "pro", 1 + i % 5, 0);
      ASSERT_TRUE(id.ok());
      for (int d = 0; d < kDepth; ++d) {
        Job& j = jobs[static_cast<std::size_t>(i * kDepth + d)];
        j.owner = *id;
        ASSERT_TRUE(core.submit(*id, j, 0).ok());
      }
    }
  }

  // Counts a dispatch and keeps its ticket.
  void take(const Decision& d) {
    ++dispatched;
    metered += d.out != core.unmetered() ? 1 : 0;
    in_flight.push_back(Flight{d.ticket, static_cast<Job*>(d.request)});
  }
  // Completes the oldest request in flight and submits it again.
  bool complete_oldest(double cost, Nanos now) {
    const Flight f = in_flight.front();
    in_flight.erase(in_flight.begin());
    return core.complete(f.ticket, cost, now).ok() && core.submit(f.job->owner, *f.job, now).ok();
  }

  void expect_no_allocation_in_a_mixed_run() const {
    EXPECT_EQ(g_allocations.load(std::memory_order_relaxed), 0);
    EXPECT_GT(dispatched, 150'000);
    EXPECT_GT(metered, 1000) << "the run must exercise metered classes, not only P3";
    EXPECT_LT(metered, dispatched) << "and the unmetered one";
  }

  Core core{reference_config()};
  std::vector<Job> jobs;
  std::vector<Flight> in_flight;
  long dispatched = 0;
  long metered = 0;
};

TEST_F(MixedRun, SteadyStateDispatchAllocatesNothing) {
  Nanos now = 0;
  g_counting.store(true, std::memory_order_relaxed);
  for (int round = 0; round < 200'000; ++round) {
    if (in_flight.size() == kInFlight && !complete_oldest((round % 4) * 0.5, now)) break;
    if (!core.in_turn() && !core.begin_turn(now)) break;
    if (const auto d = core.visit(now)) take(*d);
    now += 20'000;  // 20 us per step: credits land, classes change
  }
  g_counting.store(false, std::memory_order_relaxed);
  expect_no_allocation_in_a_mixed_run();
}

TEST_F(MixedRun, SteadyStateBatchesAllocateNothing) {
  std::vector<Decision> batch(8);
  Nanos now = 0;
  g_counting.store(true, std::memory_order_relaxed);
  for (int round = 0; round < 50'000; ++round) {
    // Half the slots come back each round, so batches of 1 to 8 alternate with full rounds.
    while (in_flight.size() > kInFlight / 2) {
      if (!complete_oldest((round % 4) * 0.5, now)) break;
    }
    const std::size_t room = std::min(batch.size(), kInFlight - in_flight.size());
    const std::size_t n = core.dispatch(now, std::span<Decision>(batch).first(room));
    for (std::size_t i = 0; i < n; ++i) take(batch[i]);
    now += 80'000;
  }
  g_counting.store(false, std::memory_order_relaxed);
  expect_no_allocation_in_a_mixed_run();
}

// The runtime in steady state: producers submit, the dispatcher decides and hands each request to
// a sink, the test completes it. The sink passes tickets back through a single-producer,
// single-consumer ring of its own, so that nothing but the runtime could allocate. With
// `capture`, a CaptureObserver records the run too, its writer thread formatting and writing
// while the count runs.
class RuntimeRun : public ::testing::Test {
 protected:
  static constexpr std::uint32_t kSlots = 16;
  static constexpr std::size_t kRing = 64;  // more than kSlots: the sink never waits

  struct Req : RequestHook {
    int participant = 0;
  };

  explicit RuntimeRun(bool capture = false) {
    RuntimeOptions o;
    o.config = reference_config();
    o.slots = kSlots;
    o.expected_participants = 64;
    o.expected_in_flight = kSlots;
    if (capture) {
      capture_path_ = testing::TempDir() + "creditloop-alloc-capture.jsonl";
      CaptureOptions c;
      c.files = CaptureFiles{capture_path_, std::uint64_t{1} << 30, 1};  // no rotation
      c.setup = capture_setup(o);
      c.expected_in_flight = kSlots;
      c.expected_participants = 64;
      c.idle_poll = std::chrono::milliseconds(1);  // it writes while the count runs
      capture_ = std::make_unique<CaptureObserver>(std::move(c));
      o.observer = capture_.get();
    }
    o.sink = [this](const Decision& d) {
      const std::size_t tail = tail_.load(std::memory_order_relaxed);  // this thread's own
      ring_[tail % kRing] = d;
      // release: pairs with the acquire in take(); publishes the entry just written.
      tail_.store(tail + 1, std::memory_order_release);
    };
    runtime_.emplace(std::move(o));
    for (int i = 0; i < 8; ++i) {
      ids_.push_back(*runtime_->add("t" + std::to_string(i), i % 2 == 0 ? "pro" : "lite", 1));
    }
    requests_.resize(kSlots);
  }

  // Waits for the next dispatch (the dispatcher is busy or about to be: no sleeping).
  Decision take() {
    // acquire: pairs with the sink's release store.
    test::spin_until([&] { return tail_.load(std::memory_order_acquire) != head_; }, "a dispatch");
    return ring_[head_++ % kRing];
  }

  // `cycles` rounds of: complete the oldest dispatch, submit its request again. Returns the
  // completions that were refused (none expected).
  int cycle(int cycles) {
    int refused = 0;
    for (int i = 0; i < cycles; ++i) {
      const Decision d = take();
      refused += runtime_->complete(d.ticket, (i % 4) * 0.25).ok() ? 0 : 1;
      Req& r = static_cast<Req&>(*d.request);
      r.participant = (r.participant + 1) % static_cast<int>(ids_.size());
      refused += runtime_->submit(ids_[static_cast<std::size_t>(r.participant)], r).ok() ? 0 : 1;
    }
    return refused;
  }

  void fill() {
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      requests_[i].participant = static_cast<int>(i % ids_.size());
      ASSERT_TRUE(runtime_->submit(ids_[i % ids_.size()], requests_[i]).ok());
    }
  }

  void drain() {
    for (std::uint32_t i = 0; i < kSlots; ++i) (void)runtime_->complete(take().ticket, 0);
  }

  std::array<Decision, kRing> ring_{};
  std::atomic<std::size_t> tail_{0};
  std::size_t head_ = 0;  // the test thread's
  std::vector<ParticipantId> ids_;
  std::vector<Req> requests_;
  std::string capture_path_;
  std::unique_ptr<CaptureObserver> capture_;  // outlives the runtime
  std::optional<Runtime> runtime_;

 public:
  ~RuntimeRun() override {
    runtime_.reset();
    capture_.reset();
    if (!capture_path_.empty()) std::remove(capture_path_.c_str());
  }
};

class CapturedRuntimeRun : public RuntimeRun {
 protected:
  CapturedRuntimeRun() : RuntimeRun(true) {}
};

TEST_F(RuntimeRun, SteadyStateSubmitDispatchAndCompleteAllocateNothing) {
  fill();
  ASSERT_EQ(cycle(2'000), 0);  // warm up: every record and list has reached its size
  g_counting.store(true, std::memory_order_relaxed);
  const int refused = cycle(50'000);
  g_counting.store(false, std::memory_order_relaxed);
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(g_allocations.exchange(0, std::memory_order_relaxed), 0);
  drain();
  EXPECT_EQ(runtime_->snapshot().dispatched, 52'000u + kSlots);
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

TEST_F(CapturedRuntimeRun, ACaptureOfTheSteadyStateAllocatesNothingOnAnyThread) {
  fill();
  ASSERT_EQ(cycle(2'000), 0);
  // The writer has taken in the registrations (each allocates its name's entry) and written
  // their lines: the header and one per participant.
  test::spin_until([&] { return capture_->stats().lines >= 1 + ids_.size(); },
                   "the capture's header and participant lines");
  g_counting.store(true, std::memory_order_relaxed);
  const int refused = cycle(50'000);
  g_counting.store(false, std::memory_order_relaxed);
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(g_allocations.exchange(0, std::memory_order_relaxed), 0);
  drain();
  runtime_->shutdown();
  capture_->close();
  const CaptureStats s = capture_->stats();
  EXPECT_EQ(s.errors, 0u) << s.last_error;
  EXPECT_EQ(s.requests + s.dropped, 52'000u + kSlots);  // the capture saw the counted run
}

}  // namespace
}  // namespace creditloop
