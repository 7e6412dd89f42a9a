// The nginx workers' shared room (integrations/nginx/zone_room.hpp, which the module reaches
// through creditloop_zone.cpp): a room of one slot, three workers that each take it twice, use
// what the slot guards (a plain variable: the backend's seat), and give it back; a worker past its
// share (the third) borrows, one of the others marks itself owed between its turns, and the first
// takes its second turn for an urgent request.
//
// Checked: the seat is never used by two workers without a happens-before between them (Relacy's
// data-race detection), and the room ends empty. The order that matters: give()'s release store,
// read by the next take()'s acquire compare-and-swap. The twin weakens that release to relaxed
// (the model's only release read-modify-write on a 64-bit atomic): the next holder's use of the
// seat then races with the last one's.
#include <cstdint>

#include "model.hpp"
#include "zone_room.hpp"

namespace creditloop::relacy {
namespace {

template <class Policy>
struct ZoneRoomModel : rl::test_suite<ZoneRoomModel<Policy>, 3> {
  using Room = nginx::ZoneRoom<With<Policy>::template Atomic>;
  static constexpr std::uint64_t kSlots = 1;

  typename Room::Word words[Room::kWords];
  Room room{words};
  rl::var<int> seat;  // what the one slot guards

  void before() {
    for (auto& w : words) w.store(0, std::memory_order_relaxed);
    seat($) = 0;
  }

  void thread(unsigned index) {
    const bool borrowing = index == 2;
    for (int turn = 0; turn < 2; ++turn) {
      const bool urgent = index == 0 && turn == 1;
      if (index == 1 && turn == 1) room.owe(1);
      if (urgent) room.urge(1);
      while (!room.take(kSlots, borrowing, urgent)) rl::yield(1, $);
      if (urgent) room.urge(-1);
      if (index == 1 && turn == 1) room.owe(-1);
      seat($) = seat($) + 1;
      room.give(1);
    }
  }

  void after() {
    RL_ASSERT(room.used() == 0);
    RL_ASSERT(seat($) == 6);
  }
};

// give()'s fetch_sub is the model's only release read-modify-write.
using Twin =
    Weaken<Holding<std::uint64_t>, Op::rmw, std::memory_order_release, std::memory_order_relaxed>;

}  // namespace

bool zone_room_model(Variant variant) {
  return check<ZoneRoomModel, Twin>("zone_room", variant, {rl::sched_random, 200000},
                                    rl::test_result_data_race);
}

}  // namespace creditloop::relacy
