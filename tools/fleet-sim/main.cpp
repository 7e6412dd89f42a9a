// creditloop-fleet-sim: a fleet of creditloop servers sharing plans through a store, simulated
// on a virtual clock. See docs/fleet.md, "Simulated at scale".
//
// Exit status: 0 done; 2 a bad command line or configuration.
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apportion.hpp"
#include "common/command_line.hpp"
#include "fleet.hpp"

namespace {

using creditloop::fleet::Change;
using creditloop::fleet::SimConfig;
using nlohmann::json;

struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
void read_field(const json& j, const char* name, T& out) {
  if (!j.contains(name)) return;
  try {
    out = j.at(name).get<T>();
  } catch (const json::exception&) {
    throw BadInput(std::string(name) + ": wrong type");
  }
}

Change parse_change(const std::string& s) {
  if (s == "none") return Change::none;
  if (s == "shift") return Change::shift;
  if (s == "death") return Change::death;
  throw BadInput("change: \"" + s + "\" is not one of none, shift, death");
}

const char* change_name(Change c) {
  switch (c) {
    case Change::none:
      return "none";
    case Change::shift:
      return "shift";
    case Change::death:
      return "death";
  }
  return "none";
}

/// The configuration's "plans": each one's name defaults to where it is in the array.
std::vector<creditloop::fleet::PlanSpec> read_plans(const json& plans) {
  if (!plans.is_array()) throw BadInput("plans: must be an array");
  std::vector<creditloop::fleet::PlanSpec> specs;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const json& p = plans[i];
    const std::string at = "plans[" + std::to_string(i) + "]";
    if (!p.is_object()) throw BadInput(at + ": must be an object");
    creditloop::fleet::PlanSpec spec;
    spec.name = at;
    try {
      read_field(p, "name", spec.name);
      read_field(p, "rate", spec.rate);
      read_field(p, "burst", spec.burst);
      read_field(p, "weight", spec.weight);
    } catch (const BadInput& e) {
      throw BadInput(at + "." + e.what());
    }
    specs.push_back(spec);
  }
  return specs;
}

/// Reads a configuration file over the defaults. Every key must be known. A field after another,
/// in the order docs/fleet.md lists them.
void read_config(const json& j, SimConfig& c) {
  if (!j.is_object()) throw BadInput("the configuration must be a JSON object");
  static const std::set<std::string> known{"servers",
                                           "tenants",
                                           "epoch_ms",
                                           "duration_s",
                                           "warmup_s",
                                           "seed",
                                           "arrivals",
                                           "slots",
                                           "service_ms",
                                           "store_rtt_ms",
                                           "store_failure_rate",
                                           "outage_at_s",
                                           "outage_s",
                                           "grace_s",
                                           "plans",
                                           "saturating_fraction",
                                           "saturating_load",
                                           "light_load",
                                           "spread",
                                           "change",
                                           "change_at_s",
                                           "shift_fraction",
                                           "deaths",
                                           "bin_ms",
                                           "window_s",
                                           "over_grant_window_s",
                                           "band"};
  for (const auto& [key, value] : j.items()) {
    if (!known.contains(key)) throw BadInput(key + ": unknown field");
  }
  read_field(j, "servers", c.servers);
  read_field(j, "tenants", c.tenants);
  read_field(j, "epoch_ms", c.epoch_ms);
  read_field(j, "duration_s", c.duration_s);
  read_field(j, "warmup_s", c.warmup_s);
  read_field(j, "seed", c.seed);
  if (j.contains("arrivals")) {
    std::string a;
    read_field(j, "arrivals", a);
    if (a != "poisson" && a != "periodic") throw BadInput("arrivals: must be poisson or periodic");
    c.poisson = a == "poisson";
  }
  read_field(j, "slots", c.slots);
  read_field(j, "service_ms", c.service_ms);
  read_field(j, "store_rtt_ms", c.store_rtt_ms);
  read_field(j, "store_failure_rate", c.store_failure_rate);
  read_field(j, "outage_at_s", c.outage_at_s);
  read_field(j, "outage_s", c.outage_s);
  read_field(j, "grace_s", c.grace_s);
  if (j.contains("plans")) c.plans = read_plans(j["plans"]);
  read_field(j, "saturating_fraction", c.saturating_fraction);
  read_field(j, "saturating_load", c.saturating_load);
  read_field(j, "light_load", c.light_load);
  read_field(j, "spread", c.spread);
  if (j.contains("change")) {
    std::string s;
    read_field(j, "change", s);
    c.change = parse_change(s);
  }
  read_field(j, "change_at_s", c.change_at_s);
  read_field(j, "shift_fraction", c.shift_fraction);
  read_field(j, "deaths", c.deaths);
  read_field(j, "bin_ms", c.bin_ms);
  read_field(j, "window_s", c.window_s);
  read_field(j, "over_grant_window_s", c.over_grant_window_s);
  read_field(j, "band", c.band);
}

json config_json(const SimConfig& c) {
  json plans = json::array();
  for (const auto& p : c.plans) {
    plans.push_back({{"name", p.name}, {"rate", p.rate}, {"burst", p.burst}, {"weight", p.weight}});
  }
  return {{"servers", c.servers},
          {"tenants", c.tenants},
          {"epoch_ms", c.epoch_ms},
          {"duration_s", c.duration_s},
          {"warmup_s", c.warmup_s},
          {"seed", c.seed},
          {"arrivals", c.poisson ? "poisson" : "periodic"},
          {"slots", c.slots},
          {"service_ms", c.service_ms},
          {"store_rtt_ms", c.store_rtt_ms},
          {"store_failure_rate", c.store_failure_rate},
          {"outage_at_s", c.outage_at_s},
          {"outage_s", c.outage_s},
          {"grace_s", c.grace_s},
          {"plans", plans},
          {"saturating_fraction", c.saturating_fraction},
          {"saturating_load", c.saturating_load},
          {"light_load", c.light_load},
          {"spread", c.spread},
          {"change", change_name(c.change)},
          {"change_at_s", c.change_at_s},
          {"shift_fraction", c.shift_fraction},
          {"deaths", c.deaths},
          {"bin_ms", c.bin_ms},
          {"window_s", c.window_s},
          {"over_grant_window_s", c.over_grant_window_s},
          {"band", c.band}};
}

json spread_json(const creditloop::fleet::Spread& s) {
  return {{"count", s.count}, {"min", s.min}, {"p01", s.p01}, {"p05", s.p05},  {"p50", s.p50},
          {"p95", s.p95},     {"p99", s.p99}, {"max", s.max}, {"mean", s.mean}};
}

json over_grant_json(const creditloop::fleet::OverGrant& g) {
  return {
      {"from_s", g.from_s},
      {"to_s", g.to_s},
      {"excess", g.excess},
      {"excess_beyond_burst", g.excess_beyond_burst},
      {"planned", g.planned},
      {"excess_fraction", g.planned > 0 ? g.excess / g.planned : 0.0},
      {"tenants_over", g.tenants_over},
      {"shortfall", g.shortfall},
      {"shortfall_fraction", g.saturating_planned > 0 ? g.shortfall / g.saturating_planned : 0.0}};
}

json result_json(const SimConfig& c, const creditloop::fleet::SimResult& r) {
  // The histogram of steady-state shares, 0.5 .. 1.5 in steps of 0.02, with the tails in the
  // end buckets.
  std::vector<std::size_t> histogram(51, 0);
  for (double x : r.saturating_ratios) {
    const double at = std::clamp((x - 0.5) / 0.02, 0.0, 50.0);
    ++histogram[static_cast<std::size_t>(at)];
  }
  json out = {{"config", config_json(c)},
              {"arrivals", r.arrivals},
              {"dispatches", r.dispatches},
              {"p1_dispatches", r.p1_dispatches},
              {"store_calls", r.store_calls},
              {"store_ops", r.store_ops},
              {"failed_calls", r.failed_calls},
              {"fallbacks", r.fallbacks},
              {"steady",
               {{"saturating_share", spread_json(r.saturating_share)},
                {"saturating_in_band", r.saturating_in_band},
                {"light_p1_share", spread_json(r.light_p1_share)},
                {"histogram", {{"from", 0.5}, {"step", 0.02}, {"counts", histogram}}},
                {"over_grant", over_grant_json(r.steady)}}}};
  if (c.change != Change::none) {
    out["change"] = {{"moved_saturating", r.moved},
                     {"in_band_before", r.eligible},
                     {"converged", r.converged},
                     {"convergence_s", spread_json(r.convergence_s)},
                     {"over_grant", over_grant_json(r.after_change)}};
  }
  if (c.outage_at_s >= 0) out["outage"] = {{"over_grant", over_grant_json(r.outage)}};
  return out;
}

/// The rule on one stored state, for checking another implementation (the Redis function)
/// against this one: {"entries": [{"server", "demand", "ms"}...], "server", "demand", "now_ms",
/// "ttl_ms"} gives {"millionths", "live", "total", "entries"} (the entries as left).
json apportion_case(const json& j) {
  std::map<std::string, std::uint32_t> ids;
  std::vector<std::string> names;
  auto id_of = [&](const std::string& name) {
    const auto [it, added] = ids.emplace(name, static_cast<std::uint32_t>(names.size()));
    if (added) names.push_back(name);
    return it->second;
  };
  std::vector<creditloop::fleet::DemandEntry> entries;
  for (const json& e : j.at("entries")) {
    entries.push_back({id_of(e.at("server").get<std::string>()),
                       e.at("demand").get<std::uint64_t>(), e.at("ms").get<std::int64_t>()});
  }
  const auto a = creditloop::fleet::report(
      entries, id_of(j.at("server").get<std::string>()), j.at("demand").get<std::uint64_t>(),
      j.at("now_ms").get<std::int64_t>(), j.at("ttl_ms").get<std::int64_t>());
  json left = json::array();
  for (const auto& e : entries) {
    left.push_back({{"server", names[e.server]}, {"demand", e.demand}, {"ms", e.written_ms}});
  }
  return {{"millionths", a.millionths}, {"live", a.live}, {"total", a.total}, {"entries", left}};
}

/// One case, or an array of cases answered by an array in the same order.
int apportion_input(std::istream& in) {
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw BadInput(std::string("--apportion: ") + e.what());
  }
  try {
    if (j.is_array()) {
      json out = json::array();
      for (const json& c : j) out.push_back(apportion_case(c));
      std::cout << out.dump() << '\n';
    } else {
      std::cout << apportion_case(j).dump() << '\n';
    }
  } catch (const json::exception& e) {
    throw BadInput(std::string("--apportion: ") + e.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"creditloop-fleet-sim: a fleet of creditloop servers on a virtual clock"};
  std::string config_path;
  std::string out_path;
  std::optional<std::uint32_t> servers, tenants;
  std::optional<double> epoch_ms, duration_s, outage_at_s, outage_s, store_rtt_ms, failure_rate;
  std::optional<std::uint64_t> seed;
  std::optional<std::string> change;
  bool apportion = false;
  app.add_option("-c,--config", config_path, "JSON configuration (fields of docs/fleet.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--servers", servers, "servers in the fleet");
  app.add_option("--tenants", tenants, "tenants");
  app.add_option("--epoch-ms", epoch_ms, "epoch length, milliseconds");
  app.add_option("--duration", duration_s, "simulated seconds");
  app.add_option("--seed", seed, "seed of every random draw");
  app.add_option("--change", change, "at change_at_s: none, shift or death");
  app.add_option("--outage-at", outage_at_s, "the store is down from this second");
  app.add_option("--outage", outage_s, "for this many seconds");
  app.add_option("--store-rtt-ms", store_rtt_ms, "the store's round trip, milliseconds");
  app.add_option("--failure-rate", failure_rate, "probability that a store round trip fails");
  app.add_option("-o,--out", out_path, "write the result JSON here instead of stdout");
  app.add_flag("--apportion", apportion,
               "apply the fleet rule to a stored state (or an array of them) read from stdin "
               "as JSON, and print the answer");
  if (const std::optional<int> status = creditloop::tools::parse_command_line(app, argc, argv)) {
    return *status;
  }
  try {
    if (apportion) return apportion_input(std::cin);
    SimConfig c;
    if (!config_path.empty()) {
      std::ifstream in(config_path);
      json j;
      try {
        j = json::parse(in);
      } catch (const json::parse_error& e) {
        throw BadInput(config_path + ": " + e.what());
      }
      read_config(j, c);
    }
    if (servers) c.servers = *servers;
    if (tenants) c.tenants = *tenants;
    if (epoch_ms) c.epoch_ms = *epoch_ms;
    if (duration_s) c.duration_s = *duration_s;
    if (seed) c.seed = *seed;
    if (change) c.change = parse_change(*change);
    if (outage_at_s) c.outage_at_s = *outage_at_s;
    if (outage_s) c.outage_s = *outage_s;
    if (store_rtt_ms) c.store_rtt_ms = *store_rtt_ms;
    if (failure_rate) c.store_failure_rate = *failure_rate;
    const auto started = std::chrono::steady_clock::now();
    const creditloop::fleet::SimResult r = creditloop::fleet::simulate(c);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // The wall time goes to stderr: the result is the same for a seed, byte for byte.
    std::fprintf(stderr, "creditloop-fleet-sim: %llu arrivals in %.1f s\n",
                 static_cast<unsigned long long>(r.arrivals), wall);
    const std::string text = result_json(c, r).dump(1) + "\n";
    if (out_path.empty()) {
      std::cout << text;
    } else {
      std::ofstream out(out_path);
      out << text;
      if (!out) throw std::runtime_error(out_path + ": cannot write");
    }
    return 0;
  } catch (const BadInput& e) {
    std::fprintf(stderr, "creditloop-fleet-sim: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "creditloop-fleet-sim: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "creditloop-fleet-sim: %s\n", e.what());
    return 1;
  }
}
