// WeightArena, the memory the model runner copies its weights into: aligned, zeroed, chunks on
// 2 MiB boundaries, big tensors in chunks of their own, and clear errors (no crash) for sizes
// the address space cannot hold.
#include "../lib/model/weight_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace hybridgen::rt::model {
namespace {

uintptr_t addr(void *p) { return reinterpret_cast<uintptr_t>(p); }

TEST(WeightArena, AllocationsAreAlignedZeroedAndDisjoint) {
  WeightArena arena;
  Result<void *> a = arena.allocate(3), b = arena.allocate(1000), z = arena.allocate(0);
  ASSERT_TRUE(a && b && z);
  for (void *p : {*a, *b, *z})
    EXPECT_EQ(addr(p) % WeightArena::kAlign, 0u);
  // The first chunk starts on a huge page boundary; each allocation is rounded to a cache line.
  EXPECT_EQ(addr(*a) % WeightArena::kHugePage, 0u);
  EXPECT_EQ(addr(*b), addr(*a) + 64);
  EXPECT_EQ(addr(*z), addr(*b) + 1024);
  const auto *bytes = static_cast<const unsigned char *>(*b);
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(bytes[i], 0);
  std::memset(*a, 0xff, 3);  // writable, and writing one leaves the next alone
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(arena.usedBytes(), 64u + 1024u + 64u);
  EXPECT_EQ(arena.mappedBytes(), WeightArena::kChunk);
}

TEST(WeightArena, ATensorLargerThanAChunkGetsItsOwnAndSmallOnesGoOn) {
  WeightArena arena;
  const size_t big = WeightArena::kChunk + 12345;
  Result<void *> small = arena.allocate(100), large = arena.allocate(big),
                 after = arena.allocate(100);
  ASSERT_TRUE(small && large && after);
  EXPECT_EQ(addr(*large) % WeightArena::kHugePage, 0u);
  // Touch both ends of the big one: the whole of it is mapped.
  static_cast<char *>(*large)[0] = 1;
  static_cast<char *>(*large)[big - 1] = 2;
  EXPECT_GE(arena.mappedBytes(), WeightArena::kChunk + big);
  EXPECT_EQ(arena.usedBytes(), 128u + (big + 63) / 64 * 64 + 128u);
}

TEST(WeightArena, ImpossibleSizesAreErrorsNotCrashes) {
  WeightArena arena;
  Result<void *> overflow = arena.allocate(SIZE_MAX - 10);
  ASSERT_FALSE(overflow);
  EXPECT_NE(overflow.status().message().find("overflow"), std::string::npos)
      << overflow.status().message();
  // More than any x86-64 address space (47 bits of user space): mmap refuses it.
  Result<void *> huge = arena.allocate(size_t(1) << 62);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.status().code(), ErrorCode::kExhausted);
  EXPECT_NE(huge.status().message().find("mmap"), std::string::npos) << huge.status().message();
  // The arena still works afterwards.
  EXPECT_TRUE(arena.allocate(64));
}

} // namespace
} // namespace hybridgen::rt::model
