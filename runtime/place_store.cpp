#include "creditloop/detail/place_store.hpp"

#include <sys/mman.h>

#include <new>

namespace creditloop::detail {

std::byte* allocate_records(std::size_t bytes, std::size_t align, bool huge) {
  auto* p = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{align}));
#ifdef MADV_HUGEPAGE
  // A hint: where transparent huge pages are off or refused, the records work the same on small
  // pages, only with more TLB misses.
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
