// Relacy model of a withdrawal's look into an inbox (internal/mailbox.hpp take_unlisted(), which
// runtime.cpp Runtime::Impl::withdraw() calls): the dispatcher takes a mailbox's inbox while two
// producers submit to it and list it as submit() does (internal/announce.hpp announce_submit()),
// the mailbox listed, half-listed or not, then drains the activation list and takes each listed
// mailbox with take_listed(), as take_inbox() does.
//
// Checked: every request is taken exactly once with its contents visible; the mailbox is never
// listed twice; the flag is clear and the inbox empty once nothing is listed.
// Order: the producers' release CAS on the inbox head -> the take's acquiring exchange (seq_cst).
// Twin: that exchange weakened to relaxed; the read of a link races the producer's write of it.
// Why: docs/testing.md#the-withdrawal-model
#include <array>
#include <memory>

#include "internal/announce.hpp"
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
  NoSleeper waker;                     // no dispatcher sleeps here: the relisting model's

  // The activation list as announce_submit() sees it, counting the listings first.
  struct CountedList {
    WithdrawalModel& model;
    void push(Mailbox& m) {
      RL_ASSERT(model.on_list.fetch_add(1, std::memory_order_relaxed) == 0);  // never twice
      model.list.push(m);
    }
  };
  // One registration only: no listing is ever stale.
  struct NoStale {
    static void raise() { RL_ASSERT(false && "listed by another registration"); }
  };

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
    CountedList listing{*this};
    NoStale stale;
    detail::announce_submit(result, *mailbox, listing, stale, waker);
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
