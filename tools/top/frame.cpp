#include "frame.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

namespace creditloop::top {
namespace {

constexpr std::size_t kNameWidthMax = 24;
constexpr std::size_t kPlanWidthMax = 16;

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string printf_string(const char* format, double value) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

bool is_text(SortKey key) { return key == SortKey::name || key == SortKey::plan; }

// The value a numeric column sorts by; unknown sorts below every number.
double sort_value(const TenantRow& r, SortKey key) {
  constexpr double unknown = -std::numeric_limits<double>::infinity();
  const TenantSample& t = r.now;
  switch (key) {
    case SortKey::shares:
      return static_cast<double>(t.shares);
    case SortKey::queue:
      return static_cast<double>(t.queued);
    case SortKey::throughput:
      return r.throughput.value_or(unknown);
    case SortKey::wait_p50:
      return t.wait_s.count > 0 ? t.wait_s.p50 : unknown;
    case SortKey::wait_p99:
      return t.wait_s.count > 0 ? t.wait_s.p99 : unknown;
    case SortKey::oldest:
      return t.oldest_queued_age_s.value_or(unknown);
    case SortKey::name:
    case SortKey::plan:
      break;
  }
  return 0;
}

// How alarming a wait is: plain under `slow`, warn from it, alert from ten times it.
Tone wait_tone(std::optional<double> seconds, double slow) {
  if (!seconds) return Tone::dim;
  if (*seconds >= 10 * slow) return Tone::alert;
  if (*seconds >= slow) return Tone::warn;
  return Tone::plain;
}

Tone worse(Tone a, Tone b) {
  const auto rank = [](Tone t) { return t == Tone::alert ? 2 : t == Tone::warn ? 1 : 0; };
  return rank(b) > rank(a) ? b : a;
}

std::string fit(const std::string& text, std::size_t width) {
  if (text.size() <= width) return text;
  return text.substr(0, width - 1) + "~";
}

struct Column {
  std::string heading;
  std::size_t width = 0;
  bool left = false;
  std::optional<SortKey> key;
  std::optional<std::size_t> klass;
};

struct Cell {
  std::string text;
  Tone tone = Tone::plain;
  std::size_t klass = 0;
};

Cell dim_dash() { return {"-", Tone::dim, 0}; }

// A server in fleet mode names each tenant's fraction of its plan: the column is shown then only.
bool any_fleet(const std::vector<const TenantRow*>& rows) {
  return std::any_of(rows.begin(), rows.end(),
                     [](const TenantRow* r) { return r->now.fleet_fraction.has_value(); });
}

std::vector<Column> columns_for(const Frame& frame, const std::vector<const TenantRow*>& rows) {
  const std::vector<std::string>& names = frame.now.class_names;
  std::size_t name_w = 4;
  std::size_t plan_w = 4;
  for (const TenantRow* r : rows) {
    name_w = std::max(name_w, std::min(r->now.name.size(), kNameWidthMax));
    plan_w = std::max(plan_w, std::min(r->now.plan.size(), kPlanWidthMax));
  }
  std::vector<Column> cols;
  cols.push_back({"NAME", name_w, true, SortKey::name, {}});
  cols.push_back({"PLAN", plan_w, true, SortKey::plan, {}});
  cols.push_back({"SHR", 4, false, SortKey::shares, {}});
  if (any_fleet(rows)) cols.push_back({"FLEET", 6, false, {}, {}});
  cols.push_back({"QUEUE", 7, false, SortKey::queue, {}});
  for (std::size_t c = 0; c < names.size(); ++c) {
    cols.push_back({"%" + names[c], std::max<std::size_t>(4, names[c].size() + 1), false, {}, c});
  }
  cols.push_back({"TPUT/s", 7, false, SortKey::throughput, {}});
  // The last class is unmetered: it has no bucket.
  for (std::size_t c = 0; c + 1 < names.size(); ++c) {
    cols.push_back(
        {"BAL." + names[c], std::max<std::size_t>(7, names[c].size() + 4), false, {}, c});
  }
  cols.push_back({"NEXT-CR", 10, false, {}, {}});
  cols.push_back({"P50", 7, false, SortKey::wait_p50, {}});
  cols.push_back({"P99", 7, false, SortKey::wait_p99, {}});
  cols.push_back({"OLDEST", 7, false, SortKey::oldest, {}});
  return cols;
}

std::vector<Cell> cells_for(const TenantRow& r, const std::vector<std::string>& names,
                            const View& view, bool fleet) {
  const TenantSample& t = r.now;
  const std::optional<double> p99 =
      t.wait_s.count > 0 ? std::optional<double>(t.wait_s.p99) : std::nullopt;
  const Tone p99_tone = wait_tone(p99, view.slow_s);
  const Tone oldest_tone = wait_tone(t.oldest_queued_age_s, view.slow_s);
  Tone name_tone = worse(p99_tone == Tone::dim ? Tone::plain : p99_tone,
                         oldest_tone == Tone::dim ? Tone::plain : oldest_tone);
  if (r.queue_trend > 0) name_tone = Tone::alert;

  std::vector<Cell> cells;
  cells.push_back({fit(t.name, kNameWidthMax), name_tone, 0});
  cells.push_back({fit(t.plan, kPlanWidthMax), Tone::plain, 0});
  cells.push_back({std::to_string(t.shares), Tone::plain, 0});
  if (fleet) {
    cells.push_back(t.fleet_fraction
                        ? Cell{printf_string("%.3f", *t.fleet_fraction), Tone::plain, 0}
                        : dim_dash());
  }
  const char trend = r.queue_trend > 0 ? '+' : r.queue_trend < 0 ? '-' : ' ';
  cells.push_back({std::to_string(t.queued) + trend,
                   r.queue_trend > 0 ? Tone::alert
                   : t.queued == 0   ? Tone::dim
                                     : Tone::plain,
                   0});
  for (std::size_t c = 0; c < names.size(); ++c) {
    if (r.mix.empty()) {
      cells.push_back(dim_dash());
      continue;
    }
    const double pct = 100 * r.mix[c];
    cells.push_back({printf_string("%.0f%%", pct), pct > 0 ? Tone::klass : Tone::dim, c});
  }
  if (r.throughput) {
    cells.push_back({format_number(*r.throughput), *r.throughput > 0 ? Tone::plain : Tone::dim, 0});
  } else {
    cells.push_back(dim_dash());
  }
  for (std::size_t c = 0; c + 1 < names.size(); ++c) {
    const std::optional<double>& b = c < t.balance.size() ? t.balance[c] : std::nullopt;
    if (!b) {
      cells.push_back(dim_dash());
      continue;
    }
    // A negative balance is a debt from charge-back: the class is closed to the tenant.
    cells.push_back({format_number(*b), *b < 0 ? Tone::alert : Tone::klass, c});
  }
  std::optional<std::size_t> soonest;
  for (std::size_t c = 0; c < t.next_credit_in_s.size(); ++c) {
    if (t.next_credit_in_s[c] &&
        (!soonest || *t.next_credit_in_s[c] < *t.next_credit_in_s[*soonest])) {
      soonest = c;
    }
  }
  if (soonest) {
    cells.push_back({names[*soonest] + " " + format_duration(*t.next_credit_in_s[*soonest]),
                     Tone::klass, *soonest});
  } else {
    cells.push_back(dim_dash());
  }
  if (t.wait_s.count > 0) {
    cells.push_back({format_duration(t.wait_s.p50), wait_tone(t.wait_s.p50, view.slow_s), 0});
    cells.push_back({format_duration(t.wait_s.p99), p99_tone, 0});
  } else {
    cells.push_back(dim_dash());
    cells.push_back(dim_dash());
  }
  if (t.oldest_queued_age_s) {
    cells.push_back({format_duration(*t.oldest_queued_age_s), oldest_tone, 0});
  } else {
    cells.push_back(dim_dash());
  }
  return cells;
}

std::string pad(const std::string& text, std::size_t width, bool left) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return left ? text + fill : fill + text;
}

Line header_status(const Status& status, bool have_frame) {
  Line line{{"creditloop-top", Tone::heading, 0}, {"  " + status.url, Tone::plain, 0}};
  if (!status.clock.empty()) line.push_back({"  " + status.clock, Tone::plain, 0});
  line.push_back({"  ", Tone::plain, 0});
  if (status.error.empty()) {
    line.push_back({"ok", Tone::good, 0});
    return line;
  }
  line.push_back(
      {(status.unreachable ? "UNREACHABLE: " : "ERROR: ") + status.error, Tone::alert, 0});
  std::string more = "  (" + std::to_string(status.failures) +
                     (status.failures == 1 ? " poll failed" : " polls failed");
  if (have_frame) more += "; data below is " + format_duration(status.data_age_s) + " old";
  line.push_back({more + ")", Tone::dim, 0});
  return line;
}

Line header_summary(const Frame& frame) {
  const Sample& s = frame.now;
  const auto value = [](std::optional<double> v, const std::string& unit = "") {
    return v ? format_number(*v) + unit : std::string("-");
  };
  Line line{{"scheduler " + (s.scheduler.empty() ? std::string("?") : s.scheduler), Tone::plain, 0},
            {"   tenants " + std::to_string(s.tenants.size()), Tone::plain, 0}};
  if (!s.loop) {
    line.push_back({"   no dispatcher loop (a FIFO server)", Tone::dim, 0});
    return line;
  }
  line.push_back({"   in flight " + std::to_string(s.loop->in_flight), Tone::plain, 0});
  line.push_back({"   waiting " + std::to_string(s.loop->waiting), Tone::plain, 0});
  if (s.loop->room_slots) {
    std::string room = "   room " + std::to_string(*s.loop->room_slots);
    if (s.loop->room_latency_s) {
      room += " (learned, no queue " + format_number(*s.loop->room_latency_s * 1e3) + " ms)";
    }
    line.push_back({std::move(room), Tone::plain, 0});
  }
  line.push_back({"   dispatches/s " + value(frame.dispatches_per_s), Tone::plain, 0});
  line.push_back({"   settling on ", Tone::plain, 0});
  if (frame.settling_class && *frame.settling_class < s.class_names.size()) {
    line.push_back({s.class_names[*frame.settling_class], Tone::klass, *frame.settling_class});
    line.push_back(
        {printf_string(" (%.0f%% of turns)", 100 * frame.settling_share), Tone::plain, 0});
  } else {
    line.push_back({frame.interval_s ? "- (idle)" : "-", Tone::dim, 0});
  }
  line.push_back({"   dispatcher cpu " + value(frame.dispatcher_cpu_pct, "%"), Tone::plain, 0});
  return line;
}

Line header_view(const View& view, std::size_t shown, std::size_t total, const Status& status,
                 bool interactive) {
  Line line{{"sort " + std::string(sort_key_name(view.sort)), Tone::plain, 0}};
  const bool descending = is_text(view.sort) == view.reversed;
  line.push_back({descending ? " desc" : " asc", Tone::plain, 0});
  if (!view.filter.empty()) {
    line.push_back({"   filter \"" + view.filter + "\": " + std::to_string(shown) + " of " +
                        std::to_string(total) + " tenants",
                    Tone::warn, 0});
  }
  line.push_back({"   every " + format_duration(status.interval_s), Tone::plain, 0});
  if (interactive) {
    line.push_back({"   h help  s/S sort  r reverse  / filter  q quit", Tone::dim, 0});
  }
  return line;
}

}  // namespace

std::string_view sort_key_name(SortKey key) {
  switch (key) {
    case SortKey::name:
      return "NAME";
    case SortKey::plan:
      return "PLAN";
    case SortKey::shares:
      return "SHR";
    case SortKey::queue:
      return "QUEUE";
    case SortKey::throughput:
      return "TPUT/s";
    case SortKey::wait_p50:
      return "P50";
    case SortKey::wait_p99:
      return "P99";
    case SortKey::oldest:
      return "OLDEST";
  }
  return "?";
}

std::optional<SortKey> parse_sort_key(std::string_view text) {
  static const std::map<std::string, SortKey, std::less<>> aliases{
      {"shares", SortKey::shares},           {"queued", SortKey::queue},
      {"tput", SortKey::throughput},         {"throughput", SortKey::throughput},
      {"wait_p50", SortKey::wait_p50},       {"wait_p99", SortKey::wait_p99},
      {"oldest_queued_age", SortKey::oldest}};
  const std::string l = lower(text);
  for (const SortKey k : kSortKeys) {
    if (lower(sort_key_name(k)) == l) return k;
  }
  if (const auto it = aliases.find(l); it != aliases.end()) return it->second;
  return std::nullopt;
}

SortKey next_sort_key(SortKey key, int step) {
  const auto n = static_cast<int>(kSortKeys.size());
  const auto at =
      static_cast<int>(std::find(kSortKeys.begin(), kSortKeys.end(), key) - kSortKeys.begin());
  return kSortKeys[static_cast<std::size_t>(((at + step) % n + n) % n)];
}

Frame make_frame(const Sample* before, Sample now, double interval_s) {
  Frame f;
  // Counters are compared class by class, which means nothing if the classes changed.
  const bool timed = before != nullptr && interval_s > 0 && before->class_names == now.class_names;
  if (timed) f.interval_s = interval_s;
  if (timed && before->loop && now.loop) {
    const LoopSample& a = *before->loop;
    const LoopSample& b = *now.loop;
    if (b.dispatched >= a.dispatched) {
      f.dispatches_per_s = static_cast<double>(b.dispatched - a.dispatched) / interval_s;
    }
    if (b.dispatcher_cpu_s >= a.dispatcher_cpu_s) {
      f.dispatcher_cpu_pct = 100 * (b.dispatcher_cpu_s - a.dispatcher_cpu_s) / interval_s;
    }
    std::uint64_t total = 0;
    std::uint64_t most = 0;
    bool restarted = false;
    for (std::size_t c = 0; c < b.turns.size() && c < a.turns.size(); ++c) {
      if (b.turns[c] < a.turns[c]) {
        restarted = true;
        break;
      }
      const std::uint64_t d = b.turns[c] - a.turns[c];
      total += d;
      if (d > most) {
        most = d;
        f.settling_class = c;
      }
    }
    if (restarted || total == 0) {
      f.settling_class.reset();
    } else {
      f.settling_share = static_cast<double>(most) / static_cast<double>(total);
    }
  }
  std::map<std::string_view, const TenantSample*> earlier;
  if (timed) {
    for (const TenantSample& t : before->tenants) earlier.emplace(t.name, &t);
  }
  for (const TenantSample& t : now.tenants) {
    TenantRow r;
    r.now = t;
    const auto it = earlier.find(t.name);
    if (it != earlier.end()) {
      const TenantSample& a = *it->second;
      r.queue_trend = t.queued > a.queued ? 1 : t.queued < a.queued ? -1 : 0;
      std::vector<std::uint64_t> delta(t.served.size(), 0);
      bool restarted = false;
      std::uint64_t total = 0;
      for (std::size_t c = 0; c < t.served.size() && c < a.served.size(); ++c) {
        restarted = restarted || t.served[c] < a.served[c];
        if (restarted) break;
        delta[c] = t.served[c] - a.served[c];
        total += delta[c];
      }
      if (!restarted) {
        r.throughput = static_cast<double>(total) / interval_s;
        if (total > 0) {
          for (const std::uint64_t d : delta) {
            r.mix.push_back(static_cast<double>(d) / static_cast<double>(total));
          }
        }
      }
    }
    f.rows.push_back(std::move(r));
  }
  f.now = std::move(now);
  return f;
}

std::vector<const TenantRow*> arrange(const Frame& frame, const View& view) {
  std::vector<const TenantRow*> rows;
  const std::string needle = lower(view.filter);
  for (const TenantRow& r : frame.rows) {
    if (needle.empty() || lower(r.now.name).find(needle) != std::string::npos) rows.push_back(&r);
  }
  const SortKey key = view.sort;
  std::stable_sort(rows.begin(), rows.end(), [&](const TenantRow* a, const TenantRow* b) {
    int order = 0;  // < 0: a first when not reversed
    if (key == SortKey::name) {
      order = a->now.name.compare(b->now.name);
    } else if (key == SortKey::plan) {
      order = a->now.plan.compare(b->now.plan);
    } else {
      const double x = sort_value(*a, key);
      const double y = sort_value(*b, key);
      order = x > y ? -1 : x < y ? 1 : 0;
    }
    if (order != 0) return view.reversed ? order > 0 : order < 0;
    return a->now.name < b->now.name;
  });
  return rows;
}

Layout layout(const Frame* frame, const Status& status, const View& view, bool interactive) {
  Layout out;
  out.header.push_back(header_status(status, frame != nullptr));
  if (frame == nullptr) {
    out.header.push_back(
        {{status.error.empty() ? "waiting for the first answer" : "no data yet", Tone::dim, 0}});
    return out;
  }
  const std::vector<const TenantRow*> rows = arrange(*frame, view);
  out.tenants = frame->rows.size();
  out.header.push_back(header_summary(*frame));
  out.header.push_back(header_view(view, rows.size(), out.tenants, status, interactive));
  out.header.push_back({});

  const std::vector<Column> cols = columns_for(*frame, rows);
  for (std::size_t i = 0; i < cols.size(); ++i) {
    const Column& c = cols[i];
    const bool sorted = c.key && *c.key == view.sort;
    const Tone tone = sorted ? Tone::selected : c.klass ? Tone::klass : Tone::heading;
    out.columns.push_back({pad(c.heading, c.width, c.left), tone, c.klass.value_or(0)});
    if (i + 1 < cols.size()) out.columns.push_back({" ", Tone::plain, 0});
  }
  // A frame the last poll could not refresh is shown, but faded.
  const bool stale = !status.error.empty();
  for (const TenantRow* r : rows) {
    const std::vector<Cell> cells = cells_for(*r, frame->now.class_names, view, any_fleet(rows));
    Line line;
    for (std::size_t i = 0; i < cols.size() && i < cells.size(); ++i) {
      line.push_back({pad(cells[i].text, cols[i].width, cols[i].left),
                      stale ? Tone::dim : cells[i].tone, cells[i].klass});
      if (i + 1 < cols.size()) line.push_back({" ", Tone::plain, 0});
    }
    out.rows.push_back(std::move(line));
  }
  return out;
}

std::string plain_text(const Layout& layout) {
  std::string out;
  const auto add = [&out](const Line& line) {
    std::string text;
    for (const Span& s : line) text += s.text;
    text.erase(text.find_last_not_of(' ') + 1);
    out += text;
    out += '\n';
  };
  for (const Line& l : layout.header) add(l);
  if (!layout.columns.empty()) add(layout.columns);
  for (const Line& l : layout.rows) add(l);
  return out;
}

std::string format_duration(double seconds) {
  if (!(seconds > 0)) return "0us";
  // At most six characters, with two or three significant digits.
  if (seconds < 1e-3) return printf_string("%.0fus", seconds * 1e6);
  if (seconds < 1e-2) return printf_string("%.2fms", seconds * 1e3);
  if (seconds < 1e-1) return printf_string("%.1fms", seconds * 1e3);
  if (seconds < 1) return printf_string("%.0fms", seconds * 1e3);
  if (seconds < 10) return printf_string("%.2fs", seconds);
  if (seconds < 60) return printf_string("%.1fs", seconds);
  const auto whole = static_cast<long long>(seconds);
  char buf[48];
  if (whole < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", whole / 60, whole % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", whole / 3600, whole / 60 % 60);
  }
  return buf;
}

std::string format_number(double value) {
  const double a = std::fabs(value);
  if (a < 1e3) return printf_string("%.1f", value);
  if (a < 1e6) return printf_string("%.1fk", value / 1e3);
  if (a < 1e9) return printf_string("%.1fM", value / 1e6);
  return printf_string("%.1fG", value / 1e9);
}

}  // namespace creditloop::top
