// The C API against the C++ core on random inputs: the same operations on a creditloop_core and
// on a creditloop::Core built from the same plans must give the same decisions, the same errors
// and the same readings. Seeds are fixed, so a difference is reproducible; the first one is
// printed with its seed and step.
#include <cstdio>
#include <cstring>
#include <optional>
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

// The same random plans, built once for the C++ core and once through the C API.
struct Plans {
  creditloop::Config config;
  creditloop_config* cconfig = nullptr;
  int count = 0;
};

// The two cores side by side, driven by one random sequence: each operation runs on both and
// compares what they say. The first difference is printed with its seed and step.
class Twins {
 public:
  explicit Twins(unsigned seed) : seed_(seed), rng_(seed) {}
  Twins(const Twins&) = delete;
  Twins& operator=(const Twins&) = delete;
  // Both cores are freed with requests still theirs: nothing is touched.
  ~Twins() { creditloop_core_free(ccore_); }

  bool start() {
    classes_ = 1 + pick(3);
    Plans plans = random_plans();
    plans_ = plans.count;
    core_.emplace(plans.config);
    if (creditloop_core_new(plans.cconfig, &ccore_, nullptr, 0) != CREDITLOOP_OK) return false;
    creditloop_config_free(plans.cconfig);
    for (int i = 0; i < kRequests; ++i) {
      cpp_requests_[i].id = i;
      c_requests_[i].id = i;
      creditloop_request_init(&c_requests_[i].record, &c_requests_[i]);
    }
    return true;
  }

  bool run(int steps) {
    for (step_ = 0; step_ < steps && !failed_; ++step_) {
      now_ += pick(4) == 0 ? 0 : pick(50'000'000);
      one_operation(pick(100));
      expect(creditloop_waiting(ccore_) == core_->waiting(), "waiting");
      expect(creditloop_in_flight(ccore_) == core_->in_flight(), "in flight");
    }
    return !failed_;
  }

 private:
  static constexpr int kRequests = 64;

  int pick(int n) { return static_cast<int>(rng_() % static_cast<unsigned>(n)); }
  int pick_participant() { return pick(static_cast<int>(cpp_ids_.size())); }

  void expect(bool ok, const char* what) {
    if (!ok && !failed_) {
      std::fprintf(stderr, "seed %u step %d: %s differs\n", seed_, step_, what);
      failed_ = true;
    }
  }

  Plans random_plans() {
    Plans plans;
    plans.config.classes = classes_;
    plans.cconfig = creditloop_config_new(classes_);
    plans.count = 1 + pick(3);
    for (int p = 0; p < plans.count; ++p) {
      creditloop::Plan plan;
      plan.name = "plan" + std::to_string(p);
      creditloop_config_add_plan(plans.cconfig, plan.name.c_str());
      for (int c = 0; c < classes_; ++c) {
        if (pick(3) == 0) continue;
        const double rate = 0.5 + pick(40) / 4.0;
        const double burst = 1 + pick(8);
        plan.terms[static_cast<std::size_t>(c)] = creditloop::ClassTerms{rate, burst};
        creditloop_config_set_class(plans.cconfig, plan.name.c_str(), c, rate, burst);
      }
      plans.config.plans.push_back(plan);
    }
    return plans;
  }

  // `op` out of 100: the share of each operation is the width of its range.
  void one_operation(int op) {
    if (op < 8 || cpp_ids_.empty()) {
      add();
    } else if (op < 12) {
      remove();
    } else if (op < 16) {
      withdraw();
    } else if (op < 50) {
      submit();
    } else if (op < 70) {
      dispatch();
    } else if (op < 90 && !cpp_tickets_.empty()) {
      complete();
    } else if (op < 94) {
      replan();
    } else if (op < 97) {
      scale();
    } else {
      snapshot();
    }
  }

  void add() {
    const std::string name = "t" + std::to_string(pick(12));
    const std::string plan = "plan" + std::to_string(pick(plans_ + 1));  // may be unknown
    const auto shares = static_cast<std::uint32_t>(pick(5));             // 0 is refused
    auto a = core_->add(name, plan, shares, now_);
    creditloop_participant cid{};
    const int cs = creditloop_add(ccore_, name.c_str(), plan.c_str(), shares, now_, &cid);
    expect(status_of(a.status()) == cs, "add status");
    if (a) {
      cpp_ids_.push_back(*a);
      c_ids_.push_back(cid);
    }
  }

  void remove() {
    const int i = pick_participant();
    auto r = core_->remove(cpp_ids_[i]);
    creditloop_request* back = nullptr;
    const int cs = creditloop_remove(ccore_, c_ids_[i], &back);
    expect(status_of(r.status()) == cs, "remove status");
    if (!r) return;
    for (auto* h = r->front(); h != nullptr;
         h = h->next_in_queue, back = creditloop_request_next(back)) {
      expect(back != nullptr &&
                 static_cast<CppRequest*>(h)->id == static_cast<CRequest*>(back->user)->id,
             "handed-back request");
      if (back == nullptr) break;
    }
    auto list = std::move(r.value());
    while (list.pop_front() != nullptr) {
    }
  }

  void withdraw() {
    const int req = pick(kRequests);
    const int cs = creditloop_withdraw(ccore_, &c_requests_[req].record);
    expect(status_of(core_->withdraw(cpp_requests_[req])) == cs, "withdraw status");
  }

  void submit() {
    const int i = pick_participant();
    const int req = pick(kRequests);
    const int cs = creditloop_submit(ccore_, c_ids_[i], &c_requests_[req].record, now_);
    const int s = status_of(core_->submit(cpp_ids_[i], cpp_requests_[req], now_));
    expect(s == cs, "submit status");
  }

  void dispatch() {
    const auto room = static_cast<std::size_t>(pick(6));
    std::vector<creditloop::Decision> cpp_out(room);
    std::vector<creditloop_decision> c_out(room + 1);
    const std::size_t n = core_->dispatch(now_, cpp_out);
    std::size_t cn = 0;
    expect(creditloop_dispatch(ccore_, now_, c_out.data(), room, &cn) == CREDITLOOP_OK,
           "dispatch status");
    expect(n == cn, "dispatch count");
    for (std::size_t j = 0; j < n && j < cn; ++j) {
      expect(static_cast<CppRequest*>(cpp_out[j].request)->id ==
                 static_cast<CRequest*>(c_out[j].request->user)->id,
             "dispatched request");
      expect(cpp_out[j].out == c_out[j].out_class, "class gone out under");
      expect(cpp_out[j].turn == c_out[j].turn_class, "turn class");
      cpp_tickets_.push_back(cpp_out[j].ticket);
      c_tickets_.push_back(c_out[j].ticket);
    }
    if (pick(2) == 0) {
      core_->end_turn();
      creditloop_end_turn(ccore_);
    }
  }

  void complete() {
    const int i = pick(static_cast<int>(cpp_tickets_.size()));
    const double cost = pick(10) == 0 ? -1.0 : pick(40) / 8.0;
    creditloop_completion done{};
    auto r = core_->complete(cpp_tickets_[i], cost, now_);
    const int cs = creditloop_complete(ccore_, c_tickets_[i], cost, now_, &done);
    expect(status_of(r.status()) == cs, "complete status");
    if (r) expect(r->bucket == done.bucket && r->charged == (done.charged != 0), "completion");
    if (r && pick(2) == 0) {  // keep some, to complete again as stale
      cpp_tickets_.erase(cpp_tickets_.begin() + i);
      c_tickets_.erase(c_tickets_.begin() + i);
    }
  }

  void replan() {
    const int i = pick_participant();
    const std::string plan = "plan" + std::to_string(pick(plans_));
    const auto shares = static_cast<std::uint32_t>(1 + pick(4));
    const auto pid = core_->find_plan(plan);
    const int s = status_of(core_->replan(cpp_ids_[i], *pid, shares, now_));
    expect(s == creditloop_replan(ccore_, c_ids_[i], plan.c_str(), shares, now_), "replan");
  }

  void scale() {
    const int i = pick_participant();
    const auto m = static_cast<std::uint32_t>(pick(1'100'001));
    expect(status_of(core_->scale(cpp_ids_[i], m, now_)) ==
               creditloop_scale(ccore_, c_ids_[i], m, now_),
           "scale");
  }

  void snapshot() {
    const int i = pick_participant();
    creditloop_participant_snapshot snap{};
    snap.size = sizeof snap;
    const int cs = creditloop_snapshot(ccore_, c_ids_[i], now_, &snap);
    expect((cs == CREDITLOOP_OK) == core_->contains(cpp_ids_[i]), "snapshot status");
    if (cs != CREDITLOOP_OK) return;
    expect(snap.queued == core_->queued(cpp_ids_[i]), "queued");
    for (int c = 0; c < classes_; ++c) {
      const auto cls = static_cast<creditloop::ClassId>(c);
      const auto b = core_->balance(cpp_ids_[i], cls, now_);
      expect(!b || snap.balance_nano[c] == static_cast<std::int64_t>(*b), "balance");
    }
    const auto st = core_->stats(cpp_ids_[i]);
    expect(snap.completed == st.completed, "completed");
    expect(snap.cost_charged_nano == static_cast<std::int64_t>(st.cost_charged), "cost charged");
  }

  unsigned seed_;
  std::mt19937_64 rng_;
  int step_ = 0;
  bool failed_ = false;
  int classes_ = 0;
  int plans_ = 0;
  std::optional<Core> core_;
  creditloop_core* ccore_ = nullptr;
  std::int64_t now_ = 0;
  std::vector<CppRequest> cpp_requests_ = std::vector<CppRequest>(kRequests);
  std::vector<CRequest> c_requests_ = std::vector<CRequest>(kRequests);
  std::vector<ParticipantId> cpp_ids_;
  std::vector<creditloop_participant> c_ids_;
  std::vector<creditloop::Ticket> cpp_tickets_;
  std::vector<creditloop_ticket> c_tickets_;
};

bool run_one(unsigned seed) {
  Twins twins(seed);
  return twins.start() && twins.run(3000);
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
