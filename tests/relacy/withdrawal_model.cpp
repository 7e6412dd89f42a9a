// A withdrawal's look into an inbox (internal/mailbox.hpp take_unlisted(), runtime.cpp
// Runtime::Impl::withdraw()): Runtime::withdraw takes the participant's inbox into the core while
// its mailbox may be listed, half-listed (a submitter between its push onto the empty inbox and
// its exchange of the flag) or not listed at all, and the activation list carries on around it.
// Two producers submit to one mailbox (producer 0 two requests, producer 1 one); the dispatcher
// takes the inbox as a withdrawal does, then drains the activation list once; after() drains until
// nothing is listed, as the dispatcher's next turns do.
//
// Checked: every request is taken exactly once, by the withdrawal's take or by an activation,
// with its contents visible; the mailbox is never on the list twice (a take that cleared the flag
// while the mailbox stayed listed would let the next submit list it again); the flag is clear and
// the inbox empty once nothing is listed.
//
// The order that matters: the take's exchange acquires the pushes' release CAS, so the dispatcher
// reads each request's link and contents as its producer wrote them. The twin weakens that
// exchange (seq_cst, the only read-modify-write on the inbox head here) to relaxed: the
// dispatcher's read of a link is then a data race with the producer's write of it.
#include <array>
#include <memory>

#include "internal/lock_free_bag.hpp"
#include "internal/mailbox.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct WithdrawalModel : rl::test_suite<WithdrawalModel<Policy>, 3> {
  using Mailbox = detail::Mailbox<Request, With<Policy>::template Atomic, RequestLink>;
  using List = detail::LockFreeBag<Mailbox, With<Policy>::template Atomic, &Mailbox::next_listed>;
  static constexpr int kRequests = 3;
  static constexpr std::uint32_t kGeneration = 3;

  // Over-aligned: storage of its own from the aligned operator new (see activation_model.cpp).
  std::unique_ptr<Mailbox> mailbox = std::make_unique<Mailbox>();
  List list;
  std::array<Request, kRequests> requests;
  // Times the mailbox is on the list. Relaxed, so that counting adds no order of its own.
  ModelAtomic<int, AsWritten> on_list{0};
  std::array<int, kRequests> taken{};  // the dispatcher's, then after()'s

  void before() { mailbox->open(kGeneration); }

  void thread(unsigned index) {
    if (index == 2) {
      take_all(mailbox->take_unlisted(kGeneration));  // the withdrawal's look
      drain();
      return;
    }
    if (index == 0) {
      submit(0);
      submit(2);
    } else {
      submit(1);
    }
  }

  void submit(int id) {
    Request& r = requests[id];
    r.payload(RL_INFO) = 100 + id;
    const typename Mailbox::Submit result = mailbox->submit(r, kGeneration);
    RL_ASSERT(result != Mailbox::Submit::refused);
    if (result == Mailbox::Submit::queued_and_listed) {
      RL_ASSERT(on_list.fetch_add(1, std::memory_order_relaxed) == 0);  // never listed twice
      list.push(*mailbox);
    }
  }

  void take_all(Request* oldest) {
    for (Request* r = oldest; r != nullptr; r = RequestLink::get(*r)) {
      const int id = static_cast<int>(r - requests.data());
      RL_ASSERT(r->payload(RL_INFO) == 100 + id);
      ++taken[id];
    }
  }

  std::size_t drain() {
    return list.drain([&](Mailbox& m) {
      RL_ASSERT(on_list.fetch_add(-1, std::memory_order_relaxed) == 1);
      take_all(m.take_listed(true, kGeneration));
    });
  }

  void after() {
    while (drain() > 0 || list.maybe_nonempty()) continue;
    for (int id = 0; id < kRequests; ++id) RL_ASSERT(taken[id] == 1);
    RL_ASSERT(!mailbox->listed.load(std::memory_order_relaxed));
    RL_ASSERT(mailbox->take_unlisted(kGeneration) == nullptr);
  }
};

using Twin =
    Weaken<Holding<std::uint64_t>, Op::rmw, std::memory_order_seq_cst, std::memory_order_relaxed>;

}  // namespace

bool withdrawal_model(Variant variant) {
  return check<WithdrawalModel, Twin>("withdrawal", variant, {rl::sched_random, 1'000'000},
                                      rl::test_result_data_race);
}

}  // namespace creditloop::relacy
