// A submit that races shutdown reports shut_down (internal/accepting_flag.hpp and inbox.hpp, as
// runtime.cpp begin_shutdown() and submit_complete.cpp submit() run them): the dispatcher's
// stop_accepting() clears the runtime's accepting flag and then closes the inbox; two producers
// each push one request, and a producer whose push is refused asks the flag for its error.
//
// Checked: a push refused by the close reads the flag cleared (the submit reports shut_down, not
// unknown_participant), and every request is either taken by the close or refused, never both.
//
// The orders that matter: close()'s exchange releases the flag's store (acq_rel), and push reads
// the head with acquire (its first load, and a failed CAS). The twin drops the release half of
// close()'s exchange (acq_rel to acquire): on a weak-memory machine a refused producer may then
// read the flag still set, and the assertion fails.
#include <array>

#include "internal/accepting_flag.hpp"
#include "internal/inbox.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct ShutdownFlagModel : rl::test_suite<ShutdownFlagModel<Policy>, 3> {
  using Inbox = detail::Inbox<Request, With<Policy>::template Atomic, RequestLink>;
  static constexpr int kProducers = 2;
  static constexpr std::uint16_t kTag = 1;

  Inbox inbox;
  detail::AcceptingFlag<With<Policy>::template Atomic> accepting;
  std::array<Request, kProducers> requests;
  std::array<bool, kProducers> refused{};  // each producer's own entry
  std::array<int, kProducers> received{};  // the dispatcher's

  void before() { inbox.open(kTag); }

  void thread(unsigned index) {
    if (index == kProducers) {
      accepting.stop_accepting([&] {  // begin_shutdown()
        for (Request* r = inbox.close(); r != nullptr; r = RequestLink::get(*r)) {
          ++received[static_cast<std::size_t>(r - requests.data())];
        }
      });
      return;
    }
    refused[index] = inbox.push(requests[index], kTag) == Inbox::Push::refused;
    if (refused[index]) RL_ASSERT(accepting.shut_down());  // submit(): the error is shut_down
  }

  void after() {
    for (int i = 0; i < kProducers; ++i) RL_ASSERT(received[i] + (refused[i] ? 1 : 0) == 1);
  }
};

// The head is the model's only 64-bit atomic; its only acq_rel RMW is close()'s exchange.
using Twin =
    Weaken<Holding<std::uint64_t>, Op::rmw, std::memory_order_acq_rel, std::memory_order_acquire>;

}  // namespace

bool shutdown_flag_model(Variant variant) {
  return check<ShutdownFlagModel, Twin>("shutdown_flag", variant, {rl::sched_full, 0},
                                        rl::test_result_user_assert_failed);
}

}  // namespace creditloop::relacy
