// detail::PlaceStore: records that never move while the store grows, through its first chunk
// record by record and from single chunks into huge-page slabs, each record a header followed by
// its buckets.
#include "creditloop/detail/place_store.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace creditloop::detail {
namespace {

struct alignas(64) Header {
  std::uint64_t tag = 7;
  std::uint64_t pad[7] = {};
};
struct alignas(64) Bucket {
  std::uint64_t value = 11;
  std::uint64_t pad[7] = {};
};
using Store = PlaceStore<Header, Bucket>;

constexpr std::size_t kSlabStart = Store::kSmallChunks * Store::kChunk;

TEST(PlaceStore, TheFirstChunkIsConstructedAsTheStoreReachesIt) {
  Store store(3);
  store.grow_to(1);
  EXPECT_EQ(store.capacity(), 1u);
  store.header(0).tag = 100;
  store.bucket(0, 2).value = 300;
  const Header* first = &store.header(0);
  store.grow_to(64);
  EXPECT_EQ(store.capacity(), 64u);
  store.grow_to(Store::kChunk - 1);
  EXPECT_EQ(store.capacity(), Store::kChunk - 1);
  EXPECT_EQ(&store.header(0), first);
  EXPECT_EQ(store.header(0).tag, 100u);
  EXPECT_EQ(store.bucket(0, 2).value, 300u);
  for (std::uint32_t p = 1; p < Store::kChunk - 1; ++p) {
    ASSERT_EQ(store.header(p).tag, 7u) << "place " << p << " not constructed";
    ASSERT_EQ(store.bucket(p, 2).value, 11u) << "place " << p;
  }
  store.grow_to(Store::kChunk + 1);  // the rest of the first chunk, and a second one
  EXPECT_EQ(store.capacity(), 2 * Store::kChunk);
  EXPECT_EQ(store.header(Store::kChunk - 1).tag, 7u);
}

TEST(PlaceStore, GrowingIntoSlabsKeepsEveryRecordInPlace) {
  Store store(3);
  store.grow_to(Store::kChunk);
  std::vector<const Header*> where;
  for (std::uint32_t p = 0; p < Store::kChunk; ++p) {
    store.header(p).tag = p;
    store.bucket(p, 2).value = p * 3;
    where.push_back(&store.header(p));
  }
  // Past the small chunks: one slab of several chunks at once.
  store.grow_to(kSlabStart + 1);
  for (std::uint32_t p = 0; p < Store::kChunk; ++p) {
    ASSERT_EQ(&store.header(p), where[p]) << "place " << p << " moved";
    ASSERT_EQ(store.header(p).tag, p);
    ASSERT_EQ(store.bucket(p, 2).value, p * 3);
  }
  const std::size_t grown = kSlabStart + Store::kSlabChunks * Store::kChunk;
  for (std::size_t p = kSlabStart; p < grown; ++p) {
    const auto place = static_cast<std::uint32_t>(p);
    ASSERT_EQ(store.header(place).tag, 7u) << "place " << p << " not constructed";
    ASSERT_EQ(store.bucket(place, 0).value, 11u);
    ASSERT_EQ(store.bucket(place, 2).value, 11u);
  }
}

TEST(PlaceStore, SlabsStartOnAHugePageAndBucketsFollowTheirHeader) {
  Store store(2);
  store.grow_to(kSlabStart + 1);
  const auto first = static_cast<std::uint32_t>(kSlabStart);
  const auto address = reinterpret_cast<std::uintptr_t>(&store.header(first));
  EXPECT_EQ(address % Store::kHugePage, 0u);
  Header& h = store.header(first + 5);
  EXPECT_EQ(Store::buckets_after(h), &store.bucket(first + 5, 0));
  EXPECT_EQ(Store::buckets_after(h) + 1, &store.bucket(first + 5, 1));
  // Consecutive places are consecutive records: a turn walks memory forwards.
  EXPECT_EQ(
      reinterpret_cast<std::byte*>(&store.header(first + 6)) - reinterpret_cast<std::byte*>(&h),
      static_cast<std::ptrdiff_t>(3 * 64));
}

}  // namespace
}  // namespace creditloop::detail
