#include "creditloop/detail/issuer.hpp"

#include <atomic>

namespace creditloop::detail {

std::uint32_t next_issuer() noexcept {
  static std::atomic<std::uint32_t> last{0};
  // relaxed: the counter pairs with nothing; only the values' uniqueness matters, which the
  // atomic read-modify-write gives in any order.
  std::uint32_t id = last.fetch_add(1, std::memory_order_relaxed) + 1;
  // Only a wrapped counter gives 0; the next value is then as fresh as any.
  if (id == 0) id = last.fetch_add(1, std::memory_order_relaxed) + 1;
  return id;
}

}  // namespace creditloop::detail
