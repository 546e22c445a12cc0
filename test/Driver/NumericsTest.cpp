// JIT-compiled decode attention against the float64 reference over head dims, GQA groups, KV
// dtypes, ragged batches, lengths up to 64K+ and split points (runtime and static).
#include "DriverTestUtil.h"
#include "hybridgen/runtime/c_api.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

using namespace hgtest;
using hybridgen::driver::AttentionSpec;
using hybridgen::driver::JitModule;

namespace {

constexpr int64_t kNoScheduler = std::numeric_limits<int64_t>::max();

double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1e-2; }

AttentionSpec specFor(const Shape &s) {
  AttentionSpec spec;
  spec.qHeads = s.qHeads;
  spec.kvHeads = s.kvHeads;
  spec.headDim = s.headDim;
  spec.blockSize = s.blockSize;
  spec.kvDtype = hybridgen::driver::dtypeName(s.kvType);
  spec.window = s.window;
  spec.softcap = s.softcap;
  spec.devices = {"cpu", "gpu"};
  return spec; // dynamic batch/pool/table and a runtime split: one module serves every case
}

std::unique_ptr<JitModule> compile(const AttentionSpec &spec,
                                   const hybridgen::driver::CompileOptions &options = {}) {
  auto t0 = std::chrono::steady_clock::now();
  auto jit = JitModule::compile(hybridgen::driver::buildAttentionModule(spec), options);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
  std::printf("[hybridgen] compiled D=%lld q/kv=%lld/%lld %s for %s in %.0f ms\n",
              static_cast<long long>(spec.headDim), static_cast<long long>(spec.qHeads),
              static_cast<long long>(spec.kvHeads), spec.kvDtype.c_str(),
              options.targetCpu.c_str(), ms);
  return jit;
}

/// Float64 output of the exact LSE merge of two partials (docs/interfaces.md).
std::vector<double> mergeReference(const Partial &a, const Partial &b, int64_t headDim) {
  std::vector<double> out(a.o.size(), 0.0);
  for (size_t r = 0; r < a.m.size(); ++r) {
    double m = std::max(a.m[r], b.m[r]);
    double wa = a.l[r] == 0 ? 0 : a.l[r] * std::exp(a.m[r] - m);
    double wb = b.l[r] == 0 ? 0 : b.l[r] * std::exp(b.m[r] - m);
    if (wa + wb == 0)
      continue;
    for (int64_t d = 0; d < headDim; ++d)
      out[r * headDim + d] =
          (wa * a.o[r * headDim + d] + wb * b.o[r * headDim + d]) / (wa + wb);
  }
  return out;
}

std::vector<int32_t> raggedLens(std::mt19937_64 &rng, int64_t batch, int32_t maxLen) {
  std::uniform_int_distribution<int32_t> dist(1, maxLen);
  std::vector<int32_t> lens(batch);
  for (int32_t &l : lens)
    l = dist(rng);
  return lens;
}

/// Runs |p| through |jit| at split points 0, len, interior ones and "no scheduler", checking
/// each against the reference. Returns the largest error seen.
double checkSplits(const JitModule &jit, Problem &p, std::mt19937_64 &rng,
                   const std::string &label) {
  std::vector<double> ref = referenceAttention(p);
  int64_t maxLen = *std::max_element(p.lens.begin(), p.lens.end());
  int64_t bs = p.shape.blockSize;
  std::vector<int64_t> splits = {0, maxLen, kNoScheduler, bs, maxLen / 2 + 1};
  if (maxLen > 2)
    splits.push_back(std::uniform_int_distribution<int64_t>(1, maxLen - 1)(rng));
  double worst = 0;
  for (int64_t split : splits) {
    if (split == kNoScheduler)
      clearRuntimeSplit();
    else
      setRuntimeSplit(split);
    std::fill(p.out.begin(), p.out.end(), std::nanf(""));
    std::vector<MemRefArg> args = p.args();
    hybridgen::driver::validateAttentionArgs(args, bs);
    jit.call("hg_attention", args);
    double err = relativeError(p.out, ref);
    worst = std::max(worst, err);
    EXPECT_LE(err, tolerance(p.shape.kvType))
        << label << " split=" << (split == kNoScheduler ? -1 : split) << " seed=" << testSeed();
  }
  clearRuntimeSplit();
  std::printf("[hybridgen] %-34s batch=%lld max_len=%lld max rel err %.2e\n", label.c_str(),
              static_cast<long long>(p.batch()), static_cast<long long>(maxLen), worst);
  return worst;
}

struct DenseCase {
  const char *name;
  Shape shape;
  int32_t longLen; // 0: no long-context case
  const char *targetCpu = "host";
  int64_t vectorBits = 0; // CompileOptions::vectorBits (0: the target's)
};

void runDense(const DenseCase &c) {
  std::mt19937_64 rng(testSeed() ^ std::hash<std::string>()(c.name));
  hybridgen::driver::CompileOptions options;
  options.targetCpu = c.targetCpu;
  options.vectorBits = c.vectorBits;
  auto jit = compile(specFor(c.shape), options);
  int32_t bs = static_cast<int32_t>(c.shape.blockSize);
  std::vector<std::vector<int32_t>> batches = {
      {1}, {bs}, {bs + 1}, {3, 5 * bs - 1, 1, 2 * bs + 7}, raggedLens(rng, 8, 3000)};
  if (c.longLen)
    batches.push_back({c.longLen});
  for (const auto &lens : batches) {
    Problem p = makeProblem(c.shape, lens, rng);
    checkSplits(*jit, p, rng, c.name);
  }
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

} // namespace

// Head dims 64..256, GQA groups 1/4/8 and the three KV dtypes, each compiled once; the long
// cases are 64K+ tokens and deliberately not multiples of the block size.
TEST(Numerics, D64_G1_F32) {
  runDense({"D64 G1 f32 bs16", shape(4, 4, 64, 16, DType::f32), 70001});
}
TEST(Numerics, D80_G4_F16) {
  runDense({"D80 G4 f16 bs16", shape(8, 2, 80, 16, DType::f16), 65537});
}
TEST(Numerics, D96_G8_BF16) {
  runDense({"D96 G8 bf16 bs32", shape(16, 2, 96, 32, DType::bf16), 0});
}
TEST(Numerics, D128_G4_BF16_Llama) {
  runDense({"D128 G4 bf16 bs16 (Llama)", shape(32, 8, 128, 16, DType::bf16), 65600});
}
TEST(Numerics, D128_G1_F16) {
  runDense({"D128 G1 f16 bs64", shape(4, 4, 128, 64, DType::f16), 0});
}
TEST(Numerics, D256_G8_F32) {
  runDense({"D256 G8 f32 bs16", shape(8, 1, 256, 16, DType::f32), 65551});
}
// Groups that are not a power of two (SmolLM2's 9/3 heads; 6 = a sub-group of 12/2): vector
// statistics with the max tree padded by -inf rows on Zen 4's interleaved 16-bit kernel (bf16 on
// a znver4 host), per-head scalar statistics on every other kernel (f32 here).
TEST(Numerics, D64_G3_BF16_SmolLM2) {
  runDense({"D64 G3 bf16 bs16 (SmolLM2)", shape(9, 3, 64, 16, DType::bf16), 65551});
}
TEST(Numerics, D64_G6_F32) {
  runDense({"D64 G6 f32 bs16", shape(12, 2, 64, 16, DType::f32), 0});
}

// The AVX2 kernel (x86-64-v3: 8-lane vectors, 16 registers; see cpu-path.md), JIT-compiled for
// that target on any CPU that has AVX2 and FMA, whatever else it has.
bool hostRunsAvx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
TEST(Numerics, Avx2_D128_G4_BF16_Llama) {
  if (!hostRunsAvx2())
    GTEST_SKIP() << "this CPU has no AVX2/FMA";
  runDense({"AVX2 D128 G4 bf16 bs16", shape(32, 8, 128, 16, DType::bf16), 20011, "x86-64-v3"});
}
TEST(Numerics, Avx2_D80_G4_F16) {
  if (!hostRunsAvx2())
    GTEST_SKIP() << "this CPU has no AVX2/FMA";
  runDense({"AVX2 D80 G4 f16 bs16", shape(8, 2, 80, 16, DType::f16), 0, "x86-64-v3"});
}
TEST(Numerics, Avx2_D64_G1_F32) {
  if (!hostRunsAvx2())
    GTEST_SKIP() << "this CPU has no AVX2/FMA";
  runDense({"AVX2 D64 G1 f32 bs16", shape(4, 4, 64, 16, DType::f32), 0, "x86-64-v3"});
}
TEST(Numerics, Avx2_D64_G3_F16) {
  if (!hostRunsAvx2())
    GTEST_SKIP() << "this CPU has no AVX2/FMA";
  runDense({"AVX2 D64 G3 f16 bs16", shape(9, 3, 64, 16, DType::f16), 0, "x86-64-v3"});
}
TEST(Numerics, Avx2_D96_G8_BF16) {
  if (!hostRunsAvx2())
    GTEST_SKIP() << "this CPU has no AVX2/FMA";
  runDense({"AVX2 D96 G8 bf16 bs32", shape(16, 2, 96, 32, DType::bf16), 0, "x86-64-v3"});
}

// 256-bit register tiles on an AVX-512 target (ymm code that may use all 32 registers): what the
// driver compiles for bf16/f16 KV on AMD Zen 4, and what CompileOptions::vectorBits = 256 asks
// for on any AVX-512 CPU.
TEST(Numerics, Narrow256OnAvx512_D128_G4_BF16_Llama) {
  if (!__builtin_cpu_supports("avx512f"))
    GTEST_SKIP() << "this CPU has no AVX-512";
  runDense({"v256 on AVX-512 D128 G4 bf16 bs16", shape(32, 8, 128, 16, DType::bf16), 20011,
            "host", 256});
}
TEST(Numerics, Narrow256OnAvx512_D64_G3_BF16_SmolLM2) {
  if (!__builtin_cpu_supports("avx512f"))
    GTEST_SKIP() << "this CPU has no AVX-512";
  runDense({"v256 on AVX-512 D64 G3 bf16 bs16", shape(9, 3, 64, 16, DType::bf16), 20011, "host",
            256});
}
TEST(Numerics, Narrow256OnAvx512_D80_G4_F16) {
  if (!__builtin_cpu_supports("avx512f"))
    GTEST_SKIP() << "this CPU has no AVX-512";
  runDense({"v256 on AVX-512 D80 G4 f16 bs16", shape(8, 2, 80, 16, DType::f16), 0, "host", 256});
}

// Sliding window and logit softcap follow docs/interfaces.md.
static Shape windowAndSoftcap(DType t) {
  Shape s = shape(8, 2, 64, 16, t);
  s.window = 100;
  s.softcap = 5.0f;
  return s;
}
TEST(Numerics, WindowAndSoftcap) {
  runDense({"D64 G4 f32 window=100 softcap=5", windowAndSoftcap(DType::f32), 0});
}

// A split point fixed at compile time (no segment, no runtime call).
TEST(Numerics, StaticSplitPoints) {
  Shape s = shape(8, 2, 64, 16, DType::bf16);
  std::mt19937_64 rng(testSeed() + 1);
  for (int64_t point : {int64_t(0), int64_t(37), int64_t(1) << 40}) {
    AttentionSpec spec = specFor(s);
    spec.splitPoint = point;
    auto jit = compile(spec);
    Problem p = makeProblem(s, {1, 36, 37, 38, 200, 17}, rng);
    std::vector<double> ref = referenceAttention(p);
    std::vector<MemRefArg> args = p.args();
    jit->call("hg_attention", args);
    double err = relativeError(p.out, ref);
    std::printf("[hybridgen] static split %lld: max rel err %.2e\n", static_cast<long long>(point),
                err);
    EXPECT_LE(err, tolerance(s.kvType)) << "static split " << point;
  }
}

// returnPartials exposes each device's (o, m, l): each must match the float64 partial of its
// token range, and the merged output the full attention.
// The split point is 50 either way: fixed at compile time, or read in an hg.segment.
class ReturnPartials : public ::testing::TestWithParam<bool> {};

TEST_P(ReturnPartials, MatchReferencePartials) {
  bool runtimeSplit = GetParam();
  Shape s = shape(8, 2, 64, 16, DType::f32);
  AttentionSpec spec = specFor(s);
  if (runtimeSplit)
    setRuntimeSplit(50);
  else
    spec.splitPoint = 50;
  spec.returnPartials = true;
  auto jit = compile(spec);
  std::mt19937_64 rng(testSeed() + 2);
  Problem p = makeProblem(s, {10, 50, 51, 300}, rng);
  int64_t rows = p.batch() * s.qHeads;
  std::vector<float> o[2], m[2], l[2];
  std::vector<MemRefArg> args = p.args();
  for (int d = 0; d < 2; ++d) {
    o[d].assign(p.out.size(), std::nanf(""));
    m[d].assign(rows, std::nanf(""));
    l[d].assign(rows, std::nanf(""));
    args.push_back({o[d].data(), DType::f32, {p.batch(), s.qHeads, s.headDim}, {}});
    args.push_back({m[d].data(), DType::f32, {p.batch(), s.qHeads}, {}});
    args.push_back({l[d].data(), DType::f32, {p.batch(), s.qHeads}, {}});
  }
  hybridgen::driver::validateAttentionArgs(args, s.blockSize);
  jit->call("hg_attention", args);
  EXPECT_LE(relativeError(p.out, referenceAttention(p)), 1e-5);
  Partial want[2] = {referencePartial(p, 0, 50), referencePartial(p, 50, kNoScheduler)};
  for (int d = 0; d < 2; ++d) {
    for (int64_t r = 0; r < rows; ++r) {
      if (want[d].l[r] == 0) { // empty range: m = -inf, l = 0
        EXPECT_TRUE(std::isinf(m[d][r]) && m[d][r] < 0) << "device " << d << " row " << r;
        EXPECT_EQ(l[d][r], 0.0f) << "device " << d << " row " << r;
        continue;
      }
      EXPECT_NEAR(m[d][r], want[d].m[r], 1e-5 * std::max(1.0, std::fabs(want[d].m[r])));
      EXPECT_NEAR(l[d][r], want[d].l[r], 1e-5 * want[d].l[r]);
    }
    // Rows of empty partials hold o = 0; compare the others normwise.
    double maxErr = 0, maxRef = 0;
    for (size_t i = 0; i < o[d].size(); ++i) {
      if (want[d].l[i / s.headDim] == 0)
        continue;
      maxErr = std::max(maxErr, std::fabs(o[d][i] - want[d].o[i]));
      maxRef = std::max(maxRef, std::fabs(want[d].o[i]));
    }
    EXPECT_LE(maxErr / maxRef, 1e-5) << "partial o of device " << d;
  }
  clearRuntimeSplit();
}
INSTANTIATE_TEST_SUITE_P(Numerics, ReturnPartials, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return std::string(info.param ? "RuntimeSplit" : "StaticSplit");
                         });

// Sparse mode: with top_k covering every CPU token it is exact; with a small top_k its error
// against dense attention is reported (an approximation, not a bug).
TEST(Numerics, SparseTopK) {
  Shape s = shape(8, 2, 64, 16, DType::f32);
  std::mt19937_64 rng(testSeed() + 3);
  Problem p = makeProblem(s, {1000, 777, 1500}, rng);
  std::vector<double> dense = referenceAttention(p);
  for (int64_t topK : {int64_t(4096), int64_t(64), int64_t(16)}) {
    AttentionSpec spec = specFor(s);
    spec.sparse = true;
    spec.topK = topK;
    auto jit = compile(spec);
    for (int64_t split : {int64_t(0), int64_t(600), int64_t(1500)}) {
      setRuntimeSplit(split);
      std::fill(p.out.begin(), p.out.end(), std::nanf(""));
      jit->call("hg_attention", p.args());
      double err = relativeError(p.out, dense);
      // The exact top-k semantics: top_k on the CPU's [0, split), dense on the rest.
      std::vector<double> topKRef =
          mergeReference(referencePartial(p, 0, split, topK),
                         referencePartial(p, split, kNoScheduler), s.headDim);
      double errTopK = relativeError(p.out, topKRef);
      std::printf("[hybridgen] sparse top_k=%lld split=%lld: rel err vs dense %.3e, vs exact "
                  "top-k %.3e\n",
                  static_cast<long long>(topK), static_cast<long long>(split), err, errTopK);
      // Whatever k is, the kernel must compute exactly the top-k attention it promises.
      EXPECT_LE(errTopK, 1e-5) << "top_k " << topK << " split " << split;
      if (topK >= 1500 || split == 0)
        EXPECT_LE(err, 1e-5) << "top_k " << topK << " covers every CPU token";
      else
        EXPECT_TRUE(std::isfinite(err));
    }
  }
  clearRuntimeSplit();
}

// The AMX path (bf16 KV on CPUs with AMX; AmxKernel.cpp) and the vector path of the same compiled
// code: HYBRIDGEN_DISABLE_AMX=1 makes hgrt_amx_available() answer 0, so the kernel falls back.
// Both must match the reference over the same splits (including slots cut by the split point
// and by the sequence end), group sizes 1/2/4, 1-8 tiles per row and 16-64 token blocks; the
// long lengths span several of the AMX loop's 4096-token chunks and end inside a slot.
namespace {

class VectorPathOnly {
public:
  VectorPathOnly() { setenv("HYBRIDGEN_DISABLE_AMX", "1", 1); }
  ~VectorPathOnly() { unsetenv("HYBRIDGEN_DISABLE_AMX"); }
};

void runBothPaths(const DenseCase &c) {
  runDense(c);
  VectorPathOnly vectorOnly;
  runDense(c);
}

} // namespace

TEST(Numerics, Amx_D64_G1_BF16) {
  runBothPaths({"D64 G1 bf16 bs16", shape(4, 4, 64, 16, DType::bf16), 9001});
}
TEST(Numerics, Amx_D256_G2_BF16_bs64) {
  runBothPaths({"D256 G2 bf16 bs64", shape(8, 4, 256, 64, DType::bf16), 8263});
}
TEST(Numerics, Amx_WindowAndSoftcap_BF16) {
  runBothPaths({"D64 G4 bf16 window=100 softcap=5", windowAndSoftcap(DType::bf16), 0});
}

// Where the machine has AMX, the default compile really takes it: its rounding differs from the
// vector path's (p and q are split into two bf16 parts there), so the outputs differ in the last
// bits while both stay within the bound. Elsewhere only the vector path exists.
TEST(Numerics, AmxPathIsTakenWhereAvailable) {
  Shape s = shape(32, 8, 128, 16, DType::bf16);
  std::mt19937_64 rng(testSeed() + 5);
  Problem p = makeProblem(s, {4099, 1000}, rng);
  std::vector<double> ref = referenceAttention(p);
  auto jit = compile(specFor(s));
  clearRuntimeSplit();
  jit->call("hg_attention", p.args());
  std::vector<float> amxOut = p.out;
  EXPECT_LE(relativeError(amxOut, ref), tolerance(DType::bf16));
  bool amx = hgrt_amx_available() != 0;
  {
    VectorPathOnly vectorOnly;
    EXPECT_EQ(hgrt_amx_available(), 0);
    jit->call("hg_attention", p.args());
  }
  EXPECT_LE(relativeError(p.out, ref), tolerance(DType::bf16));
  std::printf("[hybridgen] AMX %s; AMX vs vector path outputs %s\n",
              amx ? "available" : "not available (CPU or OS)",
              amxOut == p.out ? "identical" : "differ");
  if (amx)
    EXPECT_NE(amxOut, p.out) << "the AMX path did not run";
  else
    EXPECT_EQ(amxOut, p.out);
}
