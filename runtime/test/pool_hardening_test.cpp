// Hostile sizes, positions and counts against the KV pool (issue 17, item 2): every one is a Status,
// never an overflow, and a refused operation leaves the pool's bytes and bookkeeping as they were.
#include "test_util.h"

#include "hybridgen/runtime/checked.h"
#include "hybridgen/runtime/kv_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

using namespace hybridgen::rt;
using hybridgen::rt::test::makeTokens;

namespace {

std::unique_ptr<KvPool> makePool(int layers = 2) {
  PoolConfig pc;
  pc.numLayers = layers;
  pc.layout = test::smallLayout();
  auto p = KvPool::create(test::makeTopology(test::threeTierConfig()), pc);
  EXPECT_TRUE(p.isOk()) << p.status().message();
  return p.isOk() ? std::move(p).valueOrThrow() : nullptr;
}

/// Everything a refused operation must not change: every byte of every K/V array, each sequence's
/// length and block table, and the free blocks of each tier.
struct Snapshot {
  std::vector<std::vector<char>> arrays;
  std::vector<std::pair<int64_t, std::vector<int32_t>>> seqs;
  std::vector<int64_t> free;

  explicit Snapshot(const KvPool &pool) {
    const size_t bytes = size_t(pool.numBlocks()) * pool.layout().blockBytes();
    for (int32_t l = 0; l < pool.numLayers(); ++l)
      for (const void *base : {pool.kBase(l), pool.vBase(l)})
        arrays.emplace_back(static_cast<const char *>(base), static_cast<const char *>(base) + bytes);
    for (int64_t s : pool.sequences())
      seqs.push_back({pool.seqLen(s), pool.blockTable(s)});
    for (int32_t t = 0; t < pool.topology().tierCount(); ++t)
      free.push_back(pool.freeBlocks(t));
  }
  bool operator==(const Snapshot &o) const { return arrays == o.arrays && seqs == o.seqs && free == o.free; }
};

/// A pool with two sequences of distinct data, so a stray write anywhere shows in the snapshot.
struct Fixture {
  std::unique_ptr<KvPool> pool = makePool();
  int64_t a = -1, b = -1;
  Fixture() {
    a = pool->createSequence();
    b = pool->createSequence();
    for (auto [seq, n] : {std::pair<int64_t, int64_t>{a, 40}, {b, 7}}) {
      std::vector<uint32_t> k, v;
      makeTokens(pool->layout(), pool->numLayers(), uint64_t(seq + 1), 0, n, k, v);
      EXPECT_TRUE(pool->append(seq, n, k.data(), v.data()).isOk());
    }
  }
};

TEST(CheckedArithmetic, RangesAndProducts) {
  EXPECT_TRUE(rangeWithin(0, 0, 0));
  EXPECT_TRUE(rangeWithin(3, 2, 5));
  EXPECT_FALSE(rangeWithin(3, 3, 5));
  EXPECT_FALSE(rangeWithin(INT64_MAX, 1, 40));  // pos + n would wrap negative
  EXPECT_FALSE(rangeWithin(1, INT64_MAX, 40));
  EXPECT_FALSE(rangeWithin(-1, 1, 40));
  EXPECT_EQ(ceilDiv(INT64_MAX, 16), INT64_MAX / 16 + 1);
  size_t out = 0;
  EXPECT_TRUE(checkedSize(&out, 2, 3, 4) && out == 24);
  EXPECT_FALSE(checkedSize(&out, INT64_MAX, INT64_MAX));
  EXPECT_FALSE(checkedSize(&out, 4, -1));
  EXPECT_EQ(saturatingInt64(1e300), INT64_MAX);
  EXPECT_EQ(saturatingInt64(-1e300), INT64_MIN);
  EXPECT_EQ(saturatingInt64(std::nan(""), 7), 7);
  EXPECT_EQ(saturatingInt64(9223372036854775807.0), INT64_MAX); // rounds to 2^63: does not fit
}

TEST(PoolHardening, HugePositionsAndCountsAreRefusedAndChangeNothing) {
  Fixture f;
  KvPool &pool = *f.pool;
  const Snapshot before(pool);
  std::vector<uint32_t> k(1024), v(1024);
  // The reproducers: pos + n overflowed in the bounds check and the copy ran off the table.
  EXPECT_EQ(pool.writeTokens(f.a, 0, INT64_MAX, 1, k.data(), v.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.readTokens(f.a, 0, INT64_MAX, 1, k.data(), v.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.writeTokens(f.a, 0, 1, INT64_MAX, k.data(), v.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.readTokens(f.a, 1, INT64_MIN, 2, k.data(), v.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.writeTokens(f.a, 0, 0, 1, nullptr, v.data()).code(), ErrorCode::kInvalidArgument);
  // s.len + n + blockSize - 1 wrapped, so "needs a negative number of blocks" was accepted.
  for (int64_t n : {INT64_MAX, INT64_MAX - 10, INT64_MAX - 40, int64_t(INT32_MAX), int64_t(-1)}) {
    EXPECT_EQ(pool.appendTokens(f.a, n).status().code(), ErrorCode::kInvalidArgument) << n;
    EXPECT_FALSE(pool.append(f.b, n, k.data(), v.data()).isOk()) << n;
  }
  EXPECT_EQ(pool.append(f.b, 3, nullptr, nullptr).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.migrateBlock(f.a, INT64_MAX, 1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.migrateBlock(f.a, 0, INT32_MAX).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Snapshot(pool) == before);
  EXPECT_TRUE(test::verifySequence(pool, f.a, uint64_t(f.a + 1)));
  EXPECT_TRUE(test::verifySequence(pool, f.b, uint64_t(f.b + 1)));
}

TEST(PoolHardening, RefusedBatchWritesNothing) {
  Fixture f;
  const int32_t maxBlocks = f.pool->maxBlocksInUse({f.a, f.b});
  std::vector<int32_t> table(2 * size_t(maxBlocks), 12345), lens(2, 777);
  // The first sequence is fine, the second unknown: nothing may be written, not even row 0.
  EXPECT_EQ(f.pool->fillBatch({f.a, 99}, maxBlocks, table.data(), lens.data()).code(), ErrorCode::kNotFound);
  EXPECT_EQ(table, std::vector<int32_t>(table.size(), 12345));
  EXPECT_EQ(lens, std::vector<int32_t>(2, 777));
  EXPECT_EQ(f.pool->fillBatch({f.a}, -1, table.data(), lens.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(f.pool->fillBatch({f.b, f.a}, 1, table.data(), lens.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(table, std::vector<int32_t>(table.size(), 12345));
  ASSERT_TRUE(f.pool->fillBatch({f.a, f.b}, maxBlocks, table.data(), lens.data()).isOk());
  EXPECT_EQ(lens[0], 40);
  EXPECT_EQ(lens[1], 7);
}

TEST(PoolHardening, LayoutsWhoseSizesOverflowAreRefused) {
  Topology topo = test::makeTopology(test::threeTierConfig());
  PoolConfig pc;
  pc.layout = test::smallLayout();
  // kvHeads * blockSize * headDim * 4 wraps size_t to 0 here; it used to divide by it.
  pc.layout.kvHeads = INT32_MAX;
  pc.layout.headDim = INT32_MAX;
  pc.layout.blockSize = 256;
  EXPECT_EQ(KvPool::create(topo, pc).status().code(), ErrorCode::kInvalidArgument);
  pc.layout = test::smallLayout();
  pc.numLayers = INT32_MAX;
  EXPECT_EQ(KvPool::create(topo, pc).status().code(), ErrorCode::kInvalidArgument);
  pc.numLayers = 1;
  pc.layout.dtype = DType(42);
  EXPECT_EQ(KvPool::create(topo, pc).status().code(), ErrorCode::kInvalidArgument);
  // 64 tiers of 2^58 blocks of 64 bytes (K+V): the id ranges' running sum wrapped int64 past the
  // int32 check (and ended in a failed mmap of a wrapped size).
  std::string many;
  for (int i = 0; i < 64; ++i)
    many += "name=t" + std::to_string(i) + ",kind=dram,node=0,bandwidth=10,capacity=18446744073709551615;";
  pc.layout = KvLayout{1, 16, 1, DType::kF16};
  EXPECT_EQ(KvPool::create(test::makeTopology(many), pc).status().code(), ErrorCode::kInvalidArgument);
}

TEST(PoolHardening, BookkeepingBeyondTheMachineIsRefused) {
  // About 2^31 block ids of 64 bytes (K+V) fit the id space but need ~48 GiB of per-block
  // bookkeeping: an error, not an allocation that gets the process killed.
  PoolConfig pc;
  pc.layout = KvLayout{1, 16, 1, DType::kF16};
  std::string cfg = "kind=dram,node=0,bandwidth=10,capacity=" + std::to_string((int64_t(INT32_MAX) - (1 << 22)) * 64);
  auto r = KvPool::create(test::makeTopology(cfg), pc);
  EXPECT_EQ(r.status().code(), ErrorCode::kExhausted) << r.status().message();
}

TEST(PoolHardening, AppendTierOrderNamesEachTierOnce) {
  // {dram, dram} counted dram's free blocks twice: an append that passed the room check then
  // found no block to allocate and threw from inside the pool.
  Fixture f;
  EXPECT_EQ(f.pool->setAppendTierOrder({1, 1}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(f.pool->setAppendTierOrder({}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(f.pool->setAppendTierOrder({0, 3}).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(f.pool->setAppendTierOrder({1}).isOk());
  const int64_t room = f.pool->freeBlocks(1);
  EXPECT_EQ(f.pool->appendTokens(f.b, (room + 1) * 16).status().code(), ErrorCode::kExhausted);
  EXPECT_TRUE(f.pool->appendTokens(f.b, 9 + room * 16).isOk()); // b's partial block, then all of dram
  EXPECT_EQ(f.pool->freeBlocks(1), 0);
}

TEST(PoolHardening, SequencesStopAtTheInt32LengthOfTheKernelContract) {
  // A pool big enough that INT32_MAX tokens of 64-byte blocks would fit in id space is not needed:
  // the limit is checked before room, so even a small pool names the real reason.
  auto pool = makePool(1);
  int64_t s = pool->createSequence();
  auto r = pool->appendTokens(s, int64_t(INT32_MAX) + 1);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("at most"), std::string::npos) << r.status().message();
  EXPECT_EQ(pool->seqLen(s), 0);
  EXPECT_TRUE(pool->blockTable(s).empty());
}

} // namespace

/// Whether every page of [p, p + bytes) is resident (mincore).
static bool resident(const void *p, size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = uintptr_t(p) / page * page;
  const size_t pages = (uintptr_t(p) + bytes - begin + page - 1) / page;
  std::vector<unsigned char> in(pages);
  if (mincore(reinterpret_cast<void *>(begin), pages * page, in.data()) != 0)
    return false;
  for (unsigned char c : in)
    if (!(c & 1))
      return false;
  return true;
}

TEST(PoolCommit, CommittedBlocksAreResidentZeroAndStillHoldTokens) {
  PoolConfig pc;
  pc.numLayers = 2;
  pc.layout = test::smallLayout();
  const size_t bb = pc.layout.blockBytes();
  // Without a commit nothing is written at create: the first block's page is not resident.
  auto lazy = KvPool::create(test::makeTopology("kind=dram,node=0,bandwidth=10,capacity=4MiB"), pc);
  ASSERT_TRUE(lazy.isOk()) << lazy.status().message();
  EXPECT_FALSE(resident((*lazy)->kBase(0), bb));
  EXPECT_EQ((*lazy)->committedBytes(), 0u);

  pc.commitBlocksPerTier = 40;
  auto r = KvPool::create(test::makeTopology("kind=dram,node=0,bandwidth=10,capacity=4MiB"), pc);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  KvPool &pool = **r;
  EXPECT_EQ(pool.committedBytes(), 2u * 2u * 40u * bb); // K and V of 2 layers
  for (int32_t l = 0; l < pool.numLayers(); ++l)
    for (const void *base : {pool.kBase(l), pool.vBase(l)}) {
      EXPECT_TRUE(resident(base, 40 * bb)) << "layer " << l;
      const char *bytes = static_cast<const char *>(base);
      EXPECT_TRUE(std::all_of(bytes, bytes + 40 * bb, [](char c) { return c == 0; }));
    }
  // The committed pages take tokens like any others.
  int64_t seq = pool.createSequence();
  std::vector<uint32_t> k, v;
  makeTokens(pool.layout(), pool.numLayers(), 7, 0, 50, k, v);
  ASSERT_TRUE(pool.append(seq, 50, k.data(), v.data()).isOk());
  EXPECT_TRUE(test::verifySequence(pool, seq, 7));
}

TEST(PoolCommit, MoreThanTheMachineHoldsIsRefusedAtCreate) {
  // A tier twice the machine's memory, committed: a clear error before any page is written, not
  // a process killed for memory in the middle of a run.
  PoolConfig pc;
  pc.layout = KvLayout{8, 16, 128, DType::kF32}; // 64 KiB blocks: few ids, little bookkeeping
  pc.commitBlocksPerTier = INT32_MAX;
  const uint64_t machine = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
  std::string cfg = "kind=dram,node=0,bandwidth=10,capacity=" + std::to_string(2 * machine);
  auto r = KvPool::create(test::makeTopology(cfg), pc);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), ErrorCode::kExhausted) << r.status().message();
  EXPECT_NE(r.status().message().find("available"), std::string::npos) << r.status().message();
}
