// Relacy model of whose queue a request is in, as another core reads it
// (creditloop/detail/queued_mark.hpp; core/loop.cpp Core::submit() and Core::withdraw(),
// runtime.cpp Runtime::Impl::withdraw()): core A's dispatcher queues a request that core B had
// queued and handed back before, while core B's dispatcher reads its mark to withdraw it (a
// caller's mistake: the request is not B's any more).
//
// Checked: a reader that sees the request queued reads core A's issuer and place, never B's
// stale ones, so Core::withdraw on B refuses it instead of unlinking it from one of B's queues.
// Order: mark_queued()'s release store of `held` -> read_queued_mark()'s acquire load.
// Twin: that store weakened to relaxed; B may see kQueued with its own issuer still there.
// Why: docs/testing.md#the-queued_mark-model
#include <cstdint>

#include "creditloop/detail/queued_mark.hpp"
#include "creditloop/request.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

constexpr std::uint32_t kCoreA = 1;
constexpr std::uint32_t kCoreB = 2;
constexpr std::uint32_t kPlaceInA = 5;
constexpr std::uint32_t kPlaceInB = 9;

template <class Policy>
struct Hook {
  ModelAtomic<std::uint32_t, Policy> queued_by{kCoreB};
  ModelAtomic<std::uint32_t, Policy> queued_place{kPlaceInB};
  ModelAtomic<std::uint8_t, Policy> held{RequestHook::kIdle};  // B handed it back
};

template <class Policy>
struct QueuedMarkModel : rl::test_suite<QueuedMarkModel<Policy>, 2> {
  Hook<Policy> request;

  void thread(unsigned index) {
    if (index == 0) {
      detail::mark_queued(request, kCoreA, kPlaceInA, RequestHook::kQueued);
    } else {
      // Core B's withdraw(), twice: before and after the mark, or one of each.
      for (int i = 0; i < 2; ++i) {
        const detail::QueuedMark mark = detail::read_queued_mark(request);
        if (mark.state == RequestHook::kQueued) {
          RL_ASSERT(mark.by == kCoreA);
          RL_ASSERT(mark.place == kPlaceInA);
        } else {
          RL_ASSERT(mark.state == RequestHook::kIdle);
        }
      }
    }
  }
};

using Twin =
    Weaken<Holding<std::uint8_t>, Op::store, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool queued_mark_model(Variant variant) {
  return check<QueuedMarkModel, Twin>("queued_mark", variant, {rl::sched_full, 0},
                                      rl::test_result_user_assert_failed);
}

}  // namespace creditloop::relacy
