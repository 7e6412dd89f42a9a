// tests/relacy/main.cpp: runs one model, correct or twin, as one ctest entry does:
//   creditloop_relacy MODEL correct|twin
// The exit status says whether the model did what it must: the correct one passes, the twin fails
// with the failure it was built to show.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "model.hpp"

namespace creditloop::relacy {

// A deeper search than CI's, by hand: CREDITLOOP_RELACY_SEARCH=full|random|bound and
// CREDITLOOP_RELACY_ITERATIONS=N (random and bound only).
Search from_environment(Search search) {
  if (const char* s = std::getenv("CREDITLOOP_RELACY_SEARCH")) {
    const std::string_view name = s;
    search.scheduler = name == "full"     ? rl::sched_full
                       : name == "bound"  ? rl::sched_bound
                       : name == "random" ? rl::sched_random
                                          : search.scheduler;
  }
  if (const char* n = std::getenv("CREDITLOOP_RELACY_ITERATIONS")) {
    search.iterations = std::strtoull(n, nullptr, 10);
  }
  return search;
}

Report simulate(bool (*run)(rl::test_params&), Search search) {
  // Relacy's stream, not std::ostringstream: Relacy replaces the global operator new with one that
  // allocates from the model while a model runs, so a std::string buffer grown both inside and
  // outside a run would be freed by the wrong allocator.
  rl::ostringstream out;
  std::ostream progress(nullptr);  // Relacy's percentage lines: discarded
  rl::test_params params;
  params.search_type = search.scheduler;
  params.iteration_count = search.iterations;
  params.output_stream = &out;
  params.progress_stream = &progress;
  const auto start = std::chrono::steady_clock::now();
  run(params);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return {params.test_result, params.stop_iteration, took.count(), std::string(out.str().c_str())};
}

bool expect(const char* name, Variant variant, bool (*run)(rl::test_params&), Search search,
            rl::test_result_e twin_failure) {
  search = from_environment(search);
  const Report report = simulate(run, search);
  const bool twin = variant == Variant::twin;
  const rl::test_result_e wanted = twin ? twin_failure : rl::test_result_success;
  const bool as_expected = report.result == wanted;
  // Relacy's output: the test's type name, then for a failure the verdict with its reason, the
  // failing iteration and the history of that iteration.
  std::istringstream lines(report.output);
  std::string verdict;
  std::getline(lines, verdict);
  std::getline(lines, verdict);
  std::printf("%s %s: %s, %s after %llu iterations (%s), %.1f s\n", name,
              twin ? "twin" : "correct", rl::test_result_str(report.result),
              as_expected ? "as it must" : "WRONG", static_cast<unsigned long long>(report.iterations),
              rl::format(search.scheduler), report.seconds);
  if (report.result != rl::test_result_success) std::printf("  %s\n", verdict.c_str());
  if (!as_expected) {
    std::printf("expected %s; Relacy's output:\n%s\n", rl::test_result_str(wanted),
                report.output.c_str());
  }
  std::fflush(stdout);
  return as_expected;
}

}  // namespace creditloop::relacy

int main(int argc, char** argv) {
  using namespace creditloop::relacy;
  struct Entry {
    std::string_view name;
    bool (*check)(Variant);
  };
  constexpr Entry kModels[] = {
      {"inbox", inbox_model},         {"activation", activation_model},
      {"parking", parking_model},     {"charge_back", charge_back_model},
      {"ticket", ticket_model},       {"close", close_model},
  };
  const std::string_view variant = argc == 3 ? argv[2] : "";
  if (variant != "correct" && variant != "twin") {
    std::fprintf(stderr, "usage: %s MODEL correct|twin (MODEL: inbox activation parking "
                         "charge_back ticket close)\n", argv[0]);
    return 2;
  }
  for (const Entry& m : kModels) {
    if (m.name == argv[1]) return m.check(variant == "twin" ? Variant::twin : Variant::correct) ? 0 : 1;
  }
  std::fprintf(stderr, "unknown model %s\n", argv[1]);
  return 2;
}
