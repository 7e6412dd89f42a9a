// Closing an inbox while producers push (internal/inbox.hpp close() and open(), runtime.cpp
// remove() and begin_shutdown()): two producers push two requests each while the dispatcher takes
// once and then closes the inbox, handing back what it held, and opens it again for a new
// registration of the place. The producers push with the old registration's tag throughout, as a
// producer that has not yet heard of the removal does. (The runtime's shutdown flag only picks the
// error code a refused submit reports; closing the inboxes is what refuses it.)
//
// Checked: every request is either taken (by take() or handed back by close()) or refused to its
// producer, never both and never neither; a refusal is final for the old registration (a producer
// whose push was refused has every later push refused too, and nothing lands in the new
// registration's inbox); the handed-back requests come oldest first per producer; the contents
// of every request the dispatcher gets are visible to it (a Relacy var).
//
// The orders that matter: push's CAS releases the request, close()'s exchange acquires it. The
// twin drops the acquire half of close()'s exchange (acq_rel to release): a request pushed after
// the last take() and handed back by close() is read without being handed over, a data race.
// (The release half is shutdown_flag_model's.)
#include <array>

#include "internal/inbox.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

// kNew: the new registration's generation. 2 differs from kOld in the 16-bit tag the head
// carries. 1 + 65536 shares it, and the new registration's own producer (the dispatcher here)
// pushes a request at once: a stale push onto that non-empty inbox passes the tag check, and only
// the inbox's 32-bit generation refuses it (deleting that check fails this model).
template <class Policy, std::uint32_t kNew>
struct CloseModelOf : rl::test_suite<CloseModelOf<Policy, kNew>, 3> {
  using Inbox = detail::Inbox<Request, With<Policy>::template Atomic, RequestLink>;
  static constexpr int kProducers = 2;
  static constexpr int kEach = 2;
  static constexpr std::uint32_t kOld = 1;

  static constexpr bool kSameTag = static_cast<std::uint16_t>(kNew) == kOld;

  Inbox inbox;
  Request fresh;  // the new registration's
  std::array<Request, kProducers * kEach> requests;
  std::array<bool, kProducers * kEach> refused{};  // each producer's own entries
  std::array<int, kProducers * kEach> received{};  // the dispatcher's
  std::array<int, kProducers> next_seq{};          // the dispatcher's

  void before() { inbox.open(kOld); }

  void thread(unsigned index) {
    if (index == 2) {
      receive(inbox.take(kOld));
      receive(inbox.close());
      inbox.open(kNew);
      if constexpr (kSameTag) RL_ASSERT(inbox.push(fresh, kNew) == Inbox::Push::queued_first);
      return;
    }
    for (int i = 0; i < kEach; ++i) {
      const int id = static_cast<int>(index) * kEach + i;
      requests[id].payload(RL_INFO) = 100 + id;
      refused[id] = inbox.push(requests[id], kOld) == Inbox::Push::refused;
    }
  }

  void receive(Request* oldest) {
    for (Request* r = oldest; r != nullptr; r = RequestLink::get(*r)) {
      const int id = static_cast<int>(r - requests.data());
      RL_ASSERT(r->payload(RL_INFO) == 100 + id);
      RL_ASSERT(id % kEach == next_seq[id / kEach]);  // each producer's oldest first
      ++next_seq[id / kEach];
      ++received[id];
    }
  }

  void after() {
    Request* const left = inbox.take(kNew);
    if constexpr (kSameTag) {
      RL_ASSERT(left == &fresh && RequestLink::get(fresh) == nullptr);
    } else {
      RL_ASSERT(left == nullptr);
    }
    for (int id = 0; id < kProducers * kEach; ++id) {
      RL_ASSERT(received[id] + (refused[id] ? 1 : 0) == 1);
      if (id % kEach > 0 && refused[id - 1]) RL_ASSERT(refused[id]);
    }
  }
};

template <class Policy>
using CloseModel = CloseModelOf<Policy, 2>;
template <class Policy>
using CloseSameTagModel = CloseModelOf<Policy, 1 + 65536>;

// The head is the model's only 64-bit atomic; its only acq_rel RMW is close()'s exchange.
using Twin =
    Weaken<Holding<std::uint64_t>, Op::rmw, std::memory_order_acq_rel, std::memory_order_release>;

}  // namespace

bool close_model(Variant variant) {
  // Random, not full: the push's load of the generation after each load of the head took the full
  // search past five minutes.
  return check<CloseModel, Twin>("close", variant, {rl::sched_random, 2'000'000},
                                 rl::test_result_data_race);
}

bool close_same_tag_model(Variant variant) {
  return check<CloseSameTagModel, Twin>("close_same_tag", variant, {rl::sched_random, 2'000'000},
                                        rl::test_result_data_race);
}

}  // namespace creditloop::relacy
