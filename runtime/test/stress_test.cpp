// Stress: many sequences, random lengths and churn over thousands of steps with migrations and
// exhaustion; every token of every layer must read back bit-identical.
#include "test_util.h"

#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/placement.h"

#include <map>
#include <random>

using namespace hybridgen::rt;

namespace {

TEST(Stress, ChurnWithMigrationsKeepsEveryTokenExact) {
  PoolConfig pc;
  pc.numLayers = 2;
  pc.layout = test::smallLayout();
  // 64 + 512 + 512 block ids (4 KiB each for 2 layers of K and V): tight enough to hit exhaustion.
  auto made = KvPool::create(test::makeTopology(test::threeTierConfig("256KiB", "2MiB", "2MiB")), pc);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  auto pool = std::move(made).valueOrThrow();
  PlacementConfig plc;
  plc.sinkTokens = 32;
  plc.recentTokens = 64;
  plc.maxMigrationsPerStep = 24;
  PlacementPolicy placement(plc);
  ASSERT_TRUE(pool->setAppendTierOrder(placement.appendOrder(pool->topology())).isOk());

  std::mt19937_64 rng(1234);
  std::map<int64_t, uint64_t> tags; // live sequence -> data tag
  uint64_t nextTag = 1;
  int64_t exhaustions = 0, frees = 0, verified = 0, manualMigrations = 0;
  std::vector<uint32_t> k, v;
  auto pick = [&]() {
    auto it = tags.begin();
    std::advance(it, int64_t(rng() % tags.size()));
    return it->first;
  };
  auto release = [&](int64_t seq) {
    ASSERT_TRUE(test::verifySequence(*pool, seq, tags[seq]));
    ASSERT_TRUE(pool->freeSequence(seq).isOk());
    tags.erase(seq);
    ++frees;
    ++verified;
  };

  const int kSteps = 3000;
  for (int step = 0; step < kSteps; ++step) {
    if (tags.size() < 40 && rng() % 10 < 3)
      tags[pool->createSequence()] = nextTag++;
    if (!tags.empty() && rng() % 10 == 0)
      release(pick());
    for (auto &[seq, tag] : tags) {
      int64_t n = rng() % 50 == 0 ? int64_t(1 + rng() % 300) : (rng() % 2 ? 1 : 0);
      if (n == 0)
        continue;
      int64_t len = pool->seqLen(seq);
      auto before = pool->blockTable(seq);
      test::makeTokens(pc.layout, pc.numLayers, tag, len, n, k, v);
      Status s = pool->append(seq, n, k.data(), v.data());
      if (!s) {
        // All tiers full: a clear error, and the sequence is exactly as before.
        ASSERT_EQ(s.code(), ErrorCode::kExhausted) << s.message();
        ASSERT_EQ(pool->seqLen(seq), len);
        ASSERT_EQ(pool->blockTable(seq), before);
        ++exhaustions;
      }
    }
    if (pool->freeBlocks(0) + pool->freeBlocks(1) + pool->freeBlocks(2) < 4 && !tags.empty()) {
      // Make room the way a server would: retire the longest sequence.
      int64_t longest = tags.begin()->first;
      for (auto &kv : tags)
        if (pool->seqLen(kv.first) > pool->seqLen(longest))
          longest = kv.first;
      release(longest);
    }
    if (step % 3 == 0) {
      auto r = placement.rebalance(*pool, int64_t(rng() % 900));
      ASSERT_TRUE(r.isOk()) << r.status().message();
    }
    for (int m = 0; m < 2 && !tags.empty(); ++m) { // arbitrary migrations on top of the policy
      int64_t seq = pick();
      size_t nb = pool->blockTable(seq).size();
      if (nb == 0)
        continue;
      Status s = pool->migrateBlock(seq, int64_t(rng() % nb), int32_t(rng() % 3));
      ASSERT_TRUE(s.isOk() || s.code() == ErrorCode::kExhausted) << s.message();
      manualMigrations += s.isOk() ? 1 : 0;
    }
    if (step % 500 == 0) {
      for (auto &kv : tags) {
        ASSERT_TRUE(test::verifySequence(*pool, kv.first, kv.second));
      }
    }
  }
  for (auto &kv : tags) {
    ASSERT_TRUE(test::verifySequence(*pool, kv.first, kv.second));
    ++verified;
  }
  // Accounting: used blocks == blocks named by live tables.
  int64_t named = 0, used = 0;
  for (auto &kv : tags)
    named += int64_t(pool->blockTable(kv.first).size());
  for (int32_t t = 0; t < 3; ++t)
    used += pool->tierUsage(t).usedBlocks;
  EXPECT_EQ(named, used);
  EXPECT_GT(pool->migrationsTotal(), 1000);
  EXPECT_GT(frees, 100);
  EXPECT_GT(verified, 100);
  RecordProperty("exhaustions", int(exhaustions));
  RecordProperty("migrations", int(pool->migrationsTotal()));
  std::printf("stress: %d steps, %lld frees, %lld exhaustions, %lld migrations (%lld manual)\n", kSteps,
              (long long)frees, (long long)exhaustions, (long long)pool->migrationsTotal(),
              (long long)manualMigrations);
}

} // namespace
