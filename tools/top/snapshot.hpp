// One answer of a server's GET /debug/participants, read into plain values.
//
// The reader trusts nothing in the answer: a field that is missing keeps its empty value (a FIFO
// server has no "loop", a tenant whose plan leaves a class unmetered has no balance for it), a
// field of the wrong type refuses the whole answer with a one-line reason, and every string is
// reduced to printable ASCII before it can reach a terminal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/refusal.hpp"

namespace creditloop::top {

struct WaitQuantiles {
  std::uint64_t count = 0;  // requests started since the server started
  double p50 = 0;           // seconds
  double p99 = 0;
  double p999 = 0;
};

struct TenantSample {
  std::string name;
  std::string plan;
  std::uint64_t shares = 0;
  /// Fleet mode: the fraction of the plan in force on this server (0..1); none otherwise.
  std::optional<double> fleet_fraction;
  std::uint64_t queued = 0;
  /// Requests answered, per class (indexed like Sample::class_names); a counter.
  std::vector<std::uint64_t> served;
  double cost_charged = 0;  // credits, a counter
  /// Per class, indexed like Sample::class_names; empty where the answer names none.
  std::vector<std::optional<double>> balance;
  std::vector<std::optional<double>> next_credit_in_s;
  std::optional<double> oldest_queued_age_s;
  WaitQuantiles wait_s;
};

struct LoopSample {
  std::uint64_t waiting = 0;
  std::uint64_t in_flight = 0;
  std::uint64_t dispatched = 0;  // counters from here on
  std::uint64_t parks = 0;
  double dispatcher_cpu_s = 0;
  std::vector<std::uint64_t> turns;  // per class
  /// The room in slots, and a learned room's no-queue latency; none from a server that names
  /// neither.
  std::optional<std::uint64_t> room_slots;
  std::optional<double> room_latency_s;
};

struct Sample {
  std::string scheduler;
  /// Every class the server knows, the unmetered one last ("P1", "P2", "P3" for two metered).
  std::vector<std::string> class_names;
  std::optional<LoopSample> loop;  // none from a FIFO server
  std::vector<TenantSample> tenants;
};

/// A sample, or why the text is not one (one line).

[[nodiscard]] tools::Parsed<Sample> parse_sample(std::string_view json_text);

/// `text` with every byte outside printable ASCII replaced by '?'.
[[nodiscard]] std::string printable(std::string_view text);

}  // namespace creditloop::top
