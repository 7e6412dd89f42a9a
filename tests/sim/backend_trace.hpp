// Runs a scenario in-process and reads its trace as a user reads it, for the tests of the
// simulator's backend model and its learned room.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "scenario.hpp"
#include "simulator.hpp"

namespace creditloop::test {

using json = nlohmann::json;

// Runs scenario text and returns its trace, one JSON object a line.
inline std::vector<json> trace_of(const std::string& text) {
  auto parsed = sim::parse_scenario(text);
  if (const auto* bad = std::get_if<sim::Refusal>(&parsed)) {
    ADD_FAILURE() << bad->message;
    return {};
  }
  auto built = sim::Simulator::create(std::get<sim::Scenario>(std::move(parsed)));
  if (const auto* bad = std::get_if<sim::Refusal>(&built)) {
    ADD_FAILURE() << bad->message;
    return {};
  }
  char* data = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&data, &size);
  {
    sim::LineWriter writer(out);
    const sim::RunReport report = std::get<0>(built)->run(&writer);
    sim::append_summary(writer.buffer(), report);
    writer.end_line();
  }
  std::fclose(out);
  std::istringstream lines(std::string(data, size));
  std::free(data);  // NOLINT(cppcoreguidelines-no-malloc): open_memstream's buffer
  std::vector<json> trace;
  for (std::string line; std::getline(lines, line);) trace.push_back(json::parse(line));
  return trace;
}

inline std::string text_of(const json& scenario) { return scenario.dump(); }

inline json example(const std::string& name) {
  const char* dir = std::getenv("CREDITLOOP_SCENARIOS");
  EXPECT_NE(dir, nullptr);
  std::ifstream in(std::filesystem::path(dir == nullptr ? "." : dir) / name);
  EXPECT_TRUE(in) << name;
  return json::parse(in);
}

// What a reader of the trace learns about each request and about the room.
struct TraceReading {
  std::map<std::uint64_t, double> arrive, dispatch, complete;
  std::map<std::uint64_t, std::string> who;
  std::vector<std::pair<double, std::uint64_t>> room;  // (t, slots), in trace order
  std::string text;                                    // the trace as written

  explicit TraceReading(const std::vector<json>& trace) {
    for (const json& l : trace) {
      text += l.dump() + "\n";
      const std::string ev = l.value("ev", "");
      if (ev == "room") room.emplace_back(l["t"].get<double>(), l["slots"].get<std::uint64_t>());
      if (ev == "arrive") {
        arrive[l["req"]] = l["t"];
        who[l["req"]] = l["participant"];
      }
      if (ev == "dispatch") dispatch[l["req"]] = l["t"];
      if (ev == "complete") complete[l["req"]] = l["t"];
    }
  }

  // The room at `t`: the last room line at or before it.
  [[nodiscard]] std::uint64_t room_at(double t) const {
    std::uint64_t slots = 0;
    for (const auto& [at, n] : room) {
      if (at > t + 1e-9) break;
      slots = n;
    }
    return slots;
  }

  // Share of the instants of [from, to), every millisecond, where the room is within 25 % of
  // `capacity`.
  [[nodiscard]] double in_band(double from, double to, double capacity) const {
    std::uint64_t in = 0, all = 0;
    for (double t = from; t < to - 1e-9; t += 0.001) {
      const auto slots = static_cast<double>(room_at(t));
      ++all;
      if (slots >= 0.75 * capacity && slots <= 1.25 * capacity) ++in;
    }
    return all == 0 ? 0 : static_cast<double>(in) / static_cast<double>(all);
  }

  [[nodiscard]] std::uint64_t completed_in(double from, double to) const {
    return static_cast<std::uint64_t>(std::count_if(complete.begin(), complete.end(), [&](auto& c) {
      return c.second >= from - 1e-9 && c.second < to - 1e-9;
    }));
  }

  // The p99 of arrival to completion of `participant`'s requests arrived in [from, to): what
  // its client sees, the wait in creditloop and in the backend's own FIFO, and the service.
  [[nodiscard]] double p99_latency(const std::string& participant, double from, double to) const {
    std::vector<double> l;
    for (const auto& [req, done] : complete) {
      const double at = arrive.at(req);
      if (who.at(req) == participant && at >= from - 1e-9 && at < to - 1e-9) l.push_back(done - at);
    }
    if (l.empty()) return 0;
    std::sort(l.begin(), l.end());
    const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(l.size())));
    return l[std::max<std::size_t>(rank, 1) - 1];
  }
};

}  // namespace creditloop::test
