// Relacy model of a mailbox's listing across a removal and re-registration of its place
// (internal/mailbox.hpp, runtime.cpp remove() and add(), submit_complete.cpp submit() with
// internal/announce.hpp, dispatcher.cpp service() and idle() with internal/idle_env.hpp): an old
// producer sets `listed` and may never push the mailbox; the dispatcher closes and reopens the
// inbox; a new producer submits one request.
//
// Checked: the new registration's request is taken (else Relacy reports the deadlock); the old
// one is taken by the close or refused.
// Order: StaleListings::raise()'s seq_cst store against the dispatcher's seq_cst re-check after
// prepare() (parker.hpp's Dekker pair).
// Twin: the store weakened to release; the dispatcher sleeps for good. Random search.
// Why: docs/testing.md#the-relisting-model
#include "internal/announce.hpp"
#include "internal/idle_env.hpp"
#include "internal/lock_free_bag.hpp"
#include "internal/mailbox.hpp"
#include "internal/parker.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct RelistingModel : rl::test_suite<RelistingModel<Policy>, 3> {
  using Atomics = With<Policy>;
  using Box = detail::Mailbox<Request, Atomics::template Atomic, RequestLink>;
  using Bag = detail::LockFreeBag<Box, Atomics::template Atomic, &Box::next_listed>;
  static constexpr std::uint32_t kOld = 1;
  static constexpr std::uint32_t kNew = 2;

  Box mailbox;
  Bag activations;
  detail::StaleListings<Atomics::template Atomic> stale;
  detail::Parker<Atomics::template Atomic, ModelFutex> parker;
  ModelAtomic<std::uint32_t, Policy> registered{0};  // the new id, as add() returns it
  Request old_request;
  Request new_request;
  bool old_taken = false;    // the dispatcher's
  bool old_refused = false;  // the old producer's

  void before() { mailbox.open(kOld); }

  // submit() and its announcement; `stops` stops the producer before it, after the listing (the
  // old producer's submit can only list: nobody else lists the old registration's mailbox).
  typename Box::Submit submit(Request& r, std::uint32_t registration, bool stops) {
    const typename Box::Submit outcome = mailbox.submit(r, registration);
    if (!stops) detail::announce_submit(outcome, mailbox, activations, stale, parker);
    return outcome;
  }

  void thread(unsigned index) {
    switch (index) {
      case 0:
        old_refused = submit(old_request, kOld, /*stops=*/true) == Box::Submit::refused;
        break;
      case 1:
        dispatch();
        break;
      default:
        while (registered.load(std::memory_order_acquire) == 0) pause();
        RL_ASSERT(submit(new_request, kNew, false) != Box::Submit::refused);
        break;
    }
  }

  // The runtime's idle environment over the activation list and the stale listings, without the
  // spin.
  using Sources = detail::WorkSources<NoWork, Bag, detail::StaleListings<Atomics::template Atomic>,
                                      NoWork, NoWork>;

  // Walks a taken chain; whether it held the new request.
  bool takes_new(Request* r) {
    bool found = false;
    for (; r != nullptr; r = RequestLink::get(*r)) {
      RL_ASSERT(r->payload($) == -1);
      found |= r == &new_request;
      old_taken |= r == &old_request;
    }
    return found;
  }

  void dispatch() {
    (void)takes_new(mailbox.inbox.close());  // remove()
    mailbox.open(kNew);                      // add(), on the same place
    registered.store(kNew, std::memory_order_release);
    detail::RetryBackoff backoff;
    const NoWork none;
    const Sources sources{none, activations, stale, none, none};
    QuietHost host;
    ModelIdleEnv<Sources> env(sources, host, {.reasons = detail::kWakeOnWork});
    bool found = false;
    for (;;) {
      activations.drain([&](Box& m) { found |= takes_new(m.take_listed(true, kNew)); });
      if (stale.take()) found |= takes_new(mailbox.take_if_stale(kNew));
      if (found) return;
      detail::idle_wait(parker, detail::kWakeOnWork, env, backoff);
    }
  }

  void after() { RL_ASSERT(old_taken != old_refused); }
};

// The flag is the model's only bool atomic, and raise() its only store.
using Twin = Weaken<Holding<bool>, Op::store, std::memory_order_seq_cst, std::memory_order_release>;

}  // namespace

bool relisting_model(Variant variant) {
  return check<RelistingModel, Twin>("relisting", variant, {rl::sched_random, 1'000'000},
                                     rl::test_result_deadlock);
}

}  // namespace creditloop::relacy
