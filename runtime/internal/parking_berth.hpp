// runtime/internal/parking_berth.hpp: where a runtime's dispatcher parks, in memory that outlives
// the runtime. Internal to the runtime.
//
// A completer publishes its completion with one exchange, then wakes the dispatcher through the
// parking word (parker.hpp). Between the two the dispatcher may take the completion, apply it,
// reach zero in flight and exit; shutdown() reports finished and the embedder destroys the
// runtime, while the completer has still to read the parking word. So the word must not be freed
// with the runtime: a runtime leases a berth from a process-wide list when it is constructed and
// recycles it onto that list when it is destroyed, and berths are never freed. A completer reads
// the berth's address before its exchange, and touches nothing else of the runtime's after it.
//
// A completer late by a whole runtime's lifetime may then notify a later runtime that leased the
// same berth: it finds a reason bit of that runtime's dispatcher, or none. At worst it wakes that
// dispatcher once for nothing, which re-checks its work and parks again, as after any spurious
// futex return; a wake-up is never lost, since the later runtime's own wakers notify the same
// word.
//
// Why this and not a count of the threads inside complete() that shutdown waits for: that count
// would cost every completion two read-modify-writes on one line shared by every completer, and
// this costs none (the completion path does exactly what it did, with the word's address loaded
// from the runtime instead of computed). The memory it keeps is one cache line per runtime alive
// at once, at the process's peak, reused by later runtimes.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "internal/futex.hpp"
#include "internal/parker.hpp"

namespace creditloop::detail {

using RuntimeParker = Parker<std::atomic, LinuxFutex>;

class ParkingBerth {
 public:
  ParkingBerth() : berth_(lease()) {}
  ~ParkingBerth() { recycle(berth_); }
  ParkingBerth(const ParkingBerth&) = delete;
  ParkingBerth& operator=(const ParkingBerth&) = delete;

  [[nodiscard]] RuntimeParker& parker() const noexcept { return berth_->parker; }

 private:
  struct alignas(64) Berth {  // a line of its own: producers and completers load it on every wake
    RuntimeParker parker;
  };
  struct FreeBerths {
    std::mutex mutex;
    std::vector<Berth*> free;  // guarded by mutex
    std::size_t made = 0;      // guarded by mutex: every berth there is, leased or free
  };
  // Never destroyed, so that a runtime destroyed during static destruction still recycles its
  // berth, and the berths stay reachable (not leaks) to the end.
  static FreeBerths& free_berths() {
    static FreeBerths* const berths = new FreeBerths;
    return *berths;
  }
  static Berth* lease() {
    FreeBerths& berths = free_berths();
    std::lock_guard lock(berths.mutex);
    if (!berths.free.empty()) {
      Berth* const berth = berths.free.back();
      berths.free.pop_back();
      return berth;
    }
    berths.free.reserve(berths.made + 1);  // room for every berth: recycle() cannot fail
    Berth* const berth = new Berth;
    ++berths.made;
    return berth;
  }
  static void recycle(Berth* berth) noexcept {
    FreeBerths& berths = free_berths();
    std::lock_guard lock(berths.mutex);
    berths.free.push_back(berth);  // within the capacity reserved when the berth was made
  }

  Berth* const berth_;
};

}  // namespace creditloop::detail
