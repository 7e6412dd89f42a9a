// The learned room (room_controller.hpp) against a model backend: `capacity` requests served at
// once, each for its service time, the rest in the backend's own FIFO; a demand that always has a
// request waiting. The controller sees only dispatch and completion instants, as in a server.
#include "creditloop/room_controller.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <queue>
#include <vector>

namespace creditloop {
namespace {

constexpr Nanos kMs = 1'000'000;

// A backend of `capacity(now)` servers, FIFO beyond them, fed by an always-full demand through a
// room of controller.slots(). Deterministic: the jitter is a fixed linear congruential sequence.
class Backend {
 public:
  Backend(RoomController& controller, std::function<std::uint32_t(Nanos)> capacity,
          std::function<Nanos(Nanos)> service, Nanos jitter, std::uint64_t seed = 42)
      : seed_(seed),
        controller_(controller),
        capacity_(std::move(capacity)),
        service_(std::move(service)),
        jitter_(jitter) {}

  // Runs to `until`; returns the requests completed in [from, until).
  std::uint64_t run(Nanos until, Nanos from = 0) {
    std::uint64_t done = 0;
    fill();
    while (!running_.empty() && running_.top().end < until) {
      const Running r = running_.top();
      running_.pop();
      now_ = r.end;
      --in_flight_;
      controller_.completed(r.dispatched, now_);
      if (now_ >= from) ++done;
      start_waiting();
      fill();
    }
    now_ = until;
    return done;
  }

  [[nodiscard]] Nanos now() const { return now_; }
  /// The time requests started since `from` waited in the backend's FIFO, and how many started.
  [[nodiscard]] Nanos waited() const { return waited_; }
  [[nodiscard]] std::uint64_t started() const { return started_; }
  void count_from(Nanos from) { count_from_ = from; }

 private:
  struct Running {
    Nanos end;
    Nanos dispatched;
    bool operator>(const Running& o) const { return end > o.end; }
  };

  Nanos next_service() {
    seed_ = seed_ * 6364136223846793005ULL + 1442695040888963407ULL;
    const Nanos base = service_(now_);
    if (jitter_ == 0) return base;
    return base - jitter_ +
           static_cast<Nanos>((seed_ >> 33) % static_cast<std::uint64_t>(2 * jitter_));
  }

  // The room lets requests out while fewer than slots() are in flight.
  void fill() {
    while (in_flight_ < controller_.slots()) {
      ++in_flight_;
      controller_.dispatched(now_, in_flight_);
      waiting_.push_back(now_);
      start_waiting();
    }
  }

  void start_waiting() {
    while (!waiting_.empty() && running_.size() < capacity_(now_)) {
      running_.push({now_ + next_service(), waiting_.front()});
      if (now_ >= count_from_) {
        waited_ += now_ - waiting_.front();
        ++started_;
      }
      waiting_.pop_front();
    }
  }

  std::uint64_t seed_;
  RoomController& controller_;
  std::function<std::uint32_t(Nanos)> capacity_;
  std::function<Nanos(Nanos)> service_;
  Nanos jitter_;
  Nanos now_ = 0;
  std::uint64_t in_flight_ = 0;
  Nanos count_from_ = 0;
  Nanos waited_ = 0;
  std::uint64_t started_ = 0;
  std::deque<Nanos> waiting_;  // dispatched, in the backend's FIFO
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running_;
};

Nanos ten_ms(Nanos) { return 10 * kMs; }

TEST(RoomController, StartsSmallAndStaysInItsBounds) {
  RoomController c({2, 3});
  EXPECT_EQ(c.slots(), 2u);
  RoomController d({1, 256});
  EXPECT_EQ(d.slots(), 1u);
  RoomController e({0, 0});
  EXPECT_EQ((e.bounds().least), 1u);
  EXPECT_EQ(e.slots(), 1u);
  EXPECT_EQ(d.no_queue_latency(), 0);
}

// Steps of 8, 16, 4 and 8 servers, 8 s each, from 2 s after each step to the next, sampled every
// 50 ms: the room within 25 % of the capacity, and the backend serving at least 0.95 of it. One
// slot is 25 % of 4, so noise moves a small room out of the band now and then: each run keeps at
// least 90 % of its samples in the band and serves 0.90 of the capacity in each step, and all
// runs together keep 98 % in the band and serve 0.95. 32 jitter sequences of
// service times spread over 5 to 15 ms, and service times of 10 ms each (requests that start
// together end together).
struct StepsResult {
  std::uint64_t samples = 0;
  std::uint64_t in_band = 0;
  double least_rate = 1e9;  // of capacity
  double rate_sum = 0;
  std::uint64_t rates = 0;
};

void run_steps(std::uint64_t seed, Nanos jitter, StepsResult& all) {
  const std::vector<std::uint32_t> steps{8, 16, 4, 8};
  constexpr Nanos kStep = 8000 * kMs;
  auto capacity = [&](Nanos t) {
    return steps[std::min<std::size_t>(static_cast<std::size_t>(t / kStep), steps.size() - 1)];
  };
  RoomController c({1, 256});
  Backend backend(c, capacity, ten_ms, jitter, seed);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Nanos start = static_cast<Nanos>(i) * kStep;
    const double cap = steps[i];
    backend.run(start + 2000 * kMs);
    std::uint64_t served = 0, samples = 0, in_band = 0;
    for (Nanos t = start + 2000 * kMs; t < start + kStep; t += 50 * kMs) {
      served += backend.run(t + 50 * kMs, t);
      ++samples;
      if (c.slots() >= cap * 0.75 && c.slots() <= cap * 1.25) ++in_band;
    }
    const double rate = static_cast<double>(served) / 6.0 / (cap * 100);  // 10 ms each
    EXPECT_GE(in_band * 10, samples * 9)
        << "seed " << seed << ", jitter " << jitter << ", step " << i << ": " << in_band << " of "
        << samples << " samples in the band";
    EXPECT_GE(rate, 0.90) << "seed " << seed << ", jitter " << jitter << ", step " << i;
    EXPECT_NEAR(static_cast<double>(c.no_queue_latency()), 10.0 * kMs, 1.0 * kMs)
        << "seed " << seed << ", step " << i;
    all.samples += samples;
    all.in_band += in_band;
    all.least_rate = std::min(all.least_rate, rate);
    all.rate_sum += rate;
    ++all.rates;
  }
}

TEST(RoomController, FollowsTheBackendsCapacity) {
  StepsResult all;
  for (std::uint64_t seed = 1; seed <= 32; ++seed) run_steps(seed, 5 * kMs, all);
  run_steps(1, 0, all);
  EXPECT_GE(all.in_band * 100, all.samples * 98);
  EXPECT_GE(all.rate_sum / static_cast<double>(all.rates), 0.95);
  std::printf(
      "room in the band: %.2f %% of %llu samples; served: %.3f of capacity on average, "
      "%.3f at least\n",
      100.0 * static_cast<double>(all.in_band) / static_cast<double>(all.samples),
      static_cast<unsigned long long>(all.samples), all.rate_sum / static_cast<double>(all.rates),
      all.least_rate);
}

// Under jitter a room a slot above the capacity moves the window's mean by less than the
// tolerance at 8 servers and more: the room must still settle at the capacity, not a slot or two
// above it, for the queue to form in creditloop. Measured as what fairness loses: the mean time a
// request waits in the backend's own FIFO, over 32 jitter sequences of 5 to 15 ms, from 4 s to
// 24 s, at most 4 % of the service time (a room one slot above 8 servers would make it 12.5 %).
TEST(RoomController, SettlesAtTheCapacityUnderJitter) {
  for (const std::uint32_t capacity : {8u, 16u}) {
    Nanos waited = 0;
    std::uint64_t started = 0;
    for (std::uint64_t seed = 1; seed <= 32; ++seed) {
      RoomController c({1, 256});
      Backend backend(
          c, [capacity](Nanos) { return capacity; }, ten_ms, 5 * kMs, seed);
      backend.count_from(4000 * kMs);
      backend.run(24000 * kMs);
      waited += backend.waited();
      started += backend.started();
    }
    const double share = static_cast<double>(waited) / static_cast<double>(started) / (10.0 * kMs);
    EXPECT_LE(share, 0.04) << capacity << " servers";
    std::printf("%u servers: a request waits %.1f %% of the service time in the backend's FIFO\n",
                capacity, 100 * share);
  }
}

// A backend that slows down for everyone (a pause: five times the service time for 1 s) cuts
// the room, and the room is back within 25 % of the capacity within 1 s of the pause's end.
TEST(RoomController, RecoversFromABackendThatSlowedForEveryone) {
  constexpr Nanos kPause = 3000 * kMs;
  auto service = [](Nanos t) {
    return t >= kPause && t < kPause + 1000 * kMs ? 50 * kMs : 10 * kMs;
  };
  RoomController c({1, 256});
  Backend backend(
      c, [](Nanos) { return 8u; }, service, 5 * kMs);
  backend.run(kPause);
  EXPECT_GE(c.slots(), 6u);
  backend.run(kPause + 1000 * kMs);
  const std::uint32_t during = c.slots();
  Nanos back = 0;
  for (Nanos t = kPause + 1000 * kMs; t < kPause + 4000 * kMs; t += 10 * kMs) {
    backend.run(t + 10 * kMs);
    if (c.slots() >= 6 && c.slots() <= 10) {
      back = t + 10 * kMs - (kPause + 1000 * kMs);
      break;
    }
  }
  EXPECT_GT(back, 0) << "never back; " << c.slots() << " slots, " << during << " in the pause";
  EXPECT_LE(back, 1000 * kMs) << "slots in the pause: " << during;
  std::printf("back within 25 %% of the capacity %.2f s after the pause; %u slots at its end\n",
              static_cast<double>(back) / 1e9, during);
}

// The same pause at 512 phases of the room's own windows and jitter sequences: wherever the
// pause falls (mid-window, mid-probe, just after a trial, at the least room), the room is back
// within 25 % of the capacity within 1.5 s of the pause's end. Before the run of cuts kept its
// memory through the least room and through a regrowth's noise, 5 of these never came back
// within 6 s and 22 more took over 1.5 s.
TEST(RoomController, RecoversFromAPauseAtAnyPhase) {
  std::vector<double> backs;
  for (std::uint64_t seed = 1; seed <= 512; ++seed) {
    const Nanos pause = 3000 * kMs + static_cast<Nanos>(seed % 64) * 37 * kMs;
    auto service = [pause](Nanos t) {
      return t >= pause && t < pause + 1000 * kMs ? 50 * kMs : 10 * kMs;
    };
    RoomController c({1, 64});
    Backend backend(
        c, [](Nanos) { return 8u; }, service, 5 * kMs, seed);
    backend.run(pause + 1000 * kMs);
    Nanos back = -1;
    for (Nanos t = pause + 1000 * kMs; t < pause + 7000 * kMs && back < 0; t += 10 * kMs) {
      backend.run(t + 10 * kMs);
      if (c.slots() >= 6 && c.slots() <= 10) back = t + 10 * kMs - (pause + 1000 * kMs);
    }
    EXPECT_GE(back, 0) << "seed " << seed << ": never back; " << c.slots() << " slots";
    EXPECT_LE(back, 1500 * kMs) << "seed " << seed;
    backs.push_back(static_cast<double>(back < 0 ? 6000 * kMs : back) / 1e9);
  }
  std::sort(backs.begin(), backs.end());
  std::printf(
      "back within 25 %% of the capacity after a pause: median %.2f s, p99 %.2f s, "
      "the longest %.2f s\n",
      backs[backs.size() / 2], backs[backs.size() * 99 / 100], backs.back());
}

// A room that is never full learns nothing about more slots and stays where it is.
TEST(RoomController, ARoomNeverFullStays) {
  RoomController c({4, 256});
  for (Nanos t = 0; t < 2000 * kMs; t += kMs) {
    c.dispatched(t, 1);
    c.completed(t, t + kMs / 2);
  }
  EXPECT_EQ(c.slots(), 4u);
  EXPECT_EQ(c.no_queue_latency(), kMs / 2);
}

}  // namespace
}  // namespace creditloop
