// The activation of a queue (internal/mailbox.hpp, internal/lock_free_bag.hpp, runtime.cpp submit()
// and take_inbox()): producers submit to two participants' mailboxes; a submit that finds the
// inbox empty and wins the `listed` flag pushes the mailbox on the activation list, and the
// dispatcher drains the list and takes each listed mailbox's inbox. Producer 0 submits to
// mailbox 0 then 1, producer 1 to mailbox 1 then 0; the dispatcher drains twice during the run and
// after() keeps draining until nothing is listed, as the runtime's dispatcher does once the
// producers are quiet.
//
// Checked: no request is stranded (once nothing is listed, every submitted request was taken,
// each exactly once, with its contents visible); a mailbox is never on the list twice; the flag is
// clear once nothing is listed.
//
// The orders that matter: the activation list's push (its compare-and-swap's release half)
// publishes the relaxed store of the mailbox's link, and drain's acquire exchange reads it, so the
// dispatcher never follows a link from before this push. The twin drops that release (seq_cst ->
// acquire on the list head's compare-and-swap only): the dispatcher can read the mailbox's link as
// it was before the push, so it walks past or off the list, loses a listed mailbox whose flag stays
// set, and that mailbox's requests are stranded, as after() reports.
//
// Not a twin: weakening the `listed` exchange and store, even to relaxed. mailbox.hpp asks for
// seq_cst there, reading them as a store-then-load pair; but a submit reaches the flag only after
// its CAS found the inbox emptied, that is after reading take()'s exchange, which releases the
// cleared flag to the CAS's acquire, so the flag exchange that follows cannot miss the clear. Such
// a twin passes (checked, both relaxed), so it would show nothing.
#include <array>
#include <memory>

#include "internal/lock_free_bag.hpp"
#include "internal/mailbox.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct ActivationModel : rl::test_suite<ActivationModel<Policy>, 3> {
  using Mailbox = detail::Mailbox<Request, With<Policy>::template Atomic, RequestLink>;
  using List = detail::LockFreeBag<Mailbox, With<Policy>::template Atomic, &Mailbox::next_listed>;
  static constexpr int kMailboxes = 2;
  static constexpr int kRequests = 4;
  static constexpr std::uint32_t kGeneration = 3;

  // Mailbox is over-aligned and Relacy allocates the test itself with plain malloc: the mailboxes
  // get storage of their own from the aligned operator new.
  std::unique_ptr<Mailbox[]> mailboxes = std::make_unique<Mailbox[]>(kMailboxes);
  List list;
  std::array<Request, kRequests> requests;
  // How many times each mailbox is on the list. Relaxed, so that counting adds no order of its own.
  ModelAtomic<int, AsWritten> on_list[kMailboxes] = {ModelAtomic<int, AsWritten>(0),
                                                     ModelAtomic<int, AsWritten>(0)};
  std::array<int, kRequests> taken{};  // the dispatcher's, then after()'s

  void before() {
    for (int m = 0; m < kMailboxes; ++m) {
      mailboxes[m].place = static_cast<std::uint32_t>(m);
      mailboxes[m].open(kGeneration);
    }
  }

  void thread(unsigned index) {
    if (index == 2) {
      for (int i = 0; i < 2; ++i) drain();
      return;
    }
    const int p = static_cast<int>(index);
    submit(2 * p, p);          // producer 0: request 0 to mailbox 0; producer 1: request 2 to 1
    submit(2 * p + 1, 1 - p);  // producer 0: request 1 to mailbox 1; producer 1: request 3 to 0
  }

  void submit(int id, int m) {
    Request& r = requests[id];
    r.payload(RL_INFO) = 100 + id;
    Mailbox& mailbox = mailboxes[m];
    const typename Mailbox::Submit result = mailbox.submit(r, kGeneration);
    RL_ASSERT(result != Mailbox::Submit::refused);
    if (result == Mailbox::Submit::queued_and_listed) {
      RL_ASSERT(on_list[m].fetch_add(1, std::memory_order_relaxed) == 0);  // never listed twice
      list.push(mailbox);
    }
  }

  std::size_t drain() {
    return list.drain([&](Mailbox& mailbox) {
      RL_ASSERT(on_list[mailbox.place].fetch_add(-1, std::memory_order_relaxed) == 1);
      for (Request* r = mailbox.take_listed(true, kGeneration); r != nullptr;
           r = RequestLink::get(*r)) {
        const int id = static_cast<int>(r - requests.data());
        RL_ASSERT(r->payload(RL_INFO) == 100 + id);
        ++taken[id];
      }
    });
  }

  void after() {
    // The dispatcher's next turns: drain until nothing is listed.
    while (drain() > 0 || list.maybe_nonempty()) continue;
    for (int id = 0; id < kRequests; ++id) RL_ASSERT(taken[id] == 1);
    for (int m = 0; m < kMailboxes; ++m) {
      RL_ASSERT(!mailboxes[m].listed.load(std::memory_order_relaxed));
      RL_ASSERT(mailboxes[m].inbox.take(kGeneration) == nullptr);
    }
  }
};

// Only the list's push does a compare-and-swap on a pointer (the inbox's head is a tagged word).
using Twin = Weaken<HoldingPointers, Op::cas, std::memory_order_seq_cst, std::memory_order_acquire>;

}  // namespace

bool activation_model(Variant variant) {
  return check<ActivationModel, Twin>("activation", variant, {rl::sched_random, 1'000'000},
                                      rl::test_result_user_assert_failed);
}

}  // namespace creditloop::relacy
