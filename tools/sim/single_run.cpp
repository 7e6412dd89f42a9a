// SCENARIO alone: one run, its trace, table or summary, and the files asked for.
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

using tools::CaptureTarget;
using tools::OutputFile;

namespace {

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

}  // namespace

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

}  // namespace creditloop::sim::program
