// What an idle runtime costs: CPU time used by the whole process (dispatcher, worker pool) over
// a wall-clock interval during which nothing is submitted.
//
//   build/release/bench/idle_cost [SECONDS=10] [PARTICIPANTS=1000] [WORKERS=2]
//
// Prints the CPU seconds used and their share of one core. The target is under 1 %: a dispatcher
// with nothing to do must sleep, not poll.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "creditloop/runtime.hpp"

namespace {

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](timeval t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  const long seconds = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 10;
  const long participants = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 1000;
  const long workers = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 2;
  if (seconds <= 0 || participants < 0 || workers < 0) {
    std::fprintf(stderr, "usage: idle_cost [SECONDS>0] [PARTICIPANTS>=0] [WORKERS>=0]\n");
    return 2;
  }
  creditloop::RuntimeOptions options;
  options.config = creditloop::reference_config();
  if (workers > 0) {
    options.workers = static_cast<unsigned>(workers);
    options.handler = [](const creditloop::Decision&) { return 0.0; };
  } else {
    options.sink = [](const creditloop::Decision&) {};
  }
  creditloop::Runtime runtime(std::move(options));
  for (long i = 0; i < participants; ++i) {
    if (!runtime.add("p" + std::to_string(i), i % 2 == 0 ? "pro" : "lite", 1)) return 1;
  }
  const double cpu_before = cpu_seconds();
  const auto wall_before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));  // the measured interval itself
  const double cpu = cpu_seconds() - cpu_before;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
  const creditloop::RuntimeSnapshot s = runtime.snapshot();
  std::printf(
      "idle %.2f s with %ld participants and %ld workers: %.6f s of CPU, %.4f %% of one "
      "core; dispatcher slept %llu times\n",
      wall, participants, workers, cpu, 100.0 * cpu / wall,
      static_cast<unsigned long long>(s.parks));
  return cpu / wall < 0.01 ? 0 : 1;
}
