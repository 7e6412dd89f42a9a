// detail::NameIndex against std::unordered_map under seeded random inserts and erases, with a
// good hash and with hashes that pile names onto a few home entries, including runs that wrap
// from the table's end to its start (where backward-shift removal is easiest to get wrong).
#include "creditloop/detail/name_index.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace creditloop::detail {
namespace {

// Every name hashes to 15: with the smallest table (16 entries) a run starts at its last entry
// and wraps to the first.
struct AllAtTheEnd {
  std::size_t operator()(std::string_view) const noexcept { return 15; }
};
// Eight home entries for every name: long runs that interleave.
struct EightHomes {
  std::size_t operator()(std::string_view name) const noexcept {
    return std::hash<std::string_view>{}(name) % 8;
  }
};

// Names by place, as the core keeps them; the index under test; and the expected mapping.
template <class Hash>
class Harness {
 public:
  explicit Harness(std::size_t places) : names_(places) {}

  void insert(const std::string& name, std::uint32_t place) {
    names_[place] = name;
    index_.make_room_for_one();
    index_.insert(Index::hash_of(name), place);
    expected_[name] = place;
  }
  // Returns the place the name had.
  std::uint32_t erase(const std::string& name) {
    const std::uint32_t place = expected_.at(name);
    index_.erase(Index::hash_of(name), place);
    names_[place] = "reused " + name;  // erase must not have needed the old name afterwards
    expected_.erase(name);
    return place;
  }
  void expect_consistent(const std::vector<std::string>& probes) const {
    ASSERT_EQ(index_.size(), expected_.size());
    for (const std::string& name : probes) {
      const auto it = expected_.find(name);
      const std::uint32_t want = it == expected_.end() ? Index::npos : it->second;
      ASSERT_EQ(index_.find(name, Index::hash_of(name), name_of()), want) << name;
    }
  }
  [[nodiscard]] bool contains(const std::string& name) const { return expected_.contains(name); }

 private:
  auto name_of() const {
    return [this](std::uint32_t place) -> std::string_view { return names_[place]; };
  }
  using Index = BasicNameIndex<Hash>;
  std::vector<std::string> names_;
  Index index_;
  std::unordered_map<std::string, std::uint32_t> expected_;
};

// Seeded random inserts and erases over `universe` names; every `check_every` operations, every
// name of the universe is looked up.
template <class Hash>
void random_against_map(std::uint64_t seed, std::size_t universe, int operations, int check_every) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < universe; ++i) names.push_back("tenant-" + std::to_string(i));
  Harness<Hash> h(universe);
  std::vector<std::uint32_t> free_places;
  for (std::size_t i = 0; i < universe; ++i) {
    free_places.push_back(static_cast<std::uint32_t>(universe - 1 - i));
  }
  for (int op = 0; op < operations; ++op) {
    const std::string& name = names[rng() % universe];
    if (h.contains(name)) {
      // Places are reused last freed first, as the core reuses them.
      free_places.push_back(h.erase(name));
    } else {
      ASSERT_FALSE(free_places.empty());
      const std::uint32_t place = free_places.back();
      free_places.pop_back();
      h.insert(name, place);
    }
    if (op % check_every == 0) {
      ASSERT_NO_FATAL_FAILURE(h.expect_consistent(names));
    }
  }
  ASSERT_NO_FATAL_FAILURE(h.expect_consistent(names));
}

TEST(NameIndex, EmptyIndexFindsNothing) {
  Harness<std::hash<std::string_view>> h(1);
  h.expect_consistent({"", "a", "tenant-0"});
}

TEST(NameIndex, RandomInsertsAndErasesAgreeWithAMap) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    random_against_map<std::hash<std::string_view>>(seed, 5000, 40000, 997);
  }
}

TEST(NameIndex, CollidingHomesAgreeWithAMap) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    random_against_map<EightHomes>(seed, 300, 6000, 7);
  }
}

TEST(NameIndex, RunsThatWrapAroundTheTableSurviveEveryEraseOrder) {
  // Up to 12 names fit the first table; all start at its last entry and wrap.
  for (int erase_first = 0; erase_first < 12; ++erase_first) {
    Harness<AllAtTheEnd> h(12);
    std::vector<std::string> names;
    for (int i = 0; i < 12; ++i) {
      names.push_back("n" + std::to_string(i));
      h.insert(names.back(), static_cast<std::uint32_t>(i));
    }
    h.erase(names[static_cast<std::size_t>(erase_first)]);
    ASSERT_NO_FATAL_FAILURE(h.expect_consistent(names));
    // Then the rest, from the back, checking after each.
    for (int i = 11; i >= 0; --i) {
      if (i == erase_first) continue;
      h.erase(names[static_cast<std::size_t>(i)]);
      ASSERT_NO_FATAL_FAILURE(h.expect_consistent(names));
    }
  }
}

TEST(NameIndex, GrowingKeepsEveryName) {
  Harness<std::hash<std::string_view>> h(100000);
  std::vector<std::string> names;
  for (std::uint32_t i = 0; i < 100000; ++i) {
    names.push_back("p" + std::to_string(i));
    h.insert(names.back(), i);
  }
  names.push_back("absent");
  h.expect_consistent(names);
}

TEST(NameIndex, ReserveHoldsThatManyWithoutGrowing) {
  NameIndex index;
  index.reserve(1000);
  const std::size_t reserved = index.capacity();
  EXPECT_GE(reserved, 1000u);
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) names.push_back("x" + std::to_string(i));
  const auto name_of = [&](std::uint32_t place) -> std::string_view { return names[place]; };
  for (std::uint32_t i = 0; i < 1000; ++i) {
    index.make_room_for_one();
    index.insert(NameIndex::hash_of(names[i]), i);
  }
  EXPECT_EQ(index.capacity(), reserved);
  for (std::uint32_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(index.find(names[i], NameIndex::hash_of(names[i]), name_of), i);
  }
}

}  // namespace
}  // namespace creditloop::detail
