// The C API against the C++ core on random inputs: the same operations on a creditloop_core and
// on a creditloop::Core built from the same plans must give the same decisions, the same errors
// and the same readings. Seeds are fixed, so a difference is reproducible; the first one is
// printed with its seed and step.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "creditloop/core.hpp"
#include "creditloop/creditloop.h"

namespace {

using creditloop::Core;
using creditloop::ParticipantId;

struct CppRequest : creditloop::RequestHook {
  int id = 0;
};
struct CRequest {
  creditloop_request record{};
  int id = 0;
};

int status_of(creditloop::Status s) {
  // The C codes of core.hpp's errors, as capi/creditloop_c.cpp maps them.
  if (s.ok()) return CREDITLOOP_OK;
  switch (s.error()) {
    case creditloop::Errc::unknown_plan:
      return CREDITLOOP_UNKNOWN_PLAN;
    case creditloop::Errc::unknown_participant:
      return CREDITLOOP_UNKNOWN_PARTICIPANT;
    case creditloop::Errc::duplicate_name:
      return CREDITLOOP_DUPLICATE_NAME;
    case creditloop::Errc::bad_shares:
      return CREDITLOOP_BAD_SHARES;
    case creditloop::Errc::bad_cost:
      return CREDITLOOP_BAD_COST;
    case creditloop::Errc::unknown_ticket:
      return CREDITLOOP_UNKNOWN_TICKET;
    case creditloop::Errc::stale_ticket:
      return CREDITLOOP_STALE_TICKET;
    case creditloop::Errc::already_queued:
      return CREDITLOOP_ALREADY_QUEUED;
    case creditloop::Errc::bad_scale:
      return CREDITLOOP_BAD_SCALE;
    case creditloop::Errc::not_queued:
      return CREDITLOOP_NOT_QUEUED;
    case creditloop::Errc::in_flight:
      return CREDITLOOP_IN_FLIGHT;
    default:
      return -1;
  }
}

struct Run {
  unsigned seed;
  int step = 0;
  bool failed = false;
  void expect(bool ok, const char* what) {
    if (!ok && !failed) {
      std::fprintf(stderr, "seed %u step %d: %s differs\n", seed, step, what);
      failed = true;
    }
  }
};

bool run_one(unsigned seed) {
  Run run{seed};
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };

  const int k = 1 + pick(3);
  creditloop::Config config;
  config.classes = k;
  creditloop_config* cconfig = creditloop_config_new(k);
  const int plans = 1 + pick(3);
  for (int p = 0; p < plans; ++p) {
    creditloop::Plan plan;
    plan.name = "plan" + std::to_string(p);
    creditloop_config_add_plan(cconfig, plan.name.c_str());
    for (int c = 0; c < k; ++c) {
      if (pick(3) == 0) continue;
      const double rate = 0.5 + pick(40) / 4.0;
      const double burst = 1 + pick(8);
      plan.terms[static_cast<std::size_t>(c)] = creditloop::ClassTerms{rate, burst};
      creditloop_config_set_class(cconfig, plan.name.c_str(), c, rate, burst);
    }
    config.plans.push_back(plan);
  }
  Core core(config);
  creditloop_core* ccore = nullptr;
  if (creditloop_core_new(cconfig, &ccore, nullptr, 0) != CREDITLOOP_OK) return false;
  creditloop_config_free(cconfig);

  constexpr int kRequests = 64;
  std::vector<CppRequest> cpp_requests(kRequests);
  std::vector<CRequest> c_requests(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    cpp_requests[i].id = i;
    c_requests[i].id = i;
    creditloop_request_init(&c_requests[i].record, &c_requests[i]);
  }
  std::vector<std::string> names;
  std::vector<ParticipantId> cpp_ids;
  std::vector<creditloop_participant> c_ids;
  std::vector<creditloop::Ticket> cpp_tickets;
  std::vector<creditloop_ticket> c_tickets;
  std::int64_t now = 0;
  for (run.step = 0; run.step < 3000 && !run.failed; ++run.step) {
    now += pick(4) == 0 ? 0 : pick(50'000'000);
    const int op = pick(100);
    if (op < 8 || cpp_ids.empty()) {
      const std::string name = "t" + std::to_string(pick(12));
      const std::string plan = "plan" + std::to_string(pick(plans + 1));  // may be unknown
      const auto shares = static_cast<std::uint32_t>(pick(5));            // 0 is refused
      auto a = core.add(name, plan, shares, now);
      creditloop_participant cid{};
      const int cs = creditloop_add(ccore, name.c_str(), plan.c_str(), shares, now, &cid);
      run.expect(status_of(a.status()) == cs, "add status");
      if (a) {
        names.push_back(name);
        cpp_ids.push_back(*a);
        c_ids.push_back(cid);
      }
    } else if (op < 12) {
      const int i = pick(static_cast<int>(cpp_ids.size()));
      auto r = core.remove(cpp_ids[i]);
      creditloop_request* back = nullptr;
      const int cs = creditloop_remove(ccore, c_ids[i], &back);
      run.expect(status_of(r.status()) == cs, "remove status");
      if (r) {
        for (auto* h = r->front(); h != nullptr;
             h = h->next_in_queue, back = creditloop_request_next(back)) {
          run.expect(back != nullptr &&
                         static_cast<CppRequest*>(h)->id == static_cast<CRequest*>(back->user)->id,
                     "handed-back request");
          if (back == nullptr) break;
        }
        auto list = std::move(r.value());
        while (list.pop_front() != nullptr) {
        }
      }
    } else if (op < 16) {
      const int req = pick(kRequests);
      const int cs = creditloop_withdraw(ccore, &c_requests[req].record);
      run.expect(status_of(core.withdraw(cpp_requests[req])) == cs, "withdraw status");
    } else if (op < 50) {
      const int i = pick(static_cast<int>(cpp_ids.size()));
      const int req = pick(kRequests);
      const int cs = creditloop_submit(ccore, c_ids[i], &c_requests[req].record, now);
      const int s = status_of(core.submit(cpp_ids[i], cpp_requests[req], now));
      run.expect(s == cs, "submit status");
    } else if (op < 70) {
      const auto room = static_cast<std::size_t>(pick(6));
      std::vector<creditloop::Decision> cpp_out(room);
      std::vector<creditloop_decision> c_out(room + 1);
      const std::size_t n = core.dispatch(now, cpp_out);
      std::size_t cn = 0;
      run.expect(creditloop_dispatch(ccore, now, c_out.data(), room, &cn) == CREDITLOOP_OK,
                 "dispatch status");
      run.expect(n == cn, "dispatch count");
      for (std::size_t j = 0; j < n && j < cn; ++j) {
        run.expect(static_cast<CppRequest*>(cpp_out[j].request)->id ==
                       static_cast<CRequest*>(c_out[j].request->user)->id,
                   "dispatched request");
        run.expect(cpp_out[j].out == c_out[j].out_class, "class gone out under");
        run.expect(cpp_out[j].turn == c_out[j].turn_class, "turn class");
        cpp_tickets.push_back(cpp_out[j].ticket);
        c_tickets.push_back(c_out[j].ticket);
      }
      if (pick(2) == 0) {
        core.end_turn();
        creditloop_end_turn(ccore);
      }
    } else if (op < 90 && !cpp_tickets.empty()) {
      const int i = pick(static_cast<int>(cpp_tickets.size()));
      const double cost = pick(10) == 0 ? -1.0 : pick(40) / 8.0;
      creditloop_completion done{};
      auto r = core.complete(cpp_tickets[i], cost, now);
      const int cs = creditloop_complete(ccore, c_tickets[i], cost, now, &done);
      run.expect(status_of(r.status()) == cs, "complete status");
      if (r)
        run.expect(r->bucket == done.bucket && r->charged == (done.charged != 0), "completion");
      if (r && pick(2) == 0) {  // keep some, to complete again as stale
        cpp_tickets.erase(cpp_tickets.begin() + i);
        c_tickets.erase(c_tickets.begin() + i);
      }
    } else if (op < 94) {
      const int i = pick(static_cast<int>(cpp_ids.size()));
      const std::string plan = "plan" + std::to_string(pick(plans));
      const auto shares = static_cast<std::uint32_t>(1 + pick(4));
      const auto pid = core.find_plan(plan);
      const int s = status_of(core.replan(cpp_ids[i], *pid, shares, now));
      run.expect(s == creditloop_replan(ccore, c_ids[i], plan.c_str(), shares, now), "replan");
    } else if (op < 97) {
      const int i = pick(static_cast<int>(cpp_ids.size()));
      const auto m = static_cast<std::uint32_t>(pick(1'100'001));
      run.expect(
          status_of(core.scale(cpp_ids[i], m, now)) == creditloop_scale(ccore, c_ids[i], m, now),
          "scale");
    } else {
      const int i = pick(static_cast<int>(cpp_ids.size()));
      creditloop_participant_snapshot snap{};
      snap.size = sizeof snap;
      const int cs = creditloop_snapshot(ccore, c_ids[i], now, &snap);
      run.expect((cs == CREDITLOOP_OK) == core.contains(cpp_ids[i]), "snapshot status");
      if (cs == CREDITLOOP_OK) {
        run.expect(snap.queued == core.queued(cpp_ids[i]), "queued");
        for (int c = 0; c < k; ++c) {
          const auto cls = static_cast<creditloop::ClassId>(c);
          const auto b = core.balance(cpp_ids[i], cls, now);
          run.expect(!b || snap.balance_nano[c] == static_cast<std::int64_t>(*b), "balance");
        }
        const auto st = core.stats(cpp_ids[i]);
        run.expect(snap.completed == st.completed, "completed");
        run.expect(snap.cost_charged_nano == static_cast<std::int64_t>(st.cost_charged),
                   "cost charged");
      }
    }
    run.expect(creditloop_waiting(ccore) == core.waiting(), "waiting");
    run.expect(creditloop_in_flight(ccore) == core.in_flight(), "in flight");
  }
  // Both cores are freed with requests still theirs: nothing is touched.
  creditloop_core_free(ccore);
  return !run.failed;
}

}  // namespace

int main() {
  int failed = 0;
  for (unsigned seed = 1; seed <= 200; ++seed) failed += run_one(seed) ? 0 : 1;
  if (failed != 0) {
    std::fprintf(stderr, "%d of 200 seeds differ\n", failed);
    return 1;
  }
  std::puts("capi differential: 200 seeds x 3000 steps agree");
  return 0;
}
