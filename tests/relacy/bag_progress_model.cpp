// One stopped pusher hides no other push (internal/lock_free_bag.hpp push_chain() and drain(), as
// the activation, completion and pool-block lists run them). Producer 0 pushes its node; producer
// 1 pushes its own and then says so on a flag; the dispatcher, once it read the flag, drains the
// bag once, wherever producer 0 is in its push, as a dispatcher would while producer 0 is
// preempted. after() drains the rest, as the dispatcher's next turns would.
//
// Checked: the one drain after the flag finds producer 1's node (a producer stopped inside its
// push, before or after reading the head, hides nothing pushed before or after it: the half-made
// state of an exchange-then-link push, which this bag replaced, fails here); every node is drained
// exactly once, with the payload its producer wrote (a Relacy var: read unordered, a data race).
//
// The orders that matter: the push's compare-and-swap releases the payload and the link, drain's
// exchange acquires them. The twin makes that compare-and-swap relaxed: the dispatcher may then
// take producer 0's node, which no flag hands to it, and read its payload unordered, a data race.
#include <array>

#include "internal/lock_free_bag.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct Pushed {
  ModelAtomic<Pushed*, Policy> next{nullptr};
  rl::var<int> payload{-1};
};

template <class Policy>
struct BagProgressModel : rl::test_suite<BagProgressModel<Policy>, 3> {
  using Node = Pushed<Policy>;
  using Bag = detail::LockFreeBag<Node, With<Policy>::template Atomic, &Node::next>;

  Bag bag;
  std::array<Node, 2> nodes;
  ModelAtomic<bool, AsWritten> pushed_1{false};
  std::array<int, 2> taken{};  // the dispatcher's, then after()'s

  void thread(unsigned index) {
    if (index == 2) {
      // acquire: pairs with producer 1's release store after its push.
      while (!pushed_1.load(std::memory_order_acquire)) pause();
      drain();
      RL_ASSERT(taken[1] == 1);  // whatever producer 0 is doing
      return;
    }
    Node& node = nodes[index];
    node.payload(RL_INFO) = 100 + static_cast<int>(index);
    bag.push(node);
    if (index == 1) pushed_1.store(true, std::memory_order_release);  // pairs with the acquire
  }

  void drain() {
    bag.drain([&](Node& node) {
      const auto i = static_cast<std::size_t>(&node - nodes.data());
      RL_ASSERT(node.payload(RL_INFO) == 100 + static_cast<int>(i));
      ++taken[i];
    });
  }

  void after() {
    drain();
    RL_ASSERT(!bag.maybe_nonempty());
    RL_ASSERT(taken[0] == 1 && taken[1] == 1);
  }
};

// The bag head and the links are the model's only pointer atomics; only push compares and swaps.
using Twin = Weaken<HoldingPointers, Op::cas, std::memory_order_seq_cst, std::memory_order_relaxed>;

}  // namespace

bool bag_progress_model(Variant variant) {
  return check<BagProgressModel, Twin>("bag_progress", variant, {rl::sched_random, 200'000},
                                       rl::test_result_data_race);
}

}  // namespace creditloop::relacy
