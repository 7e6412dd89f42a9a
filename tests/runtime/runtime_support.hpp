// tests/runtime/runtime_support.hpp: what the runtime's tests share: a request type, a sink that
// records, options built around it, and latches and counters to wait on. The tests synchronise on
// what the runtime does (a sink that signals each dispatch, a snapshot that round-trips through
// the dispatcher), never on elapsed time; a deadline only turns a hang into a failure.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/runtime.hpp"

namespace creditloop::runtime_tests {

using namespace std::chrono_literals;
inline constexpr auto kDeadline = 60s;  // a hang fails the test instead of stalling CI

struct Req : RequestHook {
  int id = 0;
};
inline int id_of(const RequestHook* r) { return static_cast<const Req*>(r)->id; }

// Collects what the sink receives, on the dispatcher thread, and lets the test wait for it.
class Recorder {
 public:
  void operator()(const Decision& d) {
    std::lock_guard lock(mutex_);
    seen_.push_back(d);
    changed_.notify_all();
  }
  // Waits until at least n dispatches were seen; false at the deadline.
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kDeadline, [&] { return seen_.size() >= n; });
  }
  std::vector<Decision> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  std::size_t count() {
    std::lock_guard lock(mutex_);
    return seen_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Decision> seen_;
};

// Completes every request dispatched so far and, as room returns, every later one, until `total`
// were dispatched: a runtime is destroyed only with nothing in flight.
inline void complete_all(Runtime& rt, Recorder& recorder, std::size_t total) {
  std::size_t done = 0;
  while (done < total) {
    ASSERT_TRUE(recorder.wait_for(done + 1));
    const std::vector<Decision> seen = recorder.seen();
    for (; done < seen.size(); ++done) (void)rt.complete(seen[done].ticket, 0);  // may be done
  }
}

inline RuntimeOptions options_with(Recorder& recorder, std::uint32_t slots = 64) {
  RuntimeOptions o;
  o.config = reference_config();
  o.slots = slots;
  o.sink = [&recorder](const Decision& d) { recorder(d); };
  return o;
}

// The same, with room only once the test sets `room` (and calls wake()).
inline RuntimeOptions options_with_room_flag(Recorder& recorder, std::atomic<bool>& room) {
  RuntimeOptions o = options_with(recorder);
  o.room = [&room] { return room.load(std::memory_order_relaxed); };  // a test flag: no pairing
  return o;
}

// Returns once every command posted before it has run on the dispatcher: a round trip of its
// own, which runs after them.
inline void after_posted_commands(Runtime& rt) { (void)rt.find(""); }

// shutdown(mode) without waiting for what is in flight, returning once the dispatcher has begun
// it: what it handed back, and what is in flight then.
inline ShutdownReport shutdown_begun(Runtime& rt, ShutdownMode mode) {
  ShutdownReport report = rt.shutdown(mode, kDeadline, ShutdownWait::answered);
  EXPECT_TRUE(report.answered);
  return report;
}

// A sink that completes every request at once with `cost`, from the dispatcher thread.
struct CompletingSink {
  Runtime* runtime = nullptr;
  double cost = 0;
  Recorder* recorder = nullptr;
  void operator()(const Decision& d) const {
    ASSERT_TRUE(runtime->complete(d.ticket, cost).ok());
    if (recorder != nullptr) (*recorder)(d);
  }
};

// Collects what on_error is told, from whichever thread.
class Errors {
 public:
  void operator()(const CallbackError& e) {
    std::lock_guard lock(mutex_);
    seen_.push_back(e);
  }
  std::vector<CallbackError> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::vector<CallbackError> seen_;
};

inline std::string what(const CallbackError& e) {
  try {
    std::rethrow_exception(e.error);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// A latch the test opens; waiting past the deadline fails instead of hanging.
class Latch {
 public:
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(changed_.wait_for(lock, kDeadline, [&] { return open_; }));
  }
  void reset() {
    std::lock_guard lock(mutex_);
    open_ = false;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
};

// Counts toward a target that another thread waits for.
class Counter {
 public:
  void add() {
    std::lock_guard lock(mutex_);
    ++count_;
    changed_.notify_all();
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kDeadline, [&] { return count_ >= n; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t count_ = 0;
};

}  // namespace creditloop::runtime_tests
