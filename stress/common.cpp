#include "common.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace creditloop::stress {
namespace {

std::uint64_t g_seed = 0;
std::string g_rerun;
std::atomic<bool> g_failing{false};

}  // namespace

void set_identity(std::uint64_t seed, std::string rerun_command) {
  g_seed = seed;
  g_rerun = std::move(rerun_command);
}

std::uint64_t run_seed() noexcept { return g_seed; }

namespace {

void report(const char* check, const std::string& what) {
  // Several threads can trip over one fault; the first report is the one that explains it, and
  // the others wait here for the process to end.
  if (g_failing.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fflush(stdout);
  std::fprintf(stderr,
               "\ncreditloop-stress: FAIL [%s]: %s\n  seed: 0x%016" PRIx64 "\n  rerun: %s\n", check,
               what.c_str(), g_seed, g_rerun.c_str());
  std::fflush(stderr);
}

}  // namespace

void fail(const char* check, const std::string& what) {
  report(check, what);
  std::_Exit(1);
}

void stall(const char* check, const std::string& what) {
  report(check, what);
  std::abort();
}

std::string str(Balance v) { return creditloop::to_decimal(v); }

std::string str(ParticipantId p) {
  return "{" + std::to_string(p.place) + "," + std::to_string(p.generation) + "}";
}

std::string str(Ticket t) {
  return "{" + std::to_string(t.index) + "," + std::to_string(t.generation) + "}";
}

std::string class_str(ClassId c) { return "P" + std::to_string(static_cast<unsigned>(c) + 1); }

std::string errc_str(creditloop::Errc e) { return std::string(creditloop::name(e)); }

std::string status_str(creditloop::Status s) { return s.ok() ? "ok" : errc_str(s.error()); }

std::string who(std::uint32_t name, ParticipantId p) {
  return participant_name(name) + " " + str(p);
}

std::string req_str(const Req& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "request 0x%" PRIx64 " (producer %u, its submission %" PRIu64 ")",
                r.id, r.producer, r.seq);
  return buf;
}

std::string participant_name(std::uint32_t index) { return "u" + std::to_string(index); }

bool parse_participant_name(std::string_view name, std::uint32_t& index) noexcept {
  if (name.size() < 2 || name.size() > 11 || name[0] != 'u') return false;
  std::uint64_t v = 0;
  for (const char c : name.substr(1)) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > 0xffffffffULL) return false;
  index = static_cast<std::uint32_t>(v);
  return true;
}

}  // namespace creditloop::stress
