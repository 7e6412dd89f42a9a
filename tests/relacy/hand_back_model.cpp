// A request's hand-back to its caller (creditloop/detail/hand_back.hpp, run by a RequestList's
// walk and its destructor after a removal or a shutdown, the runtime's withdraw(), completions, the
// worker pool and a refused submit). The dispatcher links two requests into a chain (the writes a
// removal's splice makes) and hands back the chain as a dropped list does; two threads race to
// submit them
// again the moment they are the caller's, as a submit may: thread 1 takes request 0 and, refused
// (its participant is gone), hands it back at once; thread 2 takes request 1, then tries request 0
// too. Each submit that takes a request writes its link, as the inbox's push does.
//
// Checked: a request has one owner at a time, the links are never written or read by two threads
// without the hand-off ordering them (Relacy vars), and a request ends the caller's exactly when
// nobody kept it.
//
// The order that matters: hand_back()'s release store, acquired by take_from_caller()'s
// compare-and-swap, orders the library's last writes of a link before the next submitter's. The
// twin weakens that store to relaxed: the submitter's write of the link then races the
// dispatcher's. hand_back_chain() reads each link before handing its request back; the walk as it
// was written before (reading the link after) fails this model as written, with a data race.
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
