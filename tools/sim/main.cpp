// creditloop-sim: runs a scenario through the real dispatcher core on a virtual clock and writes
// the trace of SPEC section 6 (or a table, or only the summary).
//
// Exit status: 0 success; 1 a bad or unreadable scenario (one line on stderr naming the field,
// nothing on stdout); 2 a bad command line; 3 the run failed (the output could not be written,
// or the core contradicted itself: a bug to report).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "picture.hpp"
#include "scenario.hpp"
#include "simulator.hpp"

namespace {

constexpr const char* kUsage =
    "usage: creditloop-sim [--table | --summary | --check] [--reasons] [--html FILE]\n"
    "                      [--svg FILE] SCENARIO.json\n"
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
    "  --html FILE also write a picture of the run to FILE: one self-contained page (no\n"
    "              network) with a lane per participant, its requests and balances, the\n"
    "              passes and why each ignored participant was passed over, and a time\n"
    "              cursor (drag it or step with the arrow keys); wheel zooms, drag pans\n"
    "  --svg FILE  also write a static SVG of the same timeline to FILE, for documents;\n"
    "              busy lanes are drawn as aggregates, so its size does not grow with the\n"
    "              number of requests (at most about 30 KB per class and participant)\n"
    "  -h, --help  print this help\n"
    "\n"
    "A bad scenario exits with status 1 and one line on standard error naming the field at\n"
    "fault (e.g. arrivals[1].count); nothing is written to standard output. Limits: times up to\n"
    "1e9 s, rounded to the nanosecond; at most 20000000 requests arriving in one run, and\n"
    "5000000 for a picture. The pictures do not change what goes to standard output (add\n"
    "--summary to keep it short). A picture file is written whole or not at all: if FILE\n"
    "cannot be created the run does not start (status 3, nothing on standard output).\n"
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

  /// Writes `content` and moves it into place; on failure, the one-line reason.
  [[nodiscard]] bool commit(const std::string& content, std::string& error) {
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

}  // namespace

int main(int argc, char** argv) {
  Mode mode = Mode::trace;
  bool reasons = false;
  std::string html_path;
  std::string svg_path;
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
    } else if (!options_done && (arg == "--html" || arg == "--svg" || arg.starts_with("--html=") ||
                                 arg.starts_with("--svg="))) {
      const bool html = arg.starts_with("--html");
      const std::size_t eq = arg.find('=');
      std::string value;
      if (eq != std::string_view::npos) {
        value = std::string(arg.substr(eq + 1));
      } else if (i + 1 < argc) {
        value = argv[++i];
      }
      const char* name = html ? "--html" : "--svg";
      if (value.empty()) {
        error_line(std::string(name) + " needs a file name (see --help)");
        return 2;
      }
      (html ? html_path : svg_path) = value;
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

  if (mode == Mode::check && (!html_path.empty() || !svg_path.empty())) {
    error_line("--check runs nothing, so it cannot draw --html or --svg (see --help)");
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
  const bool drawing = !html_path.empty() || !svg_path.empty();
  // Refused before the simulator sizes its pool for the run.
  if (drawing && std::get<sim::Scenario>(parsed).requests > sim::Picture::kMaxRequests) {
    error_line(file + ": " + std::to_string(std::get<sim::Scenario>(parsed).requests) +
               " requests arrive in this run; a picture takes at most " +
               std::to_string(sim::Picture::kMaxRequests) + " (set an earlier `until`)");
    return 2;
  }
  try {
    // The picture reads the scenario the simulator takes over.
    std::optional<sim::Scenario> scenario;
    if (drawing) scenario = std::get<sim::Scenario>(parsed);
    auto built = sim::Simulator::create(std::move(std::get<sim::Scenario>(parsed)));
    if (const auto* bad = std::get_if<sim::ScenarioError>(&built)) {
      error_line(file + ": " + bad->message);
      return 1;
    }
    if (mode == Mode::check) return 0;
    sim::Simulator& simulator = *std::get<0>(built);

    std::vector<std::unique_ptr<OutputFile>> pictures;
    std::unique_ptr<sim::Picture> picture;
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
      const std::size_t slash = file.find_last_of('/');
      picture = std::make_unique<sim::Picture>(
          *scenario, slash == std::string::npos ? file : file.substr(slash + 1));
      simulator.observe(picture.get());
    }

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
