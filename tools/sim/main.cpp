// creditloop-sim: runs a scenario through the real dispatcher core on a virtual clock and writes
// the trace of SPEC section 6 (or a table, or only the summary); or replays a capture, or runs a
// scenario's arrivals under two sets of plans, and compares the two runs (docs/replay.md).
//
// Exit status: 0 success; 1 a bad or unreadable scenario, capture or plans file (one line on
// stderr naming the field, nothing on stdout); 2 a bad command line; 3 the run failed (the output
// could not be written, or the core contradicted itself: a bug to report).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture_file.hpp"
#include "picture.hpp"
#include "replay.hpp"
#include "scenario.hpp"
#include "simulator.hpp"

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
    "arrival, pass, dispatch and completion, then a summary line (SPEC section 6).\n"
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

// A picture file. Its temporary is created beside the target before the run, so that a path that
// cannot be written fails before anything else is, and renamed over the target only once
// complete, so that a reader never sees half a picture. Discarded unless committed.
class OutputFile {
 public:
  OutputFile(std::string option, std::string path)
      : option_(std::move(option)), path_(std::move(path)) {}
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() { discard(); }

  /// Creates the temporary; on failure, the one-line reason.
  [[nodiscard]] bool open(std::string& error) {
    struct stat st {};
    if (stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      error = option_ + " " + path_ + ": is a directory";
      return false;
    }
    temp_ = path_ + ".XXXXXX";
    fd_ = mkstemp(temp_.data());
    if (fd_ < 0) {
      error = option_ + " " + path_ + ": cannot create: " + std::strerror(errno);
      temp_.clear();
      return false;
    }
    // mkstemp makes the file private; a picture is as readable as any file the user creates.
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd_, 0666 & ~mask);
    return true;
  }

  /// Writes `content` at the end of the temporary; on failure, the one-line reason.
  [[nodiscard]] bool append(const std::string& content, std::string& error) {
    std::size_t done = 0;
    while (done < content.size()) {
      const ssize_t n = write(fd_, content.data() + done, content.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = option_ + " " + path_ + ": cannot write: " + std::strerror(errno);
        return false;
      }
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// Writes `content` and moves it into place; on failure, the one-line reason.
  [[nodiscard]] bool commit(const std::string& content, std::string& error) {
    if (!append(content, error)) return false;
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) {
      error = option_ + " " + path_ + ": cannot write: " + std::strerror(errno);
      return false;
    }
    if (rename(temp_.c_str(), path_.c_str()) != 0) {
      error = option_ + " " + path_ + ": cannot replace: " + std::strerror(errno);
      return false;
    }
    temp_.clear();
    return true;
  }

  void discard() noexcept {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (!temp_.empty()) unlink(temp_.c_str());
    temp_.clear();
  }

 private:
  std::string option_;
  std::string path_;
  std::string temp_;
  int fd_ = -1;
};

// The file of --capture. The capture writer writes a path of its own; it is given one inside a
// private directory created beside FILE before the run, renamed over FILE once complete and
// removed otherwise, so that a capture, like a picture, is written whole or not at all.
class CaptureTarget {
 public:
  explicit CaptureTarget(std::string path) : path_(std::move(path)) {}
  CaptureTarget(const CaptureTarget&) = delete;
  CaptureTarget& operator=(const CaptureTarget&) = delete;
  ~CaptureTarget() { discard(); }

  /// Creates the directory; on failure, the one-line reason.
  [[nodiscard]] bool open(std::string& error) {
    struct stat st {};
    if (stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      error = "--capture " + path_ + ": is a directory";
      return false;
    }
    dir_ = path_ + ".XXXXXX";
    if (mkdtemp(dir_.data()) == nullptr) {
      error = "--capture " + path_ + ": cannot create: " + std::strerror(errno);
      dir_.clear();
      return false;
    }
    return true;
  }
  /// Where the writer writes.
  [[nodiscard]] std::string file() const { return dir_ + "/capture"; }

  [[nodiscard]] bool commit(std::string& error) {
    if (rename(file().c_str(), path_.c_str()) != 0) {
      error = "--capture " + path_ + ": cannot replace: " + std::strerror(errno);
      return false;
    }
    discard();
    return true;
  }

  void discard() noexcept {
    if (dir_.empty()) return;
    unlink(file().c_str());
    rmdir(dir_.c_str());
    dir_.clear();
  }

 private:
  std::string path_;
  std::string dir_;
};

// Reads `file` ("-": standard input) whole; on failure, the one-line reason.
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

// The captured run as the picture's report wants it: every request recorded was dispatched and
// completed; the run stops at the last completion.
sim::RunReport report_of(const sim::Capture& capture, std::uint64_t slots) {
  sim::RunReport out;
  out.classes = capture.classes;
  out.slots = slots;
  out.arrived = capture.requests.size();
  for (const sim::ParticipantSpec& p : capture.participants) {
    sim::ParticipantReport r;
    r.name = p.name;
    r.plan = p.plan;
    r.shares = p.shares;
    out.participants.push_back(std::move(r));
  }
  for (const sim::CapturedRequest& r : capture.requests) {
    sim::ParticipantReport& p = out.participants[r.participant];
    ++p.dispatched[r.cls];
    ++p.completed;
    const creditloop::Nanos wait = r.dispatch - r.arrive;
    if (!p.wait_max || wait > *p.wait_max) p.wait_max = wait;
    out.stopped_at = std::max(out.stopped_at, r.complete);
  }
  return out;
}

// One simulated run of `scenario` with a recorder of waits and, if drawing, a picture.
struct Recorded {
  sim::Scenario scenario;
  std::unique_ptr<sim::WaitRecorder> waits;
  std::unique_ptr<sim::Picture> picture;
  sim::RunReport report;
};

// Runs `scenario`; a refusal by the core comes back in `error` (exit status 1).
bool record_run(Recorded& run, bool drawing, const std::string& title, std::string& error) {
  auto built = sim::Simulator::create(run.scenario);
  if (const auto* bad = std::get_if<sim::ScenarioError>(&built)) {
    error = bad->message;
    return false;
  }
  sim::Simulator& simulator = *std::get<0>(built);
  run.waits = std::make_unique<sim::WaitRecorder>(run.scenario);
  sim::ObserverFan fan;
  fan.add(run.waits.get());
  if (drawing) {
    run.picture = std::make_unique<sim::Picture>(run.scenario, title);
    fan.add(run.picture.get());
  }
  simulator.observe(&fan);
  run.report = simulator.run(nullptr);
  return true;
}

// --replay and SCENARIO --plans: two runs side by side.
int compare_runs(const Options& o) {
  const bool drawing = !o.html_path.empty();
  std::optional<sim::PlanFile> plans;
  if (!o.plans_path.empty()) {
    std::string text;
    std::string error;
    if (!read_input(o.plans_path, text, error)) {
      error_line(error);
      return 1;
    }
    auto parsed = sim::parse_plan_file(text);
    if (const auto* bad = std::get_if<sim::ScenarioError>(&parsed)) {
      error_line(o.plans_path + ": " + bad->message);
      return 1;
    }
    plans = std::get<sim::PlanFile>(std::move(parsed));
    plans->name = o.plans_path;
  }

  sim::Comparison cmp;
  std::optional<sim::Capture> capture;
  Recorded first;   // the scenario as given (scenario mode only)
  Recorded second;  // the replay, or the scenario under --plans
  std::string title;
  std::string first_label;
  std::string second_label;
  if (o.replay) {
    std::vector<sim::CaptureText> texts;
    for (const std::string& file : o.files) {
      sim::CaptureText t;
      t.name = file;
      std::string error;
      if (!read_input(file, t.text, error)) {
        error_line(error);
        return 1;
      }
      texts.push_back(std::move(t));
    }
    auto read = sim::read_capture(texts);
    if (const auto* bad = std::get_if<sim::CaptureError>(&read)) {
      error_line(bad->message);
      return 1;
    }
    capture = std::get<sim::Capture>(std::move(read));
    auto scenario =
        sim::replay_scenario(*capture, plans ? &*plans : nullptr, o.slots, capture->files.front());
    if (const auto* bad = std::get_if<sim::ScenarioError>(&scenario)) {
      error_line(bad->message);
      return 1;
    }
    second.scenario = std::get<sim::Scenario>(std::move(scenario));
    cmp.keys = {"captured", "replayed"};
    cmp.classes = capture->classes;
    cmp.slots = second.scenario.slots;
    cmp.dropped = capture->dropped;
    std::string files;
    for (const std::string& f : capture->files) files += (files.empty() ? "" : ", ") + f;
    cmp.what = "replay of " + files + ": " + std::to_string(capture->requests.size()) +
               " requests; captured: as recorded; replayed: through the core on a virtual clock" +
               (plans ? " under the plans of " + plans->name : " under the captured plans");
    if (capture->first_file > 0) {
      // The files before it were rotated away: see docs/replay.md, "what it cannot".
      cmp.what += "; note: the earliest file given is file " + std::to_string(capture->first_file) +
                  " of the capture, so the replay starts there with every bucket full";
    }
    title = "replay of " + base_name(capture->files.front());
    first_label = "captured: " + base_name(capture->files.front()) +
                  " as recorded (no passes or balances in a capture)";
    second_label = "replayed: under " + (plans ? "the plans of " + base_name(plans->name)
                                               : std::string("the captured plans"));
  } else {
    std::string text;
    std::string error;
    const std::string& file = o.files[0];
    if (!read_input(file, text, error)) {
      error_line(error);
      return 1;
    }
    sim::ParseResult parsed = sim::parse_scenario(text);
    if (const auto* bad = std::get_if<sim::ScenarioError>(&parsed)) {
      error_line(file + ": " + bad->message);
      return 1;
    }
    first.scenario = std::get<sim::Scenario>(std::move(parsed));
    auto other = sim::with_plans(first.scenario, *plans);
    if (const auto* bad = std::get_if<sim::ScenarioError>(&other)) {
      error_line(bad->message);
      return 1;
    }
    second.scenario = std::get<sim::Scenario>(std::move(other));
    cmp.keys = {"scenario", "plans"};
    cmp.classes = first.scenario.config.classes;
    cmp.slots = first.scenario.slots;
    cmp.what = "two runs of " + file + "'s arrivals: scenario: under its own plans; plans: under " +
               plans->name + "'s";
    title = base_name(file) + " and " + base_name(plans->name);
    first_label = "scenario: " + base_name(file) + " under its own plans";
    second_label = "plans: the same arrivals under the plans of " + base_name(plans->name);
  }
  const std::uint64_t requests = second.scenario.requests;
  if (drawing && requests > sim::Picture::kMaxRequests) {
    error_line(std::to_string(requests) + " requests in this run; a picture takes at most " +
               std::to_string(sim::Picture::kMaxRequests));
    return 2;
  }
  if (o.mode == Mode::check) {
    for (Recorded* r : {&first, &second}) {
      if (o.replay && r == &first) continue;
      auto built = sim::Simulator::create(r->scenario);
      if (const auto* bad = std::get_if<sim::ScenarioError>(&built)) {
        error_line(bad->message);
        return 1;
      }
    }
    return 0;
  }

  try {
    std::unique_ptr<OutputFile> page;
    if (drawing) {
      page = std::make_unique<OutputFile>("--html", o.html_path);
      std::string error;
      if (!page->open(error)) {
        error_line(error);
        return 3;
      }
    }
    std::string error;
    if (!o.replay && !record_run(first, drawing, title, error)) {
      error_line(o.files[0] + ": " + error);
      return 1;
    }
    if (!record_run(second, drawing, title, error)) {
      error_line(error);
      return 1;
    }
    // The captured side: as recorded, drawn from the capture's own instants.
    std::optional<sim::Scenario> captured_scenario;
    std::unique_ptr<sim::Picture> captured_picture;
    sim::RunReport captured_report;
    if (o.replay) {
      cmp.runs[0] = sim::account_of(*capture);
      if (drawing) {
        auto s =
            sim::replay_scenario(*capture, nullptr, second.scenario.slots, capture->files.front());
        if (const auto* bad = std::get_if<sim::ScenarioError>(&s)) {
          error_line(bad->message);
          return 1;
        }
        captured_scenario = std::get<sim::Scenario>(std::move(s));
        captured_picture = std::make_unique<sim::Picture>(*captured_scenario, title);
        captured_picture->without_balances();
        sim::play_capture(*capture, *captured_picture);
        captured_report = report_of(*capture, second.scenario.slots);
      }
    } else {
      cmp.runs[0] = first.waits->account();
    }
    cmp.runs[1] = second.waits->account();

    std::string out = o.json ? sim::comparison_json(cmp) + "\n" : sim::format_comparison(cmp);
    if (std::fputs(out.c_str(), stdout) < 0 || std::fflush(stdout) != 0) {
      error_line(std::string("cannot write the output: ") + std::strerror(errno));
      return 3;
    }
    if (drawing) {
      const sim::Picture::Run top =
          o.replay ? sim::Picture::Run{captured_picture.get(), &captured_report, first_label}
                   : sim::Picture::Run{first.picture.get(), &first.report, first_label};
      const sim::Picture::Run below{second.picture.get(), &second.report, second_label};
      if (!page->commit(sim::Picture::pair_html(title, top, below), error)) {
        error_line(error);
        return 3;
      }
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    error_line(std::string("run failed: ") + e.what());
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
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
      o.reasons = true;
    } else if (!options_done && arg == "--replay") {
      o.replay = true;
    } else if (!options_done && arg == "--json") {
      o.json = true;
    } else if (!options_done &&
               (arg == "--html" || arg == "--svg" || arg == "--capture" || arg == "--plans" ||
                arg == "--slots" || arg.starts_with("--html=") || arg.starts_with("--svg=") ||
                arg.starts_with("--capture=") || arg.starts_with("--plans=") ||
                arg.starts_with("--slots="))) {
      const std::size_t eq = arg.find('=');
      const std::string name(arg.substr(0, eq));
      std::string value;
      if (eq != std::string_view::npos) {
        value = std::string(arg.substr(eq + 1));
      } else if (i + 1 < argc) {
        value = argv[++i];
      }
      if (value.empty()) {
        error_line(name + (name == "--slots" ? " needs a number" : " needs a file name") +
                   " (see --help)");
        return 2;
      }
      if (name == "--slots") {
        std::uint64_t n = 0;
        const auto r = std::from_chars(value.data(), value.data() + value.size(), n);
        if (r.ec != std::errc() || r.ptr != value.data() + value.size() || n < 1 ||
            n > sim::kMaxSlots) {
          error_line("--slots must be a whole number from 1 to " + std::to_string(sim::kMaxSlots) +
                     ", got '" + value + "' (see --help)");
          return 2;
        }
        o.slots = n;
      } else {
        (name == "--html"      ? o.html_path
         : name == "--svg"     ? o.svg_path
         : name == "--capture" ? o.capture_path
                               : o.plans_path) = value;
      }
    } else if (!options_done && (arg == "--table" || arg == "--summary" || arg == "--check")) {
      const Mode m = arg == "--table"     ? Mode::table
                     : arg == "--summary" ? Mode::summary
                                          : Mode::check;
      if (o.mode != Mode::trace && o.mode != m) {
        error_line("--table, --summary and --check exclude each other (see --help)");
        return 2;
      }
      o.mode = m;
    } else if (!options_done && arg.size() > 1 && arg[0] == '-') {
      error_line("unknown option '" + std::string(arg) + "' (see --help)");
      return 2;
    } else {
      o.files.emplace_back(arg);
    }
  }

  const bool two_runs = o.replay || !o.plans_path.empty();
  if (o.replay) {
    if (o.files.empty()) {
      error_line("--replay needs at least one capture file (see --help)");
      return 2;
    }
    if (std::count(o.files.begin(), o.files.end(), "-") > 1) {
      error_line("standard input (\"-\") can be only one of the capture files (see --help)");
      return 2;
    }
  } else if (o.files.size() != 1) {
    error_line(o.files.empty() ? "no scenario file given (see --help)"
                               : "exactly one scenario file, got " +
                                     std::to_string(o.files.size()) + " (see --help)");
    return 2;
  }
  if (two_runs) {
    const char* what = o.replay ? "--replay" : "--plans with a scenario";
    std::string clash;
    if (o.mode == Mode::table || o.mode == Mode::summary) {
      clash = o.mode == Mode::table ? "--table" : "--summary";
    } else if (o.reasons) {
      clash = "--reasons";
    } else if (!o.svg_path.empty()) {
      clash = "--svg";
    } else if (!o.capture_path.empty()) {
      clash = "--capture";
    }
    if (!clash.empty()) {
      error_line(std::string(what) + " prints the two runs' comparison; it does not take " + clash +
                 " (see --help)");
      return 2;
    }
    if (o.slots && !o.replay) {
      error_line("--slots is for --replay (a scenario gives its own) (see --help)");
      return 2;
    }
    if (o.mode == Mode::check && !o.html_path.empty()) {
      error_line("--check runs nothing, so it cannot draw --html or --svg (see --help)");
      return 2;
    }
    return compare_runs(o);
  }
  if (o.json || o.slots) {
    error_line(std::string(o.json ? "--json" : "--slots") +
               " is for --replay or --plans (see --help)");
    return 2;
  }

  const Mode mode = o.mode;
  const bool reasons = o.reasons;
  const std::string& html_path = o.html_path;
  const std::string& svg_path = o.svg_path;
  if (mode == Mode::check && (!html_path.empty() || !svg_path.empty() || !o.capture_path.empty())) {
    error_line(o.capture_path.empty() || !html_path.empty() || !svg_path.empty()
                   ? "--check runs nothing, so it cannot draw --html or --svg (see --help)"
                   : "--check runs nothing, so it cannot write --capture (see --help)");
    return 2;
  }

  const std::string& file = o.files[0];
  std::string text;
  if (std::string error; !read_input(file, text, error)) {
    error_line(error);
    return 1;
  }

  sim::ParseResult parsed = sim::parse_scenario(text);
  if (const auto* bad = std::get_if<sim::ScenarioError>(&parsed)) {
    error_line(file + ": " + bad->message);
    return 1;
  }
  const bool drawing = !html_path.empty() || !svg_path.empty();
  // Refused before the simulator sizes its pool for the run.
  if (drawing && std::get<sim::Scenario>(parsed).requests > sim::Picture::kMaxRequests) {
    error_line(file + ": " + std::to_string(std::get<sim::Scenario>(parsed).requests) +
               " requests arrive in this run; a picture takes at most " +
               std::to_string(sim::Picture::kMaxRequests) + " (set an earlier `until`)");
    return 2;
  }
  try {
    // The picture and the capture read the scenario the simulator takes over.
    std::optional<sim::Scenario> scenario;
    if (drawing || !o.capture_path.empty()) scenario = std::get<sim::Scenario>(parsed);
    auto built = sim::Simulator::create(std::move(std::get<sim::Scenario>(parsed)));
    if (const auto* bad = std::get_if<sim::ScenarioError>(&built)) {
      error_line(file + ": " + bad->message);
      return 1;
    }
    if (mode == Mode::check) return 0;
    sim::Simulator& simulator = *std::get<0>(built);

    std::vector<std::unique_ptr<OutputFile>> pictures;
    std::unique_ptr<sim::Picture> picture;
    sim::ObserverFan observers;
    if (drawing) {
      if (!html_path.empty()) pictures.push_back(std::make_unique<OutputFile>("--html", html_path));
      if (!svg_path.empty()) pictures.push_back(std::make_unique<OutputFile>("--svg", svg_path));
      for (auto& f : pictures) {
        std::string error;
        if (!f->open(error)) {
          error_line(error);
          return 3;
        }
      }
      picture = std::make_unique<sim::Picture>(*scenario, base_name(file));
      observers.add(picture.get());
    }
    std::unique_ptr<CaptureTarget> capture_target;
    std::unique_ptr<sim::CaptureRecorder> capture;
    if (!o.capture_path.empty()) {
      capture_target = std::make_unique<CaptureTarget>(o.capture_path);
      std::string error;
      if (!capture_target->open(error)) {
        error_line(error);
        return 3;
      }
      capture = std::make_unique<sim::CaptureRecorder>(*scenario, capture_target->file());
      if (!capture->error().empty()) {
        error_line("--capture " + o.capture_path + ": " + capture->error());
        return 3;
      }
      observers.add(capture.get());
    }
    if (!observers.empty()) simulator.observe(&observers);

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
    if (capture) {
      capture->finish();
      std::string error = capture->error();
      if (!error.empty()) {
        error = "--capture " + o.capture_path + ": " + error;
      } else {
        capture.reset();  // closes the file
        (void)capture_target->commit(error);
      }
      if (!error.empty()) {
        error_line(error);
        return 3;
      }
    }
    std::size_t next = 0;
    for (const std::string* path : {&html_path, &svg_path}) {
      if (path->empty()) continue;
      const std::string content = path == &html_path ? picture->html(report) : picture->svg(report);
      std::string error;
      if (!pictures[next++]->commit(content, error)) {
        error_line(error);
        return 3;
      }
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    error_line(std::string("run failed: ") + e.what());
    return 3;
  }
  return 0;
}
