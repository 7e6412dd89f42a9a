// Relacy model of the nginx workers' hand-off through the shared zone
// (integrations/nginx/zone_entry.hpp, reached through creditloop_zone.cpp): a writer of the new
// generation publishes twice over an entry a stale configuration left; a reader reads it twice.
//
// Checked: a read live for the new generation counts only that generation's values, never the
// stale one's; the stale entry is never live for the new generation.
// Order: publish()'s release store of the stamp -> live()'s acquire load of it.
// Twin: that store weakened to relaxed; the reader sees the new stamp beside stale values.
// Why: docs/testing.md#the-zone_entry-model
#include <array>
#include <cstdint>

#include "model.hpp"
#include "zone_entry.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct ZoneEntryModel : rl::test_suite<ZoneEntryModel<Policy>, 2> {
  using Entry = nginx::ZoneEntry<With<Policy>::template Atomic>;
  static constexpr std::size_t kValues = 2;
  static constexpr std::uint64_t kStaleGeneration = 1;
  static constexpr std::uint64_t kGeneration = 2;
  // Stamps, in ms: the stale state's, then the two publishes'. The reader reads at kNow.
  static constexpr std::uint64_t kStaleStamp = 5;
  static constexpr std::uint64_t kFirstStamp = 10;
  static constexpr std::uint64_t kSecondStamp = 20;
  static constexpr std::uint64_t kNow = 20;
  // Times to live as an epoch's reader uses them: the stale state's stamp is older than either.
  static constexpr std::uint64_t kAnyPublish = kNow - kFirstStamp;  // both publishes pass
  static constexpr std::uint64_t kLastOnly = kNow - kSecondStamp;   // only the second passes

  // Value i of publish p (0: the stale state) is p * 100 + i, so a value names its publish.
  static constexpr std::uint64_t value(std::uint64_t publish, std::size_t i) {
    return publish * 100 + i;
  }
  static constexpr std::uint64_t publish_of(std::uint64_t v) { return v / 100; }

  std::array<typename Entry::Word, Entry::words(kValues)> words;
  Entry entry{words.data()};

  // Single-threaded, before the workers: the state a stale configuration's worker left.
  void before() {
    for (std::size_t i = 0; i < kValues; ++i) entry.store(i, value(0, i));
    entry.publish(kStaleGeneration, kStaleStamp);
  }

  void thread(unsigned index) {
    if (index == 0) {
      write(1, kFirstStamp);
      write(2, kSecondStamp);
    } else {
      read_any_publish();
      read_last_publish();
    }
  }

  void write(std::uint64_t publish, std::uint64_t stamp) {
    for (std::size_t i = 0; i < kValues; ++i) entry.store(i, value(publish, i));
    entry.publish(kGeneration, stamp);
  }

  void read_any_publish() {
    if (!entry.live(kGeneration, kNow, kAnyPublish)) return;
    for (std::size_t i = 0; i < kValues; ++i) {
      const std::uint64_t v = entry.load(i);
      RL_ASSERT(v % 100 == i);
      RL_ASSERT(publish_of(v) >= 1);  // never the stale generation's value
    }
  }

  void read_last_publish() {
    if (!entry.live(kGeneration, kNow, kLastOnly)) return;
    for (std::size_t i = 0; i < kValues; ++i) RL_ASSERT(entry.load(i) == value(2, i));
  }

  void after() {
    // Everything is visible once both have finished: the last publish, live, and its values.
    RL_ASSERT(entry.live(kGeneration, kNow, kLastOnly));
    for (std::size_t i = 0; i < kValues; ++i) RL_ASSERT(entry.load(i) == value(2, i));
    RL_ASSERT(!entry.live(kStaleGeneration, kNow, kAnyPublish));
  }
};

// The stamp's store in publish() is the model's only release store.
using Twin =
    Weaken<Holding<std::uint64_t>, Op::store, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool zone_entry_model(Variant variant) {
  return check<ZoneEntryModel, Twin>("zone_entry", variant, {rl::sched_full, 0},
                                     rl::test_result_user_assert_failed);
}

}  // namespace creditloop::relacy
