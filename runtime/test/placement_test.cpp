// Tests for semantic-aware placement under a configured 3-tier topology (hbm + dram + cxl emulated).
#include "test_util.h"

#include "hybridgen/runtime/placement.h"

#include <climits>

using namespace hybridgen::rt;

namespace {

struct Fixture {
  std::unique_ptr<KvPool> pool;
  std::vector<int64_t> seqs;
};

// 3 sequences x 30 blocks; the first 16 blocks land in the 16-block hbm tier, the rest in dram.
Fixture makeFixture() {
  PoolConfig pc;
  pc.numLayers = 2;
  pc.layout = test::smallLayout();
  auto p = KvPool::create(test::makeTopology(test::threeTierConfig("64KiB", "1MiB", "1MiB")), pc);
  EXPECT_TRUE(p.isOk());
  Fixture f{std::move(p).valueOrThrow(), {}};
  for (uint64_t tag = 0; tag < 3; ++tag) {
    int64_t s = f.pool->createSequence();
    std::vector<uint32_t> k, v;
    test::makeTokens(pc.layout, 2, tag, 0, 30 * 16, k, v);
    EXPECT_TRUE(f.pool->append(s, 30 * 16, k.data(), v.data()).isOk());
    f.seqs.push_back(s);
  }
  return f;
}

PlacementConfig smallWindows() {
  PlacementConfig c;
  c.sinkTokens = 64;   // 4 blocks
  c.recentTokens = 32; // 2 blocks
  c.maxMigrationsPerStep = 16;
  return c;
}

int64_t settle(const PlacementPolicy &pol, KvPool &pool, int64_t split) {
  int64_t steps = 0;
  for (;; ++steps) {
    auto n = pol.rebalance(pool, split);
    EXPECT_TRUE(n.isOk());
    EXPECT_LE(*n, pol.config().maxMigrationsPerStep); // bounded per step
    if (*n == 0)
      return steps;
    if (steps > 100)
      return -1;
  }
}

TEST(Placement, HostSharesFollowBandwidth) {
  auto s = PlacementPolicy::hostShares(test::makeTopology(test::threeTierConfig()));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s[0], 0.0);
  EXPECT_NEAR(s[1], 2.0 / 3, 1e-12);
  EXPECT_NEAR(s[2], 1.0 / 3, 1e-12);
}

TEST(Placement, AllCpuSpreadsByBandwidthWithHotBlocksOnDram) {
  Fixture f = makeFixture();
  PlacementPolicy pol(smallWindows());
  EXPECT_EQ(f.pool->tierUsage(0).usedBlocks, 16);
  EXPECT_GT(settle(pol, *f.pool, INT64_MAX), 0);
  EXPECT_EQ(f.pool->tierUsage(0).usedBlocks, 0); // CPU tokens must leave HBM
  EXPECT_EQ(f.pool->tierUsage(1).usedBlocks, 60);
  EXPECT_EQ(f.pool->tierUsage(2).usedBlocks, 30);
  for (int64_t s : f.seqs) {
    const auto &t = f.pool->blockTable(s);
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(f.pool->tierOfBlock(t[size_t(j)]), 1) << "sink block " << j;
    EXPECT_EQ(f.pool->tierOfBlock(t[28]), 1); // recent window
    EXPECT_EQ(f.pool->tierOfBlock(t[29]), 1);
  }
  EXPECT_EQ(pol.rebalance(*f.pool, INT64_MAX).value(), 0); // steady state: no churn
  for (uint64_t i = 0; i < 3; ++i)
    EXPECT_TRUE(test::verifySequence(*f.pool, f.seqs[i], i));
}

TEST(Placement, HitCountsPullBlocksToTheFastestTier) {
  Fixture f = makeFixture();
  PlacementPolicy pol(smallWindows());
  settle(pol, *f.pool, INT64_MAX);
  // Find a cold block on cxl and make it the most selected block in sparse mode.
  int64_t seq = -1, logical = -1;
  for (int64_t s : f.seqs)
    for (size_t j = 0; j < f.pool->blockTable(s).size() && seq < 0; ++j)
      if (f.pool->tierOfBlock(f.pool->blockTable(s)[j]) == 2) {
        seq = s;
        logical = int64_t(j);
      }
  ASSERT_GE(seq, 0);
  f.pool->addHits(f.pool->blockTable(seq)[size_t(logical)], 1000);
  settle(pol, *f.pool, INT64_MAX);
  EXPECT_EQ(f.pool->tierOfBlock(f.pool->blockTable(seq)[size_t(logical)]), 1);
  EXPECT_EQ(f.pool->tierUsage(1).usedBlocks, 60); // the spread is kept
  EXPECT_EQ(f.pool->hits(f.pool->blockTable(seq)[size_t(logical)]), 1000u);
}

TEST(Placement, GpuTokensGoToHbmWhileItHasRoom) {
  Fixture f = makeFixture();
  PlacementPolicy pol(smallWindows());
  settle(pol, *f.pool, INT64_MAX);
  const int64_t split = 20 * 16; // blocks 20..29 of each sequence are GPU blocks: 30 > 16 HBM blocks
  settle(pol, *f.pool, split);
  EXPECT_EQ(f.pool->tierUsage(0).usedBlocks, 16);
  for (int64_t s : f.seqs) {
    const auto &t = f.pool->blockTable(s);
    for (size_t j = 0; j < 20; ++j)
      EXPECT_NE(f.pool->tierOfBlock(t[j]), 0) << "CPU block " << j << " in HBM";
  }
  for (uint64_t i = 0; i < 3; ++i)
    EXPECT_TRUE(test::verifySequence(*f.pool, f.seqs[i], i));
}

} // namespace
