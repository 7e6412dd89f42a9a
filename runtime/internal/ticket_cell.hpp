// runtime/internal/ticket_cell.hpp: the state of one runtime ticket, completed from any thread.
// Internal to the runtime: not installed, not part of the public API.
//
//   bits 2-63   the generation of the cell's current use (62 bits: no wrap in practice, ticket.hpp)
//   bits 0-1    its phase: free, in flight (issued), claimed (completed, not yet applied)
//
//   free -> in flight      issue(), the dispatcher: a store, release
//   free -> claimed        issue_claimed(), the dispatcher for its own pool: a store, relaxed
//   in flight -> claimed   claim(), any completer: one CAS, acquire on success and failure
//   claimed -> free        release(), the dispatcher: a store, relaxed
//
// `Atomic` is a template parameter so that the memory-model checks (tests/relacy) run this code.
//
// Why: docs/design.md#the-hand-offs
#pragma once

#include <atomic>
#include <cstdint>

namespace creditloop::detail {

// Defined by the tests alone, which move a cell to a generation no test could reach by use.
struct TicketCellTestAccess;

template <template <class> class Atomic>
class TicketCell {
 public:
  enum class Claim : std::uint8_t { claimed, unknown, stale };

  /// The largest generation a cell issues; a ticket above it is forged.
  static constexpr std::uint64_t kMaxGeneration = (std::uint64_t{1} << 62) - 1;

  /// Dispatcher only, on a free cell. Starts a new use and returns its generation (never 0).
  std::uint64_t issue() noexcept {
    const std::uint64_t generation = next_generation();
    // release: pairs with the acquire of claim(); publishes the record written before issue().
    state_.store(pack(generation, kInFlight), std::memory_order_release);
    return generation;
  }

  /// Dispatcher only, on a free cell. Starts a new use already claimed, for a completer the
  /// dispatcher chose itself (its worker pool): that completer owns the cell from the start, and
  /// any other completion of the ticket fails as stale. Returns the generation (never 0).
  std::uint64_t issue_claimed() noexcept {
    const std::uint64_t generation = next_generation();
    // relaxed: the chosen completer learns of the ticket through the worker queue, which
    // publishes it; anyone else's claim fails whatever it sees.
    state_.store(pack(generation, kClaimed), std::memory_order_relaxed);
    return generation;
  }

  /// Any thread. Wait-free: one CAS. claimed: this call won the ticket and now owns the cell
  /// until it hands it to the dispatcher. unknown: never issued (a forged ticket). stale:
  /// completed already, or an earlier use of this cell.
  Claim claim(std::uint64_t generation) noexcept {
    if (generation == 0 || generation > kMaxGeneration) return Claim::unknown;
    std::uint64_t seen = pack(generation, kInFlight);
    // acquire on both outcomes: pairs with issue()'s release.
    if (state_.compare_exchange_strong(seen, pack(generation, kClaimed), std::memory_order_acquire,
                                       std::memory_order_acquire)) {
      return Claim::claimed;
    }
    // Generations are issued in increasing order, so one at or below the current one was issued.
    const bool issued = generation <= generation_of(seen);
    return issued ? Claim::stale : Claim::unknown;
  }

  /// Dispatcher only, on a claimed cell whose completion it has applied.
  void release() noexcept {
    // relaxed: see the file comment.
    const std::uint64_t state = state_.load(std::memory_order_relaxed);
    state_.store(pack(generation_of(state), kFree), std::memory_order_relaxed);
  }

  /// Any thread: the generation of the use in progress (issued, claimed or not, and not yet
  /// released by the dispatcher), or 0 when the cell is free. For a report of the moment.
  [[nodiscard]] std::uint64_t outstanding() const noexcept {
    // relaxed: only this word is read, and it guards nothing the reader then touches.
    const std::uint64_t state = state_.load(std::memory_order_relaxed);
    return phase_of(state) == kFree ? 0 : generation_of(state);
  }

  /// Whether the cell is in flight now (monitoring and tests only).
  [[nodiscard]] bool in_flight() const noexcept {
    return phase_of(state_.load(std::memory_order_acquire)) == kInFlight;
  }

 private:
  static constexpr std::uint64_t kFree = 0;
  static constexpr std::uint64_t kInFlight = 1;
  static constexpr std::uint64_t kClaimed = 2;

  friend struct TicketCellTestAccess;

  // The generation of the cell's next use: never 0, so that a zeroed ticket is never issued.
  // 2^62 - 1 uses of one cell before it would wrap: not within any server's life (ticket.hpp).
  [[nodiscard]] std::uint64_t next_generation() const noexcept {
    // relaxed: only the dispatcher writes a free cell's generation.
    const std::uint64_t generation = generation_of(state_.load(std::memory_order_relaxed)) + 1;
    return generation > kMaxGeneration ? 1 : generation;
  }
  static std::uint64_t pack(std::uint64_t generation, std::uint64_t phase) noexcept {
    return (generation << 2) | phase;
  }
  static std::uint64_t generation_of(std::uint64_t state) noexcept { return state >> 2; }
  static std::uint64_t phase_of(std::uint64_t state) noexcept { return state & 3; }

  Atomic<std::uint64_t> state_{0};
};

}  // namespace creditloop::detail
