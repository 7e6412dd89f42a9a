// tools/sim/program.hpp: what the parts of the creditloop-sim program share (main.cpp reads the
// command line, single_run.cpp runs a scenario alone, compare_runs.cpp runs two side by side).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scenario.hpp"

namespace creditloop::sim::program {

enum class Mode { trace, table, summary, check };

struct Options {
  Mode mode = Mode::trace;
  bool reasons = false;
  bool replay = false;
  bool json = false;
  std::string html_path;
  std::string svg_path;
  std::string capture_path;
  std::string plans_path;
  std::optional<std::uint64_t> slots;
  std::vector<std::string> files;
};

// One line, always: control characters from file names or messages would break that promise.
void error_line(const std::string& message);

// Reads `file` ("-": standard input) whole; on failure, the one-line reason.
bool read_input(const std::string& file, std::string& text, std::string& error);

std::string base_name(const std::string& file);

// Why a scenario cannot be captured or run again under other plans: a capture's header, and the
// scenario built from it, record a fixed number of slots and no backend. Null when it can.
const char* no_second_run(const sim::Scenario& s);

// SCENARIO alone: the trace, the table or the summary, and the files asked for.
int single_run(const Options& o);

// --replay and SCENARIO --plans: two runs side by side.
int compare_runs(const Options& o);

}  // namespace creditloop::sim::program
