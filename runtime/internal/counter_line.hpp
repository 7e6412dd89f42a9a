// runtime/internal/counter_line.hpp: a participant's (or the runtime's) counters, written by the
// dispatcher alone and read by any thread without a round trip. Internal to the runtime.
//
// Under a sequence count: the dispatcher makes the count odd, updates the values, and makes it
// even again; a reader copies the values between two reads of an equal, even count, and retries
// otherwise. So a metrics scrape never waits for the dispatcher (it retries only across an update
// of the same line, a few nanoseconds), and the dispatcher never waits for anyone: two plain
// stores and a fence more than bare counters. Every value is an atomic, so a reader that races an
// update reads no torn word; the count rejects its copy.
//
// `Atomic` and `Fence` are template parameters so that the memory-model checks (tests/relacy) run
// this code: `Fence::fence(order)` is std::atomic_thread_fence in the runtime, and
// `Fence::back_off(attempt)` a reader's wait for a writer inside an update: a bounded spin, then
// a yield, so that a reader never spins without bound on the line of a writer that was preempted.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "creditloop/units.hpp"
#include "internal/spin.hpp"

namespace creditloop::detail {

/// The fence the runtime's counter lines use, and how a reader waits out a writer.
struct ThreadFence {
  static void fence(std::memory_order order) noexcept { std::atomic_thread_fence(order); }
  /// A few pauses cover an update in progress (tens of nanoseconds); a writer still inside after
  /// them was preempted, and spinning on would only keep it off this CPU: yield instead.
  static void back_off(unsigned attempt) noexcept {
    if (attempt < kSpins) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  static constexpr unsigned kSpins = 64;
};

template <template <class> class Atomic>
struct alignas(64) CounterLine {
  static constexpr std::size_t kQueued = 0;
  static constexpr std::size_t kDispatched = 1;  // kMaxClasses + 1 of them
  static constexpr std::size_t kCompleted = kDispatched + kMaxClasses + 1;
  static constexpr std::size_t kCostLow = kCompleted + 1;  // the 128-bit cost, in two halves
  static constexpr std::size_t kCostHigh = kCostLow + 1;
  static constexpr std::size_t kValues = kCostHigh + 1;

  Atomic<std::uint64_t> sequence{0};    // odd while the dispatcher writes
  Atomic<std::uint32_t> generation{0};  // the participant counted here; 0: none
  std::array<Atomic<std::uint64_t>, kValues> values{};
};

/// The dispatcher's side: one update of a line, from construction to destruction.
template <template <class> class Atomic, class Fence = ThreadFence>
class CounterWrite {
 public:
  using Line = CounterLine<Atomic>;

  explicit CounterWrite(Line& line) noexcept
      : line_(line), sequence_(line.sequence.load(std::memory_order_relaxed)) {  // its own
    line_.sequence.store(sequence_ + 1, std::memory_order_relaxed);
    // release: pairs with the acquire fence in read_counters(); a reader that copies any value
    // stored below also sees the odd count above in its second read, and retries.
    Fence::fence(std::memory_order_release);
  }
  ~CounterWrite() {
    // release: pairs with the acquire load in read_counters(); the values are complete.
    line_.sequence.store(sequence_ + 2, std::memory_order_release);
  }
  CounterWrite(const CounterWrite&) = delete;
  CounterWrite& operator=(const CounterWrite&) = delete;

  void add(std::size_t i, std::uint64_t delta) noexcept {
    Atomic<std::uint64_t>& v = line_.values[i];
    v.store(v.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);  // one writer
  }
  void set(std::size_t i, std::uint64_t value) noexcept {
    line_.values[i].store(value, std::memory_order_relaxed);  // ordered by the sequence count
  }
  void add_cost(Balance cost) noexcept {
    const Balance sum = cost_of(line_) + cost;
    set(Line::kCostLow, static_cast<std::uint64_t>(sum));
    set(Line::kCostHigh, static_cast<std::uint64_t>(sum >> 64));
  }
  void reset(std::uint32_t generation) noexcept {
    for (Atomic<std::uint64_t>& v : line_.values) v.store(0, std::memory_order_relaxed);
    line_.generation.store(generation, std::memory_order_relaxed);  // ordered by the count
  }
  void forget() noexcept { line_.generation.store(0, std::memory_order_relaxed); }

  static Balance cost_of(const Line& line) noexcept {
    // relaxed: the writer's own values, or a reader's copy validated by the count.
    const auto low = line.values[Line::kCostLow].load(std::memory_order_relaxed);
    const auto high = line.values[Line::kCostHigh].load(std::memory_order_relaxed);
    return (static_cast<Balance>(static_cast<std::int64_t>(high)) << 64) |
           static_cast<Balance>(low);
  }

 private:
  Line& line_;
  const std::uint64_t sequence_;
};

/// Any thread: a consistent copy of `line` into `out` (ParticipantCounters or RuntimeCounters),
/// and the generation it was counted for.
template <class Fence = ThreadFence, template <class> class Atomic, class Counters>
std::uint32_t read_counters(const CounterLine<Atomic>& line, Counters& out) noexcept {
  using Line = CounterLine<Atomic>;
  for (unsigned attempt = 0;; ++attempt) {
    // acquire: pairs with ~CounterWrite()'s release; the values of that update are visible.
    const std::uint64_t before = line.sequence.load(std::memory_order_acquire);
    if ((before & 1) != 0) {
      Fence::back_off(attempt);
      continue;
    }
    // relaxed, all of them: validated by the count below.
    const std::uint32_t generation = line.generation.load(std::memory_order_relaxed);
    out.queued = line.values[Line::kQueued].load(std::memory_order_relaxed);
    for (std::size_t c = 0; c < out.dispatched.size(); ++c) {
      out.dispatched[c] = line.values[Line::kDispatched + c].load(std::memory_order_relaxed);
    }
    out.completed = line.values[Line::kCompleted].load(std::memory_order_relaxed);
    out.cost_charged = CounterWrite<Atomic, Fence>::cost_of(line);
    // acquire: pairs with CounterWrite's release fence; an update whose values were copied above
    // has made the count odd before this second read.
    Fence::fence(std::memory_order_acquire);
    if (line.sequence.load(std::memory_order_relaxed) == before) return generation;
    Fence::back_off(attempt);
  }
}

}  // namespace creditloop::detail
