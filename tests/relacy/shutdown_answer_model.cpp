// Who takes what a shutdown(hand_back) command hands back (internal/shutdown_answer.hpp,
// runtime.cpp shutdown() and run_commands()): the dispatcher runs the command, which fills the
// runtime's handed-back list and offers it to the caller with answer(), then releases the command's
// `done`; the caller's wait for `done` either sees it in time or reaches its deadline, and then
// answered() settles whether it leaves or waits a moment more and takes the list.
//
// `done` is a std::binary_semaphore in the runtime: here a word with the semaphore's orders
// (release when the dispatcher posts it, acquire when the caller takes it) and ModelFutex for its
// sleep. The caller's timed wait is one acquire load: reading it unset is reaching the deadline.
//
// Checked: the list ends in exactly one place, the caller's if and only if answered() said so, the
// runtime's otherwise (for the next call); and the caller reads it only after the dispatcher's
// writes are ordered before (Relacy variables: an unordered read is a data race).
//
// The order that matters: `done`'s release, acquired by the caller's wait, publishes the list;
// the CAS on the waiter word is relaxed and decides only who won. The twin weakens `done`'s
// release store to relaxed: the caller then reads the list the dispatcher is writing. Full
// search: two threads and a bounded wait.
#include "internal/shutdown_answer.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

// A handed-back list in the model: how many requests it holds. Moving it reads the source and
// empties it, as RequestList's move does, so both sides' accesses are checked.
struct Parcel {
  rl::var<int> requests{0};

  Parcel() = default;
  Parcel(Parcel&& other) noexcept : requests(0) { take_from(other); }
  Parcel& operator=(Parcel&& other) noexcept {
    take_from(other);
    return *this;
  }
  Parcel(const Parcel&) = delete;
  Parcel& operator=(const Parcel&) = delete;

 private:
  void take_from(Parcel& other) {
    requests($) = static_cast<int>(other.requests($));
    other.requests($) = 0;
  }
};

template <class Policy>
struct ShutdownAnswerModel : rl::test_suite<ShutdownAnswerModel<Policy>, 2> {
  static constexpr int kQueued = 3;

  detail::ShutdownAnswer<Parcel, With<Policy>::template Atomic> answer;
  ModelAtomic<std::uint32_t, Policy> done{0};
  Parcel handed_back;  // the runtime's (the dispatcher's): what the next call would find
  int caller_took = -1;
  bool answered = false;

  void thread(unsigned index) {
    if (index == 0) {
      // The command's work: begin_shutdown() hands back what is queued, then answer().
      handed_back.requests($) = kQueued;
      (void)answer.answer(handed_back);
      done.store(1, std::memory_order_release);  // run_commands(): done.release()
      ModelFutex::wake(done);
      return;
    }
    const bool in_time = done.load(std::memory_order_acquire) != 0;  // try_acquire_until()
    answered = answer.answered(in_time, [&] {
      while (done.load(std::memory_order_acquire) == 0) ModelFutex::wait(done, 0, -1);
    });
    if (answered) {
      Parcel taken = answer.take();
      caller_took = taken.requests($);
    }
  }

  void after() {
    const int left = handed_back.requests($);
    if (answered) {
      RL_ASSERT(caller_took == kQueued && left == 0);
    } else {
      RL_ASSERT(left == kQueued);
    }
  }
};

// `done` is the model's only 32-bit atomic, and the dispatcher's store its only store.
using Twin =
    Weaken<Holding<std::uint32_t>, Op::store, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool shutdown_answer_model(Variant variant) {
  return check<ShutdownAnswerModel, Twin>("shutdown_answer", variant, {rl::sched_full, 0},
                                          rl::test_result_data_race);
}

}  // namespace creditloop::relacy
