// Tests for thread-to-block assignment: coverage, bandwidth-weighted thread counts, balance.
#include "test_util.h"

#include "hybridgen/runtime/executor.h"
#include "hybridgen/runtime/placement.h"
#include "hybridgen/runtime/thread_plan.h"

#include <climits>
#include <map>
#include <set>

using namespace hybridgen::rt;

namespace {

std::unique_ptr<KvPool> spreadPool(std::vector<int64_t> &seqs) {
  PoolConfig pc;
  pc.layout = test::smallLayout();
  auto p = KvPool::create(test::makeTopology(test::threeTierConfig("64KiB", "1MiB", "1MiB")), pc);
  EXPECT_TRUE(p.isOk());
  auto pool = std::move(p).valueOrThrow();
  for (int i = 0; i < 3; ++i) {
    int64_t s = pool->createSequence();
    EXPECT_TRUE(pool->appendTokens(s, 60 * 16 + 5 * i).isOk());
    seqs.push_back(s);
  }
  PlacementConfig pcfg;
  pcfg.maxMigrationsPerStep = 1000;
  PlacementPolicy pol(pcfg);
  while (*pol.rebalance(*pool, INT64_MAX) > 0) {
  }
  return pool;
}

void expectCoverage(const KvPool &pool, const std::vector<int64_t> &seqs, int64_t split, const ThreadPlan &plan) {
  std::set<std::pair<int32_t, int32_t>> seen;
  int64_t tokens = 0;
  for (const auto &t : plan.threads)
    for (const auto &it : t.items) {
      EXPECT_TRUE(seen.insert({it.batchIndex, it.logical}).second) << "block read twice";
      EXPECT_EQ(it.block, pool.blockTable(seqs[size_t(it.batchIndex)])[size_t(it.logical)]);
      tokens += it.tokens;
    }
  int64_t want = 0;
  for (int64_t s : seqs)
    want += std::min(split, pool.seqLen(s));
  EXPECT_EQ(tokens, want);
}

TEST(ThreadPlan, ThreadsFollowTierBandwidth) {
  std::vector<int64_t> seqs;
  auto pool = spreadPool(seqs);
  ThreadPlan plan = planThreads(*pool, seqs, INT64_MAX, 4);
  ASSERT_EQ(plan.threads.size(), 4u);
  expectCoverage(*pool, seqs, INT64_MAX, plan);
  std::map<int32_t, int> perTier;
  double lo = 1e9, hi = 0;
  for (const auto &t : plan.threads) {
    ++perTier[t.tier];
    EXPECT_EQ(t.cpuNode, pool->topology().tiers()[size_t(t.tier)].readerNode);
    lo = std::min(lo, t.estSeconds);
    hi = std::max(hi, t.estSeconds);
  }
  // dram holds 2/3 of the blocks at 2x the bandwidth of cxl: equal time, so 2 threads each.
  EXPECT_EQ(perTier[1], 2);
  EXPECT_EQ(perTier[2], 2);
  EXPECT_LT(hi / lo, 1.25);
}

TEST(ThreadPlan, PartialSplitAndFewThreads) {
  std::vector<int64_t> seqs;
  auto pool = spreadPool(seqs);
  const int64_t split = 100; // 6 full blocks + 4 rows
  ThreadPlan plan = planThreads(*pool, seqs, split, 3);
  expectCoverage(*pool, seqs, split, plan);
  ThreadPlan one = planThreads(*pool, seqs, INT64_MAX, 1);
  ASSERT_EQ(one.threads.size(), 1u);
  expectCoverage(*pool, seqs, INT64_MAX, one);
  EXPECT_TRUE(planThreads(*pool, seqs, 0, 2).threads.empty());
  EXPECT_TRUE(pinCurrentThreadToNode(0).isOk());
}

TEST(ThreadPlan, ExecutorRunsEveryEntryOnce) {
  std::vector<int64_t> seqs;
  auto pool = spreadPool(seqs);
  ThreadPlan plan = planThreads(*pool, seqs, INT64_MAX, 3);
  std::vector<int64_t> tokens(plan.threads.size(), 0);
  std::vector<int> runs(plan.threads.size(), 0);
  ASSERT_TRUE(runPinned(plan, [&](const ThreadWork &w, int i) {
                ++runs[size_t(i)];
                for (const auto &it : w.items)
                  tokens[size_t(i)] += it.tokens;
              }).isOk());
  int64_t total = 0;
  for (size_t i = 0; i < plan.threads.size(); ++i) {
    EXPECT_EQ(runs[i], 1);
    total += tokens[i];
  }
  int64_t want = 0;
  for (int64_t s : seqs)
    want += pool->seqLen(s);
  EXPECT_EQ(total, want);
  EXPECT_TRUE(runPinned(ThreadPlan{}, [](const ThreadWork &, int) {}).isOk());
}

} // namespace
