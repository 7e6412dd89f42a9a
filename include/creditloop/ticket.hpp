// creditloop/ticket.hpp: what a dispatched request is completed by.
//
// A ticket names one in-flight record of the core and the generation of that record's use. The
// record is reused after completion with the next generation, so a repeated or stale ticket, or
// one made up that names no use issued so far, never matches a live record: completing it is
// refused and changes nothing. A ticket is not a secret, though: one copied, or guessed right,
// that names a use now in flight completes that use, as its holder's completion would.
//
// Why 64 bits of generation: records are reused last in first out, so one busy record takes
// nearly every use. With 32 bits it wrapped after 2^32 uses (about a minute at full speed), and a
// completion delayed that long then matched a live use of its record. The runtime keeps 62 bits
// of it beside a 2-bit phase in one atomic word, the core 63 (it counts two steps per use): 2^62
// uses of one record, at a billion uses a second (more than the dispatcher can make), take 146
// years, so a stale ticket is refused however long it was delayed.
//
// Why an issuer: every core and every runtime numbers its records from 0, so without it the first
// ticket of one is the first ticket of every other, and a sharded embedder that completed on the
// wrong shard would complete a stranger's request there. A ticket carries the identity of the
// core or runtime that issued it (detail/issuer.hpp), and every other refuses it as unknown.
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
