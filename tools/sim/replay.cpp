#include "replay.hpp"

#include "common/json_text.hpp"
#include "table.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

namespace creditloop::sim {

using creditloop::ClassId;
using creditloop::Nanos;
using tools::append_uint;
using tools::json_string;

namespace {

// Exact: seconds with 9 decimals, the capture's own form.
void append_nanos(std::string& out, Nanos t) {
  append_uint(out, static_cast<std::uint64_t>(t / 1'000'000'000));
  out += '.';
  char digits[9];
  auto frac = static_cast<std::uint64_t>(t % 1'000'000'000);
  for (int i = 8; i >= 0; --i) {
    digits[i] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  out.append(digits, 9);
}

std::string micro(Nanos t) {
  std::string s;
  append_micro(s, t);
  return s;
}

std::vector<std::string> class_strings(int k) {
  std::vector<std::string> out;
  for (int c = 0; c <= k; ++c) {
    out.push_back(json_string(creditloop::class_name(static_cast<ClassId>(c))));
  }
  return out;
}

struct Stats {
  std::uint64_t dispatched = 0;
  std::vector<Nanos> sorted;
  Nanos mean = 0;
};

Stats stats_of(const RunAccount::Row& row) {
  Stats s;
  s.sorted = row.waits;
  std::sort(s.sorted.begin(), s.sorted.end());
  s.dispatched = s.sorted.size();
  if (!s.sorted.empty()) {
    I128 sum = 0;
    for (const Nanos w : s.sorted) sum += w;
    const auto n = static_cast<I128>(s.sorted.size());
    s.mean = static_cast<Nanos>((sum + n / 2) / n);
  }
  return s;
}

// count / total as a percentage with one decimal, rounded half up in integers.
std::string percent(std::uint64_t count, std::uint64_t total) {
  if (total == 0) return "-";
  const U128 tenths = (static_cast<U128>(count) * 1000 + total / 2) / total;
  std::string s;
  append_uint(s, static_cast<std::uint64_t>(tenths / 10));
  s += '.';
  s += static_cast<char>('0' + static_cast<int>(tenths % 10));
  s += '%';
  return s;
}

// count / total to 6 decimals, rounded half up in integers.
void append_share(std::string& out, std::uint64_t count, std::uint64_t total) {
  const U128 micro_units = (static_cast<U128>(count) * 1'000'000 + total / 2) / total;
  append_micro(out, static_cast<creditloop::Balance>(micro_units) * 1000);
}

}  // namespace

Nanos percentile(const std::vector<Nanos>& sorted, int p) {
  const auto n = static_cast<U128>(sorted.size());
  const U128 rank = (n * static_cast<unsigned>(p) + 99) / 100;  // ceil(p% of n), at least 1
  return sorted[static_cast<std::size_t>(rank == 0 ? 0 : rank - 1)];
}

namespace {

// An empty row per participant, in ring order.
std::vector<RunAccount::Row> rows_of(const std::vector<ParticipantSpec>& participants) {
  std::vector<RunAccount::Row> rows;
  for (const ParticipantSpec& p : participants) {
    RunAccount::Row row;
    row.name = p.name;
    row.plan = p.plan;
    row.shares = p.shares;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

RunAccount account_of(const Capture& capture) {
  RunAccount out;
  out.rows = rows_of(capture.participants);
  for (const CapturedRequest& r : capture.requests) {
    RunAccount::Row& row = out.rows[r.participant];
    ++row.requests;
    row.waits.push_back(r.dispatch - r.arrive);
    ++row.by_class[r.cls];
  }
  return out;
}

WaitRecorder::WaitRecorder(const Scenario& scenario) {
  account_.rows = rows_of(scenario.participants);
  arrived_.reserve(static_cast<std::size_t>(scenario.requests));
}

void WaitRecorder::arrived(Nanos t, std::uint32_t participant, std::uint64_t /*req*/) {
  arrived_.push_back(t);  // req numbers are arrival order
  ++account_.rows[participant].requests;
}

void WaitRecorder::dispatched(Nanos t, std::uint32_t participant, std::uint64_t req, ClassId c,
                              const Balances& /*balances*/) {
  RunAccount::Row& row = account_.rows[participant];
  row.waits.push_back(t - arrived_[static_cast<std::size_t>(req)]);
  ++row.by_class[c];
}

CaptureRecorder::CaptureRecorder(const Scenario& scenario, const std::string& path) {
  creditloop::CaptureFiles files;
  files.path = path;
  files.max_bytes = std::numeric_limits<std::uint64_t>::max();
  files.files = 1;
  creditloop::CaptureSetup setup;
  setup.config = scenario.config;
  setup.slots = static_cast<std::uint32_t>(scenario.slots);  // at most kMaxSlots, 1e9
  writer_ = std::make_unique<creditloop::CaptureWriter>(std::move(files), std::move(setup),
                                                        [this](const std::string& message) {
                                                          if (error_.empty()) error_ = message;
                                                        });
  for (const ParticipantSpec& p : scenario.participants) {
    names_.push_back(p.name);
    writer_->plan(0, p.name, p.plan, p.shares);
  }
  pending_.reserve(static_cast<std::size_t>(scenario.requests));
}

CaptureRecorder::~CaptureRecorder() = default;

void CaptureRecorder::arrived(Nanos t, std::uint32_t /*participant*/, std::uint64_t /*req*/) {
  pending_.push_back(Pending{t, 0, 0});
}

void CaptureRecorder::dispatched(Nanos t, std::uint32_t /*participant*/, std::uint64_t req,
                                 ClassId c, const Balances& /*balances*/) {
  Pending& p = pending_[static_cast<std::size_t>(req)];
  p.dispatched = t;
  p.cls = c;
}

void CaptureRecorder::completed(Nanos t, std::uint32_t participant, std::uint64_t req,
                                std::int64_t cost_nano, const Balances& /*balances*/) {
  const Pending& p = pending_[static_cast<std::size_t>(req)];
  creditloop::CaptureRequest r;
  r.participant = names_[participant];
  r.arrive = p.arrived;
  r.dispatch = p.dispatched;
  r.complete = t;
  r.out = p.cls;
  r.cost_nano = cost_nano;
  writer_->request(r);
}

void CaptureRecorder::finish() { writer_->flush(); }

void ObserverFan::arrived(Nanos t, std::uint32_t participant, std::uint64_t req) {
  for (RunObserver* o : observers_) o->arrived(t, participant, req);
}
void ObserverFan::passed(Nanos t, ClassId c, std::span<const PassEntry> waiting) {
  for (RunObserver* o : observers_) o->passed(t, c, waiting);
}
void ObserverFan::dispatched(Nanos t, std::uint32_t participant, std::uint64_t req, ClassId c,
                             const Balances& balances) {
  for (RunObserver* o : observers_) o->dispatched(t, participant, req, c, balances);
}
void ObserverFan::completed(Nanos t, std::uint32_t participant, std::uint64_t req,
                            std::int64_t cost_nano, const Balances& balances) {
  for (RunObserver* o : observers_) o->completed(t, participant, req, cost_nano, balances);
}
void ObserverFan::withdrawn(Nanos t, std::uint32_t participant, std::uint64_t req) {
  for (RunObserver* o : observers_) o->withdrawn(t, participant, req);
}

void ObserverFan::room(Nanos t, std::uint32_t slots) {
  for (RunObserver* o : observers_) o->room(t, slots);
}

void play_capture(const Capture& capture, RunObserver& observer) {
  const Balances none{};
  for (std::size_t i = 0; i < capture.requests.size(); ++i) {
    const CapturedRequest& r = capture.requests[i];
    observer.arrived(r.arrive, r.participant, i);
  }
  for (std::size_t i = 0; i < capture.requests.size(); ++i) {
    const CapturedRequest& r = capture.requests[i];
    observer.dispatched(r.dispatch, r.participant, i, r.cls, none);
    observer.completed(r.complete, r.participant, i, r.cost_nano, none);
  }
}

std::string format_comparison(const Comparison& c) {
  const int k = c.classes;
  std::vector<std::string> header = {"participant", "run",        "plan",     "shares",
                                     "requests",    "dispatched", "wait p50", "wait p99",
                                     "wait max",    "wait mean"};
  for (int cl = 0; cl <= k; ++cl)
    header.push_back(creditloop::class_name(static_cast<ClassId>(cl)));
  std::vector<bool> left(header.size(), false);
  left[0] = left[1] = left[2] = true;
  std::vector<std::vector<std::string>> rows;
  std::uint64_t totals[2] = {0, 0};
  for (std::size_t i = 0; i < c.runs[0].rows.size(); ++i) {
    for (std::size_t r = 0; r < 2; ++r) {
      const RunAccount::Row& row = c.runs[r].rows[i];
      const Stats s = stats_of(row);
      totals[r] += row.requests;
      std::vector<std::string> line = {r == 0 ? row.name : "",
                                       c.keys[r],
                                       row.plan,
                                       std::to_string(row.shares),
                                       std::to_string(row.requests),
                                       std::to_string(s.dispatched)};
      if (s.sorted.empty()) {
        line.insert(line.end(), {"-", "-", "-", "-"});
      } else {
        line.insert(line.end(), {micro(percentile(s.sorted, 50)), micro(percentile(s.sorted, 99)),
                                 micro(s.sorted.back()), micro(s.mean)});
      }
      for (int cl = 0; cl <= k; ++cl) {
        line.push_back(percent(row.by_class[static_cast<std::size_t>(cl)], s.dispatched));
      }
      rows.push_back(std::move(line));
    }
  }
  std::string out = c.what + "\n";
  out += "waits from arrival to dispatch, in seconds (p50, p99: nearest rank); " + c.keys[0] +
         ": " + std::to_string(totals[0]) + " requests, " + c.keys[1] + ": " +
         std::to_string(totals[1]) + "; " + std::to_string(c.slots) +
         (c.slots == 1 ? " slot" : " slots") +
         "; class mix: share of each participant's dispatched requests by class\n";
  append_table(out, header, rows, left);
  if (c.dropped > 0) {
    out += "warning: the capture lost " + std::to_string(c.dropped) +
           " records (dropped): those requests are in neither run\n";
  }
  return out;
}

std::string comparison_json(const Comparison& c) {
  const int k = c.classes;
  const std::vector<std::string> classes = class_strings(k);
  std::string out = "{\"runs\": [";
  out += json_string(c.keys[0]);
  out += ", ";
  out += json_string(c.keys[1]);
  out += "], \"classes\": [";
  for (int cl = 0; cl <= k; ++cl) {
    if (cl > 0) out += ", ";
    out += classes[static_cast<std::size_t>(cl)];
  }
  out += "], \"slots\": ";
  append_uint(out, c.slots);
  out += ", \"dropped\": ";
  append_uint(out, c.dropped);
  out += ", \"participants\": [";
  for (std::size_t i = 0; i < c.runs[0].rows.size(); ++i) {
    if (i > 0) out += ", ";
    out += "{\"name\": ";
    out += json_string(c.runs[0].rows[i].name);
    for (std::size_t r = 0; r < 2; ++r) {
      const RunAccount::Row& row = c.runs[r].rows[i];
      const Stats s = stats_of(row);
      out += ", ";
      out += json_string(c.keys[r]);
      out += ": {\"plan\": ";
      out += json_string(row.plan);
      out += ", \"shares\": ";
      append_uint(out, row.shares);
      out += ", \"requests\": ";
      append_uint(out, row.requests);
      out += ", \"dispatched\": ";
      append_uint(out, s.dispatched);
      out += ", \"wait\": ";
      if (s.sorted.empty()) {
        out += "null";
      } else {
        out += "{\"p50\": ";
        append_nanos(out, percentile(s.sorted, 50));
        out += ", \"p99\": ";
        append_nanos(out, percentile(s.sorted, 99));
        out += ", \"max\": ";
        append_nanos(out, s.sorted.back());
        out += ", \"mean\": ";
        append_nanos(out, s.mean);
        out += '}';
      }
      out += ", \"classes\": {";
      for (int cl = 0; cl <= k; ++cl) {
        if (cl > 0) out += ", ";
        out += classes[static_cast<std::size_t>(cl)];
        out += ": ";
        append_uint(out, row.by_class[static_cast<std::size_t>(cl)]);
      }
      out += "}, \"mix\": ";
      if (s.dispatched == 0) {
        out += "null";
      } else {
        out += '{';
        for (int cl = 0; cl <= k; ++cl) {
          if (cl > 0) out += ", ";
          out += classes[static_cast<std::size_t>(cl)];
          out += ": ";
          append_share(out, row.by_class[static_cast<std::size_t>(cl)], s.dispatched);
        }
        out += '}';
      }
      out += '}';
    }
    out += '}';
  }
  out += "]}";
  return out;
}

}  // namespace creditloop::sim
