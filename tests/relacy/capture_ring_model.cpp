// The capture's hand-off from the dispatcher to its writer thread (internal/spsc_ring.hpp, used by
// capture.cpp): the producer (the dispatcher) pushes three records into a ring of two slots, and
// a push that finds the ring full is dropped, never waited on; the consumer (the writer thread)
// drains twice, wherever that falls; after() drains the rest, as close() does.
//
// Checked: every record pushed is taken exactly once, in push order, with the contents the
// producer wrote (a Relacy var: reading it unordered is a data race); a dropped record is never
// taken; and the producer never writes a cell the consumer is still reading (the same var: a
// write racing the read is a data race too).
//
// The orders that matter: try_push()'s release store of tail_ publishes the record to drain()'s
// acquire load of tail_, and drain()'s release store of head_ hands the slots back to
// try_push()'s acquire load of head_. The twin weakens both release stores to relaxed (the two
// positions are the model's only 64-bit atomics): the consumer can then read a record it was
// never handed, or the producer overwrite one being read, and Relacy reports a data race.
#include <array>
#include <memory>

#include "internal/spsc_ring.hpp"
#include "model.hpp"

namespace creditloop::relacy {
namespace {

// A ring cell whose contents Relacy checks for races: a copy reads the source and writes the
// destination through Relacy vars.
struct Slot {
  Slot() = default;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot& other) {
    payload(RL_INFO) = other.payload(RL_INFO);
    return *this;
  }
  ~Slot() = default;
  rl::var<int> payload{-1};
};

template <class Policy>
struct CaptureRingModel : rl::test_suite<CaptureRingModel<Policy>, 2> {
  using Ring = detail::SpscRing<Slot, With<Policy>::template Atomic>;
  static constexpr int kRecords = 3;

  // The positions are over-aligned and Relacy allocates the test itself with plain malloc: the
  // ring gets storage of its own from the aligned operator new.
  std::unique_ptr<Ring> ring = std::make_unique<Ring>(2);
  std::array<bool, kRecords> pushed{};  // the producer's, then after()'s
  std::array<int, kRecords> taken{};    // the consumer's, then after()'s: ids in order
  int taken_count = 0;

  void thread(unsigned index) {
    if (index == 0) {
      for (int id = 0; id < kRecords; ++id) {
        Slot record;
        record.payload(RL_INFO) = 100 + id;
        pushed[id] = ring->try_push(record);
      }
    } else {
      for (int i = 0; i < 2; ++i) drain();
    }
  }

  std::size_t drain() {
    return ring->drain(
        [&](const Slot& s) {
          const int id = s.payload(RL_INFO) - 100;
          RL_ASSERT(id >= 0 && id < kRecords);
          RL_ASSERT(taken_count < kRecords);
          taken[taken_count++] = id;
        },
        ring->capacity());
  }

  void after() {
    while (drain() > 0) continue;
    int expected = 0;
    for (int id = 0; id < kRecords; ++id) {
      if (!pushed[id]) continue;
      RL_ASSERT(expected < taken_count && taken[expected] == id);  // once, in push order
      ++expected;
    }
    RL_ASSERT(expected == taken_count);  // nothing dropped was taken
    RL_ASSERT(pushed[0] && pushed[1]);   // an empty ring of two takes two
  }
};

// The ring's positions are the model's only 64-bit atomics; their only release stores are
// tail_'s in try_push() and head_'s in drain().
using Twin =
    Weaken<Holding<std::uint64_t>, Op::store, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool capture_ring_model(Variant variant) {
  return check<CaptureRingModel, Twin>("capture_ring", variant, {rl::sched_full, 0},
                                       rl::test_result_data_race);
}

}  // namespace creditloop::relacy
