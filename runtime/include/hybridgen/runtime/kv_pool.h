// Paged KV cache over memory tiers: block allocation, per-sequence block tables, appends, migration.
#pragma once

#include "hybridgen/runtime/free_blocks.h"
#include "hybridgen/runtime/kv_layout.h"
#include "hybridgen/runtime/status.h"
#include "hybridgen/runtime/tier_memory.h"
#include "hybridgen/runtime/topology.h"

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace hybridgen::rt {

struct PoolConfig {
  int32_t numLayers = 1;
  KvLayout layout;
  /// Optional per-tier cap on blocks (index = tier index); missing or < 0 = from the tier capacity.
  std::vector<int64_t> maxBlocksPerTier;
  bool hugePages = true; // madvise(MADV_HUGEPAGE) on the pool mappings
  /// When the preferred tier is full, take the next tier in order (true) or fail (false).
  bool spill = true;
  /// With an HBM tier in device memory: page-lock the host tiers' ranges (cuMemHostRegister) so
  /// migrations to and from HBM are DMA. This commits every host tier's pages up front.
  bool pinHostTiers = true;
  /// Blocks of each host tier, from its first id (the ones handed out first), whose pages are
  /// written at create under the tier's NUMA binding; 0 (the default) leaves every page to fault
  /// in on first use. The model runner commits what batch x maxContext can use, so the page
  /// faults, and the kernel's zeroing of each fresh 2 MiB page, happen at load instead of inside
  /// the first prefill (on a VM guest whose host backs fresh memory slowly that was ~1 s of a
  /// 37-token prefill), and a pool larger than the memory available is refused at create.
  int64_t commitBlocksPerTier = 0;
};

struct TierUsage {
  int64_t capacityBlocks = 0;
  int64_t usedBlocks = 0;
};

/// One KV pool for all layers of a model. Block ids are global: id b names the same block in every
/// layer's K and V array, and the tier that owns b's id range is where b lives. Not thread-safe: call
/// from one thread (the decode loop); kernels may read the arrays concurrently.
class KvPool {
public:
  static Result<std::unique_ptr<KvPool>> create(const Topology &topo, const PoolConfig &cfg);
  ~KvPool();
  KvPool(const KvPool &) = delete;
  KvPool &operator=(const KvPool &) = delete;

  //===--- sequences ---===//
  int64_t createSequence();
  Status freeSequence(int64_t seq);
  bool hasSequence(int64_t seq) const { return seqs_.count(seq) != 0; }
  std::vector<int64_t> sequences() const;

  /// Makes room for |n| more tokens (all or nothing: on error nothing changed). Returns the position
  /// of the first new token. New blocks go to the first tier of appendTierOrder() with room.
  Result<int64_t> appendTokens(int64_t seq, int64_t n);
  /// Keeps the first |len| tokens of |seq| (0 <= len <= its length; else an error and nothing
  /// changes) and frees the blocks past them, last first; the next append continues at |len|.
  Status truncateSequence(int64_t seq, int64_t len);
  /// Copies |n| tokens into layer |layer| at positions [pos, pos+n); |k|/|v| are [n][kvHeads][headDim]
  /// in the pool dtype. Positions must already be appended.
  Status writeTokens(int64_t seq, int32_t layer, int64_t pos, int64_t n, const void *k, const void *v);
  Status readTokens(int64_t seq, int32_t layer, int64_t pos, int64_t n, void *k, void *v) const;
  /// appendTokens + writeTokens for every layer; |k|/|v| are [numLayers][n][kvHeads][headDim].
  Status append(int64_t seq, int64_t n, const void *k, const void *v);

  //===--- migration ---===//
  /// Copies logical block |logical| of |seq| to a free block of |tier| (all layers), then repoints the
  /// block table and frees the old block. The table never names a block that holds partial data.
  Status migrateBlock(int64_t seq, int64_t logical, int32_t tier);
  int64_t migrationsTotal() const { return migrations_; }

  //===--- views for kernels ---===//
  /// Base of layer |layer|'s K/V array [numBlocks][kvHeads][blockSize][headDim] in host memory.
  /// nullptr for a layer out of range. With an HBM tier in device memory, that tier's blocks are
  /// not in this array but at hgrt_gpu_alias(base) + id * blockBytes on the device.
  void *kBase(int32_t layer) const { return validLayer(layer) ? kArrays_[size_t(layer)] : nullptr; }
  void *vBase(int32_t layer) const { return validLayer(layer) ? vArrays_[size_t(layer)] : nullptr; }
  int64_t seqLen(int64_t seq) const;
  /// The block ids of |seq| in token order (empty for an unknown sequence).
  const std::vector<int32_t> &blockTable(int64_t seq) const;
  /// Fills an int32 [seqs.size()][maxBlocks] block table (unused entries -1) and int32 lens.
  Status fillBatch(const std::vector<int64_t> &seqs, int32_t maxBlocks, int32_t *table, int32_t *lens) const;
  int32_t maxBlocksInUse(const std::vector<int64_t> &seqs) const;

  //===--- tiers and blocks ---===//
  const KvLayout &layout() const { return cfg_.layout; }
  int32_t numLayers() const { return cfg_.numLayers; }
  int64_t numBlocks() const { return totalBlocks_; } // array extent, including alignment gaps
  const Topology &topology() const { return topo_; }
  /// What PoolConfig::commitBlocksPerTier wrote at create: bytes (K and V of every layer) and
  /// seconds.
  uint64_t committedBytes() const { return committedBytes_; }
  double commitSeconds() const { return commitSeconds_; }
  // Out-of-range tiers/blocks read as empty/free (-1, zeros), never as undefined behaviour.
  int32_t tierOfBlock(int32_t block) const;
  TierUsage tierUsage(int32_t tier) const;
  int64_t freeBlocks(int32_t tier) const { return validTier(tier) ? int64_t(free_[size_t(tier)].size()) : 0; }
  const TierMemory &tierMemory(int32_t tier) const { return *mem_[size_t(tier)]; }
  /// Owner of a block: (sequence, logical index), or seq -1 when free.
  int64_t blockOwner(int32_t block) const { return validBlock(block) ? owner_[size_t(block)] : -1; }
  int32_t blockLogical(int32_t block) const { return validBlock(block) ? logical_[size_t(block)] : -1; }
  /// Tier preference for new blocks; the placement policy may change it (default: topology order).
  const std::vector<int32_t> &appendTierOrder() const { return appendOrder_; }
  Status setAppendTierOrder(std::vector<int32_t> order);

  /// Sparse-mode feedback: how often a block's tokens were selected (follows the block on migration).
  void addHits(int32_t block, uint64_t hits) {
    if (validBlock(block))
      hits_[size_t(block)] += hits;
  }
  uint64_t hits(int32_t block) const { return validBlock(block) ? hits_[size_t(block)] : 0; }

private:
  KvPool(const Topology &topo, const PoolConfig &cfg) : topo_(topo), cfg_(cfg) {}
  bool validLayer(int32_t l) const { return l >= 0 && l < cfg_.numLayers; }
  bool validTier(int32_t t) const { return t >= 0 && size_t(t) < free_.size(); }
  bool validBlock(int32_t b) const { return b >= 0 && int64_t(b) < totalBlocks_; }
  Status init();
  /// Writes the pages of blocks [first, first + count) of every layer's K and V arrays.
  Status commitBlocks(int64_t first, int64_t count);
  /// A free block from the tiers of appendTierOrder() from |preferredOrderStart|, next to |after|
  /// (the sequence's last block, -1 none) where it can (FreeBlocks::take).
  Result<int32_t> allocBlock(int32_t preferredOrderStart, int32_t after);
  /// The block table of |seq| if |layer| and tokens [pos, pos+n) exist, else the error.
  Result<const std::vector<int32_t> *> tokenBlocks(int64_t seq, int32_t layer, int64_t pos,
                                                   int64_t n) const;
  void releaseBlock(int32_t block);
  Status copyBlock(int32_t dst, int32_t src);
  /// The tier memory of |block| when it lives on a device, else nullptr (host memory).
  const TierMemory *deviceMemoryOf(int32_t block) const;
  /// Moves token rows of device-tier blocks: |copies| grouped by tier memory.
  Status flushDeviceRows(const TierMemory *mem, const std::vector<TierMemory::Copy> &copies, bool toDevice) const;

  struct Sequence {
    int64_t len = 0;
    std::vector<int32_t> blocks;
  };

  Topology topo_;
  PoolConfig cfg_;
  std::vector<std::unique_ptr<TierMemory>> mem_;
  std::vector<int64_t> tierFirst_, tierCount_;
  std::vector<FreeBlocks> free_; // per tier
  std::vector<int32_t> appendOrder_;
  int64_t totalBlocks_ = 0;
  size_t mapBytes_ = 0;
  std::vector<void *> kArrays_, vArrays_;
  std::vector<int64_t> owner_;
  std::vector<int32_t> logical_;
  std::vector<uint64_t> hits_;
  std::unordered_map<int64_t, Sequence> seqs_;
  int64_t nextSeq_ = 0;
  int64_t migrations_ = 0;
  uint64_t committedBytes_ = 0;
  double commitSeconds_ = 0;
};

} // namespace hybridgen::rt
