// The capture: formatting and rotating files (CaptureWriter), and the runtime observer that feeds
// a writer thread through a ring (CaptureObserver). See creditloop/capture.hpp and docs/capture.md.
//
// Lines are formatted by hand rather than with nlohmann-json, for two reasons. Times and costs
// are integers (nanoseconds, nano-credits) printed as exact decimals ("0.000001200"); a JSON
// library prints doubles, which cannot hold every nanosecond of a long run. And the runtime
// library depends on nothing but the standard library and threads, so an embedder that installs
// it needs no JSON library. Strings are escaped as RFC 8259 asks (quote, backslash, controls).
#include "creditloop/capture.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "internal/spin.hpp"
#include "internal/spsc_ring.hpp"

namespace creditloop {

namespace detail {

/// One event handed from the dispatcher to the writer thread. Fixed size: a name travels as a
/// pointer to a copy the add made, which the writer (or the dispatcher, when the push fails)
/// deletes.
struct CaptureRecord {
  enum class Kind : std::uint8_t { request, plan, scale, remove, dropped };
  Kind kind = Kind::request;
  ClassId out = 0;
  std::uint32_t place = 0;
  std::uint32_t generation = 0;
  PlanId plan = 0;
  std::uint32_t shares = 0;
  Nanos t = 0;       // request: complete; others: the instant
  Nanos arrive = 0;  // request only
  Nanos dispatch = 0;
  std::int64_t amount = 0;      // request: cost in nano-credits; remove: requests in flight;
                                // scale: millionths; dropped: records lost
  std::string* name = nullptr;  // plan records of an add: the participant's name
};
static_assert(sizeof(CaptureRecord) == 64, "one cache line per record");

}  // namespace detail

namespace {

using namespace std::string_view_literals;

constexpr std::size_t kWriteChunk = 64 * 1024;
// class_name() without building a string per line.
constexpr std::array<std::string_view, kMaxClasses + 1> kClassNames = {"P1", "P2", "P3", "P4",
                                                                       "P5", "P6", "P7", "P8"};
// After an error, how long (on the capture's clock) before a new file is tried.
constexpr Nanos kRetryAfter = kNanosPerSecond;

void append_escaped(std::string& out, std::string_view text) {
  out += '"';
  const auto needs_escape = [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  };
  if (std::none_of(text.begin(), text.end(), needs_escape)) {  // names usually: one copy
    out += text;
    out += '"';
    return;
  }
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
}

template <class Integer>
void append_integer(std::string& out, Integer value) {
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
  (void)ec;  // 24 characters hold any 64-bit integer
  out.append(digits, end);
}

// Shortest text that reads back as the same double (rates and bursts).
void append_double(std::string& out, double value) {
  char digits[32];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
  (void)ec;  // 32 characters hold any double's shortest form
  out.append(digits, end);
}

// `value` / 10^kDecimals, exactly, with all kDecimals digits ("-0.000001200"). Formatted in one
// buffer and appended once: a request line has four of these.
template <int kDecimals>
void append_fixed(std::string& out, std::int64_t value) {
  constexpr std::uint64_t kUnit = [] {
    std::uint64_t u = 1;
    for (int i = 0; i < kDecimals; ++i) u *= 10;
    return u;
  }();
  char text[48];
  char* p = text;
  const std::uint64_t magnitude =
      value < 0 ? 0 - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
  if (value < 0) *p++ = '-';
  p = std::to_chars(p, text + 24, magnitude / kUnit).ptr;  // 24 holds any 64-bit integer
  *p++ = '.';
  // Two digits at a time, from the last: half the divisions of one at a time.
  static constexpr auto kPairs = [] {
    std::array<char, 200> pairs{};
    for (int i = 0; i < 100; ++i) {
      pairs[static_cast<std::size_t>(2 * i)] = static_cast<char>('0' + i / 10);
      pairs[static_cast<std::size_t>(2 * i + 1)] = static_cast<char>('0' + i % 10);
    }
    return pairs;
  }();
  std::uint64_t rest = magnitude % kUnit;
  int at = kDecimals;
  for (; at >= 2; at -= 2) {
    const std::size_t pair = 2 * static_cast<std::size_t>(rest % 100);
    p[at - 2] = kPairs[pair];
    p[at - 1] = kPairs[pair + 1];
    rest /= 100;
  }
  if (at == 1) p[0] = static_cast<char>('0' + rest);
  out.append(text, static_cast<std::size_t>(p + kDecimals - text));
}

std::string describe_errno(int error) { return std::strerror(error); }

}  // namespace

CaptureSetup capture_setup(const RuntimeOptions& options) {
  CaptureSetup s;
  s.config = options.config;
  // A room test's or a learned room's slots are not one number: the capture says null.
  if (!options.room && !options.learned_room) s.slots = options.slots;
  s.origin = options.clock ? options.clock() : detail::monotonic_now();
  s.origin_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  return s;
}

// ---- CaptureWriter ------------------------------------------------------------------------------

CaptureWriter::CaptureWriter(CaptureFiles files, CaptureSetup setup, CaptureErrorHandler on_error)
    : files_(std::move(files)), setup_(std::move(setup)), on_error_(std::move(on_error)) {
  if (files_.path.empty()) throw std::invalid_argument("capture: the path is empty");
  if (files_.files == 0) throw std::invalid_argument("capture: files must be at least 1");
  if (const auto problem = check(setup_.config)) {
    throw std::invalid_argument("capture: " + problem->message);
  }
  buffer_.reserve(2 * kWriteChunk);
  line_.reserve(512);
  rotate();  // keeps an earlier capture at PATH as PATH.1
}

CaptureWriter::~CaptureWriter() {
  flush();
  if (fd_ >= 0) ::close(fd_);
}

void CaptureWriter::append_time(Nanos t) { append_fixed<9>(line_, t - setup_.origin); }

void CaptureWriter::plan(Nanos t, std::string_view participant, std::string_view plan,
                         std::uint32_t shares, std::uint32_t scale) {
  bool found = false;
  for (auto& [name, member] : members_) {
    if (name == participant) {
      member = Member{std::string(plan), shares, scale};
      found = true;
      break;
    }
  }
  if (!found) {
    members_.emplace_back(std::string(participant), Member{std::string(plan), shares, scale});
  }
  line_.clear();
  line_ += R"({"ev": "plan", "t": )"sv;
  append_time(t);
  line_ += R"(, "participant": )"sv;
  append_escaped(line_, participant);
  line_ += R"(, "plan": )"sv;
  append_escaped(line_, plan);
  line_ += R"(, "shares": )"sv;
  append_integer(line_, shares);
  if (scale != kWholePlan) {
    line_ += R"(, "scale": )"sv;
    append_integer(line_, scale);
  }
  line_ += '}';
  line_done(t, false);
}

void CaptureWriter::remove(Nanos t, std::string_view participant) {
  for (auto it = members_.begin(); it != members_.end(); ++it) {
    if (it->first == participant) {
      members_.erase(it);
      break;
    }
  }
  line_.clear();
  line_ += R"({"ev": "remove", "t": )"sv;
  append_time(t);
  line_ += R"(, "participant": )"sv;
  append_escaped(line_, participant);
  line_ += '}';
  line_done(t, false);
}

void CaptureWriter::request(const CaptureRequest& r) {
  line_.clear();
  line_ += R"({"ev": "request", "participant": )"sv;
  append_escaped(line_, r.participant);
  line_ += R"(, "arrive": )"sv;
  append_time(r.arrive);
  line_ += R"(, "dispatch": )"sv;
  append_time(r.dispatch);
  line_ += R"(, "complete": )"sv;
  append_time(r.complete);
  line_ += R"(, "class": ")"sv;
  line_ += kClassNames[r.out];
  line_ += R"(", "cost": )"sv;
  // Six decimals (micro-credits), rounded to the nearest.
  append_fixed<6>(line_, (r.cost_nano + 500) / 1000);
  line_ += '}';
  line_done(r.complete, true);
}

void CaptureWriter::dropped(Nanos t, std::uint64_t requests) {
  line_.clear();
  line_ += R"({"ev": "dropped", "t": )"sv;
  append_time(t);
  line_ += R"(, "requests": )"sv;
  append_integer(line_, requests);
  line_ += '}';
  line_done(t, false);
}

void CaptureWriter::line_done(Nanos t, bool request) {
  line_ += '\n';
  if (fd_ < 0) {
    // Failed before: try a new file a while after the first line that found none.
    if (!retry_at_) {
      retry_at_ = t + kRetryAfter;
    } else if (t >= *retry_at_) {
      retry_at_.reset();
      rotate();
    }
  }
  if (fd_ >= 0 && file_bytes_ > header_bytes_ && file_bytes_ + line_.size() > files_.max_bytes) {
    rotate();
  }
  if (fd_ < 0) {
    std::lock_guard lock(stats_mutex_);
    ++stats_.lost;
    return;
  }
  buffer_ += line_;
  file_bytes_ += line_.size();
  ++buffered_lines_;
  if (request) ++buffered_requests_;
  if (buffer_.size() >= kWriteChunk) write_out();
}

void CaptureWriter::flush() {
  if (fd_ >= 0) write_out();
}

bool CaptureWriter::write_out() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      {
        std::lock_guard lock(stats_mutex_);
        stats_.lost += buffered_lines_;
      }
      buffered_lines_ = 0;
      buffered_requests_ = 0;
      buffer_.clear();
      ::close(fd_);
      fd_ = -1;
      fail("cannot write", error);
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
  if (buffered_lines_ > 0) {
    std::lock_guard lock(stats_mutex_);
    stats_.lines += buffered_lines_;
    stats_.requests += buffered_requests_;
  }
  buffered_lines_ = 0;
  buffered_requests_ = 0;
  reported_ = false;
  return true;
}

void CaptureWriter::rotate() {
  if (fd_ >= 0) {
    write_out();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Shift PATH.{files-2} .. PATH.1 up one and PATH to PATH.1; the oldest beyond `files` goes.
  // A missing file in the chain is no error (fewer files exist than are kept).
  const auto name = [&](std::uint32_t i) {
    return i == 0 ? files_.path : files_.path + "." + std::to_string(i);
  };
  if (files_.files == 1) {
    if (::unlink(files_.path.c_str()) != 0 && errno != ENOENT) {
      fail("cannot remove", errno);
    }
  } else {
    for (std::uint32_t i = files_.files - 1; i-- > 0;) {
      if (::rename(name(i).c_str(), name(i + 1).c_str()) != 0 && errno != ENOENT) {
        fail("cannot rename to " + name(i + 1), errno);
      }
    }
  }
  start_file();
}

void CaptureWriter::start_file() {
  fd_ = ::open(files_.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    fail("cannot open", errno);
    return;
  }
  buffer_.clear();
  buffered_lines_ = 0;
  buffered_requests_ = 0;
  // The header is formatted in its own string: a rotation comes while line_ holds a line.
  std::string header;
  append_header(header);
  header += '\n';
  buffer_ += header;
  header_bytes_ = file_bytes_ = header.size();
  ++buffered_lines_;
  ++file_number_;
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.files;
  }
  write_out();  // the header at once: a file that exists is a file a reader can start
}

void CaptureWriter::append_header(std::string& out) const {
  out += R"({"capture": "creditloop", "version": )"sv;
  append_integer(out, kCaptureVersion);
  out += R"(, "file": )"sv;
  append_integer(out, file_number_);
  out += R"(, "origin_unix_ns": )"sv;
  append_integer(out, setup_.origin_unix_ns);
  out += R"(, "classes": [)"sv;
  for (int c = 0; c < setup_.config.classes; ++c) {
    if (c > 0) out += ", ";
    append_escaped(out, class_name(static_cast<ClassId>(c)));
  }
  out += R"(], "plans": {)"sv;
  bool first_plan = true;
  for (const Plan& p : setup_.config.plans) {
    if (!first_plan) out += ", ";
    first_plan = false;
    append_escaped(out, p.name);
    out += ": {";
    bool first_class = true;
    for (int c = 0; c < setup_.config.classes; ++c) {
      const auto& terms = p.terms[static_cast<std::size_t>(c)];
      if (!terms) continue;
      if (!first_class) out += ", ";
      first_class = false;
      append_escaped(out, class_name(static_cast<ClassId>(c)));
      out += R"(: {"rate": )"sv;
      append_double(out, terms->rate);
      out += R"(, "burst": )"sv;
      append_double(out, terms->burst);
      out += '}';
    }
    out += '}';
  }
  out += R"(}, "server": {"slots": )"sv;
  if (setup_.slots) {
    append_integer(out, *setup_.slots);
  } else {
    out += "null";
  }
  out += R"(}, "participants": [)"sv;
  bool first_member = true;
  for (const auto& [name, member] : members_) {
    if (!first_member) out += ", ";
    first_member = false;
    out += R"({"name": )"sv;
    append_escaped(out, name);
    out += R"(, "plan": )"sv;
    append_escaped(out, member.plan);
    out += R"(, "shares": )"sv;
    append_integer(out, member.shares);
    if (member.scale != kWholePlan) {
      out += R"(, "scale": )"sv;
      append_integer(out, member.scale);
    }
    out += '}';
  }
  out += "]}";
}

void CaptureWriter::fail(const std::string& what, int error) {
  const std::string message = "capture " + files_.path + ": " + what + ": " + describe_errno(error);
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.errors;
    stats_.last_error = message;
  }
  if (reported_) return;
  reported_ = true;
  if (on_error_) {
    on_error_(message);
  } else {
    std::fprintf(stderr, "creditloop: %s (later errors are only counted)\n", message.c_str());
  }
}

CaptureStats CaptureWriter::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

// ---- CaptureObserver ----------------------------------------------------------------------------

namespace {
std::uint64_t key_of(std::uint32_t place, std::uint32_t generation) noexcept {
  return (std::uint64_t{place} << 32) | generation;
}
}  // namespace

CaptureObserver::CaptureObserver(CaptureOptions options) : options_(std::move(options)) {
  ring_ = std::make_unique<Ring>(options_.ring_records);
  tickets_.resize(std::max<std::size_t>(options_.expected_in_flight, 1));
  places_.resize(std::max<std::size_t>(options_.expected_participants, 1));
  writer_ = std::make_unique<CaptureWriter>(options_.files, options_.setup, options_.on_error);
  thread_ = std::thread([this] { write_loop(); });
}

CaptureObserver::~CaptureObserver() { close(); }

void CaptureObserver::close() {
  std::call_once(closed_, [this] {
    {
      std::lock_guard lock(wake_mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
    // The runtime has stopped calling (see close()'s contract): what it could not hand over is
    // ours to report. Its last writes are ordered before this by the runtime's own shutdown.
    const std::uint64_t lost = unreported_drops_ + lost_unknown_;
    unreported_drops_ = 0;
    lost_unknown_ = 0;
    if (lost > 0) writer_->dropped(last_now_, lost);
    writer_->flush();
  });
}

CaptureStats CaptureObserver::stats() const {
  CaptureStats s = writer_->stats();
  // relaxed: a counter read for display; the dispatcher is its only writer.
  s.dropped = dropped_.load(std::memory_order_relaxed);
  return s;
}

bool CaptureObserver::push(const detail::CaptureRecord& record, bool control) {
  // Requests leave room for the rare plan and remove records, which the writer needs to name
  // the requests that follow.
  const std::size_t keep_free = control ? 0 : std::min<std::size_t>(ring_->capacity() / 8, 64);
  if (unreported_drops_ > 0) {
    detail::CaptureRecord d;
    d.kind = detail::CaptureRecord::Kind::dropped;
    d.t = last_now_;
    d.amount = static_cast<std::int64_t>(unreported_drops_);
    if (ring_->try_push(d, keep_free)) unreported_drops_ = 0;
  }
  if (unreported_drops_ == 0 && ring_->try_push(record, keep_free)) return true;
  ++unreported_drops_;
  // relaxed: a counter for stats(); this thread is its only writer, so load and store suffice.
  dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return false;
}

void CaptureObserver::on_add(ParticipantId p, std::string_view name, PlanId plan,
                             std::uint32_t shares, Nanos now) {
  seen(now);
  if (p.place >= places_.size())
    places_.resize(std::max<std::size_t>(p.place + 1, places_.size() * 2));
  places_[p.place] = Place{p.generation, 0};
  detail::CaptureRecord r;
  r.kind = detail::CaptureRecord::Kind::plan;
  r.place = p.place;
  r.generation = p.generation;
  r.plan = plan;
  r.shares = shares;
  r.t = now;
  r.name = new std::string(name);  // add may allocate; the writer deletes it
  if (!push(r, true)) delete r.name;
}

void CaptureObserver::on_remove(ParticipantId p) {
  // The core's remove takes no instant: the dispatcher's latest is when it happened.
  detail::CaptureRecord r;
  r.kind = detail::CaptureRecord::Kind::remove;
  r.place = p.place;
  r.generation = p.generation;
  r.t = last_now_;
  if (p.place < places_.size() && places_[p.place].generation == p.generation) {
    r.amount = static_cast<std::int64_t>(places_[p.place].in_flight);
    places_[p.place] = Place{};
  }
  push(r, true);
}

void CaptureObserver::on_replan(ParticipantId p, PlanId plan, std::uint32_t shares, Nanos now) {
  seen(now);
  detail::CaptureRecord r;
  r.kind = detail::CaptureRecord::Kind::plan;
  r.place = p.place;
  r.generation = p.generation;
  r.plan = plan;
  r.shares = shares;
  r.t = now;
  push(r, true);
}

void CaptureObserver::on_scale(ParticipantId p, std::uint32_t millionths, Nanos now) {
  seen(now);
  detail::CaptureRecord r;
  r.kind = detail::CaptureRecord::Kind::scale;
  r.place = p.place;
  r.generation = p.generation;
  r.amount = millionths;
  r.t = now;
  push(r, true);
}

void CaptureObserver::on_submit(ParticipantId, const RequestHook&, Nanos now) { seen(now); }
void CaptureObserver::on_begin_turn(std::optional<ClassId>, Nanos now) { seen(now); }
void CaptureObserver::on_dispatch(std::size_t, std::size_t, Nanos now) { seen(now); }

void CaptureObserver::on_visit(const Decision* dispatch, Ticket ticket, Nanos now) {
  seen(now);
  if (dispatch == nullptr) return;
  if (ticket.index >= tickets_.size()) {  // more in flight than ever: grow, as the runtime does
    tickets_.resize(std::max<std::size_t>(ticket.index + 1, tickets_.size() * 2));
  }
  TicketEntry& e = tickets_[ticket.index];
  e.generation = ticket.generation;
  e.arrive = dispatch->request->queued_at;
  e.dispatch = now;
  e.participant = dispatch->participant;
  e.out = dispatch->out;
  const std::uint32_t place = dispatch->participant.place;
  if (place < places_.size() && places_[place].generation == dispatch->participant.generation) {
    ++places_[place].in_flight;
  }
}

void CaptureObserver::on_complete(Ticket ticket, std::int64_t cost_nano, Nanos now) {
  seen(now);
  if (ticket.index >= tickets_.size()) return;
  TicketEntry& e = tickets_[ticket.index];
  if (e.generation != ticket.generation) return;  // dispatched before the capture began
  e.generation = 0;
  const std::uint32_t place = e.participant.place;
  if (place < places_.size() && places_[place].generation == e.participant.generation) {
    --places_[place].in_flight;
  }
  detail::CaptureRecord r;
  r.kind = detail::CaptureRecord::Kind::request;
  r.out = e.out;
  r.place = place;
  r.generation = e.participant.generation;
  r.t = now;
  r.arrive = e.arrive;
  r.dispatch = e.dispatch;
  r.amount = cost_nano;
  push(r, false);
}

void CaptureObserver::write_loop() {
  for (;;) {
    const std::size_t taken = write_some();
    writer_->flush();
    std::unique_lock lock(wake_mutex_);
    if (stopping_) {
      lock.unlock();
      while (write_some() > 0) continue;  // what was handed over before the stop
      writer_->flush();
      return;
    }
    // A ring more than half full is drained again at once; otherwise the writer waits a while,
    // so that it writes in batches and costs nothing when idle.
    if (taken < ring_->capacity() / 2) {
      wake_.wait_for(lock, options_.idle_poll, [this] { return stopping_; });
    }
  }
}

std::size_t CaptureObserver::write_some() {
  return ring_->drain([this](const detail::CaptureRecord& r) { write(r); }, ring_->capacity());
}

void CaptureObserver::write(const detail::CaptureRecord& r) {
  using Kind = detail::CaptureRecord::Kind;
  const std::uint64_t key = key_of(r.place, r.generation);
  const Config& config = options_.setup.config;
  const auto plan_name = [&](PlanId id) -> std::string_view {
    return id < config.plans.size() ? std::string_view(config.plans[id].name) : "?";
  };
  switch (r.kind) {
    case Kind::plan:
    case Kind::scale: {
      if (r.name != nullptr) {  // an add: every participant starts with the whole plan
        known_[key] = Known{std::move(*r.name), r.plan, r.shares, kWholePlan, 0};
        delete r.name;
      }
      const auto it = known_.find(key);
      if (it == known_.end()) {  // its add was dropped: nothing to name it by
        ++lost_unknown_;
        return;
      }
      Known& k = it->second;
      if (r.kind == Kind::scale) {
        k.scale = static_cast<std::uint32_t>(r.amount);
      } else {  // a re-plan keeps the fraction
        k.plan = r.plan;
        k.shares = r.shares;
      }
      writer_->plan(r.t, k.name, plan_name(k.plan), k.shares, k.scale);
      return;
    }
    case Kind::remove: {
      const auto it = known_.find(key);
      if (it == known_.end()) {
        ++lost_unknown_;
        return;
      }
      writer_->remove(r.t, it->second.name);
      // Kept while its requests in flight are still to come, to name them. A request record
      // dropped on the way leaves the name here until the capture closes.
      if (r.amount == 0) {
        known_.erase(it);
      } else {
        it->second.outstanding = static_cast<std::uint64_t>(r.amount);
      }
      return;
    }
    case Kind::request: {
      const auto it = known_.find(key);
      if (it == known_.end()) {
        ++lost_unknown_;
        return;
      }
      writer_->request(CaptureRequest{it->second.name, r.arrive, r.dispatch, r.t, r.out, r.amount});
      if (it->second.outstanding > 0 && --it->second.outstanding == 0) known_.erase(it);
      return;
    }
    case Kind::dropped: {
      const std::uint64_t lost = static_cast<std::uint64_t>(r.amount) + lost_unknown_;
      lost_unknown_ = 0;
      writer_->dropped(r.t, lost);
      return;
    }
  }
}

}  // namespace creditloop
