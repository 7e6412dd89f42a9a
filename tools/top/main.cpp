// creditloop-top: a creditloop-server's dispatcher and tenants, live, from its admin listener's
// GET /debug/participants. See docs/top.md.
//
// Exit status: 0 quit with `q`, Ctrl-C or SIGTERM (or --once printed its frame); 1 --once got
// no answer, or the terminal cannot be driven; 2 a bad command line.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/command_line.hpp"
#include "frame.hpp"
#include "http_get.hpp"
#include "screen.hpp"
#include "snapshot.hpp"

namespace {

using namespace creditloop::top;
namespace tools = creditloop::tools;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kParticipants = "/debug/participants";
// An error body is shown in the header, so only its first line and not much of it.
constexpr std::size_t kErrorTextMax = 80;

// Set by SIGINT and SIGTERM. With handlers of our own in place ncurses installs none, and the
// loop leaves through Screen's destructor, which gives the terminal back.
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop(int /*signal*/) { g_stop = 1; }

struct Options {
  std::string url;
  std::string admin_key;
  double interval_s = 1;
  double timeout_s = 2;
  bool once = false;
  std::string sort = "TPUT/s";
  bool reverse = false;
  std::string filter;
  double slow_s = 0.1;
  bool no_colour = false;
};

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1e3));
}

std::string wall_clock() {
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

std::string first_line(const std::string& body) {
  std::string line = printable(body.substr(0, body.find('\n')));
  if (line.size() > kErrorTextMax) line = line.substr(0, kErrorTextMax) + "...";
  return line;
}

// The samples received so far, and what became of the last poll.
class Poller {
 public:
  /// Takes the result of a poll that ended at `at`.
  void take(const GetResult& result, Clock::time_point at) {
    if (const auto* f = std::get_if<Failure>(&result)) {
      fail(f->what, f->unreachable);
      return;
    }
    const Reply& reply = std::get<Reply>(result);
    if (reply.status != 200) {
      std::string why = "HTTP " + std::to_string(reply.status);
      if (const std::string text = first_line(reply.body); !text.empty()) why += " " + text;
      if (reply.status == 401) why += " (--admin-key?)";
      fail(why, false);
      return;
    }
    tools::Parsed<Sample> parsed = parse_sample(reply.body);
    if (const auto* why = std::get_if<tools::Refusal>(&parsed)) {
      fail("bad answer: " + why->message, false);
      return;
    }
    Sample& s = std::get<Sample>(parsed);
    const double interval = last_ ? std::chrono::duration<double>(at - last_at_).count() : 0;
    frame_ = make_frame(last_ ? &*last_ : nullptr, s, interval);
    last_ = std::move(s);
    last_at_ = at;
    error_.clear();
    unreachable_ = false;
    failures_ = 0;
  }

  [[nodiscard]] const Frame* frame() const { return frame_ ? &*frame_ : nullptr; }
  [[nodiscard]] bool ok() const { return error_.empty() && frame_.has_value(); }
  [[nodiscard]] const std::string& error() const { return error_; }

  [[nodiscard]] Status status(const Options& o, const Url& url, Clock::time_point now,
                              const std::string& clock) const {
    Status s;
    s.url = url.text();
    s.clock = clock;
    s.error = error_;
    s.unreachable = unreachable_;
    s.failures = failures_;
    s.data_age_s = last_ ? std::chrono::duration<double>(now - last_at_).count() : 0;
    s.interval_s = o.interval_s;
    return s;
  }

 private:
  void fail(std::string why, bool unreachable) {
    error_ = std::move(why);
    unreachable_ = unreachable;
    ++failures_;
  }

  std::optional<Sample> last_;
  Clock::time_point last_at_{};
  std::optional<Frame> frame_;
  std::string error_;
  bool unreachable_ = false;
  unsigned failures_ = 0;
};

const std::vector<std::string>& help_text() {
  static const std::vector<std::string> lines{
      "keys",
      "  q        quit",
      "  s  S     sort by the next / previous column (NAME PLAN SHR QUEUE TPUT/s P50 P99 OLDEST)",
      "  r        reverse the order",
      "  /        filter by tenant name (a substring, any case): Enter applies, Esc clears",
      "  Esc      clear the filter",
      "  space    poll now",
      "  h  ?     this help; any key closes it",
      "",
      "columns",
      "  FLEET    fleet mode: the fraction of the plan in force on this server",
      "  QUEUE    requests waiting; + it grew over the last interval (red), - it shrank",
      "  %Pn      share of the tenant's answers that went out under class Pn, last interval",
      "  TPUT/s   answers per second, last interval",
      "  BAL.Pn   credits in the tenant's Pn bucket (red: in debt after charge-back)",
      "  NEXT-CR  the soonest credit to land in an empty bucket",
      "  P50 P99  queueing delay since the server started (yellow from --slow, red from 10x)",
      "  OLDEST   age of the oldest queued request",
      "",
      "header: 'settling on' is the class the dispatcher settled on most over the last interval",
  };
  return lines;
}

int run_once(const Options& o, const Url& url, View view) {
  HttpClient client;
  Poller poller;
  for (int i = 0; i < 2; ++i) {
    if (i == 1) std::this_thread::sleep_for(millis(o.interval_s));  // the interval to measure
    const GetResult r = client.get(url, kParticipants, o.admin_key, millis(o.timeout_s));
    poller.take(r, Clock::now());
    if (!poller.ok()) {
      std::fprintf(stderr, "creditloop-top: %s: %s\n", url.text().c_str(), poller.error().c_str());
      return 1;
    }
  }
  const Status status = poller.status(o, url, Clock::now(), wall_clock());
  std::fputs(plain_text(layout(poller.frame(), status, view, false)).c_str(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// A key typed at the filter's prompt; true when it closes the prompt (Enter applies what is
// typed, Esc clears the filter).
bool edit_filter(const Key& key, std::string& typed, View& view) {
  if (key.kind == Key::Kind::enter) {
    view.filter = typed;
    return true;
  }
  if (key.kind == Key::Kind::escape) {
    view.filter.clear();
    typed.clear();
    return true;
  }
  if (key.kind == Key::Kind::backspace) {
    if (!typed.empty()) typed.pop_back();
  } else if (key.kind == Key::Kind::text && typed.size() < 64) {
    typed += key.ch;
  }
  return false;
}

// What a key typed over the table asks of the live view beyond the sort and order it changes
// in `view` itself.
enum class TableKey : unsigned char { none, quit, filter, help, poll };
TableKey table_key(char ch, View& view) {
  switch (ch) {
    case 'q':
    case 'Q':
      return TableKey::quit;
    case 's':
      view.sort = next_sort_key(view.sort, +1);
      break;
    case 'S':
      view.sort = next_sort_key(view.sort, -1);
      break;
    case 'r':
    case 'R':
      view.reversed = !view.reversed;
      break;
    case '/':
      return TableKey::filter;
    case 'h':
    case 'H':
    case '?':
      return TableKey::help;
    case ' ':
      return TableKey::poll;
    default:
      break;
  }
  return TableKey::none;
}

// The live view: polls, reads keys, redraws. One loop over one frame's state (the mode, what is
// typed, when to poll next); the keys' meanings are edit_filter() and table_key().
int run_interactive(const Options& o, const Url& url, View view) {
  HttpClient client;
  Poller poller;
  std::signal(SIGINT, on_stop);
  std::signal(SIGTERM, on_stop);
  const char* no_colour = std::getenv("NO_COLOR");  // no-color.org: set and not empty
  Screen screen(!o.no_colour && (no_colour == nullptr || *no_colour == '\0'));
  enum class Mode : unsigned char { table, help, filter } mode = Mode::table;
  std::string typed;
  std::string clock;
  const auto interval = std::chrono::duration_cast<Clock::duration>(millis(o.interval_s));
  Clock::time_point next_poll = Clock::now();
  bool dirty = true;
  while (g_stop == 0) {
    Clock::time_point now = Clock::now();
    if (now >= next_poll) {
      const GetResult r = client.get(url, kParticipants, o.admin_key, millis(o.timeout_s));
      now = Clock::now();
      poller.take(r, now);
      clock = wall_clock();
      // Keep the cadence, unless a slow poll already ate the next turn.
      next_poll += interval;
      if (next_poll <= now) next_poll = now + interval;
      dirty = true;
    }
    if (dirty) {
      const Layout l = layout(poller.frame(), poller.status(o, url, now, clock), view, true);
      Overlay overlay;
      if (mode == Mode::help) overlay.help = &help_text();
      if (mode == Mode::filter) overlay.prompt = &typed;
      screen.draw(l, overlay);
      dirty = false;
    }
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_poll - Clock::now()).count();
    const Key key = screen.read_key(static_cast<int>(std::clamp<long long>(wait, 0, 1000)));
    if (key.kind == Key::Kind::none) continue;
    dirty = true;
    if (key.kind == Key::Kind::resize || key.kind == Key::Kind::redraw) continue;
    switch (mode) {
      case Mode::help:
        mode = Mode::table;  // any key closes the help
        break;
      case Mode::filter:
        if (edit_filter(key, typed, view)) mode = Mode::table;
        break;
      case Mode::table:
        if (key.kind == Key::Kind::escape) {
          view.filter.clear();
          typed.clear();
          break;
        }
        if (key.kind != Key::Kind::text) break;
        switch (table_key(key.ch, view)) {
          case TableKey::quit:
            return 0;
          case TableKey::filter:
            typed = view.filter;
            mode = Mode::filter;
            break;
          case TableKey::help:
            mode = Mode::help;
            break;
          case TableKey::poll:
            next_poll = Clock::now();
            break;
          case TableKey::none:
            break;
        }
        break;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"creditloop-top: a creditloop-server's dispatcher and tenants, live"};
  Options o;
  app.add_option("url", o.url, "the server's admin listener, e.g. http://127.0.0.1:9090")
      ->required();
  app.add_option("--admin-key", o.admin_key, "the server's admin.key, if it has one")
      ->envname("CREDITLOOP_ADMIN_KEY");
  app.add_option("-i,--interval", o.interval_s, "seconds between polls")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s,
                 "seconds a poll may take before the server counts as unreachable")
      ->check(CLI::Range(0.1, 60.0))
      ->capture_default_str();
  app.add_flag("--once", o.once,
               "poll twice, --interval apart, print one plain-text frame to stdout and exit");
  app.add_option("--sort", o.sort,
                 "the column to sort by: NAME PLAN SHR QUEUE TPUT/s P50 P99 OLDEST")
      ->check([](const std::string& s) {
        return parse_sort_key(s) ? std::string() : "unknown column \"" + s + "\"";
      })
      ->capture_default_str();
  app.add_flag("-r,--reverse", o.reverse, "reverse the order");
  app.add_option("--filter", o.filter, "show only tenants whose name holds this (any case)");
  app.add_option("--slow", o.slow_s, "a wait (p99, oldest) from this many seconds is shown as high")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--no-color", o.no_colour, "no colours, attributes only (also: NO_COLOR set)");
  if (const std::optional<int> status = creditloop::tools::parse_command_line(app, argc, argv)) {
    return *status;
  }
  const auto url = parse_url(o.url);
  if (const auto* why = std::get_if<tools::Refusal>(&url)) {
    std::fprintf(stderr, "creditloop-top: %s: %s\n", o.url.c_str(), why->message.c_str());
    return 2;
  }
  View view;
  view.sort = *parse_sort_key(o.sort);
  view.reversed = o.reverse;
  view.filter = printable(o.filter);
  view.slow_s = o.slow_s;
  // A server that closes while a request is written must not end the program.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    if (o.once) return run_once(o, std::get<Url>(url), view);
    return run_interactive(o, std::get<Url>(url), view);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "creditloop-top: %s\n", e.what());
    return 1;
  }
}
