// --replay and SCENARIO --plans: two runs of the same arrivals, compared side by side.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capture_file.hpp"
#include "common/atomic_output.hpp"
#include "picture.hpp"
#include "program.hpp"
#include "replay.hpp"
#include "simulator.hpp"

namespace creditloop::sim::program {

using tools::OutputFile;

namespace {

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

}  // namespace

const char* no_second_run(const sim::Scenario& s) {
  if (s.room_auto)
    return "the server's room is learned (\"slots\": \"auto\"), which a capture does not record";
  if (!s.backend.empty()) return "the server has a backend, which a capture does not record";
  return nullptr;
}

namespace {

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

}  // namespace

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

}  // namespace creditloop::sim::program
