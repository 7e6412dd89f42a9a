// The core on a virtual clock: a two-slot server, one `pro` and one `lite` participant, each
// with more work than its credit. The core never reads a clock; this program owns time, so every
// run makes the same decisions. It checks what the contract promises for this load and exits
// non-zero if the core did anything else.
#include <array>
#include <cstdio>
#include <deque>
#include <map>
#include <vector>

#include <creditloop/core.hpp>

namespace {

constexpr creditloop::Nanos kMillisecond = 1'000'000;

struct Job : creditloop::RequestHook {  // your request: the core links it, never copies it
  int id = 0;
};

struct InService {  // a dispatched request, finishing at `done`
  creditloop::Ticket ticket;
  creditloop::Nanos done = 0;
};

int run() {
  // [readme]
  creditloop::Core core(creditloop::reference_config());  // pro: P1+P2, lite: P2
  core.reserve(/*participants=*/16, /*in_flight=*/2);     // no allocation after this
  creditloop::Nanos now = 0;
  const creditloop::ParticipantId alice = core.add("alice", "pro", /*shares=*/1, now).value();
  const creditloop::ParticipantId bob = core.add("bob", "lite", /*shares=*/1, now).value();

  std::vector<Job> jobs(60);  // your requests, derived from RequestHook: never copied
  for (std::size_t i = 0; i < jobs.size(); ++i) {  // 30 each, all at once
    jobs[i].id = static_cast<int>(i);
    if (!core.submit(i % 2 == 0 ? alice : bob, jobs[i], now)) return 1;
  }
  // [/readme]

  constexpr std::size_t kSlots = 2;
  constexpr creditloop::Nanos kService = 50 * kMillisecond;
  std::deque<InService> in_service;  // completes in dispatch order: every job takes kService
  std::array<creditloop::Decision, kSlots> decided;
  // [readme]
  while (core.waiting() > 0 || !in_service.empty()) {
    // Decide while there is room: one call fills the free slots (fewer if the queues run dry).
    const std::size_t room = kSlots - in_service.size();
    const std::size_t n = core.dispatch(now, std::span(decided).first(room));
    core.end_turn();  // the server is full: this turn ends here
    for (std::size_t i = 0; i < n; ++i) in_service.push_back({decided[i].ticket, now + kService});
    // Jump the virtual clock to the next completion and charge its real cost back.
    now = in_service.front().done;
    if (!core.complete(in_service.front().ticket, /*cost credits=*/0.5, now)) return 2;
    in_service.pop_front();
  }
  // [/readme]

  // What the contract says of this run: both were served to the end; the pro participant went
  // out under P1 while its P1 bucket lasted, then lower; the lite one never under P1.
  const creditloop::ParticipantStats a = core.stats(alice);
  const creditloop::ParticipantStats b = core.stats(bob);
  std::printf("alice (pro):  P1 %llu  P2 %llu  P3 %llu\n",
              static_cast<unsigned long long>(a.dispatched[0]),
              static_cast<unsigned long long>(a.dispatched[1]),
              static_cast<unsigned long long>(a.dispatched[2]));
  std::printf("bob (lite):   P1 %llu  P2 %llu  P3 %llu\n",
              static_cast<unsigned long long>(b.dispatched[0]),
              static_cast<unsigned long long>(b.dispatched[1]),
              static_cast<unsigned long long>(b.dispatched[2]));
  std::printf("finished at %.3f s of virtual time\n", static_cast<double>(now) / 1e9);
  if (a.completed != 30 || b.completed != 30) return 3;
  if (a.dispatched[0] == 0 || b.dispatched[0] != 0) return 4;
  if (a.dispatched[2] + b.dispatched[2] == 0) return 5;  // 60 jobs outrun both bursts
  return 0;
}

}  // namespace

int main() { return run(); }
