// The core's work per operation in instructions, for tools/instruction-budget, which runs each
// case under `valgrind --tool=callgrind --collect-atstart=no --instr-atstart=no`: callgrind's
// counts do not depend on the machine's speed or load, so the budget holds on any machine with
// the same compiler.
//
// Each case builds its workload (workloads.hpp) uninstrumented, brings it to its steady state,
// then counts only around the measured operations (setup and, for decisions, the untimed upkeep
// excluded), and prints the number of operations; the script divides callgrind's total by it.
//
//   bench_instructions --list     the cases, one per line
//   bench_instructions CASE       runs one (natively too: the counts are then simply not taken)
#include <valgrind/callgrind.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "creditloop/room_controller.hpp"
#include "workloads.hpp"

namespace {

using creditloop::bench::Api;
using creditloop::bench::Credit;
using creditloop::bench::DecisionLoop;
using creditloop::bench::Fleet;
using creditloop::bench::FreshCores;
using creditloop::bench::kBatch;
using creditloop::bench::ShallowLoop;

enum class Kind {
  decision,  // decisions alone (Core::dispatch in batches of 8, or begin_turn + visit)
  cycle,     // decision, submission and completion with cost, queues kept at their depth
  request,   // one deep: submission, decision, completion with cost
  add,       // registration into fresh cores, nothing reserved (`registered` adds per core)
  withdraw,  // withdrawal of a queued request anywhere in its queue (Core::withdraw)
  room,      // the learned room's work per completion: completed(), and the dispatched() that
             // refills the room (`registered`: the backend's capacity)
};

struct Case {
  std::string name;
  Kind kind;
  std::size_t registered;
  std::size_t waiting;  // participants with queued work (decision and cycle)
  Api api;
  Credit credit;
  std::size_t depth;  // queue depth (cycle)
};

std::string_view credit_name(Credit c) {
  switch (c) {
    case Credit::scarce:
      return "scarce";
    case Credit::plentiful:
      return "plentiful";
    case Credit::high_rate:
      return "high-rate";
  }
  return "?";
}

std::vector<Case> all_cases() {
  struct Size {
    const char* label;
    std::size_t registered;
    std::size_t waiting;
  };
  const Size sizes[] = {{"1", 1, 1},
                        {"1k-1pct", 1000, 10},
                        {"1k-all", 1000, 1000},
                        {"1024-all", 1024, 1024},
                        {"1M-1pct", 1'000'000, 10'000},
                        {"1M-all", 1'000'000, 1'000'000}};
  std::vector<Case> cases;
  for (const Credit credit : {Credit::plentiful, Credit::scarce}) {
    for (const Api api : {Api::single, Api::batch}) {
      for (const Size& s : sizes) {
        cases.push_back({"decision/" + std::string(api == Api::single ? "visit" : "batch") + "/" +
                             std::string(credit_name(credit)) + "/" + s.label,
                         Kind::decision, s.registered, s.waiting, api, credit, 4});
      }
    }
    for (const std::size_t registered : {64u, 10'000u, 1'000'000u}) {
      cases.push_back({"request/one-deep/" + std::string(credit_name(credit)) + "/" +
                           std::to_string(registered),
                       Kind::request, registered, 0, Api::single, credit, 1});
    }
    cases.push_back({"cycle/16-deep/" + std::string(credit_name(credit)) + "/1024", Kind::cycle,
                     1024, 1024, Api::single, credit, 16});
  }
  cases.push_back({"decision/visit/high-rate/1k-all", Kind::decision, 1000, 1000, Api::single,
                   Credit::high_rate, 4});
  cases.push_back(
      {"withdraw/16-deep/1024", Kind::withdraw, 1024, 1024, Api::single, Credit::plentiful, 16});
  for (const std::size_t capacity : {8u, 64u}) {
    cases.push_back({"room/completion/capacity-" + std::to_string(capacity), Kind::room, capacity,
                     0, Api::single, Credit::plentiful, 0});
  }
  cases.push_back({"add/first/unreserved", Kind::add, 1, 0, Api::single, Credit::plentiful, 0});
  cases.push_back(
      {"add/10000/unreserved", Kind::add, 10'000, 0, Api::single, Credit::plentiful, 0});
  return cases;
}

// Counting is on only between these two (--collect-atstart=no); outside callgrind they do nothing.
struct Counted {
  Counted() { CALLGRIND_TOGGLE_COLLECT; }
  ~Counted() { CALLGRIND_TOGGLE_COLLECT; }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
};

constexpr std::size_t kMeasured = 16 * kBatch;  // operations counted per case

template <Api api>
std::uint64_t run_decisions(const Case& c) {
  Fleet fleet(c.registered, c.waiting, c.credit, c.depth);
  DecisionLoop<api> loop(fleet);
  std::uint64_t per_class[creditloop::kMaxClasses + 1] = {};
  // Warm up uninstrumented: two rounds of every waiting participant (the buckets start full, so
  // the first round is all metered even when credit is scarce), at least 8 batches.
  const std::size_t warm = std::max<std::size_t>(2 * c.waiting, 8 * kBatch);
  for (std::size_t made = 0; made < warm;) {
    const int n = loop.decide();
    loop.upkeep(n, per_class);
    made += static_cast<std::size_t>(n);
  }
  CALLGRIND_START_INSTRUMENTATION;
  std::uint64_t ops = 0;
  while (ops < kMeasured) {
    int n = 0;
    if (c.kind == Kind::cycle) {
      const Counted counted;
      n = loop.decide();
      loop.upkeep(n, per_class);
    } else {
      {
        const Counted counted;
        n = loop.decide();
      }
      loop.upkeep(n, per_class);
    }
    ops += static_cast<std::uint64_t>(n);
  }
  return ops;
}

std::uint64_t run_requests(const Case& c) {
  ShallowLoop loop(c.registered, c.credit);
  // Warm up: every participant served twice, at least 64 rounds.
  const std::size_t warm = std::max<std::size_t>(2 * c.registered, 64 * ShallowLoop::kRound);
  for (std::size_t made = 0; made < warm;) made += loop.round();
  CALLGRIND_START_INSTRUMENTATION;
  std::uint64_t ops = 0;
  while (ops < kMeasured) {
    const Counted counted;
    ops += loop.round();
  }
  return ops;
}

// The first add into a fresh core sizes its tables; ten thousand show the growth per add.
std::uint64_t run_adds(const Case& c) {
  FreshCores cores(16, c.registered);
  CALLGRIND_START_INSTRUMENTATION;
  const Counted counted;
  return cores.add_all();
}

// Withdrawals spread over every queue and position (head, middle and tail alike); each withdrawn
// request is submitted again uncounted, so that the queues keep their depth.
std::uint64_t run_withdrawals(const Case& c) {
  creditloop::Core core(creditloop::reference_config());
  core.reserve(c.registered, 0);
  std::vector<creditloop::ParticipantId> ids;
  for (std::size_t i = 0; i < c.registered; ++i) {
    ids.push_back(*core.add("p" + std::to_string(i), "pro", 1, 0));
  }
  std::vector<creditloop::RequestHook> requests(c.registered * c.depth);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    (void)core.submit(ids[i % c.registered], requests[i], 0);
  }
  CALLGRIND_START_INSTRUMENTATION;
  std::uint64_t ops = 0;
  for (std::size_t i = 0; ops < kMeasured; ++i) {
    // A stride prime to the pool's size visits every request once before any twice.
    const std::size_t r = (i * 7919) % requests.size();
    {
      const Counted counted;
      if (core.withdraw(requests[r]).ok()) ++ops;
    }
    (void)core.submit(ids[r % c.registered], requests[r], 0);
  }
  return ops;
}

// A RoomController in front of a model backend of `capacity` servers (10 ms each, give or take
// 5 ms from a fixed sequence; the rest in its FIFO), always a request waiting for the room: what
// a dispatcher pays the controller per completion once the room has settled. The model's own
// work is not counted.
std::uint64_t run_room(const Case& c) {
  constexpr creditloop::Nanos kMs = 1'000'000;
  creditloop::RoomController room({1, 256});
  struct Served {
    creditloop::Nanos end;
    creditloop::Nanos dispatched;
    bool operator>(const Served& o) const { return end > o.end; }
  };
  std::priority_queue<Served, std::vector<Served>, std::greater<>> serving;
  std::queue<creditloop::Nanos> fifo;  // dispatch instants of the requests waiting in it
  std::uint64_t seed = 42;
  std::uint64_t in_flight = 0;
  creditloop::Nanos now = 0;
  const auto start_waiting = [&] {
    while (!fifo.empty() && serving.size() < c.registered) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      const auto jitter = static_cast<creditloop::Nanos>((seed >> 33) % (10 * kMs));
      serving.push({now + 5 * kMs + jitter, fifo.front()});
      fifo.pop();
    }
  };
  // What the dispatcher does at a completion: tell the controller, refill the room.
  const auto tell = [&](const Served& s) {
    room.completed(s.dispatched, now);
    while (in_flight < room.slots()) room.dispatched(now, ++in_flight);
  };
  const auto step = [&](bool counted) {
    const Served s = serving.top();
    serving.pop();
    now = s.end;
    --in_flight;
    start_waiting();
    const std::uint64_t before = in_flight;
    if (counted) {
      const Counted counting;
      tell(s);
    } else {
      tell(s);
    }
    for (std::uint64_t n = before; n < in_flight; ++n) fifo.push(now);
    start_waiting();
  };
  while (in_flight < room.slots()) room.dispatched(now, ++in_flight);
  for (std::uint64_t i = 0; i < in_flight; ++i) fifo.push(now);
  start_waiting();
  // A minute of virtual time at 8 servers: the start, the slow start and many probes are over.
  for (int i = 0; i < 50'000; ++i) step(false);
  CALLGRIND_START_INSTRUMENTATION;
  std::uint64_t ops = 0;
  for (; ops < 32 * kMeasured; ++ops) step(true);
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Case> cases = all_cases();
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const Case& c : cases) std::printf("%s\n", c.name.c_str());
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: bench_instructions --list | CASE\n");
    return 2;
  }
  for (const Case& c : cases) {
    if (c.name != argv[1]) continue;
    std::uint64_t ops = 0;
    if (c.kind == Kind::add) {
      ops = run_adds(c);
    } else if (c.kind == Kind::room) {
      ops = run_room(c);
    } else if (c.kind == Kind::withdraw) {
      ops = run_withdrawals(c);
    } else if (c.kind == Kind::request) {
      ops = run_requests(c);
    } else if (c.api == Api::batch) {
      ops = run_decisions<Api::batch>(c);
    } else {
      ops = run_decisions<Api::single>(c);
    }
    std::printf("ops %llu\n", static_cast<unsigned long long>(ops));
    return ops > 0 ? 0 : 1;
  }
  std::fprintf(stderr, "bench_instructions: no case named %s (see --list)\n", argv[1]);
  return 2;
}
