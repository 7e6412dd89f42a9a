// stress/expect.hpp: docs/contract.md §5's refusals, asserted as they happen, by the threads that
// make the calls (completers, pranks, churn). A refusal other than the one expected fails the run.
#pragma once

#include <string>

#include "run.hpp"

namespace creditloop::stress {

/// The names of the checks beyond the six.
inline constexpr const char* kCompletionErrors = "completion errors (contract §5)";
inline constexpr const char* kLifecycle = "lifecycle (contract §5)";

/// A call that must be refused with `want`.
void expect_refused(creditloop::Status got, creditloop::Errc want, const char* check,
                    const std::string& what);

/// A lifecycle call that must be refused with `want`; shut_down is the answer to everything
/// once shutdown has begun.
void expect_lifecycle_refusal(Run& run, creditloop::Status got, creditloop::Errc want,
                              const std::string& what);

/// Whether a lifecycle call that should succeed did; false when it was refused because shutdown
/// has begun.
bool lifecycle_ok(Run& run, creditloop::Status got, const std::string& what);

}  // namespace creditloop::stress
