// integrations/nginx/zone_entry.hpp: one nginx worker's entry in the module's shared-memory zone,
// written by that worker alone and read by every worker, without a lock. Internal to the module:
// its C code reaches it through creditloop_zone.h.
//
// An entry is a run of 64-bit words:
//   stamp       nginx's milliseconds at the worker's last publish; 0: never. Release store in
//               publish(), acquire load in live(): a reader that sees a stamp sees every value
//               stored before it, and the generation beside it.
//   generation  of the configuration the worker runs; relaxed, ordered by the stamp.
//   values      what the worker publishes (the module decides the layout); relaxed stores by the
//               one writer, relaxed loads by readers after live(). Each value stands alone: a
//               reader may see one from the latest publish beside a later one's, never one from
//               before the publish whose stamp it saw.
// Every operation is a few loads and stores: no allocation, no wait.
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
// Why: docs/nginx.md#the-hand-off-through-the-zone
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace creditloop::nginx {

template <template <class> class Atomic>
class ZoneEntry {
 public:
  using Word = Atomic<std::uint64_t>;
  static constexpr std::size_t kHeaderWords = 2;  // the stamp, the generation

  /// Words an entry of `values` values takes.
  static constexpr std::size_t words(std::size_t values) noexcept { return kHeaderWords + values; }

  /// A view of the entry that starts at `words`, which holds words(values) live words.
  explicit ZoneEntry(Word* words) noexcept : words_(words) {}

  // ---- the writer: the worker that owns the entry, on its one thread ----

  /// Sets one value; readers see it at the latest with the next publish().
  void store(std::size_t value, std::uint64_t v) noexcept {
    // relaxed: the stamp's release store in publish() orders it for readers.
    words_[kHeaderWords + value].store(v, std::memory_order_relaxed);
  }

  /// Adds to one value. Not a read-modify-write: the owner is the only writer, so a load and a
  /// store cannot lose an update, and readers need only a value that is not torn.
  void add(std::size_t value, std::uint64_t delta) noexcept {
    Word& w = words_[kHeaderWords + value];
    // relaxed: the owner's own last store, which no other thread writes.
    const std::uint64_t before = w.load(std::memory_order_relaxed);
    // relaxed: as in store().
    w.store(before + delta, std::memory_order_relaxed);
  }

  /// Publishes every value stored so far under `generation`, stamped `stamp_ms` (0 is taken as 1:
  /// 0 means never published).
  void publish(std::uint64_t generation, std::uint64_t stamp_ms) noexcept {
    // relaxed: the stamp's release store below orders it for readers.
    words_[1].store(generation, std::memory_order_relaxed);
    // release: pairs with the acquire load of the stamp in live(), in the readers.
    words_[0].store(stamp_ms == 0 ? 1 : stamp_ms, std::memory_order_release);
  }

  // ---- readers: any worker, the owner included ----

  /// Whether the entry is a worker of `generation` that published no more than `ttl_ms` before
  /// `now_ms`. Only after it returns true are the values load() reads this generation's.
  [[nodiscard]] bool live(std::uint64_t generation, std::uint64_t now_ms,
                          std::uint64_t ttl_ms) const noexcept {
    // acquire: pairs with the release store of the stamp in publish(), in the writer.
    const std::uint64_t stamp = words_[0].load(std::memory_order_acquire);
    // Each worker's clock is the time its event loop last looked at, so another worker's stamp
    // may be a few milliseconds ahead of `now_ms`: that entry is fresh, not (as unsigned
    // arithmetic would have it) ages old.
    if (stamp == 0 || (now_ms > stamp && now_ms - stamp > ttl_ms)) return false;
    // relaxed: ordered by the acquire load of the stamp above.
    return words_[1].load(std::memory_order_relaxed) == generation;
  }

  /// One value, after live() returned true.
  [[nodiscard]] std::uint64_t load(std::size_t value) const noexcept {
    // relaxed: ordered by the acquire load of the stamp in live().
    return words_[kHeaderWords + value].load(std::memory_order_relaxed);
  }

 private:
  Word* words_;
};

}  // namespace creditloop::nginx
