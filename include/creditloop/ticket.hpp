// creditloop/ticket.hpp: what a dispatched request is completed by: the index of one in-flight
// record, the generation of that record's use, and the core or runtime that issued it.
//
//  - A repeated or stale ticket, one made up that names no use issued so far, or one of another
//    issuer never matches a live record: completing it is refused and changes nothing.
//  - A ticket is not a secret: one copied, or guessed right, that names a use now in flight
//    completes that use, as its holder's completion would.
//  - The generation does not wrap in practice: 2^62 uses of one record take 146 years.
//
// Why: docs/design.md#ticket-generations
#pragma once

#include <cstdint>

namespace creditloop {

struct Ticket {
  std::uint32_t index = 0;
  std::uint32_t issuer = 0;      // never 0 for an issued ticket
  std::uint64_t generation = 0;  // never 0 for an issued ticket

  friend constexpr bool operator==(Ticket, Ticket) noexcept = default;
};

}  // namespace creditloop
