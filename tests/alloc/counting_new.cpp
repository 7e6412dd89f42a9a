#include "alloc/counting_new.hpp"

#include <cstdlib>
#include <new>

namespace creditloop::test {

std::atomic<long> g_allocations{0};
std::atomic<bool> g_counting{false};
thread_local bool t_refusing = false;
thread_local bool t_on_dispatcher = false;
std::atomic<bool> g_refusing_dispatcher{false};

}  // namespace creditloop::test

namespace {
bool refusing() {
  using creditloop::test::g_refusing_dispatcher;
  using creditloop::test::t_on_dispatcher;
  using creditloop::test::t_refusing;
  // relaxed: a switch, pairing with nothing; the test learns what the dispatcher did under it
  // through the sink's counter and the snapshot's round trip, which order it themselves.
  return t_refusing || (t_on_dispatcher && g_refusing_dispatcher.load(std::memory_order_relaxed));
}
}  // namespace

using creditloop::test::g_allocations;
using creditloop::test::g_counting;

// GCC inlines these into callers and then sees malloc'd memory freed by a replaced operator
// delete, warning of a mismatch that is not one: both halves of the pair are replaced here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (refusing()) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// The worker pool's queue allocates its blocks here (runtime/worker_pool.cpp).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// Over-aligned types (the core's records, the runtime's cache-line structures) come here.
void* operator new(std::size_t n, std::align_val_t align) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (refusing()) throw std::bad_alloc();
  const auto a = static_cast<std::size_t>(align);
  // aligned_alloc wants a size that is a multiple of the alignment.
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
