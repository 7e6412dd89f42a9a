#include "options.hpp"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>

#include "creditloop/units.hpp"

namespace creditloop::stress {
namespace {

constexpr const char* kUsage = R"(usage: creditloop-stress [options]

Runs a creditloop::Runtime with producer threads, completions and (with --churn) participants
added, removed, re-planned and scaled while it runs, and checks every request's fate,
per-participant order, per-bucket accounting, the classes against the reference model, the
bounded wait and that the dispatcher never stalls. Exit status 0 when every check holds, 1 on
the first violation (the message names the check, the participant or request, and the seed).

  --producers N          producer threads (4)
  --workers N            the runtime's worker pool, or our completer threads with --mode sink (2)
  --participants N       names registered before the start (1000)
  --seconds S            run time before shutdown (5)
  --seed X               the seed of every random choice (default: random, printed first)
  --churn                add, remove, re-plan and scale participants while running
  --slots N              requests in flight at once (64)
  --classes K            metered classes, 1..7 (2)
  --pool N               requests per producer (256)
  --mode pool|sink       the runtime's worker pool, or a sink and completer threads of our own
                         that use complete(), complete_nano() and CompletionBatch (by seed)
  --shutdown hand_back|drain   how the run ends (by seed)
  --decide visits|batches      the dispatcher's calls into the core: one per visit, or a batch
                         per call as with no observer, which the observer then follows (by seed)
  --no-replay            do not replay the observer's events through the reference model
  --replay-limit N       replay at most the first N dispatches, 0 for no limit (8000000): the
                         model keeps every ticket it issued, about 100 bytes each
  --replay-lag-s S       end the replay early once it would need more than S seconds to catch
                         up (20): the model scans the ring, so it is slow with many participants
  --replay-backlog-mb M  end the replay early once this much log waits for it (256)
                         (after the replay ends, the ledger checks carry on alone)
  --wait-slack-ms MS     real-time allowance of the bounded-wait check (500)
  --watchdog-ms MS       how long nothing may move while work waits (1000)
  --churn-us US          mean pause between two lifecycle calls with --churn (500)
  --service-us US        busy time per request in handlers and completers (0)
  --snapshots            also take per-participant snapshots while running (the replay then
                         also checks that reading balances leaves the decisions unchanged)
)";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "creditloop-stress: %s\n\n%s", what.c_str(), kUsage);
  std::exit(2);
}

std::uint64_t parse_u64(std::string_view flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    usage_error(std::string(flag) + ": not a whole number: " + text);
  }
  return v;
}

double parse_double(std::string_view flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v) || v < 0) {
    usage_error(std::string(flag) + ": not a non-negative number: " + text);
  }
  return v;
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Choices left to the seed are made here, once, so that the rerun command names them.
void choose_by_seed(Options& o) {
  if (!o.seed_given) {
    std::random_device rd;
    o.seed = (std::uint64_t{rd()} << 32) ^ rd();
  }
  if (!o.mode) o.mode = (o.seed & 1) != 0 ? SinkMode::sink : SinkMode::pool;
  if (!o.end) o.end = (o.seed & 2) != 0 ? EndMode::drain : EndMode::hand_back;
  if (!o.decide) o.decide = (o.seed & 4) != 0 ? DecideMode::batches : DecideMode::visits;
}

}  // namespace

const char* mode_name(SinkMode m) { return m == SinkMode::pool ? "pool" : "sink"; }
const char* end_name(EndMode m) { return m == EndMode::hand_back ? "hand_back" : "drain"; }
const char* decide_name(DecideMode m) { return m == DecideMode::visits ? "visits" : "batches"; }

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(std::string(a) + " needs a value");
      return argv[++i];
    };
    auto bounded = [&](std::uint64_t lo, std::uint64_t hi) {
      const std::uint64_t v = parse_u64(a, value());
      if (v < lo || v > hi) {
        usage_error(std::string(a) + " must be between " + std::to_string(lo) + " and " +
                    std::to_string(hi));
      }
      return v;
    };
    // A flag with two values, spelled as `name` prints them.
    auto one_of = [&]<class E>(E first, E second, const char* (*name)(E)) {
      const std::string_view v = value();
      if (v == name(first)) return first;
      if (v == name(second)) return second;
      usage_error(std::string(a) + " is " + name(first) + " or " + name(second));
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--producers") {
      o.producers = static_cast<unsigned>(bounded(1, 1024));
    } else if (a == "--workers") {
      o.workers = static_cast<unsigned>(bounded(1, 1024));
    } else if (a == "--participants") {
      o.participants = static_cast<std::uint32_t>(bounded(1, creditloop::kMaxParticipants / 2));
    } else if (a == "--seconds") {
      o.seconds = parse_double(a, value());
    } else if (a == "--seed") {
      o.seed = parse_u64(a, value());
      o.seed_given = true;
    } else if (a == "--churn") {
      o.churn = true;
    } else if (a == "--slots") {
      o.slots = static_cast<std::uint32_t>(bounded(1, 1u << 20));
    } else if (a == "--classes") {
      o.classes = static_cast<int>(bounded(1, creditloop::kMaxClasses));
    } else if (a == "--pool") {
      o.pool = static_cast<std::uint32_t>(bounded(1, 1u << 20));
    } else if (a == "--mode") {
      o.mode = one_of(SinkMode::pool, SinkMode::sink, mode_name);
    } else if (a == "--shutdown") {
      o.end = one_of(EndMode::hand_back, EndMode::drain, end_name);
    } else if (a == "--decide") {
      o.decide = one_of(DecideMode::visits, DecideMode::batches, decide_name);
    } else if (a == "--no-replay") {
      o.replay = false;
    } else if (a == "--replay-limit") {
      o.replay_limit = parse_u64(a, value());
    } else if (a == "--replay-backlog-mb") {
      o.replay_backlog_mb = bounded(1, 1u << 20);
    } else if (a == "--replay-lag-s") {
      o.replay_lag_s = parse_double(a, value());
    } else if (a == "--wait-slack-ms") {
      o.wait_slack_ms = parse_double(a, value());
    } else if (a == "--watchdog-ms") {
      o.watchdog_ms = parse_double(a, value());
      if (o.watchdog_ms < 10) usage_error("--watchdog-ms must be at least 10");
    } else if (a == "--churn-us") {
      o.churn_us = parse_double(a, value());
    } else if (a == "--service-us") {
      o.service_us = parse_double(a, value());
    } else if (a == "--snapshots") {
      o.snapshots = true;
    } else {
      usage_error("unknown argument: " + std::string(a));
    }
  }
  choose_by_seed(o);
  return o;
}

std::string rerun_command(const Options& o, const char* argv0) {
  char seed[32];
  std::snprintf(seed, sizeof seed, "0x%016" PRIx64, o.seed);
  std::string c = std::string(argv0) + " --producers " + std::to_string(o.producers) +
                  " --workers " + std::to_string(o.workers) + " --participants " +
                  std::to_string(o.participants) + " --seconds " + fmt(o.seconds) + " --seed " +
                  seed + (o.churn ? " --churn" : "") + " --slots " + std::to_string(o.slots) +
                  " --classes " + std::to_string(o.classes) + " --pool " + std::to_string(o.pool) +
                  " --mode " + mode_name(*o.mode) + " --shutdown " + end_name(*o.end) +
                  " --decide " + decide_name(*o.decide);
  if (!o.replay) c += " --no-replay";
  c += " --replay-limit " + std::to_string(o.replay_limit);
  c += " --replay-backlog-mb " + std::to_string(o.replay_backlog_mb) + " --replay-lag-s " +
       fmt(o.replay_lag_s);
  c += " --wait-slack-ms " + fmt(o.wait_slack_ms) + " --watchdog-ms " + fmt(o.watchdog_ms);
  if (o.churn) c += " --churn-us " + fmt(o.churn_us);
  if (o.service_us > 0) c += " --service-us " + fmt(o.service_us);
  if (o.snapshots) c += " --snapshots";
  return c;
}

creditloop::Config make_config(int classes) {
  using creditloop::ClassTerms;
  using creditloop::Plan;
  creditloop::Config config;
  config.classes = classes;
  // Lower classes refill faster, as in the reference plans, so that work descends under load.
  constexpr double kRate[] = {2, 5, 10, 20, 50, 100, 200};
  auto plan = [&](const char* name, auto&& terms_of) {
    Plan p;
    p.name = name;
    for (int c = 0; c < classes; ++c) p.terms[static_cast<std::size_t>(c)] = terms_of(c);
    config.plans.push_back(p);
  };
  using Terms = std::optional<ClassTerms>;
  // The reference plans (for k = 2, exactly reference_config()).
  plan("pro", [&](int c) -> Terms { return ClassTerms{kRate[c], 2 * kRate[c]}; });
  plan("lite", [&](int c) -> Terms {
    if (c == 0 && classes > 1) return std::nullopt;
    return ClassTerms{kRate[c], 2 * kRate[c]};
  });
  // Holds nothing: only ever unmetered.
  plan("free", [](int) -> Terms { return std::nullopt; });
  // P1 only, slow and with the smallest burst: its participants wait for credits.
  plan("top", [](int c) -> Terms {
    if (c != 0) return std::nullopt;
    return ClassTerms{0.5, 1};
  });
  // Rates and bursts that are not whole, so that the refill's carried remainder matters.
  plan("odd", [](int c) -> Terms {
    if (c % 2 != 0) return std::nullopt;
    return ClassTerms{0.333333333 * (c + 1), 1.5 + c};
  });
  // Ten times the reference: a lot of P1 work.
  plan("gold", [&](int c) -> Terms { return ClassTerms{10 * kRate[c], 20 * kRate[c]}; });
  return config;
}

}  // namespace creditloop::stress
