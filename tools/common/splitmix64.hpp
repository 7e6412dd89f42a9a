#pragma once
// splitmix64, the one generator behind the stress run's seeds and the fleet simulator's streams:
// its whole state is one word, so a stream's draws depend on nothing but its own seed.

#include <cstdint>

namespace creditloop::tools {

/// The state's step between draws.
inline constexpr std::uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15ULL;

/// The draw that follows `state`: `state` stepped once, then mixed.
[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t state) noexcept {
  std::uint64_t z = state + kSplitmix64Gamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Draws from a stream: returns splitmix64(state) and steps `state` past it.
[[nodiscard]] constexpr std::uint64_t splitmix64_next(std::uint64_t& state) noexcept {
  const std::uint64_t z = splitmix64(state);
  state += kSplitmix64Gamma;
  return z;
}

}  // namespace creditloop::tools
