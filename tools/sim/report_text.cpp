// What a run's report prints: the summary line of the trace, and the table of --table.
#include <array>

#include "common/json_text.hpp"
#include "simulator.hpp"
#include "table.hpp"

namespace creditloop::sim {

using creditloop::Balance;
using creditloop::ClassId;
using tools::append_uint;
using tools::json_string;

namespace {

std::string micro(Balance nano) {
  std::string s;
  append_micro(s, nano);
  return s;
}

}  // namespace

void append_summary(std::string& out, const RunReport& report) {
  out += "{\"ev\": \"summary\", \"participants\": {";
  bool first = true;
  for (const ParticipantReport& p : report.participants) {
    if (!first) out += ", ";
    first = false;
    out += json_string(p.name);
    out += ": {\"dispatched\": {";
    for (int c = 0; c <= report.classes; ++c) {
      if (c > 0) out += ", ";
      out += json_string(creditloop::class_name(static_cast<ClassId>(c)));
      out += ": ";
      append_uint(out, p.dispatched[static_cast<std::size_t>(c)]);
    }
    out += "}, \"completed\": ";
    append_uint(out, p.completed);
    if (report.withdraws) {
      out += ", \"withdrawn\": ";
      append_uint(out, p.withdrawn);
    }
    out += ", \"waiting\": ";
    append_uint(out, p.waiting);
    out += ", \"wait_max\": ";
    if (p.wait_max) {
      append_micro(out, *p.wait_max);
    } else {
      out += "null";
    }
    out += '}';
  }
  out += "}}";
}

namespace {

// count / total as a percentage with one decimal, rounded half up in integers so that the table
// is as deterministic as the trace.
std::string percent(std::uint64_t count, std::uint64_t total) {
  if (total == 0) return "-";
  const U128 tenths = (static_cast<U128>(count) * 1000 + total / 2) / total;
  std::string s;
  append_uint(s, tenths / 10);
  s += '.';
  s += static_cast<char>('0' + static_cast<int>(tenths % 10));
  s += '%';
  return s;
}

}  // namespace

std::string format_table(const RunReport& report) {
  const int k = report.classes;
  std::vector<std::string> header = {"participant", "plan", "shares"};
  for (int c = 0; c <= k; ++c) header.push_back(creditloop::class_name(static_cast<ClassId>(c)));
  header.insert(header.end(), {"all", "of total", "completed"});
  if (report.withdraws) header.emplace_back("withdrawn");
  header.insert(header.end(), {"waiting", "wait_max"});
  for (int c = 0; c < k; ++c) {
    header.push_back("bal " + creditloop::class_name(static_cast<ClassId>(c)));
  }
  // Text columns align left, numbers right.
  std::vector<bool> left(header.size(), false);
  left[0] = left[1] = true;

  std::uint64_t grand = 0;
  std::array<std::uint64_t, creditloop::kMaxClasses + 1> per_class{};
  std::uint64_t completed = 0;
  std::uint64_t withdrawn = 0;
  std::uint64_t waiting = 0;
  for (const ParticipantReport& p : report.participants) {
    for (int c = 0; c <= k; ++c) {
      per_class[static_cast<std::size_t>(c)] += p.dispatched[static_cast<std::size_t>(c)];
      grand += p.dispatched[static_cast<std::size_t>(c)];
    }
    completed += p.completed;
    withdrawn += p.withdrawn;
    waiting += p.waiting;
  }

  std::vector<std::vector<std::string>> rows;
  for (const ParticipantReport& p : report.participants) {
    std::vector<std::string> row = {p.name, p.plan, std::to_string(p.shares)};
    std::uint64_t total = 0;
    for (int c = 0; c <= k; ++c) total += p.dispatched[static_cast<std::size_t>(c)];
    for (int c = 0; c <= k; ++c) {
      const std::uint64_t n = p.dispatched[static_cast<std::size_t>(c)];
      row.push_back(std::to_string(n) + " (" + percent(n, total) + ")");
    }
    row.push_back(std::to_string(total));
    row.push_back(percent(total, grand));
    row.push_back(std::to_string(p.completed));
    if (report.withdraws) row.push_back(std::to_string(p.withdrawn));
    row.push_back(std::to_string(p.waiting));
    row.push_back(p.wait_max ? micro(*p.wait_max) : "-");
    for (int c = 0; c < k; ++c) {
      const auto& bal = p.balances[static_cast<std::size_t>(c)];
      row.push_back(bal ? micro(*bal) : "-");
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::string> totals = {"(all)", "", ""};
  for (int c = 0; c <= k; ++c) {
    const std::uint64_t n = per_class[static_cast<std::size_t>(c)];
    totals.push_back(std::to_string(n) + " (" + percent(n, grand) + ")");
  }
  totals.insert(totals.end(),
                {std::to_string(grand), percent(grand, grand), std::to_string(completed)});
  if (report.withdraws) totals.push_back(std::to_string(withdrawn));
  totals.insert(totals.end(), {std::to_string(waiting), ""});
  for (int c = 0; c < k; ++c) totals.emplace_back("");

  std::string out =
      "stopped at t=" + micro(report.stopped_at) + " s; " + std::to_string(report.arrived) +
      " arrived, " + std::to_string(grand) + " dispatched, " + std::to_string(completed) +
      " completed, " + (report.withdraws ? std::to_string(withdrawn) + " withdrawn, " : "") +
      std::to_string(waiting) + " waiting; " +
      (report.room_auto ? "a learned room (" + std::to_string(report.room_auto->least) + ".." +
                              std::to_string(report.room_auto->most) + ") of "
                        : std::string()) +
      std::to_string(report.slots) + (report.slots == 1 ? " slot" : " slots") +
      (report.room_auto ? " at the stop" : "") +
      "; dispatches per class (share of the row), balances at the stop\n";
  append_table(out, header, rows, left, totals);
  return out;
}

}  // namespace creditloop::sim
