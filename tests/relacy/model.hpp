// tests/relacy/model.hpp: what the Relacy models share. The production pieces take their atomic
// type as a template template parameter; ModelAtomic is the one the models pass, so Relacy
// explores the very code the runtime runs, with the memory orders it asks for, or with one of
// them deliberately weakened (a policy) for the twin that must fail.
#pragma once

#include <relacy/relacy.hpp>

// relacy.hpp rewrites memory_order_*, new, delete, the malloc family and assert as macros for code
// written against its own API. The production headers and these models are written against std,
// so the rewrites would turn std::memory_order_relaxed into `std::mo_relaxed, $`.
#undef memory_order_relaxed
#undef memory_order_consume
#undef memory_order_acquire
#undef memory_order_release
#undef memory_order_acq_rel
#undef memory_order_seq_cst
#undef new
#undef delete
#undef malloc
#undef calloc
#undef realloc
#undef free
#undef assert

#include <atomic>
#include <cstdint>
#include <source_location>
#include <string>
#include <type_traits>
#include <version>

#include "internal/idle_env.hpp"
#include "internal/ticket_cell.hpp"

namespace creditloop::relacy {

enum class Op : std::uint8_t { load, store, rmw, cas, fence };  // rmw: exchange and fetch_*

/// The orders as the production code wrote them.
struct AsWritten {
  template <class T>
  static constexpr std::memory_order order(Op, std::memory_order mo) noexcept {
    return mo;
  }
};

/// Which atomics a weakening applies to, by the type they hold.
template <class Target>
struct Holding {
  template <class T>
  static constexpr bool applies = std::is_same_v<T, Target>;
};
struct HoldingPointers {
  template <class T>
  static constexpr bool applies = std::is_pointer_v<T>;
};
/// The fences (ModelFence asks its policy for the order of a fence as for a `void` atomic).
struct Fences {
  template <class T>
  static constexpr bool applies = std::is_void_v<T>;
};

/// One order weakened: `from` becomes `to` for operations `op` on the atomics `Which` selects, and
/// nothing else changes. A twin names the one pairing it breaks this way.
template <class Which, Op kOp, std::memory_order kFrom, std::memory_order kTo>
struct Weaken {
  template <class T>
  static constexpr std::memory_order order(Op op, std::memory_order mo) noexcept {
    return Which::template applies<T> && op == kOp && mo == kFrom ? kTo : mo;
  }
};

inline rl::memory_order to_rl(std::memory_order mo) noexcept {
  switch (mo) {
    case std::memory_order_relaxed:
      return rl::mo_relaxed;
    case std::memory_order_consume:
      return rl::mo_consume;
    case std::memory_order_acquire:
      return rl::mo_acquire;
    case std::memory_order_release:
      return rl::mo_release;
    case std::memory_order_acq_rel:
      return rl::mo_acq_rel;
    case std::memory_order_seq_cst:
      break;
  }
  return rl::mo_seq_cst;
}

/// The failure order of a compare-and-swap may not be stronger than the load half of its success
/// order; weakening the success order must weaken the failure order with it.
constexpr std::memory_order failure_within(std::memory_order failure,
                                           std::memory_order success) noexcept {
  auto strength = [](std::memory_order mo) {
    switch (mo) {
      case std::memory_order_relaxed:
      case std::memory_order_release:
        return 0;
      case std::memory_order_consume:
        return 1;
      case std::memory_order_acquire:
      case std::memory_order_acq_rel:
        return 2;
      case std::memory_order_seq_cst:
        break;
    }
    return 3;
  };
  return strength(failure) <= strength(success) ? failure
         : strength(success) == 2               ? std::memory_order_acquire
         : strength(success) == 1               ? std::memory_order_consume
                                                : std::memory_order_relaxed;
}

/// Relacy wants the caller's place with every access; a defaulted Here argument supplies the place
/// in the production header, so a trace names the line of inbox.hpp rather than this file.
#if defined(__cpp_lib_source_location)
using Here = std::source_location;
inline rl::debug_info where(const Here& at) noexcept {
  return rl::debug_info(at.function_name(), at.file_name(), static_cast<unsigned>(at.line()));
}
#else
// Clang before 15 cannot build std::source_location; its traces name no place.
struct Here {
  static constexpr Here current() noexcept { return {}; }
};
inline rl::debug_info where(const Here&) noexcept { return rl::debug_info(); }
#endif

/// std::atomic's interface, as much of it as the production pieces use, over rl::atomic.
template <class T, class Policy>
class ModelAtomic {
 public:
  // Not explicit, as std::atomic's: arrays of atomics are value-initialized with `{}`.
  ModelAtomic() : a_(T{}) {}
  explicit ModelAtomic(T value) : a_(value) {}
  ModelAtomic(const ModelAtomic&) = delete;
  ModelAtomic& operator=(const ModelAtomic&) = delete;

  T load(std::memory_order mo = std::memory_order_seq_cst,
         Here at = Here::current()) const noexcept {
    return a_.load(to_rl(Policy::template order<T>(Op::load, mo)), where(at));
  }
  void store(T value, std::memory_order mo = std::memory_order_seq_cst,
             Here at = Here::current()) noexcept {
    a_.store(value, to_rl(Policy::template order<T>(Op::store, mo)), where(at));
  }
  T exchange(T value, std::memory_order mo = std::memory_order_seq_cst,
             Here at = Here::current()) noexcept {
    return a_.exchange(value, to_rl(Policy::template order<T>(Op::rmw, mo)), where(at));
  }
  T fetch_add(T value, std::memory_order mo = std::memory_order_seq_cst,
              Here at = Here::current()) noexcept {
    return a_.fetch_add(value, to_rl(Policy::template order<T>(Op::rmw, mo)), where(at));
  }
  T fetch_sub(T value, std::memory_order mo = std::memory_order_seq_cst,
              Here at = Here::current()) noexcept {
    return a_.fetch_sub(value, to_rl(Policy::template order<T>(Op::rmw, mo)), where(at));
  }
  T fetch_or(T value, std::memory_order mo = std::memory_order_seq_cst,
             Here at = Here::current()) noexcept {
    return a_.fetch_or(value, to_rl(Policy::template order<T>(Op::rmw, mo)), where(at));
  }
  T fetch_and(T value, std::memory_order mo = std::memory_order_seq_cst,
              Here at = Here::current()) noexcept {
    return a_.fetch_and(value, to_rl(Policy::template order<T>(Op::rmw, mo)), where(at));
  }
  bool compare_exchange_weak(T& expected, T desired, std::memory_order success,
                             std::memory_order failure, Here at = Here::current()) noexcept {
    const std::memory_order s = Policy::template order<T>(Op::cas, success);
    return a_.compare_exchange_weak(expected, desired, to_rl(s), where(at),
                                    to_rl(failure_within(failure, s)), where(at));
  }
  bool compare_exchange_strong(T& expected, T desired, std::memory_order success,
                               std::memory_order failure, Here at = Here::current()) noexcept {
    const std::memory_order s = Policy::template order<T>(Op::cas, success);
    return a_.compare_exchange_strong(expected, desired, to_rl(s), where(at),
                                      to_rl(failure_within(failure, s)), where(at));
  }

  /// The model's futex waits and wakes on the Relacy atomic itself.
  rl::atomic<T>& relacy() noexcept { return a_; }

 private:
  rl::atomic<T> a_;
};

/// Passes ModelAtomic with one policy where a template template parameter is expected.
template <class Policy>
struct With {
  template <class T>
  using Atomic = ModelAtomic<T, Policy>;
};

/// The futex under the Parker in a model. wait() sleeps only while the word still holds
/// `expected`, checked and slept on with no wake in between (what the kernel's hash-bucket lock
/// gives). Without a timeout it returns only when woken (no spurious return): a sleep that no
/// notify() will end blocks the dispatcher for good, and Relacy reports the run as a deadlock.
/// With a timeout (the dispatcher's wait for a half-finished push) it may also return unwoken,
/// at any point Relacy chooses.
struct ModelFutex {
  template <class Word>
  static void wait(Word& word, std::uint32_t expected, std::int64_t timeout_ns,
                   Here at = Here::current()) noexcept {
    rl::context& c = rl::ctx();
    c.sched();
    c.atomic_thread_fence_seq_cst();  // the kernel's barrier before it reads the word
    {
      rl::preemption_disabler no_wake_in_between(c);
      if (word.relacy().load(rl::mo_seq_cst, where(at)) != expected) return;
    }
    const bool timed = timeout_ns >= 0;
    word.relacy().wait(c, /*is_timed=*/timed, /*allow_spurious_wakeup=*/false, where(at));
  }

  template <class Word>
  static void wake(Word& word, Here at = Here::current()) noexcept {
    rl::context& c = rl::ctx();
    c.sched();
    c.atomic_thread_fence_seq_cst();  // the kernel's barrier before it looks for sleepers
    word.relacy().wake(c, 1, where(at));
  }
};

/// Lets other threads run while this one waits for something only they can do: a spin loop that
/// does not yield looks like a livelock to Relacy's fair schedulers.
inline void pause() { rl::yield(1, RL_INFO); }

/// The Fence parameter of the counter line (internal/counter_line.hpp) in a model: its fences
/// under `Policy` (a fence weakened to relaxed is no fence), and a reader's back-off a yield.
template <class Policy>
struct ModelFence {
  static void fence(std::memory_order mo, Here at = Here::current()) noexcept {
    const std::memory_order order = Policy::template order<void>(Op::fence, mo);
    if (order != std::memory_order_relaxed) rl::atomic_thread_fence(to_rl(order), where(at));
  }
  static void back_off(unsigned) noexcept { pause(); }
};

// ---- the dispatcher's idle environment (internal/idle_env.hpp)
// -----------------------------------

/// A source of work the model does not have: WorkSources asks every one.
struct NoWork {
  static bool maybe_nonempty() noexcept { return false; }
  static bool raised() noexcept { return false; }
};

/// The dispatcher's host in a model with no room test and nothing to retry.
struct QuietHost {
  static bool has_room() noexcept { return false; }
  static bool retry_pending() noexcept { return false; }
  static void parked(std::uint32_t, std::int64_t) noexcept {}
};

/// IdleEnv's clock and pauses in a model. The models set no spin, so the clock is never read; the
/// yields before a sleep are no scheduling points of their own (each re-check's loads are).
struct ModelPause {
  static std::int64_t now() noexcept { return 0; }
  static void relax() noexcept {}
  static void yield() noexcept {}
};

/// The runtime's idle environment over a model's sources.
template <class Sources, class Host = QuietHost>
using ModelIdleEnv = detail::IdleEnv<Sources, Host, ModelPause>;

// ---- running a model ---------------------------------------------------------------------------

enum class Variant : std::uint8_t { correct, twin };

struct Search {
  rl::scheduler_type_e scheduler;
  rl::iteration_t iterations;  // ignored by the full search, which ends when it has seen all
};

/// What one run printed: Relacy's verdict and its history, for the caller to show.
struct Report {
  rl::test_result_e result;
  rl::iteration_t iterations;
  double seconds;
  std::string output;
};

Report simulate(bool (*run)(rl::test_params&), Search search);

/// Runs the model and says whether it did what `variant` expects: the correct model passes, the
/// twin fails with `twin_failure`. Prints a one-line summary, and Relacy's trace when surprised.
bool expect(const char* name, Variant variant, bool (*run)(rl::test_params&), Search search,
            rl::test_result_e twin_failure);

template <class Model>
bool run_model(rl::test_params& params) {
  return rl::simulate<Model>(params);
}

/// Runs Model<AsWritten> or Model<Twin>, as `variant` says, through expect().
template <template <class> class Model, class Twin>
bool check(const char* name, Variant variant, Search search, rl::test_result_e twin_failure) {
  return expect(name, variant,
                variant == Variant::correct ? run_model<Model<AsWritten>> : run_model<Model<Twin>>,
                search, twin_failure);
}

// The models, one per hand-off; each returns whether `variant` behaved as expected.
bool inbox_model(Variant variant);
bool activation_model(Variant variant);
bool bag_progress_model(Variant variant);
bool withdrawal_model(Variant variant);
bool parking_model(Variant variant);
bool parking_notify_model(Variant variant);   // parking's model, another twin
bool parking_recheck_model(Variant variant);  // and a third
bool charge_back_model(Variant variant);
bool ticket_model(Variant variant);
bool close_model(Variant variant);
bool close_same_tag_model(Variant variant);
bool pool_completion_model(Variant variant);
bool pool_completion_append_model(Variant variant);  // pool_completion's model, another twin
bool shutdown_flag_model(Variant variant);
bool capture_ring_model(Variant variant);
bool counter_line_model(Variant variant);
bool hand_back_model(Variant variant);
bool zone_entry_model(Variant variant);    // the nginx module's workers, not the runtime
bool zone_room_model(Variant variant);     // likewise
bool zone_learned_model(Variant variant);  // likewise
bool wake_model(Variant variant);
bool command_list_model(Variant variant);
bool relisting_model(Variant variant);
bool last_holder_model(Variant variant);
bool shutdown_answer_model(Variant variant);
bool queued_mark_model(Variant variant);

// A ticket's record as the completion models use it: the cell, the completion list's link, and
// the cost a completer writes (a Relacy var: the dispatcher reading it unordered is a data race).
template <class Policy>
struct CostRecord {
  detail::TicketCell<With<Policy>::template Atomic> cell;
  ModelAtomic<CostRecord*, Policy> next_completed{nullptr};
  rl::var<std::int64_t> cost{-1};  // the completer's until it publishes the record
  std::uint64_t generation = 0;    // the dispatcher's: the cell's current use
};

/// The record's cost as completion_handover.hpp reaches it (its MemberCost in the runtime): a
/// Relacy variable, whose unordered access is reported at the line of the header that made it.
template <class Record>
struct VarCost {
  static std::int64_t get(const Record& record, Here at = Here::current()) {
    return record.cost(where(at));
  }
  static void set(Record& record, std::int64_t cost, Here at = Here::current()) {
    record.cost(where(at)) = cost;
  }
};

/// A waker for a model with no dispatcher asleep: completion_handover.hpp's notify() does nothing.
struct NoSleeper {
  void notify(std::uint32_t) const noexcept {}
};

/// The queue link of a model's node, through the policy the queue code is templated on
/// (internal/queue_link.hpp): a Relacy variable, so an access to it that no hand-off orders against
/// another thread's is reported as a data race, at the line of the queue code that made it.
template <class Node>
struct VarLink {
  static Node* get(const Node& node, Here at = Here::current()) { return node.next(where(at)); }
  static void set(Node& node, Node* next, Here at = Here::current()) {
    node.next(where(at)) = next;
  }
};

// A request as the queue models push it: the intrusive link, and a payload; Relacy checks every
// access to either for races (a request read without having been handed over is a data race).
struct Request {
  rl::var<Request*> next{nullptr};
  rl::var<int> payload{-1};
};
using RequestLink = VarLink<Request>;

}  // namespace creditloop::relacy
