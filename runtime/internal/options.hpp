// runtime/internal/options.hpp: what the constructor checks before it starts a thread, and where
// the runtime's threads run (CPU placement, names, CPU time). Internal to the runtime.
#pragma once

#include <string>

#include "creditloop/runtime.hpp"
#include "creditloop/units.hpp"

namespace creditloop::detail {

/// Throws std::invalid_argument naming the first option that cannot work.
void check_options(const RuntimeOptions& options);

/// The inboxes hold a request's address in 48 bits (inbox.hpp). Where this process's pointers
/// carry a tag above bit 47 (AArch64 MTE or HWASan tag heap and stack pointers; x86 LAM
/// pointers may be tagged too), submit would refuse every request: throws std::runtime_error
/// once, here, saying why. `heap` is the runtime's own allocation, made like the embedder's
/// requests usually are.
void check_addresses(const void* heap);

/// How many CPUs this process may run on, or 0 if the kernel does not say.
unsigned usable_cpus() noexcept;

/// Names the calling thread (at most 15 characters are kept; empty: unnamed) and pins it to `cpu`
/// (negative: not pinned; check_options() made sure the process may run there).
void place_this_thread(const std::string& name, int cpu);

/// CPU time of the calling thread.
Nanos thread_cpu_now() noexcept;

}  // namespace creditloop::detail
