// Relacy model of a request's hand-back to its caller (creditloop/detail/hand_back.hpp): the
// dispatcher hands back a chain of two requests as a dropped list does, while two threads race to
// submit them again the moment they are the caller's.
//
// Checked: a request has one owner at a time; its link is never touched by two threads without
// the hand-off ordering them; a request ends the caller's exactly when nobody kept it.
// Order: hand_back()'s release store -> take_from_caller()'s acquiring compare-and-swap.
// Twin: that store weakened to relaxed; the submitter's write of the link races the dispatcher's.
// Why: docs/testing.md#the-hand_back-model
#include <array>

#include "creditloop/detail/hand_back.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct Hook {
  ModelAtomic<std::uint8_t, Policy> held{RequestHook::kQueued};
  rl::var<Hook*> next{nullptr};
};

template <class Policy>
struct HandBackModel : rl::test_suite<HandBackModel<Policy>, 3> {
  using Node = Hook<Policy>;
  using Link = VarLink<Node>;

  std::array<Node, 2> requests;
  // Owners per request, the dispatcher's at the start. Relaxed, so that counting adds no order of
  // its own.
  std::array<ModelAtomic<int, AsWritten>, 2> owners;
  std::array<bool, 2> kept{};  // by thread 2, read by after()

  void before() {
    for (auto& o : owners) o.store(1, std::memory_order_relaxed);
  }

  bool take(int i) {
    if (!detail::take_from_caller(requests[i].held)) return false;
    RL_ASSERT(owners[i].fetch_add(1, std::memory_order_relaxed) == 0);
    Link::set(requests[i], nullptr);  // the push's write of the link
    return true;
  }

  void release(int i) { RL_ASSERT(owners[i].fetch_add(-1, std::memory_order_relaxed) == 1); }

  void thread(unsigned index) {
    if (index == 0) {
      Link::set(requests[0], &requests[1]);
      Link::set(requests[1], nullptr);
      release(0);
      release(1);
      detail::hand_back_chain<Link>(&requests[0]);
    } else if (index == 1) {
      if (take(0)) {
        release(0);
        detail::hand_back(requests[0].held);  // refused: the caller's again
      }
    } else {
      kept[1] = take(1);
      kept[0] = take(0);
    }
  }

  void after() {
    for (int i = 0; i < 2; ++i) {
      const std::uint8_t state = requests[i].held.load(std::memory_order_relaxed);
      RL_ASSERT(state == (kept[i] ? RequestHook::kInbox : RequestHook::kIdle));
      RL_ASSERT(owners[i].load(std::memory_order_relaxed) == (kept[i] ? 1 : 0));
    }
  }
};

using Twin =
    Weaken<Holding<std::uint8_t>, Op::store, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool hand_back_model(Variant variant) {
  return check<HandBackModel, Twin>("hand_back", variant, {rl::sched_full, 0},
                                    rl::test_result_data_race);
}

}  // namespace creditloop::relacy
