// The nginx workers' learned room (integrations/nginx/zone_learned.hpp, which the module reaches
// through creditloop_zone.cpp): two workers feed one controller, each a dispatch and a
// completion, dropping a sample when the other is feeding; the controller here is a stand-in
// whose state is a plain variable and whose room counts the samples it took.
//
// Checked: the controller's state is never touched by two workers without a happens-before
// between them (Relacy's data-race detection), and the published room is the count of samples
// taken. The order that matters: unlock()'s release store, read by the next try_lock()'s acquire
// exchange. The twin weakens that exchange to relaxed (the model's only acquire read-modify-write
// on a 64-bit atomic): the next feeder's read of the state then races with the last one's write.
#include <cstdint>

#include "model.hpp"
#include "zone_learned.hpp"

namespace creditloop::relacy {
namespace {

struct StandInController {
  rl::var<std::uint32_t> samples;
  void dispatched(std::int64_t, std::uint64_t) { samples($) = samples($) + 1; }
  void completed(std::int64_t, std::int64_t) { samples($) = samples($) + 1; }
  std::uint32_t slots() const { return samples($); }
  std::int64_t no_queue_latency() const { return 0; }
};

template <class Policy>
struct ZoneLearnedModel : rl::test_suite<ZoneLearnedModel<Policy>, 2> {
  using Learned = nginx::ZoneLearned<With<Policy>::template Atomic, StandInController>;

  typename Learned::Word words[Learned::kWords];
  StandInController controller;
  Learned learned{words, &controller};
  rl::var<std::uint32_t> taken[2];

  void before() {
    for (auto& w : words) w.store(0, std::memory_order_relaxed);
    controller.samples($) = 0;
    learned.start();
    taken[0]($) = taken[1]($) = 0;
  }

  void thread(unsigned index) {
    std::uint32_t took = 0;
    took += learned.dispatched(static_cast<std::int64_t>(index), 1) ? 1 : 0;
    took += learned.completed(0, static_cast<std::int64_t>(index) + 1) ? 1 : 0;
    taken[index]($) = took;
  }

  void after() {
    const std::uint32_t took = taken[0]($) + taken[1]($);
    RL_ASSERT(took >= 2);  // a worker drops a sample only while the other feeds
    RL_ASSERT(learned.slots() == took);
    RL_ASSERT(controller.samples($) == took);
  }
};

// try_lock()'s exchange is the model's only acquire read-modify-write.
using Twin =
    Weaken<Holding<std::uint64_t>, Op::rmw, std::memory_order_acquire, std::memory_order_relaxed>;

}  // namespace

bool zone_learned_model(Variant variant) {
  return check<ZoneLearnedModel, Twin>("zone_learned", variant, {rl::sched_full, 0},
                                       rl::test_result_data_race);
}

}  // namespace creditloop::relacy
