// The core's registry: construction, plans, participants (add, remove, replan, scale) and what
// can be read of them. A request's way through the core (queued, dispatched in a turn,
// completed) is loop.cpp.
#include "creditloop/core.hpp"

#include "creditloop/detail/hand_back.hpp"
#include "creditloop/detail/issuer.hpp"

#include <bit>
#include <stdexcept>
#include <utility>

namespace creditloop {
namespace {

// Places of the first growth of a core with nothing reserved: one word of each ready set, 12 KiB
// of records at k = 2.
constexpr std::uint32_t kFirstPlaces = 64;

// `whole` x millionths / 1e6, rounded down. The product needs 128 bits; the quotient, at most
// `whole`, fits 64 again. Out of line and cold, so that set_terms() stays small.
[[gnu::noinline, gnu::cold]] std::uint64_t scaled(std::uint64_t whole,
                                                  std::uint32_t millionths) noexcept {
  return static_cast<std::uint64_t>(Rate128{whole} * millionths / kWholePlan);
}

}  // namespace

Core::Core(Config config)
    : config_(std::move(config)), issuer_(detail::next_issuer()), places_store_(config_.classes) {
  if (const auto problem = check(config_)) throw std::invalid_argument(problem->message);
  k_ = config_.classes;
  terms_.reserve(config_.plans.size());
  for (std::size_t i = 0; i < config_.plans.size(); ++i) {
    const Plan& plan = config_.plans[i];
    PlanTerms t;
    for (int c = 0; c < k_; ++c) {
      const auto& terms = plan.terms[static_cast<std::size_t>(c)];
      if (!terms) continue;
      // check() has already proven both values convert.
      t.rate[static_cast<std::size_t>(c)] =
          static_cast<std::uint64_t>(*to_nano_credits(terms->rate, kMaxRate));
      t.burst[static_cast<std::size_t>(c)] = *to_nano_credits(terms->burst, kMaxBurst);
      t.held = static_cast<std::uint8_t>(t.held | (1u << c));
    }
    terms_.push_back(t);
    plan_index_.emplace(plan.name, static_cast<PlanId>(i));
  }
  cursor_.fill(-1);
  for (int c = 0; c < kMaxClasses; ++c) {
    timers_[static_cast<std::size_t>(c)] =
        detail::BasicTimerHeap<BucketTimers>(BucketTimers{&places_store_, static_cast<ClassId>(c)});
  }
}

Core::~Core() = default;

std::optional<PlanId> Core::find_plan(std::string_view name) const noexcept {
  const auto it = plan_index_.find(name);
  if (it == plan_index_.end()) return std::nullopt;
  return it->second;
}

bool Core::plan_holds(PlanId plan, ClassId c) const noexcept {
  return plan < terms_.size() && c < k_ && ((terms_[plan].held >> c) & 1u) != 0;
}

void Core::grow_places(std::uint32_t places) {
  if (places <= places_) return;
  const std::size_t n = places;
  places_store_.grow_to(n);
  names_.resize(n);
  cold_.resize(n);
  waiting_.resize(places);
  for (int c = 0; c < k_; ++c) {
    ready_[static_cast<std::size_t>(c)].resize(places);
    timers_[static_cast<std::size_t>(c)].reserve(places);
  }
  places_ = places;
}

void Core::reserve(std::size_t participants, std::size_t in_flight) {
  const auto places = static_cast<std::uint32_t>(
      participants < kMaxParticipants ? participants : std::size_t{kMaxParticipants});
  grow_places(places);
  name_index_.reserve(participants);
  free_places_.reserve(participants);
  reserve_in_flight(in_flight);
}

void Core::reserve_in_flight(std::size_t in_flight) {
  constexpr std::size_t kChunk = decltype(in_flight_records_)::kChunk;
  const std::size_t from = in_flight_records_.capacity();
  const std::size_t wanted = in_flight < kMaxInFlight ? in_flight : std::size_t{kMaxInFlight};
  if (wanted <= from) return;
  // The free list first, sized for the whole chunks the table grows by: a failure then leaves
  // the records as they were.
  free_tickets_.resize((wanted + kChunk - 1) / kChunk * kChunk);
  try {
    in_flight_records_.grow_to(wanted);
  } catch (...) {
    free_new_records(from);  // the chunks made before the failure
    throw;
  }
  free_new_records(from);
}

// ---- participants ---------------------------------------------------------------------------

bool Core::contains(ParticipantId p) const noexcept { return live(p); }

Result<ParticipantId> Core::add(std::string_view name, std::string_view plan, std::uint32_t shares,
                                Nanos now) {
  const auto id = find_plan(plan);
  if (!id) return Errc::unknown_plan;
  return add(name, *id, shares, now);
}

Result<ParticipantId> Core::add(std::string_view name, PlanId plan, std::uint32_t shares,
                                Nanos now) {
  if (plan >= terms_.size()) return Errc::unknown_plan;
  if (shares == 0 || shares > kMaxShares) return Errc::bad_shares;
  const std::uint32_t name_hash = detail::NameIndex::hash_of(name);
  if (name_index_.find(name, name_hash, name_of()) != detail::NameIndex::npos) {
    return Errc::duplicate_name;
  }
  now = advance_clock(now);

  std::uint32_t place = 0;
  if (!free_places_.empty()) {
    place = free_places_.back();
  } else {
    if (ring_size_ == kMaxParticipants) return Errc::too_many_participants;
    place = ring_size_;
    if (place >= places_) {
      // Geometric from a few places, so that a core with nothing reserved pays for those at its
      // first add and O(1) per add after (reserve() sizes everything up front instead).
      const std::uint32_t doubled = places_ > kMaxParticipants / 2 ? kMaxParticipants : places_ * 2;
      grow_places(doubled > kFirstPlaces ? doubled : kFirstPlaces);
    }
  }
  // Everything that can allocate happens before the first change of state.
  std::string stored_name(name);
  name_index_.make_room_for_one();
  name_index_.insert(name_hash, place);
  if (!free_places_.empty()) {
    free_places_.pop_back();
  } else {
    ++ring_size_;
  }

  Header& header = header_at(place);
  const std::uint32_t generation = header.generation + 1 == 0 ? 1 : header.generation + 1;
  header = Header{};
  header.refilled_at = now;
  header.joined_turn = turn_.active ? turn_.serial : 0;
  header.generation = generation;
  header.held = terms_[plan].held;
  header.live = true;
  cold_[place] = Cold{.plan = plan, .shares = shares};
  for (int c = 0; c < k_; ++c) {
    BucketRec& b = bucket(place, static_cast<ClassId>(c));
    set_terms(place, static_cast<ClassId>(c));
    b.value = b.cap_atto();
    b.dispatched = 0;
    ++b.incarnation;
  }
  names_[place] = std::move(stored_name);
  ++live_;
  return ParticipantId{place, generation, issuer_};
}

Result<RequestList> Core::remove(ParticipantId p) {
  if (!live(p)) return Errc::unknown_participant;
  // The one allocation of a removal, made before anything changes: when it fails, the
  // participant is still registered (the C API answers CREDITLOOP_NO_MEMORY, nothing changed).
  if (free_places_.size() == free_places_.capacity()) {
    free_places_.reserve(std::max<std::size_t>(8, 2 * free_places_.capacity()));
  }
  Header& header = header_at(p.place);
  if (header.queued != 0) leave_waiting(p.place);
  forget_timers(p.place, header.held);
  detail::keep_for_list<detail::HookLink>(header.head);  // the list hands each back (request.hpp)
  RequestList handed_back(header.head, header.tail, header.queued);
  header.head = header.tail = nullptr;
  header.queued = 0;
  header.live = false;
  for (int c = 0; c < k_; ++c) ++bucket(p.place, static_cast<ClassId>(c)).incarnation;
  name_index_.erase(detail::NameIndex::hash_of(names_[p.place]), p.place);
  free_places_.push_back(p.place);
  --live_;
  return handed_back;
}

Status Core::replan(ParticipantId p, PlanId plan, std::uint32_t shares, Nanos now) {
  if (!live(p)) return Errc::unknown_participant;
  if (plan >= terms_.size()) return Errc::unknown_plan;
  if (shares == 0 || shares > kMaxShares) return Errc::bad_shares;
  now = advance_clock(now);
  bring_to(p.place, now);  // refill at the old terms up to the change
  Header& header = header_at(p.place);
  const std::uint8_t old_held = header.held;
  forget_timers(p.place, old_held);  // new terms, new instants
  cold_[p.place].plan = plan;
  cold_[p.place].shares = shares;
  header.held = terms_[plan].held;
  for (int i = 0; i < k_; ++i) {
    const auto c = static_cast<ClassId>(i);
    const bool had = ((old_held >> c) & 1u) != 0;
    const bool has = ((header.held >> c) & 1u) != 0;
    BucketRec& b = bucket(p.place, c);
    set_terms(p.place, c);
    if (has && had) {
      if (b.value > b.cap_atto()) b.value = b.cap_atto();
    } else if (has) {
      b.value = b.cap_atto();
      ++b.incarnation;
    } else if (had) {
      ++b.incarnation;
      ready_[c].clear(p.place);
    }
  }
  if (header.queued != 0) refile_held(p.place, header);
  return {};
}

Status Core::scale(ParticipantId p, std::uint32_t millionths, Nanos now) noexcept {
  if (!live(p)) return Errc::unknown_participant;
  if (millionths > kWholePlan) return Errc::bad_scale;
  now = advance_clock(now);
  bring_to(p.place, now);  // refill at the old terms up to the change
  Header& header = header_at(p.place);
  forget_timers(p.place, header.held);  // new terms, new instants
  header.scale = millionths;
  for (std::uint8_t held = header.held; held != 0; held &= static_cast<std::uint8_t>(held - 1)) {
    const auto c = static_cast<ClassId>(std::countr_zero(held));
    BucketRec& b = bucket(p.place, c);
    set_terms(p.place, c);
    if (b.value > b.cap_atto()) b.value = b.cap_atto();
  }
  if (header.queued != 0) refile_held(p.place, header);
  return {};
}

std::optional<ParticipantId> Core::find(std::string_view name) const {
  const std::uint32_t place = name_index_.find(name, detail::NameIndex::hash_of(name), name_of());
  if (place == detail::NameIndex::npos) return std::nullopt;
  return ParticipantId{place, header_at(place).generation, issuer_};
}

std::optional<ParticipantId> Core::at(std::uint32_t place) const noexcept {
  if (place >= ring_size_ || !header_at(place).live) return std::nullopt;
  return ParticipantId{place, header_at(place).generation, issuer_};
}

std::string_view Core::name(ParticipantId p) const noexcept { return names_[p.place]; }
PlanId Core::plan(ParticipantId p) const noexcept { return cold_[p.place].plan; }
std::uint32_t Core::shares(ParticipantId p) const noexcept { return cold_[p.place].shares; }
std::uint32_t Core::scale_of(ParticipantId p) const noexcept { return header_at(p.place).scale; }
ParticipantStats Core::stats(ParticipantId p) const noexcept {
  ParticipantStats out;
  for (int c = 0; c < k_; ++c) {
    out.dispatched[static_cast<std::size_t>(c)] =
        bucket(p.place, static_cast<ClassId>(c)).dispatched;
  }
  out.dispatched[static_cast<std::size_t>(k_)] = header_at(p.place).unmetered_dispatched;
  const Cold& cold = cold_[p.place];
  out.completed = cold.completed;
  out.cost_charged = cold.cost_charged;
  out.cost_uncharged = cold.cost_uncharged;
  return out;
}

// Always inline: with its scaled branch GCC stopped inlining it, and the calls cost each add 80
// instructions (bench_instructions add/10000/unreserved).
[[gnu::always_inline]] inline void Core::set_terms(std::uint32_t place, ClassId c) noexcept {
  const Cold& cold = cold_[place];
  BucketRec& b = bucket(place, c);
  // Within the limits of units.hpp both products fit 64 bits (at most 1e19).
  const std::uint64_t rate = terms_[cold.plan].rate[c] * cold.shares;
  const std::uint64_t cap = static_cast<std::uint64_t>(terms_[cold.plan].burst[c]) * cold.shares;
  const std::uint32_t scale = header_at(place).scale;
  if (scale == kWholePlan) [[likely]] {  // every participant until scaled
    b.rate = rate;
    b.cap = cap;
  } else {
    b.rate = scaled(rate, scale);
    b.cap = scaled(cap, scale);
  }
}

// ---- reading --------------------------------------------------------------------------------

bool Core::holds(ParticipantId p, ClassId c) const noexcept {
  return live(p) && c < k_ && ((header_at(p.place).held >> c) & 1u) != 0;
}

Result<Balance> Core::balance(ParticipantId p, ClassId c, Nanos now) noexcept {
  if (!live(p)) return Errc::unknown_participant;
  if (!holds(p, c)) return Errc::unknown_class;
  bring_to(p.place, advance_clock(now));
  return nano_of(bucket(p.place, c).value);
}

std::optional<Nanos> Core::next_credit(ParticipantId p, ClassId c, Nanos now) noexcept {
  if (!holds(p, c)) return std::nullopt;
  now = advance_clock(now);
  bring_to(p.place, now);
  const BucketRec& b = bucket(p.place, c);
  if (!b.cap_reaches_a_credit()) return std::nullopt;  // scaled below one credit: never has one
  // The same exact arithmetic that files the bucket's timer: at the instant minus 1 ns the
  // refilled balance is still short of a credit.
  return credit_instant(b.value, b.rate, now);
}

bool Core::qualifies(ParticipantId p, ClassId c, Nanos now) noexcept {
  if (!live(p) || header_at(p.place).queued == 0 || c > k_) return false;
  if (c == unmetered()) return true;
  if (!holds(p, c)) return false;
  bring_to(p.place, advance_clock(now));
  return bucket(p.place, c).has_credit();
}

}  // namespace creditloop
