// Shared helpers for the runtime tests: a 3-tier emulated topology and deterministic token data.
#pragma once

#include "hybridgen/runtime/kv_pool.h"
#include "hybridgen/runtime/topology.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace hybridgen::rt::test {

/// hbm (emulated, host memory) + dram on node 0 + "cxl" emulated as a second region of node 0.
/// Bandwidths are configured so tests do not depend on this machine's probe.
inline std::string threeTierConfig(const std::string &hbmCap = "1MiB", const std::string &dramCap = "4MiB",
                                   const std::string &cxlCap = "4MiB") {
  return "name=hbm,kind=hbm,capacity=" + hbmCap + ",bandwidth=4800\n"
         "name=dram,kind=dram,node=0,capacity=" + dramCap + ",bandwidth=40  # local DRAM\n"
         "name=cxl,kind=cxl,node=0,capacity=" + cxlCap + ",bandwidth=20\n";
}

inline Topology makeTopology(const std::string &cfg) {
  DiscoverOptions o;
  o.probeBandwidth = false;
  auto t = Topology::fromConfig(cfg, o);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return *t;
}

/// Small layout so tests are fast: 2 kv-heads x 16 tokens x 8 dims x 4 bytes = 1 KiB per block.
inline KvLayout smallLayout(int32_t blockSize = 16) {
  KvLayout l;
  l.kvHeads = 2;
  l.blockSize = blockSize;
  l.headDim = 8;
  l.dtype = DType::kF32;
  return l;
}

/// A distinct bit pattern for every (sequence tag, layer, token, head, dim, K/V).
inline uint32_t pattern(uint64_t tag, int layer, int64_t token, int head, int d, int isV) {
  uint64_t x = tag * 0x9E3779B97F4A7C15ull ^ (uint64_t(layer) << 56) ^ (uint64_t(token) << 20) ^
               (uint64_t(head) << 12) ^ (uint64_t(d) << 2) ^ uint64_t(isV);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return uint32_t(x);
}

/// Fills [layers][n][kvHeads][headDim] K and V buffers for tokens [pos, pos+n) of |tag|.
inline void makeTokens(const KvLayout &l, int layers, uint64_t tag, int64_t pos, int64_t n,
                       std::vector<uint32_t> &k, std::vector<uint32_t> &v) {
  k.resize(size_t(layers) * n * l.kvHeads * l.headDim);
  v.resize(k.size());
  size_t i = 0;
  for (int layer = 0; layer < layers; ++layer)
    for (int64_t t = 0; t < n; ++t)
      for (int h = 0; h < l.kvHeads; ++h)
        for (int d = 0; d < l.headDim; ++d, ++i) {
          k[i] = pattern(tag, layer, pos + t, h, d, 0);
          v[i] = pattern(tag, layer, pos + t, h, d, 1);
        }
}

/// True when every token of |seq| in every layer reads back as makeTokens(tag) wrote it.
inline ::testing::AssertionResult verifySequence(const KvPool &pool, int64_t seq, uint64_t tag) {
  const KvLayout &l = pool.layout();
  int64_t len = pool.seqLen(seq);
  std::vector<uint32_t> k(size_t(len) * l.kvHeads * l.headDim), v(k.size());
  for (int layer = 0; layer < pool.numLayers(); ++layer) {
    Status s = pool.readTokens(seq, layer, 0, len, k.data(), v.data());
    if (!s)
      return ::testing::AssertionFailure() << s.message();
    size_t i = 0;
    for (int64_t t = 0; t < len; ++t)
      for (int h = 0; h < l.kvHeads; ++h)
        for (int d = 0; d < l.headDim; ++d, ++i) {
          if (k[i] != pattern(tag, layer, t, h, d, 0) || v[i] != pattern(tag, layer, t, h, d, 1))
            return ::testing::AssertionFailure() << "seq " << seq << " layer " << layer << " token " << t
                                                 << " head " << h << " dim " << d << " differs";
        }
  }
  return ::testing::AssertionSuccess();
}

} // namespace hybridgen::rt::test
