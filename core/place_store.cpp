#include "creditloop/detail/place_store.hpp"

#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace creditloop::detail {

std::byte* allocate_records(std::size_t bytes, std::size_t align, bool huge) {
  auto* p = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{align}));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // The core's only call outside the standard library, and only where it exists. A hint: where
  // transparent huge pages are off or refused, the records work the same on small pages, only with
  // more TLB misses.
  if (huge) (void)::madvise(p, bytes, MADV_HUGEPAGE);
#else
  (void)huge;
#endif
  return p;
}

void free_records(std::byte* p, std::size_t align) noexcept {
  ::operator delete (p, std::align_val_t{align});
}

}  // namespace creditloop::detail
