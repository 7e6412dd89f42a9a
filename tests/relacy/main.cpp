// tests/relacy/main.cpp: runs one model, correct or twin, as one ctest entry does:
//   creditloop_relacy MODEL correct|twin
// The exit status says whether the model did what it must: the correct one passes, the twin fails
// with the failure it was built to show.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <streambuf>
#include <string>
#include <string_view>

#include "model.hpp"

namespace creditloop::relacy {

// By hand, a search other than CI's: CREDITLOOP_RELACY_SEARCH=full|random|bound and
// CREDITLOOP_RELACY_ITERATIONS=N (random and bound only); CREDITLOOP_RELACY_TRACE=1 prints
// Relacy's history of a failing iteration even when the failure was the expected one.
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

// Relacy's output goes to a memory stream of the C library, whose buffer comes from malloc: Relacy
// replaces the global operator new with one that allocates from the model while a model runs, so
// a C++ string stream's buffer, grown both inside and outside a run, would be freed by the wrong
// allocator.
class MemoryStream : public std::streambuf {
 public:
  MemoryStream() : file_(open_memstream(&data_, &size_)) {}
  MemoryStream(const MemoryStream&) = delete;
  MemoryStream& operator=(const MemoryStream&) = delete;
  ~MemoryStream() override {
    if (file_ != nullptr) std::fclose(file_);
    std::free(data_);
  }
  std::string text() {
    std::fflush(file_);
    return std::string(data_, size_);
  }

 private:
  int_type overflow(int_type c) override {
    return traits_type::eq_int_type(c, traits_type::eof()) ? traits_type::not_eof(c)
                                                           : std::fputc(c, file_);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    return static_cast<std::streamsize>(std::fwrite(s, 1, static_cast<std::size_t>(n), file_));
  }

  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* file_;
};

Report simulate(bool (*run)(rl::test_params&), Search search) {
  MemoryStream buffer;
  std::ostream out(&buffer);
  std::ostream progress(nullptr);  // Relacy's percentage lines: discarded
  rl::test_params params;
  params.search_type = search.scheduler;
  params.iteration_count = search.iterations;
  params.output_stream = &out;
  params.progress_stream = &progress;
  const auto start = std::chrono::steady_clock::now();
  run(params);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return {params.test_result, params.stop_iteration, took.count(), buffer.text()};
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
  std::printf("%s %s: %s, %s after %llu iterations (%s), %.1f s\n", name, twin ? "twin" : "correct",
              rl::test_result_str(report.result), as_expected ? "as it must" : "WRONG",
              static_cast<unsigned long long>(report.iterations), rl::format(search.scheduler),
              report.seconds);
  if (report.result != rl::test_result_success) std::printf("  %s\n", verdict.c_str());
  if (!as_expected || std::getenv("CREDITLOOP_RELACY_TRACE") != nullptr) {
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
      {"inbox", inbox_model},
      {"activation", activation_model},
      {"bag_progress", bag_progress_model},
      {"withdrawal", withdrawal_model},
      {"parking", parking_model},
      {"parking_notify", parking_notify_model},
      {"parking_recheck", parking_recheck_model},
      {"charge_back", charge_back_model},
      {"ticket", ticket_model},
      {"close", close_model},
      {"close_same_tag", close_same_tag_model},
      {"pool_completion", pool_completion_model},
      {"pool_completion_append", pool_completion_append_model},
      {"shutdown_flag", shutdown_flag_model},
      {"capture_ring", capture_ring_model},
      {"counter_line", counter_line_model},
      {"hand_back", hand_back_model},
      {"zone_entry", zone_entry_model},
      {"zone_room", zone_room_model},
      {"zone_learned", zone_learned_model},
      {"wake", wake_model},
      {"command_list", command_list_model},
      {"relisting", relisting_model},
      {"last_holder", last_holder_model},
      {"shutdown_answer", shutdown_answer_model},
      {"queued_mark", queued_mark_model},
  };
  const std::string_view variant = argc == 3 ? argv[2] : "";
  if (variant != "correct" && variant != "twin") {
    std::fprintf(stderr, "usage: %s MODEL correct|twin\nMODEL:", argv[0]);
    for (const Entry& m : kModels) {
      std::fprintf(stderr, " %.*s", static_cast<int>(m.name.size()), m.name.data());
    }
    std::fprintf(stderr, "\n");
    return 2;
  }
  for (const Entry& m : kModels) {
    if (m.name == argv[1])
      return m.check(variant == "twin" ? Variant::twin : Variant::correct) ? 0 : 1;
  }
  std::fprintf(stderr, "unknown model %s\n", argv[1]);
  return 2;
}
