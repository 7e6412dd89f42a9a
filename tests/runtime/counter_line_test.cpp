// The counter lines: counters() read from other threads while the dispatcher updates them. The
// tests synchronise on what the runtime does, never on elapsed time (runtime_support.hpp).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/runtime.hpp"
#include "internal/counter_line.hpp"
#include "internal/spin.hpp"
#include "runtime_support.hpp"

namespace creditloop {
namespace {

using namespace runtime_tests;

// A scrape on another thread reads counters while the dispatcher writes them: each read is a
// consistent cut of one participant, never goes backwards, and ends at the exact totals.
TEST(CounterLine, CountersReadFromAnotherThreadAreMonotonicAndEndExact) {
  constexpr int kRequests = 3000;
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 8;
  CompletingSink sink{nullptr, 0.25, nullptr};
  o.sink = [&sink](const Decision& d) { sink(d); };
  Runtime rt(std::move(o));
  sink.runtime = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    std::uint64_t last_dispatched = 0;
    std::uint64_t last_completed = 0;
    // acquire: pairs with the release store below; a last read after it sees the final values.
    while (!done.load(std::memory_order_acquire)) {
      const std::optional<ParticipantCounters> c = rt.counters(alice);
      ASSERT_TRUE(c.has_value());
      const std::uint64_t dispatched = c->dispatched[0] + c->dispatched[1] + c->dispatched[2];
      EXPECT_GE(dispatched, last_dispatched);
      EXPECT_GE(c->completed, last_completed);
      EXPECT_LE(c->completed, dispatched);
      // One cut: every completion so far was charged 0.25 credit, unless the bucket was P3's.
      EXPECT_LE(c->cost_charged, static_cast<Balance>(c->completed) * 250'000'000);
      last_dispatched = dispatched;
      last_completed = c->completed;
    }
  });
  std::deque<Req> requests(kRequests);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  done.store(true, std::memory_order_release);
  scraper.join();
  const ParticipantCounters c = *rt.counters(alice);
  EXPECT_EQ(c.dispatched[0] + c.dispatched[1] + c.dispatched[2], std::uint64_t{kRequests});
  EXPECT_EQ(c.completed, std::uint64_t{kRequests});
  EXPECT_EQ(c.queued, 0u);
  EXPECT_EQ(c.cost_charged, rt.snapshot(alice)->stats.cost_charged);
  EXPECT_EQ(rt.counters().completed, std::uint64_t{kRequests});
}

// The totals are summed over a loop iteration and written once (runtime_impl.hpp,
// PendingTotals); a command still returns with them whole, even one a sink runs inline in the
// middle of a batch: every dispatch handed out so far is counted, the sink's own included.
TEST(CounterLine, TotalsAreWholeWhenACommandReturnsEvenInsideABatch) {
  constexpr int kRequests = 64;
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = 16;
  Runtime* runtime = nullptr;
  std::uint64_t handed = 0;         // on the dispatcher thread only
  std::vector<std::uint64_t> lags;  // likewise; read after shutdown
  o.sink = [&](const Decision& d) {
    ++handed;
    (void)runtime->find("");  // a command: run inline on the dispatcher
    std::uint64_t dispatched = 0;
    for (const std::uint64_t n : runtime->counters().dispatched) dispatched += n;
    lags.push_back(handed - dispatched);
    ASSERT_TRUE(runtime->complete(d.ticket, 0).ok());
  };
  Runtime rt(std::move(o));
  runtime = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  std::deque<Req> requests(kRequests);
  for (Req& r : requests) ASSERT_TRUE(rt.submit(alice, r).ok());
  EXPECT_TRUE(rt.shutdown(ShutdownMode::drain).empty());
  ASSERT_EQ(lags.size(), std::size_t{kRequests});
  for (const std::uint64_t lag : lags) EXPECT_EQ(lag, 0u);
}

// A writer stopped inside its update (odd count): the reader waits through its back-off, one call
// per retry with the attempts counted, and copies the whole update once the writer goes on. Here
// the writer "goes on" inside the back-off's 200th call, so the test needs no second thread.
struct StalledWriter {
  using Line = detail::CounterLine<std::atomic>;
  struct Fence {
    static void fence(std::memory_order order) noexcept { std::atomic_thread_fence(order); }
    static void back_off(unsigned attempt) noexcept {
      attempts.push_back(attempt);
      if (attempt == kResumesAt) writer.reset();
    }
    static inline std::vector<unsigned> attempts;
    static inline std::optional<detail::CounterWrite<std::atomic, Fence>> writer;
  };
  static constexpr unsigned kResumesAt = 199;
};

TEST(CounterLine, AReaderWaitsOutAWriterStoppedInsideAnUpdateThroughItsBackOff) {
  // The back-off's record is static (the fence policy is a type): a repeated run starts it afresh.
  StalledWriter::Fence::attempts.clear();
  StalledWriter::Line line;
  detail::CounterWrite<std::atomic, StalledWriter::Fence>(line).reset(5);
  StalledWriter::Fence::writer.emplace(line);
  StalledWriter::Fence::writer->add(StalledWriter::Line::kQueued, 3);
  StalledWriter::Fence::writer->add(StalledWriter::Line::kCompleted, 3);

  ParticipantCounters out;
  EXPECT_EQ(detail::read_counters<StalledWriter::Fence>(line, out), 5u);
  EXPECT_EQ(out.queued, 3u);
  EXPECT_EQ(out.completed, 3u);
  ASSERT_EQ(StalledWriter::Fence::attempts.size(), StalledWriter::kResumesAt + 1);
  for (unsigned i = 0; i < StalledWriter::Fence::attempts.size(); ++i) {
    EXPECT_EQ(StalledWriter::Fence::attempts[i], i);
  }
  // The runtime's own back-off spins a bounded number of times before it yields.
  EXPECT_LT(detail::ThreadFence::kSpins, StalledWriter::kResumesAt);
}

}  // namespace
}  // namespace creditloop
