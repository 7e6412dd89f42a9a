// The per-participant push and take (internal/inbox.hpp): two producers push two requests each onto
// one inbox while the dispatcher takes twice; after() takes what is left.
//
// Checked: every request is taken exactly once; each producer's requests come out of take() in
// the order it pushed them (take reverses the LIFO chain); the request's contents, written before
// the push, are visible to the dispatcher (a Relacy var: reading it unordered is a data race); and
// a push reports queued_first exactly once per take that found requests, since that report is how
// the runtime learns to activate the participant.
//
// The orders that matter: push's CAS releases the request and its link, take's exchange acquires
// them. The twin drops the release half of push's CAS (seq_cst -> acquire): the dispatcher then
// reads a request it was never handed, which Relacy reports as a data race, first on the queue
// link (a Relacy variable, queue_link.hpp) that take()'s reversal reads in Inbox::reversed().
#include <array>

#include "internal/inbox.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct InboxModel : rl::test_suite<InboxModel<Policy>, 3> {
  static constexpr int kProducers = 2;
  static constexpr int kEach = 2;
  static constexpr std::uint16_t kTag = 5;
  using Inbox = detail::Inbox<Request, With<Policy>::template Atomic, RequestLink>;

  Inbox inbox;
  std::array<Request, kProducers * kEach> requests;
  std::array<int, kProducers> queued_first{};  // each producer's own count
  std::array<int, kProducers> next_seq{};      // the dispatcher's, then after()'s
  int nonempty_takes = 0;

  void before() { inbox.open(kTag); }

  void thread(unsigned index) {
    if (index < kProducers) {
      produce(static_cast<int>(index));
    } else {
      dispatch();
    }
  }

  void produce(int producer) {
    for (int i = 0; i < kEach; ++i) {
      const int id = producer * kEach + i;
      Request& r = requests[id];
      r.payload(RL_INFO) = 100 + id;
      const typename Inbox::Push result = inbox.push(r, kTag);
      RL_ASSERT(result != Inbox::Push::refused);
      if (result == Inbox::Push::queued_first) ++queued_first[producer];
    }
  }

  // Two takes, wherever they fall among the pushes; after() takes the rest. A bounded dispatcher
  // keeps the full search finite: a spinning one would have no end to explore.
  void dispatch() {
    for (int i = 0; i < 2; ++i) receive(inbox.take(kTag));
  }

  void receive(Request* oldest) {
    if (oldest != nullptr) ++nonempty_takes;
    for (Request* r = oldest; r != nullptr; r = RequestLink::get(*r)) {
      const int id = static_cast<int>(r - requests.data());
      RL_ASSERT(r->payload(RL_INFO) == 100 + id);
      // In order and once: the next unseen request of its producer, never an earlier one.
      RL_ASSERT(id % kEach == next_seq[id / kEach]);
      ++next_seq[id / kEach];
    }
  }

  void after() {
    receive(inbox.take(kTag));
    RL_ASSERT(next_seq[0] == kEach && next_seq[1] == kEach);
    RL_ASSERT(queued_first[0] + queued_first[1] == nonempty_takes);
  }
};

using Twin =
    Weaken<Holding<std::uint64_t>, Op::cas, std::memory_order_seq_cst, std::memory_order_acquire>;

}  // namespace

bool inbox_model(Variant variant) {
  // Random, not full: the push's load of the generation after each load of the head took the full
  // search past an hour.
  return check<InboxModel, Twin>("inbox", variant, {rl::sched_random, 2'000'000},
                                 rl::test_result_data_race);
}

}  // namespace creditloop::relacy
