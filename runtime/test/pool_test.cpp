// Tests for the KV pool: layout, append/read, tiers and spill, exhaustion, free, migration, batches.
#include "test_util.h"

#include "hybridgen/runtime/kv_pool.h"

using namespace hybridgen::rt;
using hybridgen::rt::test::makeTokens;

namespace {

std::unique_ptr<KvPool> makePool(const std::string &cfg, int layers = 2, bool spill = true) {
  PoolConfig pc;
  pc.numLayers = layers;
  pc.layout = test::smallLayout();
  pc.spill = spill;
  auto p = KvPool::create(test::makeTopology(cfg), pc);
  EXPECT_TRUE(p.isOk()) << p.status().message();
  return p.isOk() ? std::move(p).valueOrThrow() : nullptr;
}

void appendTagged(KvPool &pool, int64_t seq, uint64_t tag, int64_t n) {
  std::vector<uint32_t> k, v;
  makeTokens(pool.layout(), pool.numLayers(), tag, pool.seqLen(seq), n, k, v);
  Status s = pool.append(seq, n, k.data(), v.data());
  ASSERT_TRUE(s.isOk()) << s.message();
}

TEST(KvLayout, OffsetsFollowTheContract) {
  KvLayout l{8, 16, 128, DType::kBF16};
  EXPECT_EQ(l.blockBytes(), 8u * 16 * 128 * 2);
  EXPECT_EQ(l.elementOffset(3, 2, 5), ((3u * 8 + 2) * 16 + 5) * 128);
  EXPECT_EQ(l.byteOffset(1, 0, 0), l.blockBytes());
  EXPECT_EQ(f32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToF32(0x3f80), 1.0f);
}

TEST(KvPool, RejectsBadConfig) {
  PoolConfig pc;
  pc.layout = test::smallLayout(8); // below 16
  EXPECT_EQ(KvPool::create(test::makeTopology(test::threeTierConfig()), pc).status().code(),
            ErrorCode::kInvalidArgument);
  pc.layout = test::smallLayout();
  pc.numLayers = 0;
  EXPECT_FALSE(KvPool::create(test::makeTopology(test::threeTierConfig()), pc).isOk());
  pc.numLayers = 1;
  EXPECT_FALSE(KvPool::create(test::makeTopology("kind=dram,capacity=100"), pc).isOk()); // < one block
}

TEST(KvPool, AppendsReadBackAndKernelViewAgree) {
  auto pool = makePool(test::threeTierConfig());
  ASSERT_TRUE(pool);
  const KvLayout &l = pool->layout();
  int64_t a = pool->createSequence(), b = pool->createSequence();
  appendTagged(*pool, a, 1, 40); // prefill
  for (int i = 0; i < 9; ++i)
    appendTagged(*pool, b, 2, 1); // decode steps
  EXPECT_EQ(pool->seqLen(a), 40);
  EXPECT_EQ(pool->blockTable(a).size(), 3u);
  EXPECT_EQ(pool->blockTable(b).size(), 1u);
  EXPECT_TRUE(test::verifySequence(*pool, a, 1));
  EXPECT_TRUE(test::verifySequence(*pool, b, 2));
  // What a kernel sees: base + block table + row, exactly the interfaces.md layout.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->kBase(1)) % kPoolAlignment, 0u);
  int64_t t = 37;
  int32_t blk = pool->blockTable(a)[size_t(t / l.blockSize)];
  const auto *k = reinterpret_cast<const uint32_t *>(static_cast<const char *>(pool->kBase(1)) +
                                                     l.byteOffset(blk, 1, int32_t(t % l.blockSize)));
  const auto *v = reinterpret_cast<const uint32_t *>(static_cast<const char *>(pool->vBase(1)) +
                                                     l.byteOffset(blk, 1, int32_t(t % l.blockSize)));
  for (int d = 0; d < l.headDim; ++d) {
    EXPECT_EQ(k[d], test::pattern(1, 1, t, 1, d, 0));
    EXPECT_EQ(v[d], test::pattern(1, 1, t, 1, d, 1));
  }
  EXPECT_EQ(pool->kBase(2), nullptr); // bad ids read as empty, never UB
  EXPECT_EQ(pool->tierOfBlock(-5), -1);
  EXPECT_EQ(pool->tierUsage(9).capacityBlocks, 0);
  EXPECT_EQ(pool->freeBlocks(-1), 0);
  EXPECT_EQ(pool->blockOwner(int32_t(pool->numBlocks())), -1);
  pool->addHits(-1, 3);
  EXPECT_EQ(pool->hits(-1), 0u);
  EXPECT_FALSE(pool->writeTokens(a, 0, 39, 2, k, v).isOk()); // past the end
  EXPECT_FALSE(pool->writeTokens(a, 5, 0, 1, k, v).isOk());  // no layer 5
}

TEST(KvPool, TransposedKPiecesHoldColumnsAndReadBackAsRows) {
  PoolConfig pc;
  pc.numLayers = 2;
  pc.layout = test::smallLayout();
  pc.layout.kTransposed = true;
  auto created = KvPool::create(test::makeTopology(test::threeTierConfig()), pc);
  ASSERT_TRUE(created.isOk()) << created.status().message();
  std::unique_ptr<KvPool> pool = std::move(created).valueOrThrow();
  const KvLayout &l = pool->layout();
  int64_t a = pool->createSequence();
  appendTagged(*pool, a, 3, 37);
  for (int i = 0; i < 5; ++i)
    appendTagged(*pool, a, 3, 1);
  EXPECT_TRUE(test::verifySequence(*pool, a, 3)); // rows in, the same rows out
  // In memory: K element (row r, column d) of a piece at d * blockSize + r; V row-major.
  for (int64_t t : {0, 17, 41}) {
    int32_t blk = pool->blockTable(a)[size_t(t / l.blockSize)], r = int32_t(t % l.blockSize);
    const char *kb = static_cast<const char *>(pool->kBase(1));
    const char *vb = static_cast<const char *>(pool->vBase(1));
    for (int d = 0; d < l.headDim; ++d) {
      size_t kAt = (l.elementOffset(blk, 1, 0) + size_t(d) * l.blockSize + r) * l.eltSize();
      EXPECT_EQ(l.kByteOffset(blk, 1, r, d), kAt);
      EXPECT_EQ(*reinterpret_cast<const uint32_t *>(kb + kAt), test::pattern(3, 1, t, 1, d, 0));
      EXPECT_EQ(reinterpret_cast<const uint32_t *>(vb + l.byteOffset(blk, 1, r))[d],
                test::pattern(3, 1, t, 1, d, 1));
    }
  }
  // Row-major K: kByteOffset is the row's offset plus the column.
  KvLayout rows = test::smallLayout();
  EXPECT_EQ(rows.kByteOffset(2, 1, 5, 3), rows.byteOffset(2, 1, 5) + 3 * rows.eltSize());
}

TEST(KvPool, FillsTiersInOrderThenSpills) {
  // 1 KiB blocks x 2 layers x K,V = 4 KiB per block id: hbm 64 KiB -> 16 blocks, dram 32, cxl 32.
  auto pool = makePool(test::threeTierConfig("64KiB", "128KiB", "128KiB"));
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->tierUsage(0).capacityBlocks, 16);
  EXPECT_EQ(pool->tierUsage(1).capacityBlocks, 32);
  int64_t s = pool->createSequence();
  appendTagged(*pool, s, 7, 16 * 20);
  EXPECT_EQ(pool->tierUsage(0).usedBlocks, 16);
  EXPECT_EQ(pool->tierUsage(1).usedBlocks, 4);
  EXPECT_EQ(pool->tierOfBlock(pool->blockTable(s)[0]), 0);
  EXPECT_EQ(pool->tierOfBlock(pool->blockTable(s)[19]), 1);
  EXPECT_TRUE(test::verifySequence(*pool, s, 7));
}

TEST(KvPool, ExhaustionIsAnErrorAndChangesNothing) {
  auto pool = makePool(test::threeTierConfig("64KiB", "64KiB", "64KiB"));
  ASSERT_TRUE(pool);
  int64_t a = pool->createSequence(), b = pool->createSequence();
  appendTagged(*pool, a, 1, 16 * 39 + 3); // 40 blocks of 48
  appendTagged(*pool, b, 2, 16 * 7);
  auto before = pool->blockTable(b);
  std::vector<uint32_t> k, v;
  makeTokens(pool->layout(), 2, 2, pool->seqLen(b), 17, k, v);
  Status st = pool->append(b, 17, k.data(), v.data()); // needs 2 blocks, 1 free
  EXPECT_EQ(st.code(), ErrorCode::kExhausted);
  EXPECT_NE(st.message().find("cannot append"), std::string::npos);
  EXPECT_EQ(pool->seqLen(b), 16 * 7);
  EXPECT_EQ(pool->blockTable(b), before);
  appendTagged(*pool, b, 2, 16); // exactly the last block still fits
  EXPECT_TRUE(pool->appendTokens(a, 13).isOk());  // fills a's last block: no new block needed
  EXPECT_FALSE(pool->appendTokens(a, 1).isOk());
  EXPECT_EQ(pool->freeSequence(a).code(), ErrorCode::kOk);
  EXPECT_EQ(pool->freeSequence(a).code(), ErrorCode::kNotFound);
  appendTagged(*pool, b, 2, 16 * 10);
  EXPECT_TRUE(test::verifySequence(*pool, b, 2));
}

TEST(KvPool, TruncateKeepsThePrefixAndFreesTheBlocksPastIt) {
  auto pool = makePool(test::threeTierConfig());
  ASSERT_TRUE(pool);
  auto freeTotal = [&] {
    int64_t n = 0;
    for (int32_t t = 0; t < pool->topology().tierCount(); ++t)
      n += pool->freeBlocks(t);
    return n;
  };
  const int64_t empty = freeTotal();
  int64_t a = pool->createSequence();
  appendTagged(*pool, a, 1, 16 * 3 + 5);
  ASSERT_EQ(pool->blockTable(a).size(), 4u);
  const std::vector<int32_t> first = pool->blockTable(a);
  ASSERT_TRUE(pool->truncateSequence(a, 20).isOk());
  EXPECT_EQ(pool->seqLen(a), 20);
  EXPECT_EQ(pool->blockTable(a), std::vector<int32_t>(first.begin(), first.begin() + 2));
  EXPECT_EQ(freeTotal(), empty - 2);
  EXPECT_TRUE(test::verifySequence(*pool, a, 1)); // the kept tokens are untouched
  // Appending continues at 20 (over the kept block's stale rows) and gets the freed blocks back.
  appendTagged(*pool, a, 1, 30);
  EXPECT_EQ(pool->seqLen(a), 50);
  EXPECT_EQ(pool->blockTable(a), first);
  EXPECT_TRUE(test::verifySequence(*pool, a, 1));
  // Refusals change nothing.
  EXPECT_EQ(pool->truncateSequence(a, 51).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool->truncateSequence(a, -1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool->truncateSequence(a + 7, 0).code(), ErrorCode::kNotFound);
  EXPECT_EQ(pool->seqLen(a), 50);
  EXPECT_TRUE(test::verifySequence(*pool, a, 1));
  // A block boundary keeps exactly the whole blocks; 0 frees them all.
  ASSERT_TRUE(pool->truncateSequence(a, 16).isOk());
  EXPECT_EQ(pool->blockTable(a).size(), 1u);
  ASSERT_TRUE(pool->truncateSequence(a, 0).isOk());
  EXPECT_TRUE(pool->blockTable(a).empty());
  EXPECT_EQ(freeTotal(), empty);
  appendTagged(*pool, a, 1, 17);
  EXPECT_TRUE(test::verifySequence(*pool, a, 1));
}

TEST(KvPool, FreedBlocksComeBackInAscendingOrder) {
  auto pool = makePool(test::threeTierConfig());
  ASSERT_TRUE(pool);
  // A prompt appended at once gets consecutive, ascending blocks (kernels walk them as one
  // stream), and keeps them when it reuses the blocks of a freed sequence.
  auto ascending = [](const std::vector<int32_t> &t) {
    for (size_t i = 1; i < t.size(); ++i)
      if (t[i] != t[i - 1] + 1)
        return false;
    return !t.empty();
  };
  int64_t a = pool->createSequence();
  appendTagged(*pool, a, 1, 16 * 9 + 5);
  std::vector<int32_t> first = pool->blockTable(a);
  EXPECT_TRUE(ascending(first));
  ASSERT_TRUE(pool->freeSequence(a).isOk());
  int64_t b = pool->createSequence();
  appendTagged(*pool, b, 2, 16 * 9 + 5);
  EXPECT_EQ(pool->blockTable(b), first);
  EXPECT_TRUE(test::verifySequence(*pool, b, 2));
}

TEST(KvPool, ABatchDecodedInLockstepKeepsRunsOfBlocks) {
  // One token of every sequence per step, as a decode batch grows: each sequence's blocks still
  // come in runs of consecutive ids (the kernels read them as longer streams; free_blocks.h).
  auto pool = makePool(test::threeTierConfig("4MiB"));
  ASSERT_TRUE(pool);
  std::vector<int64_t> seqs;
  for (int i = 0; i < 4; ++i)
    seqs.push_back(pool->createSequence());
  const int64_t steps = 16 * (FreeBlocks::kAllocRunBlocks + 3);
  for (int64_t step = 0; step < steps; ++step)
    for (size_t i = 0; i < seqs.size(); ++i)
      appendTagged(*pool, seqs[i], 10 + i, 1);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<int32_t> &t = pool->blockTable(seqs[i]);
    ASSERT_EQ(t.size(), size_t(FreeBlocks::kAllocRunBlocks + 3));
    int jumps = 0;
    for (size_t j = 1; j < t.size(); ++j)
      jumps += t[j] != t[j - 1] + 1;
    EXPECT_EQ(jumps, 1) << "sequence " << i;
    EXPECT_TRUE(test::verifySequence(*pool, seqs[i], 10 + i));
  }
}

TEST(KvPool, NoSpillFailsWhenPreferredTierIsFull) {
  auto pool = makePool(test::threeTierConfig("64KiB", "1MiB", "1MiB"), 2, /*spill=*/false);
  ASSERT_TRUE(pool);
  int64_t s = pool->createSequence();
  EXPECT_TRUE(pool->appendTokens(s, 16 * 16).isOk());
  auto r = pool->appendTokens(s, 1);
  EXPECT_EQ(r.status().code(), ErrorCode::kExhausted);
  EXPECT_NE(r.status().message().find("spill disabled"), std::string::npos);
}

TEST(KvPool, MigrationCopiesThenRepoints) {
  auto pool = makePool(test::threeTierConfig("64KiB", "128KiB", "128KiB"));
  ASSERT_TRUE(pool);
  int64_t s = pool->createSequence();
  appendTagged(*pool, s, 9, 16 * 3 + 5);
  int32_t old = pool->blockTable(s)[1];
  pool->addHits(old, 5);
  ASSERT_TRUE(pool->migrateBlock(s, 1, 2).isOk());
  int32_t now = pool->blockTable(s)[1];
  EXPECT_NE(now, old);
  EXPECT_EQ(pool->tierOfBlock(now), 2);
  EXPECT_EQ(pool->blockOwner(old), -1);
  EXPECT_EQ(pool->blockOwner(now), s);
  EXPECT_EQ(pool->hits(now), 5u);
  EXPECT_EQ(pool->migrationsTotal(), 1);
  EXPECT_TRUE(test::verifySequence(*pool, s, 9));
  EXPECT_EQ(pool->migrateBlock(s, 9, 1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool->migrateBlock(s, 0, 5).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool->migrateBlock(42, 0, 1).code(), ErrorCode::kNotFound);
  // Into a full tier: a clear error, table untouched.
  int64_t filler = pool->createSequence();
  appendTagged(*pool, filler, 3, 16 * 13); // tier 0 now full (16 blocks)
  ASSERT_EQ(pool->freeBlocks(0), 0);
  auto before = pool->blockTable(s);
  EXPECT_EQ(pool->migrateBlock(s, 1, 0).code(), ErrorCode::kExhausted);
  EXPECT_EQ(pool->blockTable(s), before);
}

TEST(KvPool, FillsBatchTables) {
  auto pool = makePool(test::threeTierConfig());
  ASSERT_TRUE(pool);
  int64_t a = pool->createSequence(), b = pool->createSequence();
  ASSERT_TRUE(pool->appendTokens(a, 50).isOk());
  ASSERT_TRUE(pool->appendTokens(b, 3).isOk());
  std::vector<int64_t> batch = {b, a};
  int32_t mb = pool->maxBlocksInUse(batch);
  EXPECT_EQ(mb, 4);
  std::vector<int32_t> table(size_t(2 * mb)), lens(2);
  ASSERT_TRUE(pool->fillBatch(batch, mb, table.data(), lens.data()).isOk());
  EXPECT_EQ(lens[0], 3);
  EXPECT_EQ(lens[1], 50);
  EXPECT_EQ(table[0], pool->blockTable(b)[0]);
  EXPECT_EQ(table[1], -1);
  EXPECT_EQ(table[size_t(mb) + 3], pool->blockTable(a)[3]);
  EXPECT_FALSE(pool->fillBatch(batch, 2, table.data(), lens.data()).isOk());
}

} // namespace
