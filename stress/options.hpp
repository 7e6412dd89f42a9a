// stress/options.hpp: the command line of creditloop-stress.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "creditloop/plan.hpp"

namespace creditloop::stress {

enum class SinkMode : std::uint8_t { pool, sink };
enum class EndMode : std::uint8_t { hand_back, drain };
// How the dispatcher decides: a core call per visit, each reported, or a batch per core call
// (the runtime's way with no observer), reported as a batch.
enum class DecideMode : std::uint8_t { visits, batches };

struct Options {
  unsigned producers = 4;
  unsigned workers = 2;  // the runtime's pool, or our completer threads with --mode sink
  std::uint32_t participants = 1000;
  double seconds = 5;
  std::uint64_t seed = 0;
  bool seed_given = false;
  bool churn = false;
  std::uint32_t slots = 64;
  int classes = 2;
  std::uint32_t pool = 256;          // requests per producer
  std::optional<SinkMode> mode;      // default: chosen by the seed
  std::optional<EndMode> end;        // default: chosen by the seed
  std::optional<DecideMode> decide;  // default: chosen by the seed
  bool replay = true;
  std::uint64_t replay_limit = 8'000'000;  // dispatches replayed; 0: all
  std::uint64_t replay_backlog_mb = 256;   // unreplayed log that ends the replay early
  double replay_lag_s = 20;                // catch-up time that ends the replay early
  double wait_slack_ms = 500;
  double watchdog_ms = 1000;
  double churn_us = 500;   // mean pause between two lifecycle calls
  bool snapshots = false;  // per-participant snapshots while running
  double service_us = 0;   // busy time a handler or completer spends per request
};

/// Parses argv; prints usage and exits on --help or a bad argument.
[[nodiscard]] Options parse_options(int argc, char** argv);

/// The command line that reruns this run (with its seed and every choice made explicit).
[[nodiscard]] std::string rerun_command(const Options& o, const char* argv0);

/// The plans of a run with `classes` metered classes.
[[nodiscard]] creditloop::Config make_config(int classes);

[[nodiscard]] const char* mode_name(SinkMode m);
[[nodiscard]] const char* end_name(EndMode m);
[[nodiscard]] const char* decide_name(DecideMode m);

}  // namespace creditloop::stress
