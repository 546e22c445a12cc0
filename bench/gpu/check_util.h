// Helpers of the GPU device check: KV element conversion, random fill, the float64 reference of
// one decode-attention step, medians, and one run of a compiled hg_attention over a KvPool.
#pragma once

#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/memref_call.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hybridgen::devcheck {

namespace rt = hybridgen::rt;
namespace mc = hybridgen::memref_call;

inline uint16_t f32ToF16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float f16ToF32(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

inline bool parseDType(const std::string &s, rt::DType &out) {
  if (s == "f32")
    out = rt::DType::kF32;
  else if (s == "f16")
    out = rt::DType::kF16;
  else if (s == "bf16")
    out = rt::DType::kBF16;
  else
    return false;
  return true;
}
inline mc::ElemType elemType(rt::DType t) {
  return t == rt::DType::kF32 ? mc::ElemType::f32 : t == rt::DType::kF16 ? mc::ElemType::f16 : mc::ElemType::bf16;
}

/// Stores |x| as one element of type |t| at |p|.
inline void storeElt(rt::DType t, void *p, float x) {
  if (t == rt::DType::kF32) {
    std::memcpy(p, &x, 4);
  } else {
    uint16_t u = t == rt::DType::kF16 ? f32ToF16(x) : rt::f32ToBf16(x);
    std::memcpy(p, &u, 2);
  }
}
inline double loadElt(rt::DType t, const void *p) {
  if (t == rt::DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t u;
  std::memcpy(&u, p, 2);
  return t == rt::DType::kF16 ? f16ToF32(u) : rt::bf16ToF32(u);
}

/// Uniform values in [-1, 1) as |t|, |n| elements.
inline std::vector<char> randomElts(rt::DType t, size_t n, std::mt19937_64 &rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<char> out(n * rt::dtypeSize(t));
  for (size_t i = 0; i < n; ++i)
    storeElt(t, out.data() + i * rt::dtypeSize(t), d(rng));
  return out;
}

inline double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// Float64 attention of one query head over |len| tokens of |seq| in layer 0, read back from the
/// pool (so the reference sees the same quantized K/V the kernels read).
inline void referenceHead(const rt::KvPool &pool, int64_t seq, int64_t len, int32_t kvHead, const float *q,
                          double scale, std::vector<double> &out) {
  const rt::KvLayout &l = pool.layout();
  const size_t row = l.rowBytes(), tok = size_t(l.kvHeads) * row;
  std::vector<char> k(size_t(len) * tok), v(k.size());
  (void)pool.readTokens(seq, 0, 0, len, k.data(), v.data());
  std::vector<double> s(static_cast<size_t>(len));
  double m = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    double dot = 0;
    const char *kr = k.data() + size_t(j) * tok + size_t(kvHead) * row;
    for (int32_t d = 0; d < l.headDim; ++d)
      dot += double(q[d]) * loadElt(l.dtype, kr + size_t(d) * l.eltSize());
    s[size_t(j)] = scale * dot;
    m = std::max(m, s[size_t(j)]);
  }
  out.assign(size_t(l.headDim), 0.0);
  double sum = 0;
  for (int64_t j = 0; j < len; ++j) {
    double p = std::exp(s[size_t(j)] - m);
    sum += p;
    const char *vr = v.data() + size_t(j) * tok + size_t(kvHead) * row;
    for (int32_t d = 0; d < l.headDim; ++d)
      out[size_t(d)] += p * loadElt(l.dtype, vr + size_t(d) * l.eltSize());
  }
  for (double &x : out)
    x = len ? x / sum : 0.0;
}

/// The memref arguments of hg_attention(q, k, v, table, lens, out) over layer 0 of |pool|.
struct BatchArgs {
  std::vector<int32_t> table, lens;
  int32_t maxBlocks = 0;
  std::vector<mc::Arg> args;
};
inline rt::Status makeArgs(rt::KvPool &pool, const std::vector<int64_t> &seqs, int64_t qHeads, std::vector<float> &q,
                           std::vector<float> &out, BatchArgs &ba) {
  const rt::KvLayout &l = pool.layout();
  ba.maxBlocks = pool.maxBlocksInUse(seqs);
  ba.table.assign(seqs.size() * size_t(ba.maxBlocks), -1);
  ba.lens.assign(seqs.size(), 0);
  if (rt::Status s = pool.fillBatch(seqs, ba.maxBlocks, ba.table.data(), ba.lens.data()); !s)
    return s;
  const int64_t b = int64_t(seqs.size());
  std::vector<int64_t> poolShape = {pool.numBlocks(), l.kvHeads, l.blockSize, l.headDim};
  std::vector<int64_t> qShape = {b, qHeads, l.headDim};
  ba.args = {{q.data(), mc::ElemType::f32, qShape, {}},
             {pool.kBase(0), elemType(l.dtype), poolShape, {}},
             {pool.vBase(0), elemType(l.dtype), poolShape, {}},
             {ba.table.data(), mc::ElemType::i32, {b, ba.maxBlocks}, {}},
             {ba.lens.data(), mc::ElemType::i32, {b}, {}},
             {out.data(), mc::ElemType::f32, qShape, {}}};
  return rt::Status::ok();
}

} // namespace hybridgen::devcheck
