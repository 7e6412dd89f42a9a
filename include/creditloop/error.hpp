// creditloop/error.hpp: what a refused call says, and the small result type that carries it.
//
// Every refusal names its problem with an Errc and leaves the state exactly as it was. Hot-path
// calls are noexcept and return Status or Result<T>; nothing on those paths throws or allocates.
#pragma once

#include <cassert>
#include <string_view>
#include <utility>
#include <variant>

namespace creditloop {

enum class Errc : unsigned char {
  unknown_plan,
  unknown_class,
  unknown_participant,    // never registered, or removed (its id is stale)
  duplicate_name,         // a live participant already has this name
  bad_shares,             // 0, or above kMaxShares
  bad_rate,               // not finite, not positive at 9 decimals, or above kMaxRate
  bad_burst,              // not finite, below 1, or above kMaxBurst
  bad_cost,               // negative, NaN, infinite, or above kMaxCost
  bad_classes,            // class count outside 1..kMaxClasses
  unknown_ticket,         // a ticket this core never issued
  stale_ticket,           // a ticket already completed, or from an earlier use of its record
  too_many_participants,  // kMaxParticipants are registered
  shut_down,              // the runtime no longer accepts this call
  unsupported_address,    // a request's address has a bit above bit 47 set (a pointer tag)
  already_queued,         // the request is queued or in flight already: submitted twice
  wrong_thread,           // called from a thread the call would deadlock (the dispatcher's own)
  bad_scale,              // a fraction of a plan above kWholePlan millionths
  not_queued,             // withdraw: the request is not queued here (idle, or queued elsewhere)
  in_flight,              // withdraw: the request was dispatched already; complete it instead
};

/// A short English description of the error, for logs and messages.
[[nodiscard]] std::string_view describe(Errc e) noexcept;
/// The enumerator's own name ("stale_ticket"), for traces and test messages.
[[nodiscard]] std::string_view name(Errc e) noexcept;

/// Success, or the reason for a refusal.
class [[nodiscard]] Status {
 public:
  constexpr Status() noexcept = default;
  constexpr Status(Errc e) noexcept : ok_(false), error_(e) {}  // NOLINT: implicit by design

  [[nodiscard]] constexpr bool ok() const noexcept { return ok_; }
  constexpr explicit operator bool() const noexcept { return ok_; }
  /// Only meaningful when !ok().
  [[nodiscard]] constexpr Errc error() const noexcept { return error_; }

  friend constexpr bool operator==(Status a, Status b) noexcept {
    return a.ok_ == b.ok_ && (a.ok_ || a.error_ == b.error_);
  }

 private:
  bool ok_ = true;
  Errc error_{};
};

/// A value, or the reason there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Errc e) : v_(e) {}                  // NOLINT: implicit by design

  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] Errc error() const noexcept {
    assert(!ok());
    return std::get<1>(v_);
  }
  [[nodiscard]] Status status() const noexcept { return ok() ? Status{} : Status{error()}; }

  T& value() & noexcept {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& noexcept {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && noexcept {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() noexcept { return &value(); }
  const T* operator->() const noexcept { return &value(); }
  T& operator*() & noexcept { return value(); }
  const T& operator*() const& noexcept { return value(); }

 private:
  std::variant<T, Errc> v_;
};

}  // namespace creditloop
