// Ahead-of-time libraries: same bits as the JIT on the same inputs, callable through AotLibrary,
// and free of any libMLIR dependency.
#include "DriverTestUtil.h"

#include "hybridgen/runtime/memref_call.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <regex>

using namespace hgtest;
using hybridgen::driver::AttentionSpec;
namespace mc = hybridgen::memref_call;

namespace {

std::string runCommand(const std::string &cmd) {
  std::string out;
  FILE *pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe)
    return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0)
    out.append(buf, n);
  pclose(pipe);
  return out;
}

std::vector<mc::Arg> toAotArgs(const std::vector<MemRefArg> &args) {
  std::vector<mc::Arg> out;
  for (const MemRefArg &a : args)
    out.push_back({a.data, static_cast<mc::ElemType>(a.dtype), a.shape, a.strides});
  return out;
}

struct AotFixture : ::testing::Test {
  static void SetUpTestSuite() {
    spec.qHeads = 8;
    spec.kvHeads = 2;
    spec.headDim = 128;
    spec.blockSize = 16;
    spec.kvDtype = "bf16";
    mlir = hybridgen::driver::buildAttentionModule(spec);
    soPath = std::string(HYBRIDGEN_TEST_TMPDIR) + "/aot_attention.so";
    hybridgen::driver::compileToSharedLibrary(mlir, soPath);
  }
  static AttentionSpec spec;
  static std::string mlir, soPath;
};
AttentionSpec AotFixture::spec;
std::string AotFixture::mlir, AotFixture::soPath;

} // namespace

TEST_F(AotFixture, JitAndAotAreBitIdentical) {
  auto jit = hybridgen::driver::JitModule::compile(mlir);
  mc::AotLibrary aot(soPath);
  ASSERT_EQ(aot.functions(), std::vector<std::string>{"hg_attention"});
  Shape s;
  s.qHeads = spec.qHeads;
  s.kvHeads = spec.kvHeads;
  s.headDim = spec.headDim;
  s.blockSize = spec.blockSize;
  s.kvType = DType::bf16;
  std::mt19937_64 rng(testSeed() + 10);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<int32_t> lens = {1, 4000, 17, 2049};
    lens.resize(1 + trial * 1);
    Problem p = makeProblem(s, lens, rng);
    for (int64_t split : {int64_t(0), int64_t(1000), int64_t(1) << 40}) {
      setRuntimeSplit(split);
      jit->call("hg_attention", p.args());
      std::vector<float> jitOut = p.out;
      std::fill(p.out.begin(), p.out.end(), -1.0f);
      aot.call("hg_attention", toAotArgs(p.args()));
      EXPECT_EQ(std::memcmp(jitOut.data(), p.out.data(), p.out.size() * sizeof(float)), 0)
          << "JIT and AOT differ, batch " << p.batch() << " split " << split;
      EXPECT_LE(relativeError(p.out, referenceAttention(p)), 1e-2);
    }
  }
  clearRuntimeSplit();
}

TEST_F(AotFixture, SignatureFileAndArgumentChecks) {
  mc::AotLibrary aot(soPath);
  const mc::Signature &sig = aot.signature("hg_attention");
  ASSERT_EQ(sig.types.size(), 6u);
  EXPECT_EQ(sig.types[1], mc::ElemType::bf16);
  EXPECT_EQ(sig.shapes[0], (std::vector<int64_t>{-1, 8, 128}));
  EXPECT_EQ(sig.shapes[1], (std::vector<int64_t>{-1, 2, 16, 128}));
  std::vector<mc::Arg> none;
  EXPECT_THROW(aot.call("hg_attention", none), std::invalid_argument);
  EXPECT_THROW(aot.call("nope", none), std::invalid_argument);
}

TEST_F(AotFixture, NoMLIRDependency) {
  std::string needed = runCommand("readelf -d '" + soPath + "'");
  EXPECT_NE(needed.find("libhybridgen_runtime"), std::string::npos) << needed;
  EXPECT_NE(needed.find("libomp"), std::string::npos) << needed;
  EXPECT_EQ(needed.find("libMLIR"), std::string::npos) << needed;
  EXPECT_EQ(needed.find("libLLVM"), std::string::npos) << needed;
  std::string ldd = runCommand("ldd '" + soPath + "'");
  EXPECT_EQ(ldd.find("libMLIR"), std::string::npos) << ldd;
  EXPECT_EQ(ldd.find("not found"), std::string::npos) << ldd;
}

// The dense kernels' symbols in an object compiled from a GQA 8/2, head dim 64 attention with
// |opts| (sorted, one per line): their names carry the kernel choices (width, far prefetch).
static std::string denseKernelNames(const std::string &dtype,
                                    const hybridgen::driver::CompileOptions &opts,
                                    const std::string &tag) {
  AttentionSpec spec;
  spec.qHeads = 8;
  spec.kvHeads = 2;
  spec.headDim = 64;
  spec.kvDtype = dtype;
  std::string path = std::string(HYBRIDGEN_TEST_TMPDIR) + "/aot_" + tag + "_" + dtype + ".o";
  hybridgen::driver::compileToObject(hybridgen::driver::buildAttentionModule(spec), path, opts);
  return runCommand("nm '" + path + "' | grep -o '__hg_cpu_dense_[a-z0-9_]*' | sort -u");
}

// On AMD Zen 4 the driver gives bf16/f16 KV kernels AVX2-sized register tiles (the "_v256"
// kernel) and keeps f32 at 512 bits; --vector-bits / CompileOptions::vectorBits overrides it
// (docs/cpu-path.md).
TEST(Aot, Zen4Uses256BitTilesFor16BitKv) {
  auto kernelNames = [](const std::string &dtype, int64_t vectorBits) {
    hybridgen::driver::CompileOptions opts;
    opts.targetCpu = "znver4";
    opts.vectorBits = vectorBits;
    return denseKernelNames(dtype, opts, "znver4");
  };
  for (const char *dtype : {"bf16", "f16"}) {
    EXPECT_NE(kernelNames(dtype, 0).find("_t1024_v256"), std::string::npos) << dtype;
    EXPECT_EQ(kernelNames(dtype, 512).find("_v256"), std::string::npos) << dtype;
  }
  std::string f32 = kernelNames("f32", 0);
  EXPECT_NE(f32.find("__hg_cpu_dense_f32"), std::string::npos) << f32;
  EXPECT_EQ(f32.find("_v256"), std::string::npos) << f32;
}

// The far L2 prefetch is on by default only where it measured faster: AMD Zen 4 with AVX-512
// (the "_f8192" kernel), and transposed K on every target; row-major K on Intel and AVX2-only
// targets gets none unless asked (docs/cpu-path.md).
TEST(Aot, FarPrefetchDefaultFollowsTheTargetCpu) {
  auto kernelNames = [](const std::string &cpu, const std::string &features, int64_t far) {
    hybridgen::driver::CompileOptions opts;
    opts.targetCpu = cpu;
    opts.targetFeatures = features;
    opts.farPrefetchBytes = far;
    return denseKernelNames("f32", opts, "far_" + cpu);
  };
  // The far-prefetch suffix follows the chunk (and width) suffixes: "_t1024[_v256]_f<bytes>".
  auto farSuffix = [](const std::string &names) {
    std::smatch m;
    return std::regex_search(names, m, std::regex("_t[0-9]+(_amx)?(_v[0-9]+)?_f([0-9]+)"))
               ? m[3].str()
               : std::string("none");
  };
  std::string zen4 = kernelNames("znver4", "", -1);
  ASSERT_NE(zen4.find("__hg_cpu_dense_f32"), std::string::npos) << zen4;
  EXPECT_EQ(farSuffix(zen4), "8192") << zen4;
  EXPECT_EQ(farSuffix(kernelNames("znver4", "", 0)), "none");
  EXPECT_EQ(farSuffix(kernelNames("znver4", "", 4096)), "4096");
  // Zen 4 without AVX-512 is an AVX2 target: paced prefetches, no far one.
  EXPECT_EQ(farSuffix(kernelNames("znver4", "-avx512f", -1)), "none");
  for (const char *cpu : {"sapphirerapids", "x86-64-v4", "x86-64-v3", "znver3"}) {
    std::string names = kernelNames(cpu, "", -1);
    EXPECT_NE(names.find("__hg_cpu_dense_f32"), std::string::npos) << cpu << ": " << names;
    EXPECT_EQ(farSuffix(names), "none") << cpu << ": " << names;
    EXPECT_EQ(farSuffix(kernelNames(cpu, "", 8192)), "8192") << cpu;
  }
  // Transposed K has no near prefetch of the next piece's K: the far one is on for every target.
  for (const char *cpu : {"sapphirerapids", "emeraldrapids", "x86-64-v3", "znver3", "znver4"}) {
    hybridgen::driver::CompileOptions opts;
    opts.targetCpu = cpu;
    opts.kTransposed = true;
    std::string names = denseKernelNames("bf16", opts, std::string("far_kt_") + cpu);
    EXPECT_NE(names.find("_kt"), std::string::npos) << cpu << ": " << names;
    EXPECT_EQ(farSuffix(names), "8192") << cpu << ": " << names;
    opts.farPrefetchBytes = 0;
    EXPECT_EQ(farSuffix(denseKernelNames("bf16", opts, std::string("far_kt0_") + cpu)), "none")
        << cpu;
  }
}

TEST(Aot, ObjectFileForAnotherCpu) {
  AttentionSpec spec;
  spec.qHeads = 4;
  spec.kvHeads = 4;
  spec.headDim = 64;
  hybridgen::driver::CompileOptions opts;
  opts.targetCpu = "x86-64-v3";
  std::string path = std::string(HYBRIDGEN_TEST_TMPDIR) + "/aot_v3.o";
  hybridgen::driver::compileToObject(hybridgen::driver::buildAttentionModule(spec), path, opts);
  std::string syms = runCommand("nm '" + path + "'");
  EXPECT_NE(syms.find("_mlir_ciface_hg_attention"), std::string::npos) << syms;
  // AVX2 code (ymm registers) but no AVX-512 (zmm) for x86-64-v3.
  std::string code = runCommand("objdump -d --no-show-raw-insn '" + path + "' | grep -c ymm");
  EXPECT_GT(std::atoi(code.c_str()), 0);
  std::string zmm = runCommand("objdump -d --no-show-raw-insn '" + path + "' | grep -c zmm");
  EXPECT_EQ(std::atoi(zmm.c_str()), 0);
}
