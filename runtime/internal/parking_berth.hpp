// runtime/internal/parking_berth.hpp: where a runtime's parking word (parker.hpp) lives, a cache
// line leased from a process-wide list when the runtime is constructed and recycled onto it when
// it is destroyed, never freed. Internal to the runtime.
//
//  - A completer loads the berth's address before its push and touches nothing else of the
//    runtime after it: it may still notify after shutdown() has reported finished.
//  - A completer late by a whole runtime may wake a later runtime on the same berth, once, for
//    nothing; no wake-up is lost.
//
// Why: docs/design.md#shutdown
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
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
  /// The parker's notify(), for a caller that reaches the parker only on the paths that wake:
  /// the berth's address is known without a load, so the load of the parker's stays on them.
  void notify(std::uint32_t reasons) const noexcept { berth_->parker.notify(reasons); }

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
