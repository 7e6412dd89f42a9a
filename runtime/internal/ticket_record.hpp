// runtime/internal/ticket_record.hpp: a ticket's record, as the dispatcher issues it and a
// completer claims and publishes it, and the pool's completion blocks, which carry a worker's
// completions instead. Internal to the runtime.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "creditloop/detail/chunked_table.hpp"
#include "creditloop/request.hpp"
#include "creditloop/ticket.hpp"
#include "creditloop/units.hpp"
#include "internal/completion_block.hpp"
#include "internal/ticket_cell.hpp"

namespace creditloop::detail {

// A ticket's record: the cell completers claim, and what the dispatcher needs to apply the
// completion. One cache line, so completers of neighbouring tickets do not share one.
struct alignas(64) TicketRecord {
  TicketCell<std::atomic> cell;
  std::atomic<TicketRecord*> next_completed{nullptr};  // the completion list's link
  std::int64_t cost = 0;  // written by the completer that claimed the cell, before publishing it
  Ticket core;            // dispatcher only: the core's ticket for this dispatch
  std::uint32_t index = 0;
  std::uint64_t generation = 0;  // dispatcher only: the cell's current use
  // Written by the dispatcher before issue(), whose release publishes it to the completer that
  // claims the cell: that completer gives the request back to its caller (request.hpp).
  RequestHook* request = nullptr;
};
static_assert(sizeof(TicketRecord) == 64 && alignof(TicketRecord) == 64,
              "completers of neighbouring tickets never share a line");

// One completion of a pool worker, as its block carries it (completion_block.hpp).
struct PoolCompletion {
  std::uint32_t index = 0;  // the ticket record's
  // The ticket's low 32 bits, checked by the dispatcher in debug builds: a pool ticket cannot be
  // stale (its worker owns it from issue), so the check needs no more.
  std::uint32_t generation = 0;
  std::int64_t cost = 0;  // nano-credits
};
// A worker publishes each completion as its job ends (worker_pool.cpp), in a block of its own or
// behind the entries of the block it lent last while the dispatcher has not closed it. 31 entries
// and a header make a block eight lines; a worker's eight blocks carry 248 completions before it
// falls back to the ticket records, which move the record's line to the worker and back. In
// bench_runtime (256 slots, one or two workers) blocks of one entry sent 57 to 83 % of the
// completions through the records and pushed once per completion; blocks of 31 sent under 0.5 %
// and pushed once per 14 to 20 completions (docs/performance.md, "Toward many cores").
inline constexpr std::size_t kPoolBlockEntries = 31;
using PoolBlock = CompletionBlock<std::atomic, PoolCompletion, kPoolBlockEntries>;
static_assert(sizeof(PoolBlock) == 16 + 16 * kPoolBlockEntries,
              "the header takes one entry's place");
static_assert(sizeof(PoolCompletion) == 16, "four completions to a cache line");

static_assert(ChunkedTable<TicketRecord>::kMax >= kMaxInFlight);

// Gives each record of a new chunk of the ticket table its index, which completers return.
inline void number_tickets(TicketRecord* chunk, std::size_t first) noexcept {
  for (std::size_t i = 0; i < ChunkedTable<TicketRecord>::kChunk; ++i) {
    chunk[i].index = static_cast<std::uint32_t>(first + i);
  }
}

}  // namespace creditloop::detail
