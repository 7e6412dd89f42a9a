// creditloop/ticket.hpp: what a dispatched request is completed by.
//
// A ticket names one in-flight record of the core and the generation of that record's use. The
// record is reused after completion with the next generation, so a repeated, stale or forged
// ticket never matches a live record: completing it is refused and changes nothing.
#pragma once

#include <cstdint>

namespace creditloop {

struct Ticket {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;  // never 0 for an issued ticket

  friend constexpr bool operator==(Ticket, Ticket) noexcept = default;
};

}  // namespace creditloop
