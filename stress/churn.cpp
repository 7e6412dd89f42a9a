// The churn thread of a stress run: participants removed, added again, re-planned and scaled
// while requests flow, each call checked against docs/contract.md §5.
#include <string>

#include "expect.hpp"
#include "run.hpp"

namespace creditloop::stress {

using creditloop::Errc;

namespace {

constexpr std::memory_order kRelaxed = std::memory_order_relaxed;

std::string plan_of(const Run& run, Rng& rng) {
  // pro, lite, free, top, odd, gold (options.cpp), weighted towards the reference plans.
  constexpr std::uint64_t kWeights[] = {35, 25, 10, 12, 10, 8};
  std::uint64_t roll = rng.below(100);
  for (std::size_t i = 0; i < std::size(kWeights); ++i) {
    if (roll < kWeights[i]) return run.config.plans[i].name;
    roll -= kWeights[i];
  }
  return run.config.plans[0].name;
}

// A fraction of a plan in millionths, as a fleet gives them: often the whole plan or nothing,
// otherwise anything between, small ones included (rates and capacities that round away).
std::uint32_t scale_of(Rng& rng) {
  const std::uint64_t roll = rng.below(100);
  if (roll < 20) return creditloop::kWholePlan;
  if (roll < 35) return 0;
  if (roll < 45) return 1 + rng.below32(1000);
  return rng.below32(creditloop::kWholePlan + 1);
}

std::uint32_t shares_of(Rng& rng) {
  const std::uint64_t roll = rng.below(100);
  if (roll < 60) return 1;
  if (roll < 93) return 2 + rng.below32(9);
  if (roll < 98) return 11 + rng.below32(90);
  return 1000 + rng.below32(9001);
}

void publish(Run& run, std::uint32_t name, ParticipantId id, bool removed) {
  // release: pairs with the producers' acquire load; they then know the call has returned.
  run.directory[name].store(directory::pack(id, removed), std::memory_order_release);
}

void churn_add(Run& run, Rng& rng, std::uint32_t name) {
  const std::string n = participant_name(name);
  const auto r = run.rt->add(n, plan_of(run, rng), shares_of(rng));
  if (!lifecycle_ok(run, r.status(), "add(" + n + ") after its removal")) return;
  publish(run, name, *r, false);
  run.adds.fetch_add(1, kRelaxed);
  if (rng.one_in(16)) {
    const std::optional<ParticipantId> found = run.rt->find(n);
    if (found && !(*found == *r) && !run.shutting_down.load(std::memory_order_acquire)) {
      fail("check 1 (fate)", "find(" + n + ") is " + str(*found) + ", add() returned " + str(*r));
    }
  }
}

void churn_once(Run& run, Rng& rng) {
  creditloop::Runtime& rt = *run.rt;
  const std::uint32_t name = rng.below32(run.o.participants);
  const std::uint64_t word = run.directory[name].load(std::memory_order_acquire);
  const ParticipantId id = directory::id_of(word, run.rt->issuer());
  const std::string n = participant_name(name);
  const std::string subject = who(name, id);
  run.churn_ops.fetch_add(1, kRelaxed);
  if (directory::removed(word)) {
    switch (rng.below(10)) {
      case 0:
        expect_lifecycle_refusal(run, rt.remove(id).status(), Errc::unknown_participant,
                                 "remove() of " + subject + ", removed already");
        return;
      case 1:
        expect_lifecycle_refusal(run, rt.replan(id, plan_of(run, rng), 1),
                                 Errc::unknown_participant,
                                 "replan() of " + subject + ", removed already");
        return;
      case 2:
        expect_lifecycle_refusal(run, rt.add(n, "no-such-plan", 1).status(), Errc::unknown_plan,
                                 "add(" + n + ") with an unknown plan");
        return;
      case 3:
        expect_lifecycle_refusal(run, rt.add(n, plan_of(run, rng), 0).status(), Errc::bad_shares,
                                 "add(" + n + ") with 0 shares");
        return;
      case 4:
        expect_lifecycle_refusal(run, rt.scale(id, scale_of(rng)), Errc::unknown_participant,
                                 "scale() of " + subject + ", removed already");
        return;
      default:
        churn_add(run, rng, name);
        return;
    }
  }
  const std::uint64_t roll = rng.below(100);
  if (roll < 45) {
    auto r = rt.remove(id);
    if (!lifecycle_ok(run, r.status(), "remove() of " + subject)) return;
    std::size_t queued = 0;
    const std::size_t count = r->size();
    std::vector<std::uint64_t> ids =
        take_handed_back(run, std::move(*r), id, "remove() of " + subject, queued);
    run.handed_back_remove.fetch_add(count, kRelaxed);
    publish(run, name, id, true);
    run.removes.fetch_add(1, kRelaxed);
    if (run.log)
      run.handbacks.real(HandBacks::key(id), std::move(ids), queued, "remove() of " + subject);
    if (rng.one_in(2)) churn_add(run, rng, name);  // back at once, as a new participant
  } else if (roll < 72) {
    if (lifecycle_ok(run, rt.replan(id, plan_of(run, rng), shares_of(rng)),
                     "replan() of " + subject)) {
      run.replans.fetch_add(1, kRelaxed);
    }
  } else if (roll < 82) {
    if (lifecycle_ok(run, rt.scale(id, scale_of(rng)), "scale() of " + subject)) {
      run.scales.fetch_add(1, kRelaxed);
    }
  } else if (roll < 85) {
    expect_lifecycle_refusal(run, rt.scale(id, creditloop::kWholePlan + 1 + rng.below32(1000)),
                             Errc::bad_scale, "scale() of " + subject + " above the whole plan");
  } else if (roll < 89) {
    expect_lifecycle_refusal(run, rt.replan(id, plan_of(run, rng), 0), Errc::bad_shares,
                             "replan() of " + subject + " to 0 shares");
  } else if (roll < 92) {
    expect_lifecycle_refusal(run, rt.replan(id, plan_of(run, rng), creditloop::kMaxShares + 1),
                             Errc::bad_shares, "replan() of " + subject + " above the share limit");
  } else if (roll < 95) {
    expect_lifecycle_refusal(run, rt.replan(id, "no-such-plan", 1), Errc::unknown_plan,
                             "replan() of " + subject + " to an unknown plan");
  } else if (roll < 98) {
    expect_lifecycle_refusal(run, rt.add(n, plan_of(run, rng), shares_of(rng)).status(),
                             Errc::duplicate_name, "add(" + n + ") while registered");
  } else {
    // The core tests the shares before the name.
    expect_lifecycle_refusal(run, rt.add(n, plan_of(run, rng), 0).status(), Errc::bad_shares,
                             "add(" + n + ") with 0 shares while registered");
  }
}

}  // namespace

void churn_main(Run& run) {
  Rng rng(seed_for(run.o.seed, Role::churn, 0));
  run.gate.wait();
  // Paced, not synchronized: no check depends on when a lifecycle call happens.
  const double mean_ns = run.o.churn_us * 1000;
  while (
      !run.stop.wait_for(std::chrono::nanoseconds(static_cast<Nanos>(2 * mean_ns * rng.unit())))) {
    churn_once(run, rng);
  }
}

}  // namespace creditloop::stress
