// The option checks and the dispatcher's placement: bad options refused, the thread named and
// pinned, the default spin. The tests synchronise on what the
// runtime does, never on elapsed time (runtime_support.hpp).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/runtime.hpp"
#include "internal/spin.hpp"
#include "runtime_support.hpp"

namespace creditloop {
namespace {

using namespace runtime_tests;

TEST(RuntimeOptions, TheDispatcherThreadIsNamedAndPinned) {
  // Pinned to the last CPU this process may use, whichever that is; the dispatcher's own
  // affinity must then be that CPU alone, which it is not unless the runtime pinned it.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "one CPU: pinned and unpinned look the same";
  int target = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) target = c;
  }
  std::mutex m;
  std::string name;
  cpu_set_t seen_affinity;
  CPU_ZERO(&seen_affinity);
  std::binary_semaphore seen{0};
  RuntimeOptions o;
  o.config = reference_config();
  o.thread_name = "cl-dispatch-test-long-name";
  o.cpu = target;
  Runtime* self = nullptr;
  o.sink = [&](const Decision& d) {
    char buffer[32] = {};
    pthread_getname_np(pthread_self(), buffer, sizeof buffer);
    {
      std::lock_guard lock(m);
      name = buffer;
      pthread_getaffinity_np(pthread_self(), sizeof seen_affinity, &seen_affinity);
    }
    (void)self->complete(d.ticket, 0);
    seen.release();
  };
  Runtime rt(std::move(o));
  self = &rt;
  const ParticipantId alice = *rt.add("alice", "pro", 1);
  Req r;
  ASSERT_TRUE(rt.submit(alice, r).ok());
  ASSERT_TRUE(seen.try_acquire_for(kDeadline));
  std::lock_guard lock(m);
  EXPECT_EQ(name, "cl-dispatch-tes");  // the kernel keeps 15 characters
  EXPECT_EQ(CPU_COUNT(&seen_affinity), 1);
  EXPECT_TRUE(CPU_ISSET(target, &seen_affinity));
}

TEST(RuntimeOptions, BadOptionsAreRefusedAtConstruction) {
  auto make = [](auto change) {
    RuntimeOptions o;
    o.config = reference_config();
    o.sink = [](const Decision&) {};
    change(o);
    return o;
  };
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.slots = 0; })), std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.sink = nullptr; })), std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.workers = 2; })), std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.batch = 0; })), std::invalid_argument);
  EXPECT_THROW(
      Runtime(make([](RuntimeOptions& o) { o.room_recheck = std::chrono::nanoseconds{0}; })),
      std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.cpu = CPU_SETSIZE + 1; })),
               std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.config.classes = 0; })),
               std::invalid_argument);
  EXPECT_THROW(Runtime(make([](RuntimeOptions& o) { o.spin = std::chrono::nanoseconds{-1}; })),
               std::invalid_argument);
}

// Unless told, the dispatcher spins only when a CPU is left over for it beyond itself and the
// workers; otherwise its spin would take the CPU from the threads it waits on.
TEST(RuntimeOptions, TheDispatcherSpinsByDefaultOnlyWithACpuToSpare) {
  using creditloop::detail::default_spin;
  const std::chrono::nanoseconds none{0};
  EXPECT_EQ(default_spin(2, 1), none);
  EXPECT_EQ(default_spin(8, 7), none);
  EXPECT_EQ(default_spin(1, 0), none);
  EXPECT_GT(default_spin(2, 0), none);
  EXPECT_GT(default_spin(64, 8), none);
  EXPECT_GT(default_spin(0, 8), none);  // unknown CPU count: spin, as a dedicated server would
}

}  // namespace
}  // namespace creditloop
