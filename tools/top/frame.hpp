// What creditloop-top shows, computed from two samples and laid out as lines of styled text.
//
// Everything here is a pure function of its arguments: the interval between the samples and the
// wall-clock label are passed in, nothing reads a clock or touches the terminal. The same lines
// are drawn by ncurses (screen.hpp) and printed plainly by --once, so both show the same numbers.
//
// Rates and the class mix come from the differences of the server's counters over the interval.
// Where there is no earlier sample, or a counter went backwards (the server restarted), they are
// unknown and shown as "-", never as a wrong number.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "snapshot.hpp"

namespace creditloop::top {

/// The columns a table can be sorted by, in the order `s` visits them.
enum class SortKey : std::uint8_t {
  name,
  plan,
  shares,
  queue,
  throughput,
  wait_p50,
  wait_p99,
  oldest,
};
inline constexpr std::array kSortKeys{SortKey::name,     SortKey::plan,       SortKey::shares,
                                      SortKey::queue,    SortKey::throughput, SortKey::wait_p50,
                                      SortKey::wait_p99, SortKey::oldest};

[[nodiscard]] std::string_view sort_key_name(SortKey key);
/// "queue", "QUEUE", "p99", ... as the column headings spell them, any case.
[[nodiscard]] std::optional<SortKey> parse_sort_key(std::string_view text);
/// The key after (step +1) or before (step -1) `key`, wrapping around.
[[nodiscard]] SortKey next_sort_key(SortKey key, int step);

struct TenantRow {
  TenantSample now;
  std::optional<double> throughput;  // requests answered per second over the interval
  /// Fraction of the interval's answers per class; empty when none were answered or unknown.
  std::vector<double> mix;
  int queue_trend = 0;  // +1 the queue grew over the interval, -1 it shrank
};

struct Frame {
  Sample now;
  std::optional<double> interval_s;  // none for the first sample
  std::optional<double> dispatches_per_s;
  std::optional<double> dispatcher_cpu_pct;
  /// The class the loop settled on most often over the interval, and its share of the turns.
  std::optional<std::size_t> settling_class;
  double settling_share = 0;
  std::vector<TenantRow> rows;  // in the server's order
};

/// `before` may be null (no earlier sample). `interval_s` is the time between the two samples.
[[nodiscard]] Frame make_frame(const Sample* before, Sample now, double interval_s);

/// How the table is arranged: chosen with keys, or with options for --once.
struct View {
  SortKey sort = SortKey::throughput;
  bool reversed = false;  // text columns ascend by default, numbers descend
  std::string filter;     // case-insensitive substring of the tenant's name; empty: all
  double slow_s = 0.1;    // a wait p99 or an oldest age from here is high; ten times it, very
};

/// The rows `view` shows, in its order; ties go by name.
[[nodiscard]] std::vector<const TenantRow*> arrange(const Frame& frame, const View& view);

/// A style, not a colour: screen.hpp picks colours or, without them, attributes.
enum class Tone : std::uint8_t {
  plain,
  dim,       // zero, unknown, stale
  heading,   // column headings
  selected,  // the heading of the sort column
  good,
  warn,   // yellow: high wait, old queue entry
  alert,  // red: growing queue, very high wait, unreachable server
  klass,  // the colour of class Span::klass
};

struct Span {
  std::string text;
  Tone tone = Tone::plain;
  std::size_t klass = 0;  // for Tone::klass
};
using Line = std::vector<Span>;

/// Where the data came from and how the last poll went.
struct Status {
  std::string url;
  std::string clock;         // wall-clock time of the last poll, as it should be printed
  std::string error;         // empty: the last poll succeeded
  bool unreachable = false;  // the error is that no HTTP answer came
  unsigned failures = 0;     // polls failed in a row
  double data_age_s = 0;     // how old the frame shown is, when the last poll failed
  double interval_s = 1;
};

struct Layout {
  std::vector<Line> header;  // status, summary, sort and filter lines
  Line columns;              // empty when there is no data yet
  std::vector<Line> rows;
  std::size_t tenants = 0;  // before the filter
};

/// `frame` may be null (nothing received yet). `interactive` adds the key hints.
[[nodiscard]] Layout layout(const Frame* frame, const Status& status, const View& view,
                            bool interactive);

/// The layout as plain text, one line each, trailing blanks removed.
[[nodiscard]] std::string plain_text(const Layout& layout);

/// 0.000042 -> "42us", 0.0153 -> "15.3ms", 0.3175 -> "318ms", 2.5 -> "2.50s", 125 -> "2m05s".
[[nodiscard]] std::string format_duration(double seconds);
/// 3.14159 -> "3.1", 12345 -> "12.3k", 5e6 -> "5.0M".
[[nodiscard]] std::string format_number(double value);

}  // namespace creditloop::top
