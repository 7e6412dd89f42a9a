// runtime/internal/completion_handover.hpp: how a completion goes from its completer to the
// dispatcher, and how the dispatcher takes it. A completer claims its ticket's cell and writes the
// cost into the record (the record is then its own), links the records of a batch, and pushes
// them on the completion bag as one chain; a pool worker adds its completion to the block it lent
// last, while the dispatcher has not closed it, or fills another of its blocks and lends it. The
// dispatcher drains both bags, applies each record and each block's entries, and returns each
// block to its worker after its entries. The runtime runs these (submit_complete.cpp,
// worker_pool.cpp, dispatcher.cpp); so do the Relacy models charge_back, pool_completion and
// parking. Internal to the runtime: not installed, not part of the public API.
//
//   completer                                  dispatcher
//   claim(): the cell's acquire CAS            drain / take_blocks(): the bags' acquire exchanges
//   write the cost, link the chain (relaxed)   read each cost and link, apply
//   publish(): the bag's seq_cst CAS  ------>  close() a block (acquire), read its entries,
//   then notify(kWakeOnRoom)                   return_to_worker() (release, acquired by
//   append(): the block's release CAS ------>  available())
//
// The bag's CAS releases the costs and links written before it, and the drain's exchange acquires
// them: the order the charge_back twin weakens. An entry appended to a lent block is released by
// the count's CAS and acquired by close(), and a block's release store of 0 returns it only after
// the dispatcher has read it: the orders the pool_completion twins weaken.
//
// `Cost` says how the record's cost is reached, so that a model can make it a Relacy variable
// (whose unordered access is a data race); the runtime's is the member itself, the same loads and
// stores as `record.cost`. The atomic type comes with the record, the bag and the block, which are
// templated on it.
//
// Why: docs/design.md#the-hand-offs
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "internal/parker.hpp"
#include "internal/test_hooks.hpp"

namespace creditloop::detail {

/// The cost as the runtime ships it: the plain member `cost` of the record.
template <class Record>
struct MemberCost {
  [[nodiscard]] static std::int64_t get(const Record& record) noexcept { return record.cost; }
  static void set(Record& record, std::int64_t cost) noexcept { record.cost = cost; }
};

/// A completer: claims `record`'s cell for its use `generation` and, if it won, writes `cost`,
/// which is then this thread's until publish_completions() hands the record over. What the claim
/// said is returned.
template <class Cost, class Record>
[[nodiscard]] auto claim_completion(Record& record, std::uint64_t generation,
                                    std::int64_t cost) noexcept {
  // acquire CAS: pairs with issue()'s release, which publishes what the dispatcher wrote first.
  const auto claim = record.cell.claim(generation);
  if (claim == decltype(claim)::claimed) Cost::set(record, cost);
  return claim;
}

/// A completer with a batch: appends a claimed record to the chain that one publish_completions()
/// hands over; until then only this thread reads the links.
template <class Record>
void chain(Record*& first, Record*& last, Record& record) noexcept {
  if (first == nullptr) {
    first = &record;
  } else {
    // relaxed: published by the push_chain() CAS in publish_completions() (release).
    last->next_completed.store(&record, std::memory_order_relaxed);
  }
  last = &record;
}

/// A completer: hands the chain first..last (one record: both the same) to the dispatcher and
/// wakes it if it sleeps for room. Once the push has run the dispatcher may apply the records,
/// finish, and the runtime be destroyed: after it this touches only `waker`, which the caller
/// passes bound before the call (the runtime's parker lives in its parking berth, which outlives
/// the runtime).
template <class Bag, class Record, class Waker>
void publish_completions(Bag& completions, Record& first, Record& last, Waker& waker) noexcept {
  // seq_cst CAS: releases the costs and links to the dispatcher's drain (exchange, acquire), and is
  // the work the dispatcher's re-check after Parker::prepare() reads (idle_env.hpp).
  completions.push_chain(first, last);
  CREDITLOOP_TEST_HOOK(completion_pushed);
  waker.notify(kWakeOnRoom);
}

/// A pool worker: lends its opened block to the dispatcher and wakes it if it sleeps for room.
template <class Blocks, class Block, class Waker>
void lend_block(Blocks& blocks, Block& block, Waker& waker) noexcept {
  block.open();        // relaxed: the push publishes it
  blocks.push(block);  // seq_cst CAS: as in publish_completions()
  waker.notify(kWakeOnRoom);
}

/// A pool worker, as a job ends: `fill(entry)` writes its completion into the block it lent last
/// (`last`), while the dispatcher has not closed it; otherwise into the first of its blocks `own`
/// that is its own again, looked for after `last` so that the blocks are lent in turn, which it
/// then lends. Returns false when the dispatcher holds every one; the worker then completes
/// through the ticket's record and never waits for the dispatcher. `last` starts at own.size().
///
/// An entry added to a lent block is as soon in the dispatcher's hands as a block of its own
/// (the next drain finds the block on the bag, or the dispatcher that took it reads its count
/// afterwards), and it costs the worker no push: while the dispatcher is busy, a worker's
/// completions share one push on the bag's head instead of one each.
template <class Blocks, class OwnBlocks, class Fill, class Waker>
bool lend_completion(Blocks& blocks, OwnBlocks& own, std::size_t& last, Fill&& fill,
                     Waker& waker) noexcept {
  // No notify after an append: the block is on the bag, whose push woke the dispatcher, or the
  // dispatcher holds it and has yet to close it.
  if (last < own.size() && own[last].append(fill)) return true;
  const std::size_t first = last < own.size() ? last + 1 : 0;
  for (std::size_t i = 0; i < own.size(); ++i) {
    const std::size_t at = (first + i) % own.size();
    auto& block = own[at];
    // acquire: pairs with take_blocks()' return_to_worker(); the entry is written after the
    // dispatcher's reads of the block's last lend.
    if (!block.available()) continue;
    last = at;
    fill(block.entries[0]);
    lend_block(blocks, block, waker);
    return true;
  }
  return false;
}

/// The dispatcher: applies every block entry the pool's workers have lent
/// (`apply_entry(entry)`), and returns each block to its worker once its entries are applied.
/// Says whether there was any. (The records' bag it drains as it is: each record is applied
/// whole.)
template <class Blocks, class ApplyEntry>
bool take_blocks(Blocks& blocks, ApplyEntry&& apply_entry) {
  // The drain's acquire exchange pairs with lend_block()'s push: the entries written before it
  // are read here after it.
  return blocks.drain([&](auto& block) {
    // acquire exchange: pairs with every append's release CAS; later appends fail.
    const std::uint32_t count = block.close();
    for (std::uint32_t i = 0; i < count; ++i) apply_entry(block.entries[i]);
    block.return_to_worker();  // release: pairs with available()'s acquire; after every read
  }) > 0;
}

}  // namespace creditloop::detail
