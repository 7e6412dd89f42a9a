// Relacy model of a queue's activation (internal/mailbox.hpp, internal/lock_free_bag.hpp,
// runtime.cpp submit() and take_inbox()): two producers submit to two mailboxes, the dispatcher
// drains the activation list and takes each listed inbox.
//
// Checked: no request is stranded or taken twice; a mailbox is never listed twice.
// Orders:
//  - the list head's CAS (push): seq_cst; its release half publishes the mailbox's relaxed link.
//  - drain's exchange of the list head: acquire, reads that link.
//  - `listed` exchange and store: seq_cst, as mailbox.hpp asks (relaxed would pass; no twin).
// Twin: the push's CAS weakened to acquire; a listed mailbox is lost and its requests stranded.
// Why: docs/testing.md#the-activation-model
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
