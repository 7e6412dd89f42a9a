// Two holders of one object, each letting go once; the last to let go frees it. An exchange whose
// client left while it was queued is held by its withdrawal (Server::withdraw) and by the
// runtime's side (its hand-out or hand-back), in either order, on different threads.
#pragma once

#include <atomic>

namespace creditloop::server {

template <template <class> class Atomic = std::atomic>
class LastHolder {
 public:
  /// Whether this caller let go last: the object is then its own to free. The acq_rel decrement
  /// pairs with the other holder's: what each wrote to the object before letting go is visible
  /// to the one that frees it (tests/relacy/last_holder_model.cpp).
  [[nodiscard]] bool let_go() noexcept {
    return holders_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }

 private:
  Atomic<int> holders_{2};
};

}  // namespace creditloop::server
