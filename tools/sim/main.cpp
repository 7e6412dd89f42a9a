// creditloop-sim: runs a scenario through the real dispatcher core on a virtual clock and writes
// the trace of SPEC section 6 (or a table, or only the summary).
//
// Exit status: 0 success; 1 a bad or unreadable scenario (one line on stderr naming the field,
// nothing on stdout); 2 a bad command line; 3 the run failed (the output could not be written,
// or the core contradicted itself: a bug to report).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "scenario.hpp"
#include "simulator.hpp"

namespace {

constexpr const char* kUsage =
    "usage: creditloop-sim [--table | --summary | --check] [--reasons] SCENARIO.json\n"
    "\n"
    "Runs SCENARIO.json (\"-\" reads standard input) through the creditloop dispatcher core on a\n"
    "virtual clock against a slot-model server. By default writes the JSON Lines trace of every\n"
    "arrival, pass, dispatch and completion, then a summary line (SPEC section 6).\n"
    "\n"
    "options:\n"
    "  --table     instead of the trace, print an aligned table per participant: plan, shares,\n"
    "              dispatches per class with their share of the row, share of all dispatches,\n"
    "              completed, waiting, longest wait and balances when the run stopped\n"
    "  --summary   print only the summary line\n"
    "  --check     validate the scenario and print nothing (exit status says whether it is good)\n"
    "  --reasons   each pass line also says why each ignored participant was passed over:\n"
    "              {\"why\": \"no_bucket\"} or {\"why\": \"below_one_credit\", \"balance\": B,\n"
    "              \"next_credit\": T} (an extension of the trace format, off by default)\n"
    "  -h, --help  print this help\n"
    "\n"
    "A bad scenario exits with status 1 and one line on standard error naming the field at\n"
    "fault (e.g. arrivals[1].count); nothing is written to standard output. Limits: times up to\n"
    "1e9 s, rounded to the nanosecond; at most 20000000 requests arriving in one run.\n"
    "Exit status: 0 ok, 1 bad or unreadable scenario, 2 bad command line, 3 run failed.\n";

// One line, always: control characters from file names or messages would break that promise.
void error_line(const std::string& message) {
  std::string line = "creditloop-sim: " + message;
  for (char& ch : line) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

bool read_all(std::FILE* f, std::string& out) {
  char chunk[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) out.append(chunk, n);
  return std::ferror(f) == 0;
}

enum class Mode { trace, table, summary, check };

}  // namespace

int main(int argc, char** argv) {
  Mode mode = Mode::trace;
  bool reasons = false;
  std::vector<std::string> files;
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!options_done && (arg == "-h" || arg == "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!options_done && arg == "--") {
      options_done = true;
    } else if (!options_done && arg == "--reasons") {
      reasons = true;
    } else if (!options_done && (arg == "--table" || arg == "--summary" || arg == "--check")) {
      const Mode m = arg == "--table"     ? Mode::table
                     : arg == "--summary" ? Mode::summary
                                          : Mode::check;
      if (mode != Mode::trace && mode != m) {
        error_line("--table, --summary and --check exclude each other (see --help)");
        return 2;
      }
      mode = m;
    } else if (!options_done && arg.size() > 1 && arg[0] == '-') {
      error_line("unknown option '" + std::string(arg) + "' (see --help)");
      return 2;
    } else {
      files.emplace_back(arg);
    }
  }
  if (files.size() != 1) {
    error_line(files.empty() ? "no scenario file given (see --help)"
                             : "exactly one scenario file, got " + std::to_string(files.size()) +
                                   " (see --help)");
    return 2;
  }

  const std::string& file = files[0];
  std::string text;
  if (file == "-") {
    if (!read_all(stdin, text)) {
      error_line("-: cannot read standard input: " + std::string(std::strerror(errno)));
      return 1;
    }
  } else {
    std::FILE* f = std::fopen(file.c_str(), "rb");
    if (f == nullptr) {
      error_line(file + ": cannot open: " + std::strerror(errno));
      return 1;
    }
    const bool ok = read_all(f, text);
    const int err = errno;
    std::fclose(f);
    if (!ok) {
      error_line(file + ": cannot read: " + std::strerror(err));
      return 1;
    }
  }

  sim::ParseResult parsed = sim::parse_scenario(text);
  if (const auto* bad = std::get_if<sim::ScenarioError>(&parsed)) {
    error_line(file + ": " + bad->message);
    return 1;
  }
  try {
    auto built = sim::Simulator::create(std::move(std::get<sim::Scenario>(parsed)));
    if (const auto* bad = std::get_if<sim::ScenarioError>(&built)) {
      error_line(file + ": " + bad->message);
      return 1;
    }
    if (mode == Mode::check) return 0;
    sim::Simulator& simulator = *std::get<0>(built);

    simulator.explain_passes(reasons);
    sim::LineWriter out(stdout);
    const sim::RunReport report = simulator.run(mode == Mode::trace ? &out : nullptr);
    if (mode == Mode::table) {
      out.buffer() += sim::format_table(report);
    } else {
      sim::append_summary(out.buffer(), report);
      out.end_line();
    }
    out.flush();
    if (std::fflush(stdout) != 0) {
      error_line(std::string("cannot write the output: ") + std::strerror(errno));
      return 3;
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    error_line(std::string("run failed: ") + e.what());
    return 3;
  }
  return 0;
}
