// KvPool sequence operations: appends, token I/O, migration and batch block tables.
#include "hybridgen/runtime/kv_pool.h"

#include "hybridgen/runtime/checked.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace hybridgen::rt {

int64_t KvPool::createSequence() {
  int64_t id = nextSeq_++;
  seqs_.emplace(id, Sequence{});
  return id;
}

std::vector<int64_t> KvPool::sequences() const {
  std::vector<int64_t> out;
  for (const auto &kv : seqs_)
    out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

Status KvPool::freeSequence(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return notFound("pool: no sequence " + std::to_string(seq));
  // Last block first: the free lists are stacks, so the next sequence to append gets these
  // blocks back in ascending order. Kernels read a sequence walking its table; with the blocks
  // in descending addresses the f32 CPU kernel read ~3% slower (docs/cpu-path.md).
  const std::vector<int32_t> &blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b)
    releaseBlock(*b);
  seqs_.erase(it);
  return Status::ok();
}

Status KvPool::truncateSequence(int64_t seq, int64_t len) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return notFound("pool: no sequence " + std::to_string(seq));
  Sequence &s = it->second;
  if (len < 0 || len > s.len)
    return invalidArgument("pool: cannot truncate sequence " + std::to_string(seq) + " of length " +
                           std::to_string(s.len) + " to " + std::to_string(len) + " tokens");
  // As freeSequence: last block first. The kept last block's rows past |len| keep stale bytes that
  // no reader sees (every read is bounded by the length) and the next append overwrites.
  const size_t keep = size_t(ceilDiv(len, int64_t(cfg_.layout.blockSize)));
  while (s.blocks.size() > keep) {
    releaseBlock(s.blocks.back());
    s.blocks.pop_back();
  }
  s.len = len;
  return Status::ok();
}

int64_t KvPool::seqLen(int64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? -1 : it->second.len;
}

const std::vector<int32_t> &KvPool::blockTable(int64_t seq) const {
  static const std::vector<int32_t> empty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? empty : it->second.blocks;
}

Result<int64_t> KvPool::appendTokens(int64_t seq, int64_t n) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return notFound("pool: no sequence " + std::to_string(seq));
  if (n < 0)
    return invalidArgument("pool: negative token count");
  Sequence &s = it->second;
  // Sequence lengths travel to kernels as int32 seq_lens (docs/interfaces.md), so a sequence never
  // grows past INT32_MAX tokens; checking here also keeps every later pos + n inside int64.
  int64_t newLen = 0;
  if (!checkedAdd(s.len, n, &newLen) || newLen > INT32_MAX)
    return invalidArgument("pool: cannot append " + std::to_string(n) + " tokens to sequence " +
                           std::to_string(seq) + " of length " + std::to_string(s.len) +
                           ": a sequence holds at most " + std::to_string(INT32_MAX) + " tokens");
  const int64_t bs = cfg_.layout.blockSize;
  const int64_t need = ceilDiv(newLen, bs) - int64_t(s.blocks.size());
  // Check room first so a failed append leaves the sequence exactly as it was.
  int64_t room = 0;
  size_t tiers = cfg_.spill ? appendOrder_.size() : 1;
  for (size_t i = 0; i < tiers; ++i)
    room += int64_t(free_[size_t(appendOrder_[i])].size());
  if (need > room)
    return exhausted("pool: cannot append " + std::to_string(n) + " tokens to sequence " + std::to_string(seq) +
                     ": needs " + std::to_string(need) + " blocks, " + std::to_string(room) +
                     " free in the tiers allowed" + (cfg_.spill ? "" : " (spill disabled)"));
  for (int64_t i = 0; i < need; ++i) {
    int32_t b = *allocBlock(0, s.blocks.empty() ? -1 : s.blocks.back()); // room checked above
    owner_[size_t(b)] = seq;
    logical_[size_t(b)] = int32_t(s.blocks.size());
    s.blocks.push_back(b);
  }
  int64_t first = s.len;
  s.len = newLen;
  return first;
}

Result<const std::vector<int32_t> *> KvPool::tokenBlocks(int64_t seq, int32_t layer, int64_t pos,
                                                         int64_t n) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return notFound("pool: no sequence " + std::to_string(seq));
  if (layer < 0 || layer >= cfg_.numLayers)
    return invalidArgument("pool: layer " + std::to_string(layer) + " out of range");
  if (!rangeWithin(pos, n, it->second.len))
    return invalidArgument("pool: " + std::to_string(n) + " tokens from position " +
                           std::to_string(pos) + " are outside sequence length " +
                           std::to_string(it->second.len));
  return &it->second.blocks;
}

namespace {

/// Stores |row| (head_dim elements) as K row |r| of kv head |h| in block |b| of |kArray|, element
/// by element where the layout stores the piece transposed.
void storeKRow(const KvLayout &L, char *kArray, int32_t b, int32_t h, int32_t r, const char *row) {
  if (!L.kTransposed) {
    std::memcpy(kArray + L.byteOffset(b, h, r), row, L.rowBytes());
    return;
  }
  for (int32_t col = 0; col < L.headDim; ++col)
    std::memcpy(kArray + L.kByteOffset(b, h, r, col), row + col * L.eltSize(), L.eltSize());
}

/// The inverse of storeKRow: K row |r| of kv head |h| in block |b| into |row|.
void loadKRow(const KvLayout &L, const char *kArray, int32_t b, int32_t h, int32_t r, char *row) {
  if (!L.kTransposed) {
    std::memcpy(row, kArray + L.byteOffset(b, h, r), L.rowBytes());
    return;
  }
  for (int32_t col = 0; col < L.headDim; ++col)
    std::memcpy(row + col * L.eltSize(), kArray + L.kByteOffset(b, h, r, col), L.eltSize());
}

} // namespace

Status KvPool::writeTokens(int64_t seq, int32_t layer, int64_t pos, int64_t n, const void *k, const void *v) {
  Result<const std::vector<int32_t> *> blocks = tokenBlocks(seq, layer, pos, n);
  if (!blocks)
    return blocks.status();
  if (n > 0 && (!k || !v))
    return invalidArgument("pool: no K/V buffer for " + std::to_string(n) + " tokens");
  const KvLayout &L = cfg_.layout;
  const size_t row = L.rowBytes();
  char *kd = static_cast<char *>(kArrays_[size_t(layer)]);
  char *vd = static_cast<char *>(vArrays_[size_t(layer)]);
  const char *ks = static_cast<const char *>(k), *vs = static_cast<const char *>(v);
  // Rows of blocks in device memory are collected (head-major, so a block's rows merge into one
  // DMA per head) and copied once at the end.
  const TierMemory *dev = nullptr;
  std::vector<TierMemory::Copy> devRows, devV;
  for (int32_t h = 0; h < L.kvHeads; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t t = pos + i;
      int32_t b = (**blocks)[size_t(t / L.blockSize)];
      int32_t r = int32_t(t % L.blockSize);
      size_t src = (size_t(i) * L.kvHeads + h) * row;
      if (const TierMemory *m = deviceMemoryOf(b)) {
        dev = m;
        devRows.push_back({2 * layer, L.byteOffset(b, h, r), const_cast<char *>(ks + src), row});
        devV.push_back({2 * layer + 1, L.byteOffset(b, h, r), const_cast<char *>(vs + src), row});
        continue;
      }
      storeKRow(L, kd, b, h, r, ks + src);
      std::memcpy(vd + L.byteOffset(b, h, r), vs + src, row);
    }
  }
  devRows.insert(devRows.end(), devV.begin(), devV.end()); // K rows, then V rows: each merges
  return flushDeviceRows(dev, devRows, /*toDevice=*/true);
}

Status KvPool::readTokens(int64_t seq, int32_t layer, int64_t pos, int64_t n, void *k, void *v) const {
  Result<const std::vector<int32_t> *> blocks = tokenBlocks(seq, layer, pos, n);
  if (!blocks)
    return blocks.status();
  if (n > 0 && (!k || !v))
    return invalidArgument("pool: no K/V buffer for " + std::to_string(n) + " tokens");
  const KvLayout &L = cfg_.layout;
  const size_t row = L.rowBytes();
  const char *kd = static_cast<const char *>(kArrays_[size_t(layer)]);
  const char *vd = static_cast<const char *>(vArrays_[size_t(layer)]);
  char *ko = static_cast<char *>(k), *vo = static_cast<char *>(v);
  const TierMemory *dev = nullptr;
  std::vector<TierMemory::Copy> devRows, devV;
  for (int32_t h = 0; h < L.kvHeads; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t t = pos + i;
      int32_t b = (**blocks)[size_t(t / L.blockSize)];
      int32_t r = int32_t(t % L.blockSize);
      size_t dst = (size_t(i) * L.kvHeads + h) * row;
      if (const TierMemory *m = deviceMemoryOf(b)) {
        dev = m;
        devRows.push_back({2 * layer, L.byteOffset(b, h, r), ko + dst, row});
        devV.push_back({2 * layer + 1, L.byteOffset(b, h, r), vo + dst, row});
        continue;
      }
      loadKRow(L, kd, b, h, r, ko + dst);
      std::memcpy(vo + dst, vd + L.byteOffset(b, h, r), row);
    }
  }
  devRows.insert(devRows.end(), devV.begin(), devV.end());
  return flushDeviceRows(dev, devRows, /*toDevice=*/false);
}

Status KvPool::append(int64_t seq, int64_t n, const void *k, const void *v) {
  // Everything that can refuse is checked before appendTokens changes the sequence: a refused
  // append leaves the pool exactly as it was.
  if (n > 0 && (!k || !v))
    return invalidArgument("pool: append of " + std::to_string(n) + " tokens without K/V data");
  auto pos = appendTokens(seq, n);
  if (!pos)
    return pos.status();
  const size_t perLayer = size_t(n) * size_t(cfg_.layout.kvHeads) * cfg_.layout.rowBytes();
  for (int32_t layer = 0; layer < cfg_.numLayers; ++layer) {
    Status s = writeTokens(seq, layer, *pos, n, static_cast<const char *>(k) + perLayer * size_t(layer),
                           static_cast<const char *>(v) + perLayer * size_t(layer));
    if (!s)
      return s;
  }
  return Status::ok();
}

Status KvPool::migrateBlock(int64_t seq, int64_t logical, int32_t tier) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return notFound("pool: no sequence " + std::to_string(seq));
  if (logical < 0 || logical >= int64_t(it->second.blocks.size()))
    return invalidArgument("pool: sequence " + std::to_string(seq) + " has no block " + std::to_string(logical));
  if (tier < 0 || tier >= topo_.tierCount())
    return invalidArgument("pool: no tier " + std::to_string(tier));
  int32_t src = it->second.blocks[size_t(logical)];
  if (tierOfBlock(src) == tier)
    return Status::ok();
  FreeBlocks &fl = free_[size_t(tier)];
  if (fl.empty())
    return exhausted("pool: tier '" + topo_.tiers()[size_t(tier)].name + "' has no free block to migrate into");
  // Next to the sequence's previous block when that is in |tier| too, so migrated runs stay runs.
  int32_t dst = fl.take(logical > 0 ? it->second.blocks[size_t(logical - 1)] : -1);
  // Copy first, repoint second: readers of the table see either the old or the new complete block.
  if (Status s = copyBlock(dst, src); !s) {
    fl.release(dst); // the table still names the intact source block
    return s;
  }
  owner_[size_t(dst)] = seq;
  logical_[size_t(dst)] = int32_t(logical);
  hits_[size_t(dst)] = hits_[size_t(src)];
  it->second.blocks[size_t(logical)] = dst;
  releaseBlock(src);
  ++migrations_;
  return Status::ok();
}

int32_t KvPool::maxBlocksInUse(const std::vector<int64_t> &seqs) const {
  size_t m = 0;
  for (int64_t s : seqs)
    m = std::max(m, blockTable(s).size());
  return int32_t(m);
}

Status KvPool::fillBatch(const std::vector<int64_t> &seqs, int32_t maxBlocks, int32_t *table, int32_t *lens) const {
  if (maxBlocks < 0)
    return invalidArgument("pool: negative maxBlocks " + std::to_string(maxBlocks));
  size_t tableSize = 0;
  if (!checkedSize(&tableSize, int64_t(seqs.size()), maxBlocks))
    return invalidArgument("pool: a block table of " + std::to_string(seqs.size()) + " x " +
                           std::to_string(maxBlocks) + " entries does not fit in memory");
  if (!seqs.empty() && (!lens || (tableSize > 0 && !table)))
    return invalidArgument("pool: fillBatch without table or lens buffers");
  // Validate every sequence first: a refused batch writes nothing into the caller's buffers.
  for (int64_t id : seqs) {
    auto it = seqs_.find(id);
    if (it == seqs_.end())
      return notFound("pool: no sequence " + std::to_string(id));
    if (int64_t(it->second.blocks.size()) > maxBlocks)
      return invalidArgument("pool: sequence " + std::to_string(id) + " needs " +
                             std::to_string(it->second.blocks.size()) + " blocks > maxBlocks " +
                             std::to_string(maxBlocks));
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto it = seqs_.find(seqs[i]);
    int32_t *row = table + i * size_t(maxBlocks);
    std::fill(row, row + maxBlocks, -1);
    std::copy(it->second.blocks.begin(), it->second.blocks.end(), row);
    lens[i] = int32_t(it->second.len);
  }
  return Status::ok();
}

} // namespace hybridgen::rt
