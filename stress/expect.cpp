#include "expect.hpp"

namespace creditloop::stress {

using creditloop::Errc;
using creditloop::Status;

void expect_refused(Status got, Errc want, const char* check, const std::string& what) {
  if (!got.ok() && got.error() == want) return;
  fail(check, what + ": expected " + errc_str(want) + ", got " + status_str(got));
}

void expect_lifecycle_refusal(Run& run, Status got, Errc want, const std::string& what) {
  if (!got.ok() && got.error() == Errc::shut_down &&
      run.shutting_down.load(std::memory_order_acquire)) {
    return;
  }
  expect_refused(got, want, kLifecycle, what);
  run.churn_refusals.fetch_add(1, std::memory_order_relaxed);
}

bool lifecycle_ok(Run& run, Status got, const std::string& what) {
  if (got.ok()) return true;
  if (got.error() == Errc::shut_down && run.shutting_down.load(std::memory_order_acquire)) {
    return false;
  }
  fail(kLifecycle, what + " refused: " + errc_str(got.error()));
}

}  // namespace creditloop::stress
