// KvPool setup: tier block ranges, one host mapping per layer array bound to tiers, block free lists.
#include "hybridgen/runtime/kv_pool.h"

#include "hybridgen/runtime/checked.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <new>
#include <numeric>
#include <string>
#include <utility>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14; older headers lack the name
#endif

namespace hybridgen::rt {

namespace {
constexpr size_t kHugePage = 2u << 20;
constexpr size_t kMaxAlignUnit = 64u << 20;

/// MemAvailable of /proc/meminfo in bytes, or 0 when it cannot be read.
uint64_t availableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:")
      return kib << 10;
    in.ignore(256, '\n');
  }
  return 0;
}

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }
} // namespace

Result<std::unique_ptr<KvPool>> KvPool::create(const Topology &topo, const PoolConfig &cfg) {
  const KvLayout &l = cfg.layout;
  if (cfg.numLayers <= 0)
    return invalidArgument("pool: numLayers must be > 0");
  if (l.kvHeads <= 0 || l.headDim <= 0)
    return invalidArgument("pool: kvHeads and headDim must be > 0");
  if (l.blockSize < 16 || l.blockSize > 256)
    return invalidArgument("pool: blockSize must be in [16, 256], got " + std::to_string(l.blockSize));
  if (topo.tierCount() == 0)
    return invalidArgument("pool: topology has no tiers");
  // The GPU kernels read K row-major, and the row copies to device memory assume it.
  for (const TierInfo &t : topo.tiers())
    if (l.kTransposed && !t.hostAccessible())
      return invalidArgument("pool: K stored transposed (kTransposed) is not supported with a "
                             "device-memory tier ('" + t.name + "')");
  if (l.dtype != DType::kF32 && l.dtype != DType::kF16 && l.dtype != DType::kBF16)
    return invalidArgument("pool: unknown dtype " + std::to_string(int32_t(l.dtype)));
  // K and V of every layer for one block must be addressable: a layout whose block bytes overflow
  // would make every offset below wrap.
  size_t perBlock = 0;
  if (!checkedSize(&perBlock, 2, cfg.numLayers, l.kvHeads, l.blockSize, l.headDim, l.eltSize()) ||
      perBlock > (size_t(1) << 40))
    return invalidArgument("pool: one block of every layer (" + std::to_string(cfg.numLayers) +
                           " layers x kvHeads " + std::to_string(l.kvHeads) + " x headDim " +
                           std::to_string(l.headDim) + ") exceeds 1 TiB");
  std::unique_ptr<KvPool> pool(new KvPool(topo, cfg));
  Status s = pool->init();
  if (!s)
    return s;
  return pool;
}

Status KvPool::init() {
  const size_t bb = cfg_.layout.blockBytes();
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const uint64_t perBlock = 2ull * uint64_t(cfg_.numLayers) * bb; // K and V of every layer (create()
                                                                   // checked it cannot overflow)
  // Tier ranges start on huge-page boundaries when affordable so mbind and THP never split a block
  // between two tiers; the gap ids are never allocated and their pages never touched.
  size_t unit = std::lcm(bb, kHugePage);
  if (unit > kMaxAlignUnit)
    unit = std::lcm(bb, page);
  const int64_t alignBlocks = int64_t(unit / bb);
  const int32_t nt = topo_.tierCount();
  // Block ids are int32: every id range, gaps included, must stay below INT32_MAX. Each tier is
  // capped there first, so the running sum (at most tiers x INT32_MAX) cannot overflow int64.
  const auto tooMany = [] {
    return invalidArgument("pool: more blocks than int32 block ids can name; raise blockSize or "
                           "lower the tier capacities");
  };
  int64_t next = 0, usable = 0;
  for (int32_t t = 0; t < nt; ++t) {
    uint64_t capBlocks = topo_.tiers()[size_t(t)].capacityBytes / perBlock;
    int64_t cap = int64_t(std::min<uint64_t>(capBlocks, INT32_MAX));
    if (size_t(t) < cfg_.maxBlocksPerTier.size() && cfg_.maxBlocksPerTier[size_t(t)] >= 0)
      cap = std::min(cap, cfg_.maxBlocksPerTier[size_t(t)]);
    next = ceilDiv(next, alignBlocks) * alignBlocks;
    tierFirst_.push_back(next);
    tierCount_.push_back(cap);
    next += cap;
    usable += cap;
    if (next >= INT32_MAX)
      return tooMany();
    mem_.push_back(makeTierMemory(topo_.tiers()[size_t(t)]));
  }
  totalBlocks_ = next;
  if (usable == 0)
    return invalidArgument("pool: no tier has room for a single block (" + std::to_string(perBlock) +
                           " bytes for all layers)");
  size_t arrayBytes = 0;
  if (!checkedSize(&arrayBytes, totalBlocks_, bb) || arrayBytes > SIZE_MAX - page)
    return tooMany();
  // The arrays are reserved lazily (MAP_NORESERVE), but the per-block bookkeeping (owner, logical
  // index, hits, free lists) is written at once: refuse sizes that would exhaust the machine
  // (tiny blocks over terabyte tiers) instead of being killed for memory while filling it.
  const size_t bookkeeping = size_t(totalBlocks_) * (sizeof(int64_t) + sizeof(int32_t) + sizeof(uint64_t)) +
                             size_t(usable) * sizeof(int32_t);
  const long physPages = sysconf(_SC_PHYS_PAGES);
  if (physPages > 0 && bookkeeping > size_t(physPages) * page / 4)
    return exhausted("pool: " + std::to_string(totalBlocks_) + " block ids need " +
                     mib(bookkeeping) + " of bookkeeping, more than a quarter "
                     "of this machine's memory; raise blockSize or lower the tier capacities");
  mapBytes_ = (arrayBytes + page - 1) / page * page;
  for (int32_t layer = 0; layer < cfg_.numLayers; ++layer) {
    for (auto *arrays : {&kArrays_, &vArrays_}) {
      void *p = mmap(nullptr, mapBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED)
        return systemError(std::string("pool: mmap of ") + std::to_string(mapBytes_) + " bytes failed: " +
                           std::strerror(errno));
      arrays->push_back(p);
      if (cfg_.hugePages)
        (void)madvise(p, mapBytes_, MADV_HUGEPAGE); // best effort: THP may be off
      for (int32_t t = 0; t < nt; ++t) {
        if (tierCount_[size_t(t)] == 0)
          continue;
        size_t begin = size_t(tierFirst_[size_t(t)]) * bb;
        size_t end = std::min(mapBytes_, (size_t(tierFirst_[size_t(t)] + tierCount_[size_t(t)]) * bb + page - 1) / page * page);
        Status s = mem_[size_t(t)]->bindHostRange(static_cast<char *>(p) + begin, end - begin);
        if (!s)
          return s;
      }
      // Every tier sees every array (also with no blocks), so array indices agree across tiers.
      // With a device tier, host tiers are pinned so migrations to and from it are DMA.
      bool pin = false;
      for (const TierInfo &tier : topo_.tiers())
        pin = pin || (tier.onDevice && cfg_.pinHostTiers);
      for (int32_t t = 0; t < nt; ++t) {
        size_t begin = size_t(tierFirst_[size_t(t)]) * bb, bytes = size_t(tierCount_[size_t(t)]) * bb;
        if (Status s = mem_[size_t(t)]->attachArray(p, mapBytes_, begin, bytes, pin); !s)
          return s;
      }
    }
  }
  free_.resize(size_t(nt));
  for (int32_t t = 0; t < nt; ++t) {
    free_[size_t(t)] = FreeBlocks(int32_t(tierFirst_[size_t(t)]), int32_t(tierCount_[size_t(t)]));
    appendOrder_.push_back(t);
  }
  owner_.assign(size_t(totalBlocks_), -1);
  logical_.assign(size_t(totalBlocks_), -1);
  hits_.assign(size_t(totalBlocks_), 0);
  if (cfg_.commitBlocksPerTier <= 0)
    return Status::ok();
  // Commit the first blocks of every host tier (device tiers hold their blocks in device memory).
  std::vector<std::pair<int64_t, int64_t>> ranges; // (first block id, blocks) per host tier
  uint64_t want = 0;
  for (int32_t t = 0; t < nt; ++t) {
    if (mem_[size_t(t)]->onDevice())
      continue;
    ranges.emplace_back(tierFirst_[size_t(t)], std::min(tierCount_[size_t(t)], cfg_.commitBlocksPerTier));
    want += perBlock * uint64_t(ranges.back().second);
  }
  const uint64_t available = availableMemoryBytes();
  if (available > 0 && want > available)
    return exhausted("pool: the KV cache needs " + mib(want) + " (K and V of " +
                     std::to_string(cfg_.numLayers) + " layers) but only " + mib(available) +
                     " of memory is available; lower the context length or the batch");
  const auto start = std::chrono::steady_clock::now();
  for (auto [first, count] : ranges)
    if (Status s = commitBlocks(first, count); !s)
      return s;
  committedBytes_ = want;
  commitSeconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::ok();
}

Status KvPool::commitBlocks(int64_t first, int64_t count) {
  if (count <= 0)
    return Status::ok();
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), bb = cfg_.layout.blockBytes();
  const size_t begin = size_t(first) * bb / page * page;
  const size_t end = std::min(mapBytes_, (size_t(first + count) * bb + page - 1) / page * page);
  for (const auto *arrays : {&kArrays_, &vArrays_}) {
    for (void *array : *arrays) {
      char *p = static_cast<char *>(array) + begin;
      // The kernel populates the range under the tier's memory policy without a fault per page;
      // kernels before 5.14 answer EINVAL, and then a write of each page's own byte does it.
      if (::madvise(p, end - begin, MADV_POPULATE_WRITE) == 0)
        continue;
      if (errno != EINVAL)
        return exhausted("pool: cannot commit " + mib(end - begin) + " of KV memory: " +
                         std::strerror(errno));
      for (size_t o = 0; o < end - begin; o += page) {
        volatile char *byte = p + o;
        *byte = *byte;
      }
    }
  }
  return Status::ok();
}

KvPool::~KvPool() {
  mem_.clear(); // unpin and free device twins while the host mappings still exist
  for (void *p : kArrays_)
    munmap(p, mapBytes_);
  for (void *p : vArrays_)
    munmap(p, mapBytes_);
}

int32_t KvPool::tierOfBlock(int32_t block) const {
  for (size_t t = 0; t < tierFirst_.size(); ++t)
    if (block >= tierFirst_[t] && block < tierFirst_[t] + tierCount_[t])
      return int32_t(t);
  return -1;
}

TierUsage KvPool::tierUsage(int32_t tier) const {
  TierUsage u;
  if (!validTier(tier))
    return u;
  u.capacityBlocks = tierCount_[size_t(tier)];
  u.usedBlocks = u.capacityBlocks - int64_t(free_[size_t(tier)].size());
  return u;
}

Status KvPool::setAppendTierOrder(std::vector<int32_t> order) {
  if (order.empty())
    return invalidArgument("pool: empty append tier order");
  std::vector<bool> seen(size_t(topo_.tierCount()), false);
  for (int32_t t : order) {
    if (t < 0 || t >= topo_.tierCount())
      return invalidArgument("pool: append tier order names tier " + std::to_string(t));
    // A tier listed twice would count its free blocks twice when an append checks for room.
    if (seen[size_t(t)])
      return invalidArgument("pool: append tier order names tier " + std::to_string(t) + " twice");
    seen[size_t(t)] = true;
  }
  appendOrder_ = std::move(order);
  return Status::ok();
}

Result<int32_t> KvPool::allocBlock(int32_t orderStart, int32_t after) {
  size_t n = cfg_.spill ? appendOrder_.size() : size_t(orderStart) + 1;
  for (size_t i = size_t(orderStart); i < n && i < appendOrder_.size(); ++i) {
    if (int32_t b = free_[size_t(appendOrder_[i])].take(after); b >= 0)
      return b;
  }
  return exhausted("pool: all tiers full");
}

void KvPool::releaseBlock(int32_t block) {
  owner_[size_t(block)] = -1;
  logical_[size_t(block)] = -1;
  hits_[size_t(block)] = 0;
  free_[size_t(tierOfBlock(block))].release(block);
}

Status KvPool::copyBlock(int32_t dst, int32_t src) {
  const size_t bb = cfg_.layout.blockBytes();
  const TierMemory *dm = deviceMemoryOf(dst), *sm = deviceMemoryOf(src);
  if (dm && dm == sm)
    return dm->copyWithinDevice(size_t(dst) * bb, size_t(src) * bb, bb);
  if (dm && sm) // two device tiers: through a host bounce (not a configuration hybridgen makes)
    return invalidArgument("pool: migration between two device tiers is not supported");
  if (dm || sm) {
    // Host side is the pool's (pinned) mapping: straight DMA, no staging.
    std::vector<TierMemory::Copy> copies;
    int32_t hostBlock = dm ? src : dst, devBlock = dm ? dst : src;
    for (int32_t layer = 0; layer < cfg_.numLayers; ++layer)
      for (int32_t kv = 0; kv < 2; ++kv) {
        char *base = static_cast<char *>((kv ? vArrays_ : kArrays_)[size_t(layer)]);
        copies.push_back({2 * layer + kv, size_t(devBlock) * bb, base + size_t(hostBlock) * bb, bb});
      }
    return dm ? dm->copyToDevice(copies, /*staged=*/false) : sm->copyFromDevice(copies, /*staged=*/false);
  }
  for (int32_t layer = 0; layer < cfg_.numLayers; ++layer) {
    char *k = static_cast<char *>(kArrays_[size_t(layer)]);
    char *v = static_cast<char *>(vArrays_[size_t(layer)]);
    std::memcpy(k + size_t(dst) * bb, k + size_t(src) * bb, bb);
    std::memcpy(v + size_t(dst) * bb, v + size_t(src) * bb, bb);
  }
  return Status::ok();
}

const TierMemory *KvPool::deviceMemoryOf(int32_t block) const {
  int32_t t = tierOfBlock(block);
  return t >= 0 && mem_[size_t(t)]->onDevice() ? mem_[size_t(t)].get() : nullptr;
}

Status KvPool::flushDeviceRows(const TierMemory *mem, const std::vector<TierMemory::Copy> &copies,
                               bool toDevice) const {
  if (!mem || copies.empty())
    return Status::ok();
  return toDevice ? mem->copyToDevice(copies, /*staged=*/true) : mem->copyFromDevice(copies, /*staged=*/true);
}

} // namespace hybridgen::rt
