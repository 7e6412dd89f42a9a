// What a scrape of every participant costs the dispatcher: the longest gap between two decisions
// while Runtime::snapshot_participants() runs once a second over PARTICIPANTS participants.
//
//   build/release/bench/snapshot_gap [PARTICIPANTS=1000000] [SECONDS=5] [BUSY=1000]
//
// BUSY of the participants each keep one request circulating: the sink completes it inline and
// submits it again, so the dispatcher always has a decision to make and every gap between two
// sink calls is time it spent elsewhere. The run has two phases of SECONDS each, one without
// scrapes (what the machine itself adds: preemption, the clock) and one with a scrape at the start
// of every second. For each it prints the longest gap, the gaps over 0.1 ms and over 1 ms, and the
// decisions made;
// for the scrapes, their wall time.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/runtime.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Phase {
  std::int64_t longest_ns = 0;
  std::uint64_t over_100us = 0;
  std::uint64_t over_1ms = 0;
  std::uint64_t decisions = 0;
};

// Touched by the dispatcher thread only (the sink); read after shutdown() joined it.
struct GapMeter {
  std::array<Phase, 2> phases{};
  Clock::time_point last{};
  bool started = false;

  void decision(int phase) {
    const Clock::time_point now = Clock::now();
    Phase& p = phases[static_cast<std::size_t>(phase)];
    if (started) {
      const std::int64_t gap =
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count();
      p.longest_ns = std::max(p.longest_ns, gap);
      if (gap > 100'000) ++p.over_100us;
      if (gap > 1'000'000) ++p.over_1ms;
    }
    ++p.decisions;
    last = now;
    started = true;
  }
};

long argument(int argc, char** argv, int i, long fallback) {
  return argc > i ? std::strtol(argv[i], nullptr, 10) : fallback;
}

// Half on each of two plans; prints how long it took. False (said) if one is refused.
bool add_participants(creditloop::Runtime& runtime, long participants,
                      std::vector<creditloop::ParticipantId>& ids) {
  const Clock::time_point adding = Clock::now();
  ids.reserve(static_cast<std::size_t>(participants));
  for (long i = 0; i < participants; ++i) {
    const auto id = runtime.add("p" + std::to_string(i), i % 2 == 0 ? "pro" : "lite", 1);
    if (!id) {
      std::fprintf(stderr, "add failed at %ld\n", i);
      return false;
    }
    ids.push_back(*id);
  }
  std::printf("added %ld participants in %.1f s\n", participants,
              std::chrono::duration<double>(Clock::now() - adding).count());
  return true;
}

void print_report(const GapMeter& meter, std::vector<double> scrapes) {
  static constexpr const char* kNames[] = {"no scrape", "a scrape a second"};
  for (std::size_t i = 0; i < meter.phases.size(); ++i) {
    const Phase& p = meter.phases[i];
    std::printf(
        "%-18s longest gap %9.3f ms, gaps over 0.1 ms %6llu, over 1 ms %6llu, decisions %llu\n",
        kNames[i], static_cast<double>(p.longest_ns) / 1e6,
        static_cast<unsigned long long>(p.over_100us), static_cast<unsigned long long>(p.over_1ms),
        static_cast<unsigned long long>(p.decisions));
  }
  std::sort(scrapes.begin(), scrapes.end());
  std::printf("scrape wall time: median %.1f ms, longest %.1f ms\n", scrapes[scrapes.size() / 2],
              scrapes.back());
}

}  // namespace

int main(int argc, char** argv) {
  const long participants = argument(argc, argv, 1, 1'000'000);
  const long seconds = argument(argc, argv, 2, 5);
  const long busy = argument(argc, argv, 3, 1000);
  if (participants <= 0 || seconds <= 0 || busy <= 0 || busy > participants) {
    std::fprintf(stderr,
                 "usage: snapshot_gap [PARTICIPANTS>0] [SECONDS>0] [BUSY in 1..PARTICIPANTS]\n");
    return 2;
  }

  GapMeter meter;
  // relaxed: only labels which phase a gap falls in; a gap at the boundary may be counted in
  // either, which changes no figure that matters.
  std::atomic<int> phase{0};
  std::vector<creditloop::ParticipantId> ids;
  std::vector<creditloop::RequestHook> requests(static_cast<std::size_t>(busy));
  creditloop::Runtime* self = nullptr;

  creditloop::RuntimeOptions options;
  options.config = creditloop::reference_config();
  options.slots = 64;
  options.expected_participants = static_cast<std::size_t>(participants);
  options.expected_in_flight = 64;
  options.thread_name = "gap-dispatch";
  options.sink = [&](const creditloop::Decision& d) {
    meter.decision(phase.load(std::memory_order_relaxed));
    // Completed before it is submitted again: until then the request is the runtime's.
    if (!self->complete(d.ticket, 0)) std::abort();
    if (!self->submit(d.participant, *d.request)) std::abort();
  };
  creditloop::Runtime runtime(std::move(options));
  self = &runtime;

  if (!add_participants(runtime, participants, ids)) return 1;

  // Spread the busy ones over the ring, so a scrape's chunks all pass some of them.
  const long stride = participants / busy;
  for (long i = 0; i < busy; ++i) {
    if (!runtime.submit(ids[static_cast<std::size_t>(i * stride)],
                        requests[static_cast<std::size_t>(i)])) {
      std::fprintf(stderr, "submit failed\n");
      return 1;
    }
  }

  std::this_thread::sleep_for(std::chrono::seconds(seconds));  // phase 0: no scrapes
  phase.store(1, std::memory_order_relaxed);
  std::vector<double> scrapes;
  const Clock::time_point start = Clock::now();
  for (long s = 0; s < seconds; ++s) {
    const Clock::time_point begin = Clock::now();
    const std::vector<creditloop::ParticipantSnapshot> all = runtime.snapshot_participants();
    scrapes.push_back(std::chrono::duration<double, std::milli>(Clock::now() - begin).count());
    if (all.size() != static_cast<std::size_t>(participants)) {
      std::fprintf(stderr, "a scrape saw %zu participants\n", all.size());
      return 1;
    }
    std::this_thread::sleep_until(start + std::chrono::seconds(s + 1));
  }
  // Nothing is queued for long: every busy request comes back within a decision of the shutdown.
  (void)runtime.shutdown(creditloop::ShutdownMode::hand_back);

  print_report(meter, std::move(scrapes));
  return 0;
}
