// HBM as a real tier of the KV pool, on the fake CUDA driver (device memory is host memory there,
// so tests can look at it through hgrt_gpu_alias): placement of the tier, appends and reads
// through staging, migrations host <-> device, refused copies, cleanup; and the emulated fallback.
#include "cuda_test_util.h"
#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/context.h"
#include "test_util.h"

#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace hybridgen::rt::test {
namespace {

class CudaPool : public CudaEnvTest {
protected:
  static std::string deviceTiers(const std::string &hbmCap = "capacity=64KiB,") {
    return "name=hbm,kind=hbm,device=cuda," + hbmCap + "bandwidth=4800\n"
           "name=dram,kind=dram,node=0,capacity=256KiB,bandwidth=40\n";
  }
  static std::unique_ptr<KvPool> makePool(const Topology &topo, int layers = 2) {
    PoolConfig pc;
    pc.numLayers = layers;
    pc.layout = smallLayout();
    pc.hugePages = false;
    auto pool = KvPool::create(topo, pc);
    EXPECT_TRUE(pool.isOk()) << pool.status().message();
    return pool.isOk() ? std::move(pool).valueOrThrow() : nullptr;
  }
};

TEST_F(CudaPool, TransposedKIsRefusedWithDeviceMemory) {
  // The GPU kernels and the row copies to device memory read K row-major.
  useFake();
  PoolConfig pc;
  pc.layout = smallLayout();
  pc.layout.kTransposed = true;
  pc.hugePages = false;
  auto pool = KvPool::create(makeTopology(deviceTiers()), pc);
  EXPECT_EQ(pool.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(pool.status().message().find("not supported with a device-memory tier ('hbm')"),
            std::string::npos)
      << pool.status().message();
}

TEST_F(CudaPool, HbmTierIsOnTheDeviceWhenOneIsUsable) {
  useFake();
  Topology topo = makeTopology(deviceTiers());
  const TierInfo &hbm = topo.tiers()[0];
  EXPECT_TRUE(hbm.onDevice);
  EXPECT_FALSE(hbm.emulated);
  EXPECT_FALSE(hbm.hostAccessible());
  EXPECT_NE(topo.describe().find("kind=hbm [cuda]"), std::string::npos) << topo.describe();
  auto pool = makePool(topo);
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->tierMemory(0).label(), "cuda:0 Fake H200");
  EXPECT_EQ(pool->tierMemory(1).label(), "numa:0(pinned)");
  SchedulerContext ctx(SchedulerConfig{}, pool.get());
  EXPECT_EQ(ctx.trace().columnNames().back(), "blocks_dram");
  EXPECT_EQ(ctx.trace().columnNames()[ctx.trace().columnNames().size() - 2], "blocks_hbm"); // no _emulated
}

TEST_F(CudaPool, WithoutADeviceTheHbmTierStaysEmulatedAndLabelled) {
  useLibrary("/nonexistent/libcuda.so.1");
  testing::internal::CaptureStderr();
  Topology topo = makeTopology(deviceTiers());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no usable CUDA device"), std::string::npos) << err;
  EXPECT_TRUE(topo.tiers()[0].emulated);
  EXPECT_FALSE(topo.tiers()[0].onDevice);
  EXPECT_NE(topo.describe().find("kind=hbm [emulated]"), std::string::npos);
  auto pool = makePool(topo);
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->tierMemory(0).label(), "emulated-hbm(host)");
  EXPECT_EQ(pool->tierMemory(1).label(), "numa:0"); // nothing pinned without a GPU
  EXPECT_EQ(hgrt_gpu_alias(pool->kBase(0)), nullptr);
  // Capacity from the device is only possible with a device.
  DiscoverOptions o;
  o.probeBandwidth = false;
  auto noCap = Topology::fromConfig("name=hbm,kind=hbm,device=cuda", o);
  ASSERT_FALSE(noCap.isOk());
  EXPECT_NE(noCap.status().message().find("zero capacity"), std::string::npos);
}

TEST_F(CudaPool, DeviceKeyIsCheckedAndCapacityCanComeFromTheDevice) {
  useFake();
  DiscoverOptions o;
  o.probeBandwidth = false;
  auto bad = Topology::fromConfig("name=hbm,kind=hbm,device=gpu,capacity=1MiB", o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("unknown device 'gpu'"), std::string::npos);
  setenv("FAKE_CUDA_MEM_FREE", "1000000", 1);
  auto fromDevice = Topology::fromConfig("name=hbm,kind=hbm,device=cuda", o);
  ASSERT_TRUE(fromDevice.isOk()) << fromDevice.status().message();
  EXPECT_EQ(fromDevice->tiers()[0].capacityBytes, 900000u);
  // device=host (or no key) keeps the emulated tier even with a GPU present.
  auto host = Topology::fromConfig("name=hbm,kind=hbm,device=host,capacity=1MiB", o);
  ASSERT_TRUE(host.isOk());
  EXPECT_TRUE(host->tiers()[0].emulated);
}

TEST_F(CudaPool, AppendsLiveInDeviceMemoryAndReadBack) {
  useFake();
  Topology topo = makeTopology(deviceTiers());
  long allocBefore = fakeCounter("allocations"), regBefore = fakeCounter("registered");
  {
    auto pool = makePool(topo);
    ASSERT_TRUE(pool);
    const KvLayout &l = pool->layout();
    const size_t bb = l.blockBytes();
    EXPECT_EQ(fakeCounter("allocations"), allocBefore + 4); // K and V of 2 layers
    int64_t seq = pool->createSequence();
    std::vector<uint32_t> k, v;
    makeTokens(l, 2, 7, 0, 40, k, v);
    long h2d = fakeCounter("h2d");
    ASSERT_TRUE(pool->append(seq, 40, k.data(), v.data()).isOk());
    // 40 tokens = blocks of 16, 16, 8 rows; per layer, K and V, head: one DMA per block.
    EXPECT_EQ(fakeCounter("h2d") - h2d, 2 * 2 * 2 * 3);
    const auto &table = pool->blockTable(seq);
    ASSERT_EQ(table.size(), 3u);
    for (int32_t b : table)
      EXPECT_EQ(pool->tierOfBlock(b), 0);
    EXPECT_TRUE(verifySequence(*pool, seq, 7));
    // The data is where a GPU kernel would look: alias + block * blockBytes.
    for (int layer = 0; layer < 2; ++layer) {
      auto *kd = static_cast<const uint32_t *>(hgrt_gpu_alias(pool->kBase(layer)));
      auto *vd = static_cast<const uint32_t *>(hgrt_gpu_alias(pool->vBase(layer)));
      ASSERT_NE(kd, nullptr);
      ASSERT_NE(vd, nullptr);
      for (int64_t t = 0; t < 40; ++t)
        for (int h = 0; h < l.kvHeads; ++h) {
          size_t e = l.elementOffset(table[size_t(t / 16)], h, int32_t(t % 16));
          EXPECT_EQ(kd[e], pattern(7, layer, t, h, 0, 0));
          EXPECT_EQ(vd[e + 3], pattern(7, layer, t, h, 3, 1));
        }
    }
    // The host pages of the HBM range were never touched.
    long page = sysconf(_SC_PAGESIZE);
    size_t hbmBytes = size_t(pool->tierUsage(0).capacityBlocks) * bb;
    std::vector<unsigned char> resident(hbmBytes / size_t(page) + 1);
    ASSERT_EQ(mincore(pool->kBase(0), hbmBytes, resident.data()), 0);
    for (unsigned char r : resident)
      EXPECT_EQ(r & 1, 0);
  }
  EXPECT_EQ(fakeCounter("allocations"), allocBefore);
  EXPECT_EQ(fakeCounter("registered"), regBefore);
}

TEST_F(CudaPool, MigrationsMoveBlocksBetweenHostAndDevice) {
  useFake();
  Topology topo = makeTopology(deviceTiers());
  auto pool = makePool(topo);
  ASSERT_TRUE(pool);
  int64_t seq = pool->createSequence();
  std::vector<uint32_t> k, v;
  makeTokens(pool->layout(), 2, 3, 0, 48, k, v);
  ASSERT_TRUE(pool->append(seq, 48, k.data(), v.data()).isOk());
  long d2h = fakeCounter("d2h"), h2d = fakeCounter("h2d"), d2d = fakeCounter("d2d");
  ASSERT_TRUE(pool->migrateBlock(seq, 0, 1).isOk()); // HBM -> DRAM
  EXPECT_EQ(pool->tierOfBlock(pool->blockTable(seq)[0]), 1);
  EXPECT_EQ(fakeCounter("d2h") - d2h, 4); // one block of each of 4 arrays, no staging
  ASSERT_TRUE(pool->migrateBlock(seq, 0, 0).isOk()); // and back
  EXPECT_EQ(fakeCounter("h2d") - h2d, 4);
  EXPECT_EQ(pool->tierOfBlock(pool->blockTable(seq)[0]), 0);
  EXPECT_TRUE(verifySequence(*pool, seq, 3));
  // A placement pass that puts CPU tokens on the host goes through the same path.
  PlacementPolicy placement{PlacementConfig{}};
  auto moved = placement.rebalance(*pool, 32);
  ASSERT_TRUE(moved.isOk()) << moved.status().message();
  EXPECT_EQ(pool->tierOfBlock(pool->blockTable(seq)[0]), 1);
  EXPECT_EQ(pool->tierOfBlock(pool->blockTable(seq)[2]), 0);
  EXPECT_TRUE(verifySequence(*pool, seq, 3));
  EXPECT_EQ(fakeCounter("d2d"), d2d); // nothing moved inside the device
}

// The model runner's per-step placement: neither side reads the other's memory, so the split every
// segment runs at is the one the blocks were moved to before the step.
TEST_F(CudaPool, PlaceForStepRunsTheSplitThatIsPlaced) {
  useFake();
  auto pool = makePool(makeTopology(deviceTiers()));
  ASSERT_TRUE(pool);
  SchedulerConfig cfg;
  cfg.policy = SchedulerPolicy::kStatic;
  cfg.staticSplit = 20; // not a whole block: the GPU's share is rounded down to blocks
  SchedulerContext ctx(cfg, pool.get());
  ASSERT_TRUE(pool->setAppendTierOrder({1}).isOk()); // appends in host memory, as the runner's
  const int64_t lens[] = {70, 40};
  std::vector<int64_t> seqs;
  for (int i = 0; i < 2; ++i) {
    seqs.push_back(pool->createSequence());
    std::vector<uint32_t> k, v;
    makeTokens(pool->layout(), 2, 10 + i, 0, lens[i], k, v);
    ASSERT_TRUE(pool->append(seqs.back(), lens[i], k.data(), v.data()).isOk());
  }
  auto tiersOf = [&](int64_t seq) {
    std::vector<int32_t> t;
    for (int32_t b : pool->blockTable(seq))
      t.push_back(pool->tierOfBlock(b));
    return t;
  };
  EXPECT_EQ(tiersOf(seqs[0]), (std::vector<int32_t>{1, 1, 1, 1, 1}));
  ctx.beginStep(70);
  auto moved = ctx.placeForStep(0);
  ASSERT_TRUE(moved.isOk()) << moved.status().message();
  EXPECT_EQ(*moved, 3 + 1); // blocks 2-4 of the first sequence, block 2 of the second
  EXPECT_EQ(tiersOf(seqs[0]), (std::vector<int32_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(tiersOf(seqs[1]), (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(ctx.splitPoint(0), 32);
  EXPECT_EQ(ctx.splitPoint(7), 32); // every segment runs at the placed split
  EXPECT_EQ(*ctx.endStep(), 0);     // nothing left to move after the step
  EXPECT_TRUE(verifySequence(*pool, seqs[0], 10));
  EXPECT_TRUE(verifySequence(*pool, seqs[1], 11));
  // Before a CPU-only pass over the whole cache (prefill): everything back in host memory.
  moved = ctx.placeAllOnHost();
  ASSERT_TRUE(moved.isOk()) << moved.status().message();
  EXPECT_EQ(*moved, 4);
  EXPECT_EQ(tiersOf(seqs[0]), (std::vector<int32_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(ctx.splitPoint(3), INT64_MAX);
  EXPECT_TRUE(verifySequence(*pool, seqs[0], 10));
  EXPECT_TRUE(verifySequence(*pool, seqs[1], 11));
}

TEST_F(CudaPool, PlaceForStepRunsOnTheCpuWhenDeviceMemoryCannotTakeTheGpuShare) {
  useFake();
  auto pool = makePool(makeTopology(deviceTiers("capacity=8KiB,"))); // 2 blocks
  ASSERT_TRUE(pool);
  ASSERT_EQ(pool->tierUsage(0).capacityBlocks, 2);
  SchedulerConfig cfg;
  cfg.policy = SchedulerPolicy::kStatic;
  cfg.staticSplit = 0; // the GPU side would be every block
  SchedulerContext ctx(cfg, pool.get());
  ASSERT_TRUE(pool->setAppendTierOrder({1}).isOk());
  int64_t seq = pool->createSequence();
  std::vector<uint32_t> k, v;
  makeTokens(pool->layout(), 2, 4, 0, 64, k, v);
  ASSERT_TRUE(pool->append(seq, 64, k.data(), v.data()).isOk());
  ctx.beginStep(64);
  ASSERT_TRUE(ctx.placeForStep(0).isOk());
  EXPECT_EQ(ctx.splitPoint(0), INT64_MAX); // a CPU-only step, not a partial read of missing blocks
  for (int32_t b : pool->blockTable(seq))
    EXPECT_EQ(pool->tierOfBlock(b), 1);
  EXPECT_TRUE(verifySequence(*pool, seq, 4));
}

TEST_F(CudaPool, FailedDeviceCopyLeavesTheTableAndFreeListIntact) {
  useFake();
  Topology topo = makeTopology(deviceTiers());
  auto pool = makePool(topo);
  ASSERT_TRUE(pool);
  int64_t seq = pool->createSequence();
  std::vector<uint32_t> k, v;
  makeTokens(pool->layout(), 2, 5, 0, 16, k, v);
  ASSERT_TRUE(pool->append(seq, 16, k.data(), v.data()).isOk());
  ASSERT_TRUE(pool->migrateBlock(seq, 0, 1).isOk());
  int32_t before = pool->blockTable(seq)[0];
  int64_t freeHbm = pool->freeBlocks(0);
  setenv("FAKE_CUDA_FAIL", "cuMemcpyHtoDAsync", 1);
  Status s = pool->migrateBlock(seq, 0, 0);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("cuMemcpyHtoDAsync failed"), std::string::npos) << s.message();
  EXPECT_EQ(pool->blockTable(seq)[0], before);
  EXPECT_EQ(pool->freeBlocks(0), freeHbm);
  unsetenv("FAKE_CUDA_FAIL");
  EXPECT_TRUE(verifySequence(*pool, seq, 5));
}

TEST_F(CudaPool, CopiesOutsideTheTierAreRefusedBeforeAnyTransfer) {
  useFake();
  Topology topo = makeTopology(deviceTiers());
  auto pool = makePool(topo);
  ASSERT_TRUE(pool);
  const TierMemory &hbm = pool->tierMemory(0);
  const size_t bb = pool->layout().blockBytes();
  const size_t end = size_t(pool->tierUsage(0).capacityBlocks) * bb; // the HBM tier starts at id 0
  std::vector<char> buf(2 * bb);
  long h2d = fakeCounter("h2d"), d2h = fakeCounter("d2h");
  // The first piece is fine, the second is not: nothing at all may be copied.
  std::vector<TierMemory::Copy> copies = {{0, 0, buf.data(), bb}, {0, end - bb / 2, buf.data(), bb}};
  EXPECT_EQ(hbm.copyToDevice(copies, true).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hbm.copyToDevice({{4, 0, buf.data(), 16}}, false).code(), ErrorCode::kInvalidArgument); // no array 4
  EXPECT_EQ(hbm.copyFromDevice({{-1, 0, buf.data(), 16}}, true).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hbm.copyFromDevice({{0, SIZE_MAX - 8, buf.data(), 16}}, false).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hbm.copyToDevice({{0, 0, nullptr, 16}}, true).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hbm.copyWithinDevice(end, 0, bb).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(fakeCounter("h2d"), h2d);
  EXPECT_EQ(fakeCounter("d2h"), d2h);
  // Host tiers have no device copies at all.
  EXPECT_EQ(pool->tierMemory(1).copyToDevice({{0, 0, buf.data(), 16}}, true).code(), ErrorCode::kInvalidArgument);
}

TEST_F(CudaPool, DeviceAllocationFailureIsAStatusNotACrash) {
  useFake();
  Topology topo = makeTopology(deviceTiers());
  setenv("FAKE_CUDA_FAIL", "cuMemAlloc", 1);
  PoolConfig pc;
  pc.layout = smallLayout();
  pc.hugePages = false;
  auto pool = KvPool::create(topo, pc);
  ASSERT_FALSE(pool.isOk());
  EXPECT_EQ(pool.status().code(), ErrorCode::kSystem);
  EXPECT_NE(pool.status().message().find("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos)
      << pool.status().message();
}

} // namespace
} // namespace hybridgen::rt::test

namespace hybridgen::rt::test {
namespace {

// hgrt_gpu_check_batch: what a GPU partial would read is checked against the table and the pool.
TEST_F(CudaPool, GpuBatchCheckRefusesWhatAKernelMustNotRead) {
  useFake();
  Topology topo = makeTopology(deviceTiers());
  auto pool = makePool(topo);
  ASSERT_TRUE(pool);
  std::vector<uint32_t> k, v;
  int64_t a = pool->createSequence(), b = pool->createSequence();
  makeTokens(pool->layout(), 2, 1, 0, 40, k, v);
  ASSERT_TRUE(pool->append(a, 40, k.data(), v.data()).isOk());
  ASSERT_TRUE(pool->append(b, 20, k.data(), v.data()).isOk());
  ASSERT_TRUE(pool->migrateBlock(a, 0, 1).isOk()); // a's first block on the host
  std::vector<int64_t> seqs = {a, b};
  int32_t maxBlocks = pool->maxBlocksInUse(seqs);
  std::vector<int32_t> table(2 * size_t(maxBlocks)), lens(2);
  ASSERT_TRUE(pool->fillBatch(seqs, maxBlocks, table.data(), lens.data()).isOk());

  // Without a pool installed only the table itself is checked.
  EXPECT_EQ(hgrt_gpu_check_batch(table.data(), lens.data(), 2, maxBlocks, 16, 0), 1);
  auto ctx = std::make_shared<SchedulerContext>(SchedulerConfig{}, pool.get());
  installContext(ctx);
  testing::internal::CaptureStderr();
  EXPECT_EQ(hgrt_gpu_check_batch(table.data(), lens.data(), 2, maxBlocks, 16, 16), 1); // GPU from token 16
  EXPECT_EQ(hgrt_gpu_check_batch(table.data(), lens.data(), 2, maxBlocks, 16, 0), 0);  // a's block 0: host
  EXPECT_EQ(hgrt_gpu_check_batch(table.data(), lens.data(), 2, maxBlocks, 32, 16), 0); // wrong block size
  std::vector<int32_t> longLens = {40, 49};                                          // > 3 blocks of 16
  EXPECT_EQ(hgrt_gpu_check_batch(table.data(), longLens.data(), 2, maxBlocks, 16, 16), 0);
  std::vector<int32_t> badTable = table;
  badTable[size_t(maxBlocks) + 1] = pool->numBlocks() + 5; // b's second block: no such id
  EXPECT_EQ(hgrt_gpu_check_batch(badTable.data(), lens.data(), 2, maxBlocks, 16, 16), 0);
  badTable[size_t(maxBlocks) + 1] = -1; // an unused entry inside the length
  EXPECT_EQ(hgrt_gpu_check_batch(badTable.data(), lens.data(), 2, maxBlocks, 16, 16), 0);
  EXPECT_EQ(hgrt_gpu_check_batch(table.data(), lens.data(), 0, maxBlocks, 16, 16), 0);
  EXPECT_EQ(hgrt_gpu_check_batch(nullptr, lens.data(), 2, maxBlocks, 16, 16), 0);
  EXPECT_EQ(hgrt_gpu_check_batch(table.data(), lens.data(), 2, maxBlocks, 16, -1), 0);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("is not in device memory but in tier 'dram'"), std::string::npos) << err;
  EXPECT_NE(err.find("has length 49, the table holds 48 tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("outside the pool"), std::string::npos) << err;
  uninstallContext();
}

} // namespace
} // namespace hybridgen::rt::test
