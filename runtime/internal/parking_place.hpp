// runtime/internal/parking_place.hpp: where a runtime's dispatcher parks, in memory that outlives
// the runtime. Internal to the runtime.
//
// A completer publishes its completion with one exchange, then wakes the dispatcher through the
// parking word (parker.hpp). Between the two the dispatcher may take the completion, apply it,
// reach zero in flight and exit; shutdown() reports finished and the embedder destroys the
// runtime, while the completer has still to read the parking word. So the word must not be freed
// with the runtime: a runtime leases a place from a process-wide list when it is constructed and
// recycles it onto that list when it is destroyed, and places are never freed. A completer reads
// the place's address before its exchange, and touches nothing else of the runtime's after it.
//
// A completer late by a whole runtime's lifetime may then notify a later runtime that leased the
// same place: it finds a reason bit of that runtime's dispatcher, or none. At worst it wakes that
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

class ParkingPlace {
 public:
  ParkingPlace() : place_(lease()) {}
  ~ParkingPlace() { recycle(place_); }
  ParkingPlace(const ParkingPlace&) = delete;
  ParkingPlace& operator=(const ParkingPlace&) = delete;

  [[nodiscard]] RuntimeParker& parker() const noexcept { return place_->parker; }

 private:
  struct alignas(64) Place {  // a line of its own: producers and completers load it on every wake
    RuntimeParker parker;
  };
  struct FreePlaces {
    std::mutex mutex;
    std::vector<Place*> free;  // guarded by mutex
    std::size_t made = 0;      // guarded by mutex: every place there is, leased or free
  };
  // Never destroyed, so that a runtime destroyed during static destruction still recycles its
  // place, and the places stay reachable (not leaks) to the end.
  static FreePlaces& free_places() {
    static FreePlaces* const places = new FreePlaces;
    return *places;
  }
  static Place* lease() {
    FreePlaces& places = free_places();
    std::lock_guard lock(places.mutex);
    if (!places.free.empty()) {
      Place* const place = places.free.back();
      places.free.pop_back();
      return place;
    }
    places.free.reserve(places.made + 1);  // room for every place: recycle() cannot fail
    Place* const place = new Place;
    ++places.made;
    return place;
  }
  static void recycle(Place* place) noexcept {
    FreePlaces& places = free_places();
    std::lock_guard lock(places.mutex);
    places.free.push_back(place);  // within the capacity reserved when the place was made
  }

  Place* const place_;
};

}  // namespace creditloop::detail
