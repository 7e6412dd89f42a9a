#pragma once

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "creditloop/capture.hpp"
#include "creditloop/runtime.hpp"
#include "spin_until.hpp"

namespace creditloop::test {

// The runtime in steady state: producers submit, the dispatcher decides and hands each request to
// a sink, the test completes it. The sink passes tickets back through a single-producer,
// single-consumer ring of its own, so that nothing but the runtime could allocate. With
// `capture`, a CaptureObserver records the run too, its writer thread formatting and writing
// while the count runs.
class RuntimeRun : public ::testing::Test {
 protected:
  static constexpr std::uint32_t kSlots = 16;
  static constexpr std::size_t kRing = 64;  // more than kSlots: the sink never waits

  struct Req : RequestHook {
    int participant = 0;
  };

  explicit RuntimeRun(bool capture = false) {
    RuntimeOptions o;
    o.config = reference_config();
    o.slots = kSlots;
    o.expected_participants = 64;
    o.expected_in_flight = kSlots;
    if (capture) {
      capture_path_ = testing::TempDir() + "creditloop-alloc-capture.jsonl";
      CaptureOptions c;
      c.files = CaptureFiles{capture_path_, std::uint64_t{1} << 30, 1};  // no rotation
      c.setup = capture_setup(o);
      c.expected_in_flight = kSlots;
      c.expected_participants = 64;
      c.idle_poll = std::chrono::milliseconds(1);  // it writes while the count runs
      capture_ = std::make_unique<CaptureObserver>(std::move(c));
      o.observer = capture_.get();
    }
    o.sink = [this](const Decision& d) {
      const std::size_t tail = tail_.load(std::memory_order_relaxed);  // this thread's own
      ring_[tail % kRing] = d;
      // release: pairs with the acquire in take(); publishes the entry just written.
      tail_.store(tail + 1, std::memory_order_release);
    };
    runtime_.emplace(std::move(o));
    for (int i = 0; i < 8; ++i) {
      ids_.push_back(*runtime_->add("t" + std::to_string(i), i % 2 == 0 ? "pro" : "lite", 1));
    }
    requests_.resize(kSlots);
  }

  // Waits for the next dispatch (the dispatcher is busy or about to be: no sleeping).
  Decision take() {
    // acquire: pairs with the sink's release store.
    test::spin_until([&] { return tail_.load(std::memory_order_acquire) != head_; }, "a dispatch");
    return ring_[head_++ % kRing];
  }

  // `cycles` rounds of: complete the oldest dispatch, submit its request again. Returns the
  // completions that were refused (none expected).
  int cycle(int cycles) {
    int refused = 0;
    for (int i = 0; i < cycles; ++i) {
      const Decision d = take();
      refused += runtime_->complete(d.ticket, (i % 4) * 0.25).ok() ? 0 : 1;
      Req& r = static_cast<Req&>(*d.request);
      r.participant = (r.participant + 1) % static_cast<int>(ids_.size());
      refused += runtime_->submit(ids_[static_cast<std::size_t>(r.participant)], r).ok() ? 0 : 1;
    }
    return refused;
  }

  void fill() {
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      requests_[i].participant = static_cast<int>(i % ids_.size());
      ASSERT_TRUE(runtime_->submit(ids_[i % ids_.size()], requests_[i]).ok());
    }
  }

  void drain() {
    for (std::uint32_t i = 0; i < kSlots; ++i) (void)runtime_->complete(take().ticket, 0);
  }

  std::array<Decision, kRing> ring_{};
  std::atomic<std::size_t> tail_{0};
  std::size_t head_ = 0;  // the test thread's
  std::vector<ParticipantId> ids_;
  std::vector<Req> requests_;
  std::string capture_path_;
  std::unique_ptr<CaptureObserver> capture_;  // outlives the runtime
  std::optional<Runtime> runtime_;

 public:
  ~RuntimeRun() override {
    runtime_.reset();
    capture_.reset();
    if (!capture_path_.empty()) std::remove(capture_path_.c_str());
  }
};

}  // namespace creditloop::test
