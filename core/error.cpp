#include "creditloop/error.hpp"

namespace creditloop {

std::string_view describe(Errc e) noexcept {
  switch (e) {
    case Errc::unknown_plan:
      return "unknown plan";
    case Errc::unknown_class:
      return "unknown class";
    case Errc::unknown_participant:
      return "unknown participant";
    case Errc::duplicate_name:
      return "a participant with this name is already registered";
    case Errc::bad_shares:
      return "shares must be a whole number from 1 to 1000000";
    case Errc::bad_rate:
      return "rate must be finite, positive and at most 10000";
    case Errc::bad_burst:
      return "burst must be finite, at least 1 and at most 10000";
    case Errc::bad_cost:
      return "cost must be finite, at least 0 and at most 1000000";
    case Errc::bad_classes:
      return "classes must number from 1 to 7";
    case Errc::unknown_ticket:
      return "unknown ticket";
    case Errc::stale_ticket:
      return "ticket already completed or stale";
    case Errc::too_many_participants:
      return "too many participants registered";
    case Errc::already_queued:
      return "request already queued or in flight";
    case Errc::wrong_thread:
      return "not allowed from the dispatcher thread or a worker of its pool";
    case Errc::bad_scale:
      return "scale must be a whole number of millionths from 0 to 1000000";
    case Errc::not_queued:
      return "request not queued here";
    case Errc::in_flight:
      return "request already dispatched: complete it";
    case Errc::shut_down:
      return "shut down";
    case Errc::unsupported_address:
      return "the request's address has a bit above bit 47 set (a pointer tag: MTE, HWASan or "
             "LAM); the runtime holds 48-bit addresses";
  }
  return "unknown error";
}

std::string_view name(Errc e) noexcept {
  switch (e) {
    case Errc::unknown_plan:
      return "unknown_plan";
    case Errc::unknown_class:
      return "unknown_class";
    case Errc::unknown_participant:
      return "unknown_participant";
    case Errc::duplicate_name:
      return "duplicate_name";
    case Errc::bad_shares:
      return "bad_shares";
    case Errc::bad_rate:
      return "bad_rate";
    case Errc::bad_burst:
      return "bad_burst";
    case Errc::bad_cost:
      return "bad_cost";
    case Errc::bad_classes:
      return "bad_classes";
    case Errc::unknown_ticket:
      return "unknown_ticket";
    case Errc::stale_ticket:
      return "stale_ticket";
    case Errc::too_many_participants:
      return "too_many_participants";
    case Errc::shut_down:
      return "shut_down";
    case Errc::unsupported_address:
      return "unsupported_address";
    case Errc::already_queued:
      return "already_queued";
    case Errc::wrong_thread:
      return "wrong_thread";
    case Errc::bad_scale:
      return "bad_scale";
    case Errc::not_queued:
      return "not_queued";
    case Errc::in_flight:
      return "in_flight";
  }
  return "?";
}

}  // namespace creditloop
