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
    case Errc::shut_down:
      return "shut down";
  }
  return "unknown error";
}

}  // namespace creditloop
