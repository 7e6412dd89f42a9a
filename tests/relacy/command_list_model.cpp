// Commands posted to the dispatcher (internal/command_list.hpp, internal/announce.hpp as
// runtime.cpp run_on_dispatcher() runs it, and dispatcher.cpp service() and its exit): two threads
// each write a command and post it, then notify the parker; the dispatcher takes and runs what is
// posted, sleeping between takes through the runtime's idle loop (detail::idle_wait() with
// internal/idle_env.hpp) with the list's seq_cst re-check, and once it ran a command it closes
// the list, as it does when it exits, and runs what the close took. A post refused by the close
// runs its command itself (in the runtime, under the exit mutex).
//
// Checked: every command runs exactly once, and its contents (a Relacy variable written before the
// post) are visible where it runs; no wake-up is lost (a lost one sleeps for good: deadlock).
//
// The orders that matter: post's CAS releases the command and take's exchange acquires it. The
// twin weakens take's exchange to relaxed: the dispatcher then reads a command it has not
// acquired, and Relacy reports the data race. Random search: with the idle loop's yields and
// three threads the full search does not end in minutes.
#include <array>

#include "internal/announce.hpp"
#include "internal/command_list.hpp"
#include "internal/idle_env.hpp"
#include "internal/parker.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct Command {
  ModelAtomic<Command*, Policy> next{nullptr};
  rl::var<int> payload{0};
  int runs = 0;  // checked after the threads joined
};

template <class Policy>
struct CommandListModel : rl::test_suite<CommandListModel<Policy>, 3> {
  using Atomics = With<Policy>;
  using Node = Command<Policy>;
  using List = detail::CommandList<Node, Atomics::template Atomic, &Node::next>;
  static constexpr int kPosters = 2;

  List list;
  detail::Parker<Atomics::template Atomic, ModelFutex> parker;
  std::array<Node, kPosters> commands;
  int ran = 0;  // the dispatcher's

  static void run(Node& c) {
    RL_ASSERT(c.payload($) == 42);
    ++c.runs;
  }

  void thread(unsigned index) {
    if (index == kPosters) {
      dispatch();
      return;
    }
    Node& c = commands[index];
    c.payload($) = 42;
    if (!detail::announce_command(list, c, parker)) {
      run(c);  // the dispatcher has exited: the caller runs it (under the exit mutex)
    }
  }

  // The runtime's idle environment over the command list alone, without the spin.
  using Sources = detail::WorkSources<List, NoWork, NoWork, NoWork, NoWork>;

  void run_chain(Node* c) {
    while (c != nullptr) {
      Node* const next = c->next.load(std::memory_order_relaxed);  // read before it is run
      run(*c);
      ++ran;
      c = next;
    }
  }

  void dispatch() {
    detail::RetryBackoff backoff;
    const NoWork none;
    const Sources sources{list, none, none, none, none};
    QuietHost host;
    ModelIdleEnv<Sources> env(sources, host, {.reasons = detail::kWakeOnWork});
    for (;;) {
      run_chain(list.take());
      if (ran > 0) break;
      detail::idle_wait(parker, detail::kWakeOnWork, env, backoff);
    }
    run_chain(list.close());
  }

  void after() {
    for (const Node& c : commands) RL_ASSERT(c.runs == 1);
  }
};

// The head is the model's only pointer atomic with an acquire RMW: take()'s exchange (close()'s
// is acq_rel and stays).
using Twin = Weaken<HoldingPointers, Op::rmw, std::memory_order_acquire, std::memory_order_relaxed>;

}  // namespace

bool command_list_model(Variant variant) {
  return check<CommandListModel, Twin>("command_list", variant, {rl::sched_random, 500'000},
                                       rl::test_result_data_race);
}

}  // namespace creditloop::relacy
