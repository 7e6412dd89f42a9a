// stress/common.hpp: what every part of creditloop-stress shares: the request object, the
// participant directory, the failure report, the seeded random numbers and the clock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/splitmix64.hpp"
#include "creditloop/runtime.hpp"

namespace creditloop::stress {

using creditloop::Balance;
using creditloop::ClassId;
using creditloop::Nanos;
using creditloop::ParticipantId;
using creditloop::Ticket;

// ---- failing loudly -----------------------------------------------------------------------------

/// Recorded once at start-up so that every failure message can say how to rerun it.
void set_identity(std::uint64_t seed, std::string rerun_command);
[[nodiscard]] std::uint64_t run_seed() noexcept;

/// Prints "FAIL [check]: what", the seed and the rerun command, then exits with status 1. Safe
/// from any thread; the first failure wins and the others wait for the exit.
[[noreturn]] void fail(const char* check, const std::string& what);
/// The same, for a run that hangs: aborts, so that a core dump shows every thread's stack.
[[noreturn]] void stall(const char* check, const std::string& what);

// ---- formatting ---------------------------------------------------------------------------------

[[nodiscard]] std::string str(Balance v);
[[nodiscard]] std::string str(ParticipantId p);
[[nodiscard]] std::string str(Ticket t);
[[nodiscard]] std::string class_str(ClassId c);
[[nodiscard]] std::string errc_str(creditloop::Errc e);
[[nodiscard]] std::string status_str(creditloop::Status s);
/// "u17 {3,2}": the directory name and the runtime's id.
[[nodiscard]] std::string who(std::uint32_t name, ParticipantId p);

// ---- random numbers -----------------------------------------------------------------------------

/// splitmix64: one step of a seed into a well-mixed 64-bit value.
[[nodiscard]] constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  return creditloop::tools::splitmix64(x);
}

/// xoshiro256**: each thread owns one, seeded from the run's seed and the thread's role, so that
/// the choices a thread makes depend on the seed alone (their interleaving does not).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept {
    for (auto& word : s_) word = seed = mix(seed);
  }
  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// [0, n); n >= 1. Modulo bias is irrelevant at these sizes.
  std::uint64_t below(std::uint64_t n) noexcept { return n <= 1 ? 0 : next() % n; }
  std::uint32_t below32(std::uint64_t n) noexcept { return static_cast<std::uint32_t>(below(n)); }
  bool one_in(std::uint64_t n) noexcept { return below(n) == 0; }
  /// [0, 1).
  double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1p-53; }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  std::uint64_t s_[4]{};
};

/// Seeds of the run's threads, one role and index each.
enum class Role : std::uint64_t {
  setup = 1,
  producer,
  completer,
  handler,
  churn,
  pranks,
  monitor,
};
[[nodiscard]] constexpr std::uint64_t seed_for(std::uint64_t seed, Role role,
                                               std::uint64_t index) noexcept {
  return mix(seed ^ mix(static_cast<std::uint64_t>(role) << 32 ^ index));
}

// ---- the clock ----------------------------------------------------------------------------------

/// steady_clock in nanoseconds: the runtime's clock (its default), and ours for waits.
[[nodiscard]] inline Nanos steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- requests -----------------------------------------------------------------------------------

enum class ReqState : std::uint8_t {
  free,         // in its producer's pool
  queued,       // submitted (set before submit(), undone if it is refused)
  dispatched,   // seen by a handler or completer
  handed_back,  // returned by remove() or shutdown()
};

/// A request. Owned by one producer's pool; lent to the runtime between submit() and its
/// dispatch or hand-back. Fields are written by whoever holds the request at the time; the
/// runtime's own hand-offs order those writes.
struct Req : creditloop::RequestHook {
  std::uint64_t id = 0;        // unique per submission: the producer in the top 16 bits
  std::uint64_t seq = 0;       // the producer's submission counter
  std::uint64_t core_seq = 0;  // the observer's on_submit order within the participant; 0: none
  Nanos submitted_at = 0;      // steady_ns() just before submit()
  Ticket ticket;               // written by the observer at dispatch, read by the handler
  ParticipantId participant;   // the id it was submitted to
  std::uint32_t name = 0;      // the directory entry it was submitted to
  std::uint32_t producer = 0;
  std::atomic<ReqState> state{ReqState::free};
  Req* next_free = nullptr;  // the producer's return stack
};

[[nodiscard]] std::string req_str(const Req& r);

/// Ids of submissions: producer p's n-th submission.
[[nodiscard]] constexpr std::uint64_t request_id(std::uint32_t producer, std::uint64_t n) noexcept {
  return (std::uint64_t{producer} << 48) | n;
}

// ---- the participant directory ------------------------------------------------------------------

/// Name i of the run ("u<i>") maps to its latest registration, packed in one word: the id, and
/// bit 63 once remove() of that id has returned. A producer that reads the bit set knows the
/// removal happened before its submit, which must then be refused.
namespace directory {
inline constexpr std::uint64_t kRemoved = std::uint64_t{1} << 63;
[[nodiscard]] constexpr std::uint64_t pack(ParticipantId p, bool removed) noexcept {
  return (removed ? kRemoved : 0) | (std::uint64_t{p.place} << 32) | p.generation;
}
// The word leaves out the issuer, which is the run's one runtime's.
[[nodiscard]] constexpr ParticipantId id_of(std::uint64_t word, std::uint32_t issuer) noexcept {
  return ParticipantId{static_cast<std::uint32_t>((word & ~kRemoved) >> 32),
                       static_cast<std::uint32_t>(word), issuer};
}
[[nodiscard]] constexpr bool removed(std::uint64_t word) noexcept { return (word & kRemoved) != 0; }
}  // namespace directory

[[nodiscard]] std::string participant_name(std::uint32_t index);
/// The index of a name made by participant_name(), or nothing.
[[nodiscard]] bool parse_participant_name(std::string_view name, std::uint32_t& index) noexcept;

// ---- stopping -----------------------------------------------------------------------------------

/// The end of the run, for threads that pace themselves: they wait on it with a timeout, so the
/// end interrupts the pause at once.
class StopSignal {
 public:
  void raise() {
    {
      std::lock_guard lock(mutex_);
      stopped_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }
  [[nodiscard]] bool raised() const noexcept { return stopped_.load(std::memory_order_acquire); }
  /// True when the signal was raised (now or during the wait).
  template <class Duration>
  bool wait_for(Duration d) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, d, [&] { return stopped_.load(std::memory_order_relaxed); });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> stopped_{false};
};

}  // namespace creditloop::stress
