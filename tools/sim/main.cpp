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
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture_file.hpp"
#include "common/atomic_output.hpp"
#include "picture.hpp"
#include "replay.hpp"
#include "scenario.hpp"
#include "simulator.hpp"

namespace sim = creditloop::sim;
using creditloop::tools::CaptureTarget;
using creditloop::tools::OutputFile;

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
  if (const auto* bad = std::get_if<sim::Refusal>(&built)) {
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

// The two runs of --replay or SCENARIO --plans, before they run.
struct TwoRuns {
  sim::Comparison cmp;
  std::optional<sim::Capture> capture;  // --replay: what was recorded
  Recorded first;                       // the scenario as given (SCENARIO --plans only)
  Recorded second;                      // the replay, or the scenario under --plans
  std::string title;
  std::string first_label;
  std::string second_label;
};

// Reads --plans FILE, if given. Returns false after saying why.
bool load_plans(const Options& o, std::optional<sim::PlanFile>& plans) {
  if (o.plans_path.empty()) return true;
  std::string text;
  std::string error;
  if (!read_input(o.plans_path, text, error)) {
    error_line(error);
    return false;
  }
  auto parsed = sim::parse_plan_file(text);
  if (const auto* bad = std::get_if<sim::Refusal>(&parsed)) {
    error_line(o.plans_path + ": " + bad->message);
    return false;
  }
  plans = std::get<sim::PlanFile>(std::move(parsed));
  plans->name = o.plans_path;
  return true;
}

// --replay: the capture read, and its replay's scenario. Returns false after saying why.
bool prepare_replay(const Options& o, const sim::PlanFile* plans, TwoRuns& runs) {
  std::vector<sim::CaptureText> texts;
  for (const std::string& file : o.files) {
    sim::CaptureText t;
    t.name = file;
    std::string error;
    if (!read_input(file, t.text, error)) {
      error_line(error);
      return false;
    }
    texts.push_back(std::move(t));
  }
  auto read = sim::read_capture(texts);
  if (const auto* bad = std::get_if<sim::Refusal>(&read)) {
    error_line(bad->message);
    return false;
  }
  const sim::Capture& capture = runs.capture.emplace(std::get<sim::Capture>(std::move(read)));
  auto scenario = sim::replay_scenario(capture, plans, o.slots, capture.files.front());
  if (const auto* bad = std::get_if<sim::Refusal>(&scenario)) {
    error_line(bad->message);
    return false;
  }
  runs.second.scenario = std::get<sim::Scenario>(std::move(scenario));
  sim::Comparison& cmp = runs.cmp;
  cmp.keys = {"captured", "replayed"};
  cmp.classes = capture.classes;
  cmp.slots = runs.second.scenario.slots;
  cmp.dropped = capture.dropped;
  std::string files;
  for (const std::string& f : capture.files) files += (files.empty() ? "" : ", ") + f;
  cmp.what = "replay of " + files + ": " + std::to_string(capture.requests.size()) +
             " requests; captured: as recorded; replayed: through the core on a virtual clock" +
             (plans ? " under the plans of " + plans->name : " under the captured plans");
  if (capture.first_file > 0) {
    // The files before it were rotated away: see docs/replay.md, "what it cannot".
    cmp.what += "; note: the earliest file given is file " + std::to_string(capture.first_file) +
                " of the capture, so the replay starts there with every bucket full";
  }
  const std::string first_file = base_name(capture.files.front());
  runs.title = "replay of " + first_file;
  runs.first_label =
      "captured: " + first_file + " as recorded (no passes or balances in a capture)";
  runs.second_label = "replayed: under " + (plans ? "the plans of " + base_name(plans->name)
                                                  : std::string("the captured plans"));
  return true;
}

// Why a scenario cannot be captured or run again under other plans: a capture's header, and the
// scenario built from it, record a fixed number of slots and no backend. Null when it can.
const char* no_second_run(const sim::Scenario& s) {
  if (s.room_auto)
    return "the server's room is learned (\"slots\": \"auto\"), which a capture does not record";
  if (!s.backend.empty()) return "the server has a backend, which a capture does not record";
  return nullptr;
}

// SCENARIO --plans: the scenario, and its arrivals under the other plans. Returns false after
// saying why.
bool prepare_plans_run(const Options& o, const sim::PlanFile& plans, TwoRuns& runs) {
  std::string text;
  std::string error;
  const std::string& file = o.files[0];
  if (!read_input(file, text, error)) {
    error_line(error);
    return false;
  }
  sim::Parsed<sim::Scenario> parsed = sim::parse_scenario(text);
  if (const auto* bad = std::get_if<sim::Refusal>(&parsed)) {
    error_line(file + ": " + bad->message);
    return false;
  }
  runs.first.scenario = std::get<sim::Scenario>(std::move(parsed));
  if (const char* why = no_second_run(runs.first.scenario)) {
    error_line(file + ": --plans: " + why);
    return false;
  }
  auto other = sim::with_plans(runs.first.scenario, plans);
  if (const auto* bad = std::get_if<sim::Refusal>(&other)) {
    error_line(bad->message);
    return false;
  }
  runs.second.scenario = std::get<sim::Scenario>(std::move(other));
  runs.cmp.keys = {"scenario", "plans"};
  runs.cmp.classes = runs.first.scenario.config.classes;
  runs.cmp.slots = runs.first.scenario.slots;
  runs.cmp.what = "two runs of " + file +
                  "'s arrivals: scenario: under its own plans; plans: under " + plans.name + "'s";
  runs.title = base_name(file) + " and " + base_name(plans.name);
  runs.first_label = "scenario: " + base_name(file) + " under its own plans";
  runs.second_label = "plans: the same arrivals under the plans of " + base_name(plans.name);
  return true;
}

// The captured side of a replay: as recorded, drawn from the capture's own instants.
struct CapturedSide {
  std::optional<sim::Scenario> scenario;
  std::unique_ptr<sim::Picture> picture;
  sim::RunReport report;
};

// Runs both (a replay's captured side is only read), prints the comparison, draws the page;
// returns the exit status.
int run_and_compare(const Options& o, TwoRuns& runs) {
  const bool drawing = !o.html_path.empty();
  std::unique_ptr<OutputFile> page;
  std::string error;
  if (drawing) {
    page = std::make_unique<OutputFile>("--html", o.html_path);
    if (!page->open(error)) {
      error_line(error);
      return 3;
    }
  }
  if (!o.replay && !record_run(runs.first, drawing, runs.title, error)) {
    error_line(o.files[0] + ": " + error);
    return 1;
  }
  if (!record_run(runs.second, drawing, runs.title, error)) {
    error_line(error);
    return 1;
  }
  CapturedSide captured;
  if (o.replay) {
    const sim::Capture& capture = *runs.capture;
    runs.cmp.runs[0] = sim::account_of(capture);
    if (drawing) {
      const std::uint64_t slots = runs.second.scenario.slots;
      auto s = sim::replay_scenario(capture, nullptr, slots, capture.files.front());
      if (const auto* bad = std::get_if<sim::Refusal>(&s)) {
        error_line(bad->message);
        return 1;
      }
      captured.scenario = std::get<sim::Scenario>(std::move(s));
      captured.picture = std::make_unique<sim::Picture>(*captured.scenario, runs.title);
      captured.picture->without_balances();
      sim::play_capture(capture, *captured.picture);
      captured.report = report_of(capture, slots);
    }
  } else {
    runs.cmp.runs[0] = runs.first.waits->account();
  }
  runs.cmp.runs[1] = runs.second.waits->account();

  const std::string out =
      o.json ? sim::comparison_json(runs.cmp) + "\n" : sim::format_comparison(runs.cmp);
  if (std::fputs(out.c_str(), stdout) < 0 || std::fflush(stdout) != 0) {
    error_line(std::string("cannot write the output: ") + std::strerror(errno));
    return 3;
  }
  if (!drawing) return 0;
  const sim::Picture::Run top =
      o.replay ? sim::Picture::Run{captured.picture.get(), &captured.report, runs.first_label}
               : sim::Picture::Run{runs.first.picture.get(), &runs.first.report, runs.first_label};
  const sim::Picture::Run below{runs.second.picture.get(), &runs.second.report, runs.second_label};
  if (!page->commit(sim::Picture::pair_html(runs.title, top, below), error)) {
    error_line(error);
    return 3;
  }
  return 0;
}

// --replay and SCENARIO --plans: two runs side by side.
int compare_runs(const Options& o) {
  std::optional<sim::PlanFile> plans;
  if (!load_plans(o, plans)) return 1;
  TwoRuns runs;
  if (o.replay ? !prepare_replay(o, plans ? &*plans : nullptr, runs)
               : !prepare_plans_run(o, *plans, runs)) {
    return 1;
  }
  const std::uint64_t requests = runs.second.scenario.requests;
  if (!o.html_path.empty() && requests > sim::Picture::kMaxRequests) {
    error_line(std::to_string(requests) + " requests in this run; a picture takes at most " +
               std::to_string(sim::Picture::kMaxRequests));
    return 2;
  }
  if (o.mode == Mode::check) {
    for (Recorded* r : {&runs.first, &runs.second}) {
      if (o.replay && r == &runs.first) continue;
      auto built = sim::Simulator::create(r->scenario);
      if (const auto* bad = std::get_if<sim::Refusal>(&built)) {
        error_line(bad->message);
        return 1;
      }
    }
    return 0;
  }
  try {
    return run_and_compare(o, runs);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    error_line(std::string("run failed: ") + e.what());
    return 3;
  }
}

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

// The files a single run writes besides standard output, each created before the run starts.
struct RunOutputs {
  std::vector<std::unique_ptr<OutputFile>> pictures;  // --html, then --svg, those given
  std::unique_ptr<sim::Picture> picture;
  std::unique_ptr<CaptureTarget> capture_target;
  std::unique_ptr<sim::CaptureRecorder> capture;
  sim::ObserverFan observers;
};

// Creates the outputs `o` asks for; on failure, says why and returns false.
bool open_outputs(const Options& o, const sim::Scenario& scenario, RunOutputs& out) {
  std::string error;
  if (!o.html_path.empty() || !o.svg_path.empty()) {
    if (!o.html_path.empty()) {
      out.pictures.push_back(std::make_unique<OutputFile>("--html", o.html_path));
    }
    if (!o.svg_path.empty()) {
      out.pictures.push_back(std::make_unique<OutputFile>("--svg", o.svg_path));
    }
    for (auto& f : out.pictures) {
      if (!f->open(error)) {
        error_line(error);
        return false;
      }
    }
    out.picture = std::make_unique<sim::Picture>(scenario, base_name(o.files[0]));
    out.observers.add(out.picture.get());
  }
  if (!o.capture_path.empty()) {
    out.capture_target = std::make_unique<CaptureTarget>(o.capture_path);
    if (!out.capture_target->open(error)) {
      error_line(error);
      return false;
    }
    out.capture = std::make_unique<sim::CaptureRecorder>(scenario, out.capture_target->file());
    if (!out.capture->error().empty()) {
      error_line("--capture " + o.capture_path + ": " + out.capture->error());
      return false;
    }
    out.observers.add(out.capture.get());
  }
  return true;
}

// Finishes the capture and writes the pictures of `report`. Returns false after saying why.
bool commit_outputs(const Options& o, const sim::RunReport& report, RunOutputs& out) {
  std::string error;
  if (out.capture) {
    out.capture->finish();
    error = out.capture->error();
    if (!error.empty()) {
      error = "--capture " + o.capture_path + ": " + error;
    } else {
      out.capture.reset();  // closes the file
      (void)out.capture_target->commit(error);
    }
    if (!error.empty()) {
      error_line(error);
      return false;
    }
  }
  std::size_t next = 0;
  for (const std::string* path : {&o.html_path, &o.svg_path}) {
    if (path->empty()) continue;
    const std::string content =
        path == &o.html_path ? out.picture->html(report) : out.picture->svg(report);
    if (!out.pictures[next++]->commit(content, error)) {
      error_line(error);
      return false;
    }
  }
  return true;
}

// SCENARIO alone: the trace, the table or the summary, and the files asked for.
int single_run(const Options& o) {
  const std::string& file = o.files[0];
  std::string text;
  if (std::string error; !read_input(file, text, error)) {
    error_line(error);
    return 1;
  }
  sim::Parsed<sim::Scenario> parsed = sim::parse_scenario(text);
  if (const auto* bad = std::get_if<sim::Refusal>(&parsed)) {
    error_line(file + ": " + bad->message);
    return 1;
  }
  if (const char* why = no_second_run(std::get<sim::Scenario>(parsed));
      why != nullptr && !o.capture_path.empty()) {
    error_line(file + ": --capture: " + why);
    return 2;
  }
  const bool drawing = !o.html_path.empty() || !o.svg_path.empty();
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
    if (const auto* bad = std::get_if<sim::Refusal>(&built)) {
      error_line(file + ": " + bad->message);
      return 1;
    }
    if (o.mode == Mode::check) return 0;
    sim::Simulator& simulator = *std::get<0>(built);
    RunOutputs outputs;
    if (scenario && !open_outputs(o, *scenario, outputs)) return 3;
    if (!outputs.observers.empty()) simulator.observe(&outputs.observers);

    simulator.explain_passes(o.reasons);
    sim::LineWriter out(stdout);
    const sim::RunReport report = simulator.run(o.mode == Mode::trace ? &out : nullptr);
    if (o.mode == Mode::table) {
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
    if (!commit_outputs(o, report, outputs)) return 3;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    error_line(std::string("run failed: ") + e.what());
    return 3;
  }
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

int main(int argc, char** argv) {
  Options o;
  if (const std::optional<int> status = parse_options(argc, argv, o)) return *status;
  if (!options_agree(o)) return 2;
  return two_runs(o) ? compare_runs(o) : single_run(o);
}
