// A metrics scrape's read of a participant's counter line (internal/counter_line.hpp), the
// runtime's sequence count: the dispatcher updates the line twice through CounterWrite, as it
// does when it dispatches and completes; a reader copies it twice through read_counters, as
// Runtime::counters() does, waiting out an update in progress with the back-off it ships (a
// yield here, so that Relacy's fair scheduler lets the writer finish).
//
// Checked: every copy is one update's, whole: its queued, dispatched and completed counts and its
// cost all name the same update (never some values of the one and some of the next); the copies
// never go backwards; and the generation is the participant's.
//
// The order that matters: CounterWrite's release fence after it makes the count odd pairs with
// read_counters' acquire fence before its second read of the count, so a reader that copied any
// value of an update sees the odd count and retries. The twin weakens that release fence (the
// model's only release fence) to none: the reader can then copy some values of the second update
// beside the first update's, read an even count that has not moved both times, and the model's
// assertion fails.
#include <array>
#include <cstdint>

#include "creditloop/snapshot.hpp"
#include "internal/counter_line.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct CounterLineModel : rl::test_suite<CounterLineModel<Policy>, 2> {
  using Line = detail::CounterLine<With<Policy>::template Atomic>;
  using Write = detail::CounterWrite<With<Policy>::template Atomic, ModelFence<Policy>>;
  static constexpr std::uint32_t kGeneration = 7;
  static constexpr std::uint64_t kUpdates = 2;

  Line line;

  void before() { Write(line).reset(kGeneration); }

  void thread(unsigned index) {
    if (index == 0) {
      for (std::uint64_t u = 1; u <= kUpdates; ++u) update();
      return;
    }
    std::uint64_t last = 0;
    for (int read = 0; read < 2; ++read) last = check_copy(last);
  }

  // Update u leaves every value at u: one more queued, dispatched and completed, and a cost of 1.
  void update() {
    Write w(line);
    w.add(Line::kQueued, 1);
    w.add(Line::kDispatched, 1);
    w.add(Line::kCompleted, 1);
    w.add_cost(Balance{kNanoPerCredit});
  }

  std::uint64_t check_copy(std::uint64_t last) {
    ParticipantCounters out;
    RL_ASSERT(detail::read_counters<ModelFence<Policy>>(line, out) == kGeneration);
    const std::uint64_t u = out.queued;
    RL_ASSERT(out.dispatched[0] == u);
    RL_ASSERT(out.completed == u);
    RL_ASSERT(out.cost_charged == static_cast<Balance>(u) * kNanoPerCredit);
    RL_ASSERT(u >= last && u <= kUpdates);
    return u;
  }

  void after() {
    ParticipantCounters out;
    RL_ASSERT(detail::read_counters<ModelFence<Policy>>(line, out) == kGeneration);
    RL_ASSERT(out.queued == kUpdates && out.completed == kUpdates);
  }
};

// CounterWrite's fence after the odd count is the model's only release fence.
using Twin = Weaken<Fences, Op::fence, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

// A random search: the reader's retries make the schedules of a full search unbounded (it ran past
// a minute without ending); a million random ones take about six seconds.
bool counter_line_model(Variant variant) {
  return check<CounterLineModel, Twin>("counter_line", variant, {rl::sched_random, 1'000'000},
                                       rl::test_result_user_assert_failed);
}

}  // namespace creditloop::relacy
