// creditloop-sim: runs a scenario through the real dispatcher core on a virtual clock and writes
// the trace of docs/contract.md §6 (or a table, or only the summary); or replays a capture, or runs
// a scenario's arrivals under two sets of plans, and compares the two runs (docs/replay.md).
//
// Exit status: 0 success; 1 a bad or unreadable scenario, capture or plans file (one line on
// stderr naming the field, nothing on stdout); 2 a bad command line; 3 the run failed (the output
// could not be written, or the core contradicted itself: a bug to report).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "program.hpp"

namespace creditloop::sim::program {

namespace {

constexpr const char* kUsage =
    "usage: creditloop-sim [--table | --summary | --check] [--reasons] [--html FILE]\n"
    "                      [--svg FILE] [--capture FILE] SCENARIO.json\n"
    "       creditloop-sim SCENARIO.json --plans OTHER.json [--json | --check] [--html FILE]\n"
    "       creditloop-sim --replay CAPTURE... [--plans PLANS.json] [--slots N]\n"
    "                      [--json | --check] [--html FILE]\n"
    "\n"
    "Runs SCENARIO.json (\"-\" reads standard input) through the creditloop dispatcher core on a\n"
    "virtual clock against a slot-model server. By default writes the JSON Lines trace of every\n"
    "arrival, pass, dispatch and completion, then a summary line (docs/contract.md §6).\n"
    "\n"
    "options:\n"
    "  --table     instead of the trace, print an aligned table per participant: plan, shares,\n"
    "              dispatches per class with their share of the row, share of all dispatches,\n"
    "              completed, waiting, longest wait and balances when the run stopped\n"
    "  --summary   print only the summary line\n"
    "  --check     validate the input and print nothing (exit status says whether it is good)\n"
    "  --reasons   each pass line also says why each ignored participant was passed over:\n"
    "              {\"why\": \"no_bucket\"} or {\"why\": \"below_one_credit\", \"balance\": B,\n"
    "              \"next_credit\": T} (an extension of the trace format, off by default)\n"
    "  --html FILE also write a picture of the run to FILE: one self-contained page (no\n"
    "              network) with a lane per participant, its requests and balances, the\n"
    "              passes and why each ignored participant was passed over, and a time\n"
    "              cursor (drag it or step with the arrow keys); wheel zooms, drag pans.\n"
    "              With --replay or --plans: both runs, one above the other on one time axis\n"
    "  --svg FILE  also write a static SVG of the same timeline to FILE, for documents;\n"
    "              busy lanes are drawn as aggregates, so its size does not grow with the\n"
    "              number of requests (at most about 30 KB per class and participant)\n"
    "  --capture FILE  also write the run as a creditloop capture (version 1, docs/replay.md):\n"
    "              a header, then one line per completed request, in completion order\n"
    "  --replay CAPTURE...  replay a capture (its rotated files in any order) through the core\n"
    "              and print, per participant, the captured and the replayed waits (arrival to\n"
    "              dispatch: p50, p99, max, mean) and class mix, side by side\n"
    "  --plans FILE  the plans of the replayed run (or of a scenario's second run): the\n"
    "              scenario's `plans` object, optionally with `participants` ([{\"name\",\n"
    "              \"plan\", \"shares\"}]) changing some participants; the captured side stays\n"
    "              as recorded. With a scenario and no --replay: the same arrivals are run\n"
    "              under the scenario's plans and under FILE's, and compared\n"
    "  --slots N   the replay's slot count (required when the capture's is null)\n"
    "  --json      print the comparison as one JSON object (keys in docs/replay.md)\n"
    "  -h, --help  print this help\n"
    "\n"
    "A bad scenario exits with status 1 and one line on standard error naming the field at\n"
    "fault (e.g. arrivals[1].count); nothing is written to standard output. A bad capture or\n"
    "plans file likewise, naming the file, line and field (e.g. cap.jsonl:7: arrive). Limits:\n"
    "times up to 1e9 s, rounded to the nanosecond; at most 20000000 requests arriving in one\n"
    "run, and 5000000 for a picture. The pictures and the capture do not change what goes to\n"
    "standard output (add --summary to keep it short). A picture or capture file is written\n"
    "whole or not at all: if FILE cannot be created the run does not start (status 3, nothing\n"
    "on standard output).\n"
    "Exit status: 0 ok, 1 bad or unreadable scenario, capture or plans file, 2 bad command\n"
    "line, 3 run failed.\n";

bool read_all(std::FILE* f, std::string& out) {
  char chunk[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) out.append(chunk, n);
  return std::ferror(f) == 0;
}

}  // namespace

void error_line(const std::string& message) {
  std::string line = "creditloop-sim: " + message;
  for (char& ch : line) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

bool read_input(const std::string& file, std::string& text, std::string& error) {
  if (file == "-") {
    if (!read_all(stdin, text)) {
      error = "-: cannot read standard input: " + std::string(std::strerror(errno));
      return false;
    }
    return true;
  }
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) {
    error = file + ": cannot open: " + std::strerror(errno);
    return false;
  }
  const bool ok = read_all(f, text);
  const int err = errno;
  std::fclose(f);
  if (!ok) {
    error = file + ": cannot read: " + std::strerror(err);
    return false;
  }
  return true;
}

std::string base_name(const std::string& file) {
  const std::size_t slash = file.find_last_of('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

namespace {

// --html, --svg, --capture, --plans and --slots, as `--name value` or `--name=value` (argv[i]).
// Returns nothing when argv[i] is none of them, 0 when it was read (i past its value), 2 for a
// missing or bad value.
std::optional<int> parse_valued(int argc, char** argv, int& i, Options& o) {
  const std::string_view arg = argv[i];
  const std::size_t eq = arg.find('=');
  const std::string name(arg.substr(0, eq));
  std::string* const path = name == "--html"      ? &o.html_path
                            : name == "--svg"     ? &o.svg_path
                            : name == "--capture" ? &o.capture_path
                            : name == "--plans"   ? &o.plans_path
                                                  : nullptr;
  if (path == nullptr && name != "--slots") return std::nullopt;
  std::string value;
  if (eq != std::string_view::npos) {
    value = std::string(arg.substr(eq + 1));
  } else if (i + 1 < argc) {
    value = argv[++i];
  }
  if (value.empty()) {
    error_line(name + (path == nullptr ? " needs a number" : " needs a file name") +
               " (see --help)");
    return 2;
  }
  if (path != nullptr) {
    *path = value;
    return 0;
  }
  std::uint64_t n = 0;
  const auto r = std::from_chars(value.data(), value.data() + value.size(), n);
  if (r.ec != std::errc() || r.ptr != value.data() + value.size() || n < 1 || n > sim::kMaxSlots) {
    error_line("--slots must be a whole number from 1 to " + std::to_string(sim::kMaxSlots) +
               ", got '" + value + "' (see --help)");
    return 2;
  }
  o.slots = n;
  return 0;
}

// Reads the command line into `o`. Returns the exit status when the program should stop here: 0
// after --help, 2 for a bad command line.
std::optional<int> parse_options(int argc, char** argv, Options& o) {
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool option = !options_done && arg.size() > 1 && arg[0] == '-';
    if (!option) {
      o.files.emplace_back(arg);
    } else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--") {
      options_done = true;
    } else if (arg == "--reasons") {
      o.reasons = true;
    } else if (arg == "--replay") {
      o.replay = true;
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg == "--table" || arg == "--summary" || arg == "--check") {
      const Mode m = arg == "--table"     ? Mode::table
                     : arg == "--summary" ? Mode::summary
                                          : Mode::check;
      if (o.mode != Mode::trace && o.mode != m) {
        error_line("--table, --summary and --check exclude each other (see --help)");
        return 2;
      }
      o.mode = m;
    } else if (const std::optional<int> status = parse_valued(argc, argv, i, o)) {
      if (*status != 0) return status;
    } else {
      error_line("unknown option '" + std::string(arg) + "' (see --help)");
      return 2;
    }
  }
  return std::nullopt;
}

// A rule of which options go together: when it applies, the command line is refused.
struct Exclusion {
  bool (*applies)(const Options&);
  const char* message;
  bool names_comparison = false;  // the message follows the option that makes two runs
};

bool two_runs(const Options& o) { return o.replay || !o.plans_path.empty(); }

// In order: the first that applies is the one reported.
constexpr Exclusion kExclusions[] = {
    {[](const Options& o) { return o.replay && o.files.empty(); },
     "--replay needs at least one capture file"},
    {[](const Options& o) {
       return o.replay && std::count(o.files.begin(), o.files.end(), "-") > 1;
     },
     "standard input (\"-\") can be only one of the capture files"},
    {[](const Options& o) { return !o.replay && o.files.empty(); }, "no scenario file given"},
    {[](const Options& o) { return two_runs(o) && o.mode == Mode::table; },
     "prints the two runs\' comparison; it does not take --table", true},
    {[](const Options& o) { return two_runs(o) && o.mode == Mode::summary; },
     "prints the two runs\' comparison; it does not take --summary", true},
    {[](const Options& o) { return two_runs(o) && o.reasons; },
     "prints the two runs\' comparison; it does not take --reasons", true},
    {[](const Options& o) { return two_runs(o) && !o.svg_path.empty(); },
     "prints the two runs\' comparison; it does not take --svg", true},
    {[](const Options& o) { return two_runs(o) && !o.capture_path.empty(); },
     "prints the two runs\' comparison; it does not take --capture", true},
    {[](const Options& o) { return two_runs(o) && o.slots && !o.replay; },
     "--slots is for --replay (a scenario gives its own)"},
    {[](const Options& o) { return !two_runs(o) && o.json; }, "--json is for --replay or --plans"},
    {[](const Options& o) { return !two_runs(o) && o.slots.has_value(); },
     "--slots is for --replay or --plans"},
    {[](const Options& o) {
       return o.mode == Mode::check && (!o.html_path.empty() || !o.svg_path.empty());
     },
     "--check runs nothing, so it cannot draw --html or --svg"},
    {[](const Options& o) { return o.mode == Mode::check && !o.capture_path.empty(); },
     "--check runs nothing, so it cannot write --capture"},
};

// Whether the options go together; if not, says why on standard error.
bool options_agree(const Options& o) {
  if (!o.replay && o.files.size() > 1) {
    error_line("exactly one scenario file, got " + std::to_string(o.files.size()) +
               " (see --help)");
    return false;
  }
  for (const Exclusion& rule : kExclusions) {
    if (!rule.applies(o)) continue;
    const std::string mode = o.replay ? "--replay " : "--plans with a scenario ";
    error_line((rule.names_comparison ? mode : "") + rule.message + " (see --help)");
    return false;
  }
  return true;
}

}  // namespace

}  // namespace creditloop::sim::program

int main(int argc, char** argv) {
  using namespace creditloop::sim::program;
  Options o;
  if (const std::optional<int> status = parse_options(argc, argv, o)) return *status;
  if (!options_agree(o)) return 2;
  return two_runs(o) ? compare_runs(o) : single_run(o);
}
