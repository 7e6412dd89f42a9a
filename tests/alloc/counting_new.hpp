// A global operator new (plain, nothrow and over-aligned) that counts on every thread and can be
// told to fail, for the allocation tests: the hot paths allocate nothing once capacity is
// reserved. Replacing operator new affects everything linked with it, hence their own binary
// (creditloop_alloc_tests), and its definitions in counting_new.cpp alone.
#pragma once

#include <atomic>

namespace creditloop::test {

// Atomics only because operator new may run on any thread; every access is relaxed since the
// test reads them on the thread that wrote them, after the measured section.
extern std::atomic<long> g_allocations;
extern std::atomic<bool> g_counting;
// Set on a thread, makes that thread's allocations through the plain operator new fail.
extern thread_local bool t_refusing;
// Marks the dispatcher thread (its room test sets it), whose allocations fail while
// g_refusing_dispatcher is raised: the test switches the dispatcher's memory off and on from its
// own thread.
extern thread_local bool t_on_dispatcher;
extern std::atomic<bool> g_refusing_dispatcher;

}  // namespace creditloop::test
