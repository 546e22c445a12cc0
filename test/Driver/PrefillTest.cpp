// JIT-compiled hg.prefill_attention (chunked prefill over the cached prefix) against a float64
// reference: chunks 1..300, prefixes 0..2000, GQA 1 and 4, f32/bf16 KV, window + softcap, ragged
// batches; a chunk of one against hg.attention decode; and its degenerate inputs.
#include "DriverTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

using namespace hgtest;
using hybridgen::driver::JitModule;

namespace {

double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1e-2; }

/// MLIR with @hg_prefill (q, k, v, table, lens, out; batch, chunk, pool and table dynamic) and
/// @hg_decode, the same attention as hg.attention (for the chunk-of-one comparison).
std::string prefillModule(const Shape &s) {
  std::ostringstream kvType, attrs;
  kvType << "memref<?x" << s.kvHeads << "x" << s.blockSize << "x" << s.headDim << "x"
         << hybridgen::driver::dtypeName(s.kvType) << ">";
  attrs << "{scale = " << std::scientific << s.scale() << " : f32";
  if (s.window)
    attrs << ", window = " << *s.window;
  if (s.softcap)
    attrs << ", softcap = " << *s.softcap << " : f32";
  attrs << "}";
  std::string kv = kvType.str();
  std::string q4 = "memref<?x?x" + std::to_string(s.qHeads) + "x" + std::to_string(s.headDim) +
                   "xf32>";
  std::string q3 = "memref<?x" + std::to_string(s.qHeads) + "x" + std::to_string(s.headDim) +
                   "xf32>";
  std::ostringstream m;
  m << "func.func @hg_prefill(%q: " << q4 << ", %k: " << kv << ", %v: " << kv
    << ", %bt: memref<?x?xi32>, %lens: memref<?xi32>, %o: " << q4 << ") {\n"
    << "  hg.prefill_attention q(%q : " << q4 << ") kv(%k, %v : " << kv << ", " << kv
    << ") table(%bt : memref<?x?xi32>) lens(%lens : memref<?xi32>) out(%o : " << q4 << ") "
    << attrs.str() << "\n  return\n}\n"
    << "func.func @hg_decode(%q: " << q3 << ", %k: " << kv << ", %v: " << kv
    << ", %bt: memref<?x?xi32>, %lens: memref<?xi32>, %o: " << q3 << ") {\n"
    << "  hg.attention q(%q : " << q3 << ") kv(%k, %v : " << kv << ", " << kv
    << ") table(%bt : memref<?x?xi32>) lens(%lens : memref<?xi32>) out(%o : " << q3 << ") "
    << attrs.str() << "\n  return\n}\n";
  return m.str();
}

/// A paged KV problem of lengths |lens| (chunk included) with a chunk's queries [batch, chunk,
/// q_heads, head_dim]. Pool rows past each sequence's length hold NaN: the kernel must never let
/// them reach the output.
struct PrefillProblem {
  Problem kv;
  int64_t chunk = 0;
  std::vector<float> q, out;

  std::vector<MemRefArg> args() {
    std::vector<MemRefArg> a = kv.args();
    const Shape &s = kv.shape;
    std::vector<int64_t> shape = {kv.batch(), chunk, s.qHeads, s.headDim};
    a[0] = {q.data(), DType::f32, shape, {}};
    a[5] = {out.data(), DType::f32, shape, {}};
    return a;
  }
};

PrefillProblem makePrefill(const Shape &s, const std::vector<int32_t> &lens, int64_t chunk,
                           std::mt19937_64 &rng) {
  PrefillProblem p;
  p.kv = makeProblem(s, lens, rng);
  p.chunk = chunk;
  std::uniform_real_distribution<float> dist(-2.5f, 2.5f);
  p.q.resize(p.kv.batch() * chunk * s.qHeads * s.headDim);
  for (float &x : p.q)
    x = dist(rng);
  p.out.assign(p.q.size(), std::nanf(""));
  int64_t bs = s.blockSize, rowElems = s.headDim;
  for (int64_t b = 0; b < p.kv.batch(); ++b) {
    int64_t len = lens[b];
    if (len % bs == 0)
      continue;
    int64_t block = p.kv.table[b * p.kv.maxBlocks + len / bs];
    for (int64_t h = 0; h < s.kvHeads; ++h)
      for (int64_t row = len % bs; row < bs; ++row) {
        size_t at = ((block * s.kvHeads + h) * bs + row) * rowElems;
        for (int64_t d = 0; d < rowElems; ++d) {
          if (s.kvType == DType::f32) {
            p.kv.k32[at + d] = p.kv.v32[at + d] = std::nanf("");
          } else {
            p.kv.k16[at + d] = p.kv.v16[at + d] = 0x7fc0; // NaN in bf16 and f16 alike
          }
        }
      }
  }
  return p;
}

/// Float64 prefill attention of docs/architecture.md's hg.prefill_attention: row t of sequence b
/// at position p = len - chunk + t sees tokens j <= p (and j > p - window); rows that see no
/// token are zero.
std::vector<double> referencePrefill(const PrefillProblem &p) {
  const Shape &s = p.kv.shape;
  int64_t group = s.qHeads / s.kvHeads, D = s.headDim, bs = s.blockSize, C = p.chunk;
  std::vector<double> out(p.q.size(), 0.0);
  std::vector<double> logits, keys, values;
  for (int64_t b = 0; b < p.kv.batch(); ++b) {
    int64_t len = p.kv.lens[b];
    // The sequence's K and V rows [kv_head][token][d], gathered through the table once.
    keys.assign(s.kvHeads * len * D, 0.0);
    values.assign(keys.size(), 0.0);
    for (int64_t h = 0; h < s.kvHeads; ++h)
      for (int64_t j = 0; j < len; ++j) {
        int64_t block = p.kv.table[b * p.kv.maxBlocks + j / bs];
        for (int64_t d = 0; d < D; ++d) {
          keys[(h * len + j) * D + d] = p.kv.kv(false, block, h, j % bs, d);
          values[(h * len + j) * D + d] = p.kv.kv(true, block, h, j % bs, d);
        }
      }
    for (int64_t t = 0; t < C; ++t) {
      int64_t pos = len - C + t;
      if (pos < 0)
        continue;
      int64_t lo = s.window ? std::max<int64_t>(0, pos - *s.window + 1) : 0;
      for (int64_t h = 0; h < s.qHeads; ++h) {
        const float *qr = &p.q[((b * C + t) * s.qHeads + h) * D];
        double *o = &out[((b * C + t) * s.qHeads + h) * D];
        const double *kh = &keys[(h / group) * len * D], *vh = &values[(h / group) * len * D];
        logits.assign(pos + 1 - lo, 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = lo; j <= pos; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += static_cast<double>(qr[d]) * kh[j * D + d];
          dot *= s.scale();
          if (s.softcap)
            dot = *s.softcap * std::tanh(dot / *s.softcap);
          logits[j - lo] = dot;
          mx = std::max(mx, dot);
        }
        double sum = 0;
        for (int64_t j = lo; j <= pos; ++j) {
          double w = std::exp(logits[j - lo] - mx);
          sum += w;
          for (int64_t d = 0; d < D; ++d)
            o[d] += w * vh[j * D + d];
        }
        for (int64_t d = 0; d < D; ++d)
          o[d] /= sum;
      }
    }
  }
  return out;
}

Shape shape(int64_t qHeads, int64_t kvHeads, int64_t headDim, int64_t blockSize, DType t) {
  Shape s;
  s.qHeads = qHeads;
  s.kvHeads = kvHeads;
  s.headDim = headDim;
  s.blockSize = blockSize;
  s.kvType = t;
  return s;
}

/// Every chunk size against ragged prefixes of 0 to 2000 tokens (one call per chunk: each
/// sequence of the batch has its own prefix).
void runPrefill(const char *name, const Shape &s) {
  std::mt19937_64 rng(testSeed() ^ std::hash<std::string>()(name));
  auto jit = JitModule::compile(prefillModule(s));
  double worst = 0;
  for (int64_t chunk : {1, 7, 64, 300}) {
    std::vector<int32_t> lens;
    for (int32_t prefix : {0, 1, 37, 2000, int32_t(s.blockSize) - 1})
      lens.push_back(prefix + static_cast<int32_t>(chunk));
    PrefillProblem p = makePrefill(s, lens, chunk, rng);
    std::vector<double> want = referencePrefill(p);
    jit->call("hg_prefill", p.args());
    double err = relativeError(p.out, want);
    worst = std::max(worst, err);
    EXPECT_LE(err, tolerance(s.kvType)) << name << " chunk=" << chunk << " seed=" << testSeed();
  }
  std::printf("[hybridgen] prefill %-30s chunks 1..300 prefixes 0..2000 max rel err %.2e\n",
              name, worst);
}

} // namespace

TEST(Prefill, D64_G1_F32) { runPrefill("D64 G1 f32 bs16", shape(4, 4, 64, 16, DType::f32)); }
TEST(Prefill, D64_G4_F32) { runPrefill("D64 G4 f32 bs16", shape(8, 2, 64, 16, DType::f32)); }
TEST(Prefill, D64_G4_BF16) { runPrefill("D64 G4 bf16 bs16", shape(8, 2, 64, 16, DType::bf16)); }
TEST(Prefill, D128_G1_BF16) {
  runPrefill("D128 G1 bf16 bs32", shape(4, 4, 128, 32, DType::bf16));
}
TEST(Prefill, D80_G4_F16) { runPrefill("D80 G4 f16 bs16", shape(8, 2, 80, 16, DType::f16)); }

// Sliding windows shorter and longer than the chunk, with a softcap.
TEST(Prefill, WindowAndSoftcap) {
  for (int64_t window : {5, 100}) {
    Shape s = shape(8, 2, 64, 16, DType::f32);
    s.window = window;
    s.softcap = 5.0f;
    runPrefill(window == 5 ? "D64 G4 f32 window=5 softcap=5" : "D64 G4 f32 window=100 softcap=5",
               s);
  }
}

// A chunk of one token is decode: the same numbers as hg.attention on the same cache.
TEST(Prefill, ChunkOfOneIsDecode) {
  for (DType t : {DType::f32, DType::bf16}) {
    Shape s = shape(8, 2, 64, 16, t);
    s.window = 300;
    std::mt19937_64 rng(testSeed() ^ 0x5eed);
    auto jit = JitModule::compile(prefillModule(s));
    PrefillProblem p = makePrefill(s, {1, 16, 17, 1000, 2001}, 1, rng);
    p.kv.q = p.q; // [batch, 1, heads, dim] and [batch, heads, dim] are the same bytes
    jit->call("hg_prefill", p.args());
    jit->call("hg_decode", p.kv.args());
    std::vector<double> decode(p.kv.out.begin(), p.kv.out.end());
    // Not bitwise: on an AMX host decode takes the AMX tiles for bf16 and prefill the vector
    // lanes, which sum the same f32 products in another order (1-3e-6 over 2001 tokens seen on
    // a Sapphire Rapids Xeon). A token missed or counted twice would be 1e-3 or more.
    double err = relativeError(p.out, decode);
    EXPECT_LE(err, 1e-5) << "prefill of one token vs decode, "
                         << (t == DType::f32 ? "f32" : "bf16") << " seed=" << testSeed();
    EXPECT_LE(relativeError(p.out, referencePrefill(p)), tolerance(t));
  }
}

// len < chunk is an argument error of the caller; the kernel still reads nothing outside the
// sequence: rows before position 0 see no token and are zero, later rows are exact.
TEST(Prefill, ShortLengthRowsAreZero) {
  Shape s = shape(8, 2, 64, 16, DType::f32);
  std::mt19937_64 rng(testSeed() ^ 0x51);
  auto jit = JitModule::compile(prefillModule(s));
  PrefillProblem p = makePrefill(s, {40, 40}, 40, rng);
  p.kv.lens[1] = 25; // 15 rows of sequence 1 sit before position 0
  jit->call("hg_prefill", p.args());
  std::vector<double> want = referencePrefill(p);
  EXPECT_LE(relativeError(p.out, want), 1e-5);
  size_t rowElems = s.qHeads * s.headDim;
  for (size_t i = 40 * rowElems; i < 55 * rowElems; ++i)
    ASSERT_EQ(p.out[i], 0.0f) << "element " << i;
}

// A block id outside the pool is skipped, never read: the call returns and the output is finite.
TEST(Prefill, BlockIdOutsidePoolIsNotRead) {
  Shape s = shape(8, 2, 64, 16, DType::f32);
  std::mt19937_64 rng(testSeed() ^ 0xb10c);
  auto jit = JitModule::compile(prefillModule(s));
  PrefillProblem p = makePrefill(s, {100}, 20, rng);
  p.kv.table[1] = 1 << 30;
  p.kv.table[2] = -5;
  jit->call("hg_prefill", p.args());
  for (float x : p.out)
    ASSERT_TRUE(std::isfinite(x));
}
