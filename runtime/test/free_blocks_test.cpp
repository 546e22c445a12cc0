// Tests for FreeBlocks: runs of consecutive ids per sequence, every block usable when the tier
// fills, and the lazy stacks' bookkeeping.
#include "hybridgen/runtime/free_blocks.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

using hybridgen::rt::FreeBlocks;

namespace {

constexpr int32_t R = FreeBlocks::kAllocRunBlocks;

/// Each sequence takes one block in turn, |rounds| times; returns the blocks of each.
std::vector<std::vector<int32_t>> lockstep(FreeBlocks &fb, int sequences, int rounds) {
  std::vector<std::vector<int32_t>> blocks(static_cast<size_t>(sequences));
  for (int r = 0; r < rounds; ++r)
    for (auto &seq : blocks) {
      int32_t b = fb.take(seq.empty() ? -1 : seq.back());
      EXPECT_GE(b, 0);
      seq.push_back(b);
    }
  return blocks;
}

TEST(FreeBlocks, LockstepSequencesGetRunsOfConsecutiveIds) {
  FreeBlocks fb(100, 1000);
  auto blocks = lockstep(fb, 8, 40);
  std::set<int32_t> seen;
  for (const auto &seq : blocks) {
    for (size_t i = 0; i < seq.size(); ++i) {
      EXPECT_TRUE(seen.insert(seq[i]).second) << "block " << seq[i] << " handed out twice";
      EXPECT_GE(seq[i], 100);
      EXPECT_LT(seq[i], 1100);
      // A run starts at an aligned id and continues by one; a sequence jumps only between runs.
      if (i % R == 0)
        EXPECT_EQ((seq[i] - 100) % R, 0) << "block " << i << " of a sequence starts no run";
      else
        EXPECT_EQ(seq[i], seq[i - 1] + 1);
    }
  }
  EXPECT_EQ(fb.size(), 1000 - 8 * 40);
  // The batch spans its blocks rounded up to runs: 8 x 48 ids, no more.
  EXPECT_LT(*seen.rbegin(), 100 + 8 * 48);
}

TEST(FreeBlocks, EveryBlockIsUsableWhenNoWholeRunIsLeft) {
  FreeBlocks fb(0, 2 * R + 5); // two whole runs and a short last one (a run of its own)
  auto blocks = lockstep(fb, 5, 1);
  EXPECT_EQ(blocks[0][0], 0);
  EXPECT_EQ(blocks[1][0], R);
  EXPECT_EQ(blocks[2][0], 2 * R);
  EXPECT_EQ(blocks[3][0], 1); // no whole run left: the lowest free ids
  EXPECT_EQ(blocks[4][0], 2);
  std::set<int32_t> all;
  for (auto &seq : blocks)
    all.insert(seq[0]);
  while (!fb.empty()) {
    int32_t b = fb.take(-1);
    ASSERT_GE(b, 0);
    EXPECT_TRUE(all.insert(b).second);
  }
  EXPECT_EQ(all.size(), size_t(2 * R + 5));
  EXPECT_EQ(fb.take(-1), -1);
  EXPECT_EQ(fb.take(3), -1);
}

TEST(FreeBlocks, ReleasedRunsAreWholeAgainAndLowestIdsComeFirst) {
  FreeBlocks fb(7, 4 * R);
  auto blocks = lockstep(fb, 2, R + 1); // runs 0 and 1 full, runs 2 and 3 begun
  for (auto &seq : blocks)
    for (int32_t b : seq)
      fb.release(b);
  EXPECT_EQ(fb.size(), 4 * R);
  for (int32_t id = 7; id < 7 + 4 * R; ++id)
    EXPECT_TRUE(fb.contains(id));
  EXPECT_FALSE(fb.contains(6));
  EXPECT_FALSE(fb.contains(7 + 4 * R));
  // A fresh batch again starts at aligned runs, each wholly its own.
  auto again = lockstep(fb, 4, 2);
  std::set<int32_t> starts;
  for (auto &seq : again) {
    EXPECT_EQ((seq[0] - 7) % R, 0);
    EXPECT_EQ(seq[1], seq[0] + 1);
    starts.insert(seq[0]);
  }
  EXPECT_EQ(starts.size(), 4u);
}

TEST(FreeBlocks, ManyTakeReleaseCyclesKeepTheCountsExact) {
  // Blocks taken out of stack order leave stale entries; the stacks are compacted, never wrong.
  FreeBlocks fb(0, 3 * R);
  int32_t first = fb.take(-1);
  for (int i = 0; i < 100000; ++i) {
    int32_t b = fb.take(first); // first + 1, out of stack order
    ASSERT_EQ(b, first + 1);
    fb.release(b);
  }
  EXPECT_EQ(fb.size(), 3 * R - 1);
  std::set<int32_t> rest;
  while (!fb.empty())
    EXPECT_TRUE(rest.insert(fb.take(-1)).second);
  EXPECT_EQ(rest.size(), size_t(3 * R - 1));
  EXPECT_EQ(rest.count(first), 0u);
}

TEST(FreeBlocks, TheLastIdOfATierHasNoNextOne) {
  FreeBlocks fb(0, R);
  for (int i = 0; i < R - 1; ++i)
    (void)fb.take(-1);
  int32_t last = fb.take(-1);
  EXPECT_EQ(last, R - 1);
  EXPECT_EQ(fb.take(last), -1);          // full
  fb.release(3);
  EXPECT_EQ(fb.take(R - 1), 3);          // R is past the tier: the lowest free instead
  fb.release(0);
  EXPECT_EQ(fb.take(INT32_MAX - 1), 0);  // an id far away is no neighbour
}

} // namespace
