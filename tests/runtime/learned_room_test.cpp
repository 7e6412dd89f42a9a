// A learned room (RuntimeOptions::learned_room) in the runtime, on a manual clock, in front of a
// model backend that the test thread drives: the room settles at the backend's capacity, the
// queue forms in the runtime, and the room never lets more out than it holds (docs/contract.md
// §5c). The test advances the clock only while the dispatcher sleeps with every dispatch it could
// make made, so each completion is applied at the instant the model chose.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <stdexcept>
#include <utility>
#include <vector>

#include "runtime_support.hpp"
#include "spin_until.hpp"

namespace creditloop::runtime_tests {
namespace {

// A backend of `capacity` servers, each taking `service` per request, and a FIFO of its own in
// front of them: above its capacity a request waits there, and its latency grows.
class ModelBackend {
 public:
  ModelBackend(std::uint32_t capacity, Nanos service) : service_(service) {
    for (std::uint32_t i = 0; i < capacity; ++i) free_at_.push(0);
  }
  void arrive(const Decision& d) {
    const Nanos start = std::max(d.at, free_at_.top());
    free_at_.pop();
    free_at_.push(start + service_);
    done_.push(Job{start + service_, d.at, d.ticket});
  }
  [[nodiscard]] bool empty() const { return done_.empty(); }
  [[nodiscard]] std::size_t held() const { return done_.size(); }
  [[nodiscard]] Nanos next() const { return done_.top().done_at; }
  // Every request done at `now`, each with the latency it had.
  void finish(Nanos now, const std::function<void(Ticket, Nanos)>& each) {
    while (!done_.empty() && done_.top().done_at <= now) {
      each(done_.top().ticket, done_.top().done_at - done_.top().dispatched_at);
      done_.pop();
    }
  }

 private:
  struct Job {
    Nanos done_at = 0;
    Nanos dispatched_at = 0;
    Ticket ticket;
    bool operator>(const Job& other) const { return done_at > other.done_at; }
  };
  Nanos service_;
  std::priority_queue<Nanos, std::vector<Nanos>, std::greater<>> free_at_;
  std::priority_queue<Job, std::vector<Job>, std::greater<>> done_;
};

void wait_until_asleep(Runtime& rt) {
  test::spin_until([&] { return rt.dispatcher_sleeping(); }, "the dispatcher to sleep");
}

constexpr std::uint32_t kCapacity = 8;
constexpr Nanos kService = 10'000'000;  // 10 ms
constexpr Nanos kRun = 12'000'000'000;  // 12 s of the manual clock
constexpr Nanos kSettled = 4'000'000'000;

struct Figures {
  std::uint32_t least_room = ~0u, most_room = 0;  // after kSettled
  std::uint64_t completed = 0;                    // after kSettled
  Nanos latency_sum = 0;                          // after kSettled
  std::uint64_t over_room = 0;  // steps that left more in flight than the room, having dispatched
};

// Runs `options` (its sink and clock are set here) in front of the model backend for kRun.
Figures run_against_backend(RuntimeOptions o) {
  Figures f;
  Recorder recorder;
  std::atomic<Nanos> clock{1'000'000'000};
  o.config = reference_config();
  o.sink = [&recorder](const Decision& d) { recorder(d); };
  // Release and acquire: the instant the test sets before a completion is the one the dispatcher
  // reads as it wakes for it (the completion's push orders it too; this says so locally).
  o.clock = [&clock] { return clock.load(std::memory_order_acquire); };  // pairs with the store
  o.spin = std::chrono::nanoseconds{0};  // asleep at once: the test waits for that
  const Nanos start = clock.load(std::memory_order_relaxed);
  // Enough that the queue never empties: the backend serves kCapacity / kService per second.
  std::deque<Req> requests(static_cast<std::size_t>(kRun / kService) * kCapacity * 5 / 4);
  Runtime rt(std::move(o));
  const ParticipantId tenant = *rt.add("tenant", "pro", 1);
  for (Req& r : requests) EXPECT_TRUE(rt.submit(tenant, r).ok());
  // A round trip: every submission is in the dispatcher's hands, so from now on it sleeps only
  // with nothing left to do but wait for a completion.
  (void)rt.snapshot();
  ModelBackend backend(kCapacity, kService);
  std::size_t seen = 0;
  for (;;) {
    wait_until_asleep(rt);
    const std::vector<Decision> dispatched = recorder.seen();
    for (; seen < dispatched.size(); ++seen) backend.arrive(dispatched[seen]);
    const Nanos now = clock.load(std::memory_order_relaxed);
    if (!dispatched.empty() && dispatched.back().at == now && backend.held() > rt.room_slots()) {
      ++f.over_room;
    }
    if (now - start > kSettled) {
      f.least_room = std::min(f.least_room, rt.room_slots());
      f.most_room = std::max(f.most_room, rt.room_slots());
    }
    if (backend.empty() || backend.next() - start > kRun) break;
    const Nanos next = backend.next();
    clock.store(next, std::memory_order_release);  // read by the dispatcher's clock
    CompletionBatch batch(rt);
    backend.finish(next, [&](Ticket t, Nanos latency) {
      EXPECT_TRUE(batch.add(t, 0).ok());
      if (next - start > kSettled) {
        ++f.completed;
        f.latency_sum += latency;
      }
    });
  }
  // Nothing more goes out; what is in flight completes, so that the runtime can finish.
  (void)shutdown_begun(rt, ShutdownMode::hand_back);
  const std::vector<Decision> dispatched = recorder.seen();
  for (; seen < dispatched.size(); ++seen) backend.arrive(dispatched[seen]);
  backend.finish(std::numeric_limits<Nanos>::max(),
                 [&](Ticket t, Nanos) { EXPECT_TRUE(rt.complete(t, 0).ok()); });
  EXPECT_TRUE(rt.shutdown(ShutdownMode::hand_back, kDeadline).finished);
  return f;
}

TEST(LearnedRoom, SettlesAtTheBackendsCapacityWithTheQueueInTheRuntime) {
  RuntimeOptions o;
  o.learned_room = RoomBounds{1, 64};
  const Figures f = run_against_backend(std::move(o));
  const Nanos window = kRun - kSettled;
  // Within a quarter of the capacity from 4 s on (the probes take it to three quarters).
  EXPECT_GE(f.least_room, kCapacity * 3 / 4);
  EXPECT_LE(f.most_room, kCapacity * 5 / 4);
  // Little queue in the backend: the mean latency within a quarter of its service time, and the
  // backend busy: at least 0.9 of what it can serve.
  ASSERT_GT(f.completed, 0u);
  EXPECT_LE(f.latency_sum / static_cast<Nanos>(f.completed), kService * 5 / 4);
  EXPECT_GE(static_cast<double>(f.completed),
            0.9 * kCapacity * static_cast<double>(window) / static_cast<double>(kService));
  EXPECT_EQ(f.over_room, 0u);
}

TEST(LearnedRoom, TheFixedRoomOfTheSameBackendQueuesInIt) {
  // The contrast that shows what the learned room does: the default 64 slots fill the
  // backend's own FIFO, 8 times its service time deep.
  RuntimeOptions o;
  const Figures f = run_against_backend(std::move(o));
  ASSERT_GT(f.completed, 0u);
  EXPECT_EQ(f.most_room, 64u);
  EXPECT_GT(f.latency_sum / static_cast<Nanos>(f.completed), kService * 4);
}

TEST(LearnedRoom, LearnsFromTheWorkerPoolsCompletionsToo) {
  // Each reading of the clock is a millisecond later, so that every request has a latency; the
  // first window closes after 32 completions and 20 ms, and sets the no-queue latency.
  std::atomic<Nanos> clock{1'000'000'000};
  RuntimeOptions o;
  o.config = reference_config();
  o.workers = 2;
  o.handler = [](const Decision&) { return 0.0; };
  o.learned_room = RoomBounds{1, 8};
  o.clock = [&clock] {
    return clock.fetch_add(1'000'000, std::memory_order_relaxed);  // a test clock: no pairing
  };
  std::deque<Req> requests(200);
  Runtime rt(std::move(o));
  const ParticipantId tenant = *rt.add("tenant", "pro", 1);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(tenant, r).ok());
  ASSERT_TRUE(rt.shutdown(ShutdownMode::drain, kDeadline).finished);
  EXPECT_EQ(rt.counters().completed, requests.size());
  EXPECT_GT(rt.room_latency(), 0);
}

TEST(LearnedRoom, ACompletionUnderLightLoadIsTimedWhenItComes) {
  // One request at a time, each taking 10 ms, a second apart: the dispatcher sleeps with room and
  // nothing queued between them. Each completion must be applied as it comes, not with the next
  // submission a second later, which would read as a backend a hundred times slower.
  Recorder recorder;
  std::atomic<Nanos> clock{1'000'000'000};
  RuntimeOptions o = options_with(recorder);
  o.learned_room = RoomBounds{2, 8};  // room to spare with one request in flight
  o.clock = [&clock] { return clock.load(std::memory_order_acquire); };  // pairs with the stores
  o.spin = std::chrono::nanoseconds{0};
  std::deque<Req> requests(40);
  Runtime rt(std::move(o));
  const ParticipantId tenant = *rt.add("tenant", "pro", 1);
  std::size_t sent = 0;
  for (Req& r : requests) {
    ASSERT_TRUE(rt.submit(tenant, r).ok());
    ASSERT_TRUE(recorder.wait_for(++sent));
    wait_until_asleep(rt);
    clock.fetch_add(10'000'000, std::memory_order_release);  // read by the dispatcher's clock
    ASSERT_TRUE(rt.complete(recorder.seen().back().ticket, 0).ok());
    wait_until_asleep(rt);
    clock.fetch_add(1'000'000'000, std::memory_order_release);
  }
  EXPECT_GE(rt.room_latency(), 10'000'000);
  EXPECT_LT(rt.room_latency(), 20'000'000);
}

TEST(LearnedRoom, PublishesItsSlotsAndLatency) {
  Recorder recorder;
  RuntimeOptions o = options_with(recorder);
  o.learned_room = RoomBounds{3, 10};
  Runtime rt(std::move(o));
  EXPECT_EQ(rt.room_slots(), 3u);  // it starts at its least room
  EXPECT_EQ(rt.room_latency(), 0);
  RuntimeOptions fixed = options_with(recorder, 5);
  Runtime other(std::move(fixed));
  EXPECT_EQ(other.room_slots(), 5u);
  EXPECT_EQ(other.room_latency(), 0);
}

TEST(LearnedRoom, BoundsOutOfOrderOrBesideARoomTestAreRefused) {
  auto make = [](auto change) {
    RuntimeOptions o;
    o.config = reference_config();
    o.sink = [](const Decision&) {};
    change(o);
    return o;
  };
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) {
                 o.learned_room = RoomBounds{9, 8};
               })),
               std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) {
                 o.learned_room = RoomBounds{0, 8};
               })),
               std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) {
                 o.learned_room = RoomBounds{1, 8};
                 o.room = [] { return true; };
               })),
               std::invalid_argument);
  // The fixed slots are not used beside a learned room, so 0 is no error there.
  EXPECT_NO_THROW(Runtime(make([](RuntimeOptions& o) {
    o.learned_room = RoomBounds{1, 8};
    o.slots = 0;
  })));
}

}  // namespace
}  // namespace creditloop::runtime_tests
