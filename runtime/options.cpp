// The runtime's option checks and CPU placement (internal/options.hpp).
#include "internal/options.hpp"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "internal/runtime_impl.hpp"

namespace creditloop::detail {
namespace {

// The CPUs this process may run on, or nothing if the kernel does not say.
std::optional<cpu_set_t> allowed_cpus() noexcept {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return std::nullopt;
  return allowed;
}

}  // namespace

unsigned usable_cpus() noexcept {
  const std::optional<cpu_set_t> allowed = allowed_cpus();
  return allowed ? static_cast<unsigned>(CPU_COUNT(&*allowed)) : 0;
}

Nanos thread_cpu_now() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<Nanos>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void check_options(const RuntimeOptions& o) {
  if (o.room == nullptr && !o.learned_room && o.slots == 0) {
    throw std::invalid_argument("runtime options: slots must be at least 1 without a room test");
  }
  if (o.learned_room) {
    if (o.room != nullptr) {
      throw std::invalid_argument(
          "runtime options: a learned room and a room test exclude each other");
    }
    if (o.learned_room->least == 0) {
      throw std::invalid_argument("runtime options: learned_room.least must be at least 1");
    }
    if (o.learned_room->least > o.learned_room->most) {
      throw std::invalid_argument(
          "runtime options: learned_room.least (" + std::to_string(o.learned_room->least) +
          ") is above learned_room.most (" + std::to_string(o.learned_room->most) + ")");
    }
  }
  if (o.workers > 0 && o.handler == nullptr) {
    throw std::invalid_argument("runtime options: workers need a handler");
  }
  if (o.workers == 0 && o.sink == nullptr) {
    throw std::invalid_argument("runtime options: a sink callback or workers with a handler");
  }
  if (o.batch == 0) throw std::invalid_argument("runtime options: batch must be at least 1");
  if (o.room_recheck.count() <= 0) {
    throw std::invalid_argument("runtime options: room_recheck must be at least 1 ns");
  }
  if (o.spin && o.spin->count() < 0)
    throw std::invalid_argument("runtime options: spin must not be negative");
  if (o.cpu >= 0) {
    const std::optional<cpu_set_t> allowed = o.cpu < CPU_SETSIZE ? allowed_cpus() : std::nullopt;
    if (!allowed || !CPU_ISSET(o.cpu, &*allowed)) {
      throw std::invalid_argument("runtime options: cpu " + std::to_string(o.cpu) +
                                  " is not available to this process");
    }
  }
}

void check_addresses(const void* heap) {
  const int on_stack = 0;
  using Queue = RuntimeMailbox::Queue;
  if (!Queue::packable(heap) || !Queue::packable(&on_stack)) {
    throw std::runtime_error(
        "runtime: this process's pointers have bits above bit 47 set (a pointer tag: AArch64 MTE "
        "or HWASan, or x86 LAM; or addresses above 2^48), and the runtime's inboxes hold 48-bit "
        "addresses: run without pointer tagging");
  }
}

void place_this_thread(const std::string& name, int cpu) {
  if (!name.empty()) {
    const std::string kept = name.substr(0, 15);
    pthread_setname_np(pthread_self(), kept.c_str());
  }
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // checked in check_options()
  }
}

}  // namespace creditloop::detail
