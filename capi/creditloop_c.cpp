// The C API (include/creditloop/creditloop.h) over creditloop::Core.
//
// No exception leaves an entry point: each one that calls anything that may throw (only
// allocation can, on the paths that allocate) catches it, so that nothing unwinds into a C
// caller's frames (tests/capi/capi_throwing_test.cpp makes them throw).
#include "creditloop/creditloop.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <unordered_map>

#include "creditloop/core.hpp"
#include "creditloop/room_controller.hpp"
#include "creditloop/version.hpp"
#include "tenant_file.hpp"

struct creditloop_config {
  creditloop::Config config;
  // A deque, so that the names handed out in creditloop_tenant_config stay where they are.
  std::deque<creditloop::config_file::Tenant> tenants;
  // Each tenant's index by its key's digest, as the server finds a tenant.
  std::unordered_map<creditloop::config_file::KeyDigest, std::size_t,
                     creditloop::config_file::KeyDigestHash,
                     creditloop::config_file::KeyDigestEqual>
      by_key;
};

struct creditloop_core {
  explicit creditloop_core(creditloop::Config config) : core(std::move(config)) {}
  creditloop::Core core;
  // creditloop_dispatch() converts the core's decisions through this, a batch at a time, so that
  // it allocates nothing per call.
  std::array<creditloop::Decision, 64> batch{};
};

namespace {

using creditloop::Errc;
using creditloop::ParticipantId;
using creditloop::RequestHook;
using creditloop::Ticket;

// The opaque C values hold the C++ ones bytewise (ParticipantId is {place, generation, issuer},
// Ticket {index, issuer, generation}), so that their fields may change as long as they fit.
static_assert(sizeof(ParticipantId) <= sizeof(creditloop_participant));
static_assert(sizeof(Ticket) <= sizeof(creditloop_ticket));
static_assert(std::is_trivially_copyable_v<ParticipantId> && std::is_trivially_copyable_v<Ticket>);
// The hook lives at the start of the caller's record.
static_assert(sizeof(RequestHook) <= sizeof(creditloop_request::internal_));
static_assert(alignof(RequestHook) <= alignof(creditloop_request));
static_assert(offsetof(creditloop_request, internal_) == 0);
static_assert(std::is_trivially_destructible_v<RequestHook>);

creditloop_participant to_c(ParticipantId p) noexcept {
  creditloop_participant out{};
  std::memcpy(&out, &p, sizeof p);
  return out;
}
ParticipantId from_c(creditloop_participant p) noexcept {
  ParticipantId out;
  std::memcpy(static_cast<void*>(&out), &p, sizeof out);
  return out;
}
creditloop_ticket to_c(Ticket t) noexcept {
  creditloop_ticket out{};
  std::memcpy(&out, &t, sizeof t);
  return out;
}
Ticket from_c(creditloop_ticket t) noexcept {
  Ticket out;
  std::memcpy(static_cast<void*>(&out), &t, sizeof out);
  return out;
}

RequestHook* hook_of(creditloop_request* r) noexcept {
  return std::launder(reinterpret_cast<RequestHook*>(r->internal_));
}
const RequestHook* hook_of(const creditloop_request* r) noexcept {
  return std::launder(reinterpret_cast<const RequestHook*>(r->internal_));
}
creditloop_request* request_of(RequestHook* h) noexcept {
  return h == nullptr ? nullptr : reinterpret_cast<creditloop_request*>(h);
}

creditloop_status to_c(Errc e) noexcept {
  switch (e) {
    case Errc::unknown_plan:
      return CREDITLOOP_UNKNOWN_PLAN;
    case Errc::unknown_class:
      return CREDITLOOP_UNKNOWN_CLASS;
    case Errc::unknown_participant:
      return CREDITLOOP_UNKNOWN_PARTICIPANT;
    case Errc::duplicate_name:
      return CREDITLOOP_DUPLICATE_NAME;
    case Errc::bad_shares:
      return CREDITLOOP_BAD_SHARES;
    case Errc::bad_rate:
      return CREDITLOOP_BAD_RATE;
    case Errc::bad_burst:
      return CREDITLOOP_BAD_BURST;
    case Errc::bad_cost:
      return CREDITLOOP_BAD_COST;
    case Errc::bad_classes:
      return CREDITLOOP_BAD_CLASSES;
    case Errc::unknown_ticket:
      return CREDITLOOP_UNKNOWN_TICKET;
    case Errc::stale_ticket:
      return CREDITLOOP_STALE_TICKET;
    case Errc::too_many_participants:
      return CREDITLOOP_TOO_MANY_PARTICIPANTS;
    case Errc::already_queued:
      return CREDITLOOP_ALREADY_QUEUED;
    case Errc::bad_scale:
      return CREDITLOOP_BAD_SCALE;
    case Errc::not_queued:
      return CREDITLOOP_NOT_QUEUED;
    case Errc::in_flight:
      return CREDITLOOP_IN_FLIGHT;
    case Errc::shut_down:
    case Errc::unsupported_address:
    case Errc::wrong_thread:
      break;  // the runtime's alone: the core never returns them
  }
  return CREDITLOOP_BAD_ARGUMENT;
}

creditloop_status to_c(creditloop::Status s) noexcept {
  return s.ok() ? CREDITLOOP_OK : to_c(s.error());
}

void write_message(char* out, std::size_t size, std::string_view text) noexcept {
  if (out == nullptr || size == 0) return;
  const std::size_t n = std::min(size - 1, text.size());
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

std::int64_t clip(creditloop::Balance b) noexcept {
  constexpr auto hi = std::numeric_limits<std::int64_t>::max();
  constexpr auto lo = std::numeric_limits<std::int64_t>::min();
  if (b > hi) return hi;
  if (b < lo) return lo;
  return static_cast<std::int64_t>(b);
}

// The tenant file's reader is the server's own (config/tenant_file.cpp).
std::unique_ptr<creditloop_config> from_file(creditloop::config_file::TenantFile file) {
  auto out = std::make_unique<creditloop_config>();
  out->config = std::move(file.plans);
  for (creditloop::config_file::Tenant& t : file.tenants) {
    out->by_key.emplace(t.key, out->tenants.size());
    out->tenants.push_back(std::move(t));
  }
  return out;
}

// The first version of a struct that carries its size reached up to its last field's end; a
// caller's struct smaller than that is not one of ours.
template <class T>
creditloop_status fill_sized(T* out, const T& value, std::size_t first_version) noexcept {
  if (out->size < first_version) return CREDITLOOP_BAD_ARGUMENT;
  const std::size_t size = out->size;
  std::memcpy(static_cast<void*>(out), &value, std::min(size, sizeof(T)));
  out->size = size;
  return CREDITLOOP_OK;
}
constexpr std::size_t kTenantConfigV1 = offsetof(creditloop_tenant_config, queue_timeout_ms) +
                                        sizeof(creditloop_tenant_config::queue_timeout_ms);
constexpr std::size_t kSnapshotV1 = offsetof(creditloop_participant_snapshot, cost_uncharged_nano) +
                                    sizeof(creditloop_participant_snapshot::cost_uncharged_nano);

creditloop::Plan* find_plan(creditloop_config& c, std::string_view name) noexcept {
  for (creditloop::Plan& p : c.config.plans) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace

extern "C" {

const char* creditloop_strerror(creditloop_status status) {
  switch (status) {
    case CREDITLOOP_OK:
      return "success";
    case CREDITLOOP_NOT_QUEUED:
      return "request not queued in this core";
    case CREDITLOOP_IN_FLIGHT:
      return "request already dispatched: complete it";
    case CREDITLOOP_NO_MEMORY:
      return "out of memory";
    case CREDITLOOP_BAD_ARGUMENT:
      return "bad argument";
    case CREDITLOOP_BAD_CONFIG:
      return "bad configuration";
    case CREDITLOOP_NOT_SUPPORTED:
      return "not supported by this build";
    case CREDITLOOP_NOT_FOUND:
      return "not found";
    case CREDITLOOP_UNKNOWN_PLAN:
      return "unknown plan";
    case CREDITLOOP_UNKNOWN_CLASS:
      return "unknown class";
    case CREDITLOOP_UNKNOWN_PARTICIPANT:
      return "unknown participant";
    case CREDITLOOP_DUPLICATE_NAME:
      return "a participant with this name is already registered";
    case CREDITLOOP_BAD_SHARES:
      return "shares must be a whole number from 1 to 1000000";
    case CREDITLOOP_BAD_RATE:
      return "rate must be finite, positive and at most 10000";
    case CREDITLOOP_BAD_BURST:
      return "burst must be finite, at least 1 and at most 10000";
    case CREDITLOOP_BAD_COST:
      return "cost must be finite, at least 0 and at most 1000000";
    case CREDITLOOP_BAD_CLASSES:
      return "classes must number from 1 to 7";
    case CREDITLOOP_UNKNOWN_TICKET:
      return "unknown ticket";
    case CREDITLOOP_STALE_TICKET:
      return "ticket already completed or stale";
    case CREDITLOOP_TOO_MANY_PARTICIPANTS:
      return "too many participants registered";
    case CREDITLOOP_ALREADY_QUEUED:
      return "request already queued or in flight";
    case CREDITLOOP_BAD_SCALE:
      return "scale must be a whole number of millionths from 0 to 1000000";
  }
  return "unknown status";
}

const char* creditloop_version(void) { return CREDITLOOP_VERSION_STRING; }
unsigned creditloop_version_number(void) { return CREDITLOOP_VERSION_NUMBER; }

int creditloop_participant_equal(creditloop_participant a, creditloop_participant b) {
  return from_c(a) == from_c(b) ? 1 : 0;
}
int creditloop_ticket_equal(creditloop_ticket a, creditloop_ticket b) {
  return from_c(a) == from_c(b) ? 1 : 0;
}

void creditloop_request_init(creditloop_request* request, void* user) {
  if (request == nullptr) return;
  new (request->internal_) RequestHook();
  request->user = user;
}
int creditloop_request_idle(const creditloop_request* request) {
  if (request == nullptr) return -1;
  return hook_of(request)->idle() ? 1 : 0;
}
creditloop_request* creditloop_request_next(const creditloop_request* request) {
  return request == nullptr ? nullptr : request_of(hook_of(request)->next_in_queue);
}

creditloop_config* creditloop_config_new(int classes) {
  if (classes < 1 || classes > creditloop::kMaxClasses) return nullptr;
  try {
    auto* c = new creditloop_config;
    c->config.classes = classes;
    return c;
  } catch (...) {
    return nullptr;
  }
}
void creditloop_config_free(creditloop_config* config) { delete config; }

creditloop_status creditloop_config_add_plan(creditloop_config* config, const char* name) {
  if (config == nullptr || name == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  if (find_plan(*config, name) != nullptr) return CREDITLOOP_DUPLICATE_NAME;
  try {
    creditloop::Plan p;
    p.name = name;
    config->config.plans.push_back(std::move(p));
    return CREDITLOOP_OK;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

creditloop_status creditloop_config_set_class(creditloop_config* config, const char* name, int cls,
                                              double rate, double burst) {
  if (config == nullptr || name == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  if (cls < 0 || cls >= config->config.classes) return CREDITLOOP_UNKNOWN_CLASS;
  creditloop::Plan* p = find_plan(*config, name);
  if (p == nullptr) return CREDITLOOP_UNKNOWN_PLAN;
  p->terms[static_cast<std::size_t>(cls)] = creditloop::ClassTerms{rate, burst};
  return CREDITLOOP_OK;
}

creditloop_status creditloop_config_parse_json(const char* text, size_t length,
                                               creditloop_config** out, char* message,
                                               size_t message_size) {
  if (text == nullptr || out == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    *out = from_file(creditloop::config_file::parse_tenant_file(std::string_view(text, length), ""))
               .release();
    return CREDITLOOP_OK;
  } catch (const creditloop::config_file::BadField& e) {
    write_message(message, message_size, e.what());
    return CREDITLOOP_BAD_CONFIG;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

creditloop_status creditloop_config_load(const char* path, creditloop_config** out, char* message,
                                         size_t message_size) {
  if (path == nullptr || out == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    *out = from_file(creditloop::config_file::load_tenant_file(path)).release();
    return CREDITLOOP_OK;
  } catch (const creditloop::config_file::BadField& e) {
    write_message(message, message_size, e.what());
    return CREDITLOOP_BAD_CONFIG;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

creditloop_status creditloop_config_find_key(const creditloop_config* config, const char* key,
                                             size_t length, size_t* index) {
  if (config == nullptr || index == nullptr || (key == nullptr && length != 0)) {
    return CREDITLOOP_BAD_ARGUMENT;
  }
  const auto digest = creditloop::config_file::key_digest(std::string_view(key, length));
  if (!digest) return CREDITLOOP_NOT_SUPPORTED;
  const auto found = config->by_key.find(*digest);
  if (found == config->by_key.end()) return CREDITLOOP_NOT_FOUND;
  *index = found->second;
  return CREDITLOOP_OK;
}

creditloop_status creditloop_config_check(const creditloop_config* config, char* message,
                                          size_t message_size) {
  if (config == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    if (const auto problem = creditloop::check(config->config)) {
      write_message(message, message_size, problem->message);
      return CREDITLOOP_BAD_CONFIG;
    }
    return CREDITLOOP_OK;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

size_t creditloop_config_tenants(const creditloop_config* config) {
  return config == nullptr ? CREDITLOOP_BAD_COUNT : config->tenants.size();
}
creditloop_status creditloop_config_tenant(const creditloop_config* config, size_t i,
                                           creditloop_tenant_config* out) {
  if (config == nullptr || out == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  if (i >= config->tenants.size()) return CREDITLOOP_NOT_FOUND;
  const creditloop::config_file::Tenant& t = config->tenants[i];
  const creditloop_tenant_config value{sizeof(creditloop_tenant_config),
                                       t.name.c_str(),
                                       t.plan.c_str(),
                                       t.shares,
                                       t.queue_limit,
                                       t.queue_timeout_ms};
  return fill_sized(out, value, kTenantConfigV1);
}
int creditloop_config_classes(const creditloop_config* config) {
  return config == nullptr ? -1 : config->config.classes;
}

creditloop_status creditloop_core_new(const creditloop_config* config, creditloop_core** out,
                                      char* message, size_t message_size) {
  if (config == nullptr || out == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    if (const auto problem = creditloop::check(config->config)) {
      write_message(message, message_size, problem->message);
      return CREDITLOOP_BAD_CONFIG;
    }
    *out = new creditloop_core(config->config);
    return CREDITLOOP_OK;
  } catch (const std::invalid_argument& e) {
    write_message(message, message_size, e.what());
    return CREDITLOOP_BAD_CONFIG;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}
void creditloop_core_free(creditloop_core* core) { delete core; }

creditloop_status creditloop_reserve(creditloop_core* core, size_t participants, size_t in_flight) {
  if (core == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    core->core.reserve(participants, in_flight);
    return CREDITLOOP_OK;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

int creditloop_classes(const creditloop_core* core) {
  return core == nullptr ? -1 : core->core.classes();
}

creditloop_status creditloop_add(creditloop_core* core, const char* name, const char* plan,
                                 uint32_t shares, int64_t now, creditloop_participant* out) {
  if (core == nullptr || name == nullptr || plan == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    auto r = core->core.add(name, plan, shares, now);
    if (!r) return to_c(r.error());
    if (out != nullptr) *out = to_c(*r);
    return CREDITLOOP_OK;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

creditloop_status creditloop_remove(creditloop_core* core, creditloop_participant p,
                                    creditloop_request** handed_back) {
  if (core == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    const ParticipantId id = from_c(p);
    if (handed_back == nullptr && core->core.queued(id) != 0) return CREDITLOOP_BAD_ARGUMENT;
    auto r = core->core.remove(id);
    if (!r) return to_c(r.error());
    if (handed_back != nullptr) *handed_back = request_of(r->front());
    return CREDITLOOP_OK;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

creditloop_status creditloop_replan(creditloop_core* core, creditloop_participant p,
                                    const char* plan, uint32_t shares, int64_t now) {
  if (core == nullptr || plan == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    const auto id = core->core.find_plan(plan);
    if (!id) return CREDITLOOP_UNKNOWN_PLAN;
    return to_c(core->core.replan(from_c(p), *id, shares, now));
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

creditloop_status creditloop_scale(creditloop_core* core, creditloop_participant p,
                                   uint32_t millionths, int64_t now) {
  if (core == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  return to_c(core->core.scale(from_c(p), millionths, now));
}

creditloop_status creditloop_find(const creditloop_core* core, const char* name,
                                  creditloop_participant* out) {
  if (core == nullptr || name == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  try {
    const auto p = core->core.find(name);
    if (!p) return CREDITLOOP_NOT_FOUND;
    if (out != nullptr) *out = to_c(*p);
    return CREDITLOOP_OK;
  } catch (...) {
    return CREDITLOOP_NO_MEMORY;
  }
}

size_t creditloop_size(const creditloop_core* core) {
  return core == nullptr ? CREDITLOOP_BAD_COUNT : core->core.size();
}
size_t creditloop_waiting(const creditloop_core* core) {
  return core == nullptr ? CREDITLOOP_BAD_COUNT : core->core.waiting();
}
size_t creditloop_in_flight(const creditloop_core* core) {
  return core == nullptr ? CREDITLOOP_BAD_COUNT : core->core.in_flight();
}

creditloop_status creditloop_submit(creditloop_core* core, creditloop_participant p,
                                    creditloop_request* request, int64_t now) {
  if (core == nullptr || request == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  return to_c(core->core.submit(from_c(p), *hook_of(request), now));
}

creditloop_status creditloop_withdraw(creditloop_core* core, creditloop_request* request) {
  if (core == nullptr || request == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  return to_c(core->core.withdraw(*hook_of(request)));
}

creditloop_status creditloop_dispatch(creditloop_core* core, int64_t now, creditloop_decision* out,
                                      size_t capacity, size_t* count) {
  if (core == nullptr || count == nullptr || (out == nullptr && capacity != 0)) {
    return CREDITLOOP_BAD_ARGUMENT;
  }
  std::size_t taken = 0;
  while (taken < capacity) {
    const std::size_t want = std::min(capacity - taken, core->batch.size());
    const std::size_t n = core->core.dispatch(now, std::span(core->batch.data(), want));
    for (std::size_t i = 0; i < n; ++i) {
      const creditloop::Decision& d = core->batch[i];
      out[taken + i] = creditloop_decision{request_of(d.request), to_c(d.ticket),
                                           to_c(d.participant), d.out, d.turn};
    }
    taken += n;
    if (n < want) break;
  }
  *count = taken;
  return CREDITLOOP_OK;
}

void creditloop_end_turn(creditloop_core* core) {
  if (core != nullptr) core->core.end_turn();
}

namespace {
creditloop_status completed(const creditloop::Result<creditloop::Completion>& r,
                            creditloop_completion* out) noexcept {
  if (!r) return to_c(r.error());
  if (out != nullptr) *out = creditloop_completion{to_c(r->participant), r->bucket, r->charged};
  return CREDITLOOP_OK;
}
}  // namespace

creditloop_status creditloop_complete(creditloop_core* core, creditloop_ticket ticket, double cost,
                                      int64_t now, creditloop_completion* out) {
  if (core == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  return completed(core->core.complete(from_c(ticket), cost, now), out);
}

creditloop_status creditloop_complete_nano(creditloop_core* core, creditloop_ticket ticket,
                                           int64_t cost_nano, int64_t now,
                                           creditloop_completion* out) {
  if (core == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  return completed(core->core.complete_nano(from_c(ticket), cost_nano, now), out);
}

creditloop_status creditloop_take_all_queued(creditloop_core* core,
                                             creditloop_request** handed_back) {
  if (core == nullptr || handed_back == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  creditloop::RequestList list = core->core.take_all_queued();
  *handed_back = request_of(list.front());
  return CREDITLOOP_OK;
}

creditloop_status creditloop_snapshot(creditloop_core* core, creditloop_participant p, int64_t now,
                                      creditloop_participant_snapshot* out) {
  if (core == nullptr || out == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  if (out->size < kSnapshotV1) return CREDITLOOP_BAD_ARGUMENT;
  creditloop::Core& c = core->core;
  const ParticipantId id = from_c(p);
  if (!c.contains(id)) return CREDITLOOP_UNKNOWN_PARTICIPANT;
  creditloop_participant_snapshot s{};
  s.size = sizeof s;
  s.name = c.name(id).data();
  s.plan = c.plan(id);
  s.shares = c.shares(id);
  s.scale = c.scale_of(id);
  s.queued = c.queued(id);
  const auto oldest = c.oldest_queued_at(id);
  s.oldest_queued_at = oldest ? *oldest : -1;
  for (int k = 0; k < CREDITLOOP_MAX_CLASSES; ++k) {
    s.balance_nano[k] = 0;
    s.next_credit[k] = -1;
  }
  for (int k = 0; k < c.classes(); ++k) {
    const auto cls = static_cast<creditloop::ClassId>(k);
    if (!c.holds(id, cls)) continue;
    s.holds |= 1u << k;
    const auto b = c.balance(id, cls, now);
    if (b) s.balance_nano[k] = clip(*b);
    if (b && *b < creditloop::kNanoPerCredit) {
      const auto at = c.next_credit(id, cls, now);
      if (at) s.next_credit[k] = *at;
    }
  }
  const creditloop::ParticipantStats st = c.stats(id);
  for (int k = 0; k <= c.classes(); ++k) s.dispatched[k] = st.dispatched[k];
  s.completed = st.completed;
  s.cost_charged_nano = clip(st.cost_charged);
  s.cost_uncharged_nano = clip(st.cost_uncharged);
  return fill_sized(out, s, kSnapshotV1);
}

uint32_t creditloop_ring_size(const creditloop_core* core) {
  return core == nullptr ? UINT32_MAX : core->core.ring_size();
}
creditloop_status creditloop_at(const creditloop_core* core, uint32_t place,
                                creditloop_participant* out) {
  if (core == nullptr || out == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  const auto p = core->core.at(place);
  if (!p) return CREDITLOOP_NOT_FOUND;
  *out = to_c(*p);
  return CREDITLOOP_OK;
}

creditloop_status creditloop_next_credit(creditloop_core* core, creditloop_participant p, int cls,
                                         int64_t now, int64_t* at) {
  if (core == nullptr || at == nullptr) return CREDITLOOP_BAD_ARGUMENT;
  if (cls < 0 || cls >= core->core.classes()) return CREDITLOOP_UNKNOWN_CLASS;
  const ParticipantId id = from_c(p);
  if (!core->core.contains(id)) return CREDITLOOP_UNKNOWN_PARTICIPANT;
  const auto t = core->core.next_credit(id, static_cast<creditloop::ClassId>(cls), now);
  if (!t) return CREDITLOOP_NOT_FOUND;
  *at = *t;
  return CREDITLOOP_OK;
}

uint64_t creditloop_turns(const creditloop_core* core, int cls) {
  if (core == nullptr || cls < 0 || cls > core->core.classes()) return UINT64_MAX;
  return core->core.turns(static_cast<creditloop::ClassId>(cls));
}

struct creditloop_room_controller {
  creditloop::RoomController controller;
};

creditloop_room_controller* creditloop_room_controller_new(uint32_t least, uint32_t most) {
  return new (std::nothrow) creditloop_room_controller{creditloop::RoomController({least, most})};
}

void creditloop_room_controller_free(creditloop_room_controller* controller) { delete controller; }

void creditloop_room_controller_dispatched(creditloop_room_controller* controller, int64_t now,
                                           uint64_t in_flight) {
  if (controller != nullptr) controller->controller.dispatched(now, in_flight);
}

void creditloop_room_controller_completed(creditloop_room_controller* controller,
                                          int64_t dispatched_at, int64_t now) {
  if (controller != nullptr) controller->controller.completed(dispatched_at, now);
}

uint32_t creditloop_room_controller_slots(const creditloop_room_controller* controller) {
  return controller == nullptr ? 0 : controller->controller.slots();
}

int64_t creditloop_room_controller_latency(const creditloop_room_controller* controller) {
  return controller == nullptr ? 0 : controller->controller.no_queue_latency();
}

}  // extern "C"
