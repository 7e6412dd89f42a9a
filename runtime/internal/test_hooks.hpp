// runtime/internal/test_hooks.hpp: places where the runtime's own tests stop or fail a thread at a
// chosen point, to show a window that no timing could open reliably: a completer or a submitter
// preempted after its push, a thread that cannot start, a queue that cannot allocate.
//
// Compiled only into creditloop_runtime_hooked, the copy of the runtime that its tests link
// (CREDITLOOP_TEST_HOOKS): the shipped library has no hook, and each CREDITLOOP_TEST_HOOK* below
// compiles to nothing there. A hook is a function pointer that a test sets before it starts the
// runtime and clears after; the runtime calls it on whichever thread reaches the point.
#pragma once

#if defined(CREDITLOOP_TEST_HOOKS)
#include <atomic>
#include <cstddef>

namespace creditloop::detail::test_hooks {

/// A completer (Runtime::complete_nano(), CompletionBatch::flush()) between the push of its
/// records onto the completion list and its wake of the dispatcher.
inline std::atomic<void (*)()> completion_pushed{nullptr};
/// A submitter between its push onto an empty inbox and the listing of its mailbox
/// (Mailbox::submit): the window in which later submits of that participant are in the inbox
/// but on no list.
inline std::atomic<void (*)()> submit_pushed_first{nullptr};
/// A submitter between the listing of its mailbox (Mailbox::submit set `listed`) and the push of
/// the mailbox onto the activation list: the window in which the participant may be removed and
/// its place reused by another.
inline std::atomic<void (*)()> submit_listed{nullptr};
/// A thread that posted a command to the dispatcher (run_on_dispatcher()), before its wake of the
/// dispatcher: a poster preempted there must hold up no decision.
inline std::atomic<void (*)()> command_posted{nullptr};
/// A submitter inside its push onto an inbox (Inbox::push), after it read the head and before its
/// compare-and-swap: the window in which the participant may be removed and its place reused.
inline std::atomic<void (*)()> inbox_pushing{nullptr};
/// A producer inside its push onto one of the runtime's lists (activations, completions, the
/// pool's blocks), after it read the list's head and before its compare-and-swap: a preemption,
/// or a cgroup's quota, stops a thread anywhere, and this is where a stop could hide the most.
inline std::atomic<void (*)()> list_pushing{nullptr};
/// A pool worker adding a completion to the block it lent last (CompletionBlock::append), after
/// it wrote the entry and before the compare-and-swap that counts it: the window in which the
/// dispatcher may close the block without it.
inline std::atomic<void (*)()> block_appending{nullptr};
/// The dispatcher after it took the commands posted so far and before it runs them: a dispatcher
/// held up there, as by a slow sink or a preemption, answers no round trip until it goes on.
inline std::atomic<void (*)()> commands_taken{nullptr};
/// The caller of Runtime::snapshot_participants() between two of its chunks: the dispatcher is
/// free to decide until the next chunk's command.
inline std::atomic<void (*)()> snapshot_between_chunks{nullptr};
/// Before the constructor starts thread `n` (the workers from 0, then the dispatcher). May throw,
/// as std::thread's constructor does when the system cannot start a thread.
inline std::atomic<void (*)(std::size_t n)> thread_starting{nullptr};
/// Before the dispatcher hands a batch to the pool's queue: false makes the hand-over fail, as
/// moodycamel's enqueue_bulk does when it cannot allocate a block.
inline std::atomic<bool (*)()> pool_accepts{nullptr};

template <class... P, class... A>
void run(std::atomic<void (*)(P...)>& hook, A... args) {
  // acquire: pairs with the test's store of the hook (its state is visible to the hook).
  if (void (*const f)(P...) = hook.load(std::memory_order_acquire)) f(args...);
}
inline bool ask(std::atomic<bool (*)()>& hook, bool otherwise) {
  // acquire: as in run().
  bool (*const f)() = hook.load(std::memory_order_acquire);
  return f != nullptr ? f() : otherwise;
}

}  // namespace creditloop::detail::test_hooks

#define CREDITLOOP_TEST_HOOK(name, ...) \
  ::creditloop::detail::test_hooks::run(::creditloop::detail::test_hooks::name, ##__VA_ARGS__)
#define CREDITLOOP_TEST_HOOK_OR(name, otherwise) \
  ::creditloop::detail::test_hooks::ask(::creditloop::detail::test_hooks::name, otherwise)
#else
#define CREDITLOOP_TEST_HOOK(name, ...) ((void)0)
#define CREDITLOOP_TEST_HOOK_OR(name, otherwise) (otherwise)
#endif
