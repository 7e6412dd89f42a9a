#include "picture.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "picture_internal.hpp"

namespace creditloop::sim {

using creditloop::Balance;
using creditloop::ClassId;
using creditloop::Nanos;

namespace {

std::int64_t micro_credits(Balance nano) {
  const bool negative = nano < 0;
  const Balance magnitude = negative ? -nano : nano;
  const Balance units = std::min<Balance>((magnitude + 500) / 1000, kMaxExact);
  return static_cast<std::int64_t>(negative ? -units : units);
}

}  // namespace

Picture::Picture(const Scenario& scenario, std::string title)
    : scenario_(scenario), title_(std::move(title)), classes_(scenario.config.classes) {
  requests_.reserve(static_cast<std::size_t>(scenario.requests));
  lanes_.resize(scenario.participants.size());
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    const ParticipantSpec& spec = scenario.participants[i];
    const auto plan = std::find_if(scenario.config.plans.begin(), scenario.config.plans.end(),
                                   [&](const creditloop::Plan& p) { return p.name == spec.plan; });
    if (plan == scenario.config.plans.end()) continue;  // the core refuses it before any run
    Lane& lane = lanes_[i];
    for (int c = 0; c < classes_; ++c) {
      const auto& terms = plan->terms[static_cast<std::size_t>(c)];
      if (!terms) continue;
      lane.held.push_back(c);
      lane.rate.push_back(terms->rate * spec.shares);
      lane.cap.push_back(terms->burst * spec.shares);
    }
    lane.samples.value.resize(lane.held.size());
  }
}

void Picture::arrived(Nanos t, std::uint32_t participant, std::uint64_t req) {
  if (req != requests_.size()) throw std::logic_error("picture: requests arrive out of number");
  Request r;
  r.arrived = micro_time(t);
  r.participant = participant;
  requests_.push_back(r);
  lanes_[participant].requests.push_back(static_cast<std::uint32_t>(req));
}

void Picture::passed(Nanos t, ClassId c, std::span<const PassEntry> waiting) {
  Passes& p = passes_;
  p.t.push_back(micro_time(t));
  p.cls.push_back(c);
  std::uint32_t eligible = 0;
  std::uint32_t ignored = 0;
  for (const PassEntry& e : waiting) {
    if (e.eligible) {
      ++eligible;
      p.eligible.push_back(e.participant);
      continue;
    }
    ++ignored;
    p.ignored.push_back(e.participant);
    p.why.push_back(e.holds ? 1 : 0);
    if (e.holds) {
      p.balance.push_back(micro_credits(e.balance));
      p.next_credit.push_back(e.next_credit ? micro_time(*e.next_credit) : -1);
    }
  }
  p.eligible_count.push_back(eligible);
  p.ignored_count.push_back(ignored);
}

void Picture::sample(std::int64_t t, std::uint32_t key, std::uint32_t participant,
                     const Balances& balances) {
  Lane& lane = lanes_[participant];
  if (lane.held.empty()) return;
  lane.samples.t.push_back(t);
  lane.samples.key.push_back(key);
  for (std::size_t h = 0; h < lane.held.size(); ++h) {
    const auto& b = balances[static_cast<std::size_t>(lane.held[h])];
    lane.samples.value[h].push_back(b ? micro_credits(*b) : 0);
  }
}

void Picture::dispatched(Nanos t, std::uint32_t participant, std::uint64_t req, ClassId c,
                         const Balances& balances) {
  Request& r = requests_.at(static_cast<std::size_t>(req));
  r.dispatched = micro_time(t);
  r.cls = static_cast<std::int8_t>(c);
  // Every dispatch follows the pass that began its turn: the latest one.
  r.pass = passes_.t.empty() ? 0 : static_cast<std::uint32_t>(passes_.t.size() - 1);
  sample(r.dispatched, r.pass + 1, participant, balances);
}

void Picture::completed(Nanos t, std::uint32_t participant, std::uint64_t req,
                        std::int64_t /*cost_nano*/, const Balances& balances) {
  Request& r = requests_.at(static_cast<std::size_t>(req));
  r.completed = micro_time(t);
  r.passes_before_completion = static_cast<std::uint32_t>(passes_.t.size());
  sample(r.completed, r.passes_before_completion, participant, balances);
}

std::int64_t Picture::waited_until(const Request& r, std::int64_t end) noexcept {
  if (r.dispatched >= 0) return r.dispatched;
  return r.withdrawn >= 0 ? r.withdrawn : end;
}

void Picture::withdrawn(Nanos t, std::uint32_t /*participant*/, std::uint64_t req) {
  requests_.at(static_cast<std::size_t>(req)).withdrawn = micro_time(t);
  withdrawals_ = true;
}

void Picture::room(Nanos t, std::uint32_t slots) { room_.emplace_back(micro_time(t), slots); }

std::int64_t Picture::end_micro(const RunReport& report) const {
  std::int64_t end = micro_time(report.stopped_at);
  for (const Request& r : requests_) end = std::max({end, r.arrived, r.completed, r.withdrawn});
  return end;
}

void Picture::without_balances() {
  balances_ = false;
  for (Lane& lane : lanes_) {
    lane.held.clear();
    lane.rate.clear();
    lane.cap.clear();
    lane.samples.value.clear();
  }
}

}  // namespace creditloop::sim
