// Shared helpers of the driver tests: random paged-KV problems and a float64 reference.
#pragma once

#include "hybridgen/Driver/Driver.h"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace hgtest {

using hybridgen::driver::DType;
using hybridgen::driver::MemRefArg;

/// Shapes of one compiled attention configuration.
struct Shape {
  int64_t qHeads = 8, kvHeads = 2, headDim = 64, blockSize = 16;
  DType kvType = DType::f32;
  std::optional<int64_t> window;
  std::optional<float> softcap;
  float scale() const;
};

/// One batch of inputs in the layout of docs/interfaces.md, with blocks scattered over the pool
/// in random order (so the block table really is exercised) and a few spare, unused blocks.
struct Problem {
  Shape shape;
  std::vector<int32_t> lens;
  int64_t numBlocks = 0, maxBlocks = 0;
  std::vector<float> q, out;
  std::vector<uint16_t> k16, v16; // f16/bf16 pools
  std::vector<float> k32, v32;    // f32 pools
  std::vector<int32_t> table;

  int64_t batch() const { return static_cast<int64_t>(lens.size()); }
  /// q, k_pool, v_pool, block_table, seq_lens, out (views of this problem's buffers).
  std::vector<MemRefArg> args();
  /// K or V element (token row |row| of pool block |block|, kv-head |h|) as the kernel sees it.
  double kv(bool value, int64_t block, int64_t h, int64_t row, int64_t d) const;
};

/// A problem with random (never zero) q, K and V for |lens|.
Problem makeProblem(const Shape &shape, const std::vector<int32_t> &lens, std::mt19937_64 &rng);

/// Float64 partial over tokens [begin, end) of each sequence (clamped to [0, len]), optionally
/// keeping only the |topK| largest logits per head: o (normalized), m and l per (batch, q-head).
struct Partial {
  std::vector<double> o, m, l;
};
Partial referencePartial(const Problem &p, int64_t begin, int64_t end, int64_t topK = 0);
/// Float64 attention over all tokens.
std::vector<double> referenceAttention(const Problem &p);

/// max |got - want| / max |want| over the whole output (normwise relative error; per-element
/// ratios are meaningless where the exact output is near zero).
double relativeError(const std::vector<float> &got, const std::vector<double> &want);

/// f32 <-> f16 / bf16 bit conversions (round to nearest even).
uint16_t toHalf(float f);
float fromHalf(uint16_t h);
uint16_t toBf16(float f);
float fromBf16(uint16_t h);

/// The seed of this test run ($HG_TEST_SEED or a fresh random one), printed once.
uint64_t testSeed();

/// Sets the split point every runtime segment reads next (a static scheduler in the runtime).
void setRuntimeSplit(int64_t split);
/// Uninstalls the scheduler: hgrt_split_point returns INT64_MAX again.
void clearRuntimeSplit();

} // namespace hgtest
