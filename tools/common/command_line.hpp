#pragma once
// The command line of the tools built on CLI11: one way to parse it and one meaning for the exit
// status, so that a script can tell a bad command line (2) from a run that failed.

#include <CLI/CLI.hpp>
#include <optional>

namespace creditloop::tools {

/// Parses the command line into `app`'s options. Returns the exit status when the program should
/// stop here: 0 after --help (printed), 2 after a bad command line (CLI11 says why on standard
/// error).
[[nodiscard]] inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace creditloop::tools
