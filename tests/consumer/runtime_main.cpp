// Proves an installed creditloop::runtime is usable: a runtime whose sink completes each request
// at once; one submission goes through dispatch and completion before shutdown returns.
#include <creditloop/runtime.hpp>

#include <atomic>
#include <cstdio>

int main() {
  std::atomic<int> dispatched{0};
  creditloop::Runtime* self = nullptr;
  creditloop::RuntimeOptions options;
  options.config = creditloop::reference_config();
  options.slots = 1;
  options.sink = [&](const creditloop::Decision& d) {
    dispatched.fetch_add(1, std::memory_order_relaxed);  // read after shutdown() joined
    if (!self->complete(d.ticket, 0.25)) std::puts("complete refused");
  };
  creditloop::Runtime runtime(std::move(options));
  self = &runtime;
  auto alice = runtime.add("alice", "pro", 1);
  if (!alice) return 1;
  creditloop::RequestHook request;
  if (!runtime.submit(*alice, request)) return 2;
  const creditloop::RequestList left = runtime.shutdown(creditloop::ShutdownMode::drain);
  if (!left.empty() || dispatched.load(std::memory_order_relaxed) != 1) return 3;
  const creditloop::RuntimeSnapshot totals = runtime.snapshot();
  if (totals.completed != 1) return 4;
  std::puts("runtime consumer ok");
  return 0;
}
