// The runtime's ticket cell (internal/ticket_cell.hpp): a completion delayed across any number of
// reuses of its cell is refused as stale.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>

#include "internal/ticket_cell.hpp"

namespace creditloop::detail {

// The test-only door of ticket_cell.hpp: moves a free cell to a generation that billions of uses
// would reach.
struct TicketCellTestAccess {
  template <class Cell>
  static void set_free_generation(Cell& cell, std::uint64_t generation) {
    using Generation = decltype(cell.next_generation());
    // relaxed: the test is the cell's only thread.
    cell.state_.store(Cell::pack(static_cast<Generation>(generation), 0),
                      std::memory_order_relaxed);
  }
};

namespace {

using Cell = TicketCell<std::atomic>;

// Where a 32-bit generation wrapped (2^32 uses of one cell, about a minute at full speed), the
// cell's next use must not take the delayed ticket's generation again.
TEST(TicketCell, DelayedTicketStaysStaleWhereA32BitGenerationWrapped) {
  Cell cell;
  const auto delayed = cell.issue();
  ASSERT_EQ(cell.claim(delayed), Cell::Claim::claimed);
  cell.release();
  TicketCellTestAccess::set_free_generation(cell, 0xFFFF'FFFFu);
  const auto live = cell.issue();
  EXPECT_NE(live, delayed);
  EXPECT_EQ(cell.claim(delayed), Cell::Claim::stale);
  EXPECT_TRUE(cell.in_flight()) << "the stale completion took the live use";
  EXPECT_EQ(cell.claim(live), Cell::Claim::claimed);
}

TEST(TicketCell, GenerationAboveTheCellsRangeIsUnknown) {
  Cell cell;
  const auto first = cell.issue();
  EXPECT_EQ(cell.claim(first + 1), Cell::Claim::unknown);
  EXPECT_EQ(cell.claim(0), Cell::Claim::unknown);
  EXPECT_EQ(cell.claim(first), Cell::Claim::claimed);
  EXPECT_EQ(cell.claim(first), Cell::Claim::stale);
}

}  // namespace
}  // namespace creditloop::detail
