// Ahead-of-time libraries built through the hybrid pipeline (CompileOptions::gpuKernels): the GPU
// kernels are embedded as a fatbin (or PTX), the library needs only the runtime, libomp and libc
// (no libMLIR, no libcuda: the runtime dlopens the driver), and on a machine without a GPU it
// takes the CPU fallback and matches the float64 reference at every split point.
#include "DriverTestUtil.h"

#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/memref_call.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

using namespace hgtest;
using hybridgen::driver::AttentionSpec;
namespace mc = hybridgen::memref_call;

namespace {

std::string run(const std::string &cmd) {
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

struct HybridAot : ::testing::Test {
  static void SetUpTestSuite() {
    // The fallback under test, whatever this machine has (the runtime reads it on first use).
    setenv("HYBRIDGEN_DISABLE_CUDA", "1", 1);
    spec.qHeads = 8;
    spec.kvHeads = 2;
    spec.headDim = 128;
    spec.blockSize = 16;
    spec.kvDtype = "bf16";
    hybridgen::driver::CompileOptions opts;
    opts.gpuKernels = true;
    soPath = std::string(HYBRIDGEN_TEST_TMPDIR) + "/aot_hybrid.so";
    hybridgen::driver::compileToSharedLibrary(hybridgen::driver::buildAttentionModule(spec),
                                              soPath, opts);
  }
  static AttentionSpec spec;
  static std::string soPath;
};
AttentionSpec HybridAot::spec;
std::string HybridAot::soPath;

} // namespace

TEST_F(HybridAot, EmbedsKernelsAndNeedsNoMLIROrCuda) {
  std::string needed = run("readelf -d '" + soPath + "'");
  EXPECT_NE(needed.find("libhybridgen_runtime"), std::string::npos) << needed;
  for (const char *lib : {"libMLIR", "libLLVM", "libcuda", "libcudart"})
    EXPECT_EQ(needed.find(lib), std::string::npos) << lib << " in\n" << needed;
  std::string ldd = run("ldd '" + soPath + "'");
  EXPECT_EQ(ldd.find("not found"), std::string::npos) << ldd;
  // The kernels are in the library (the embedded binary and its loader) and are launched
  // through the runtime's mgpu* ABI.
  std::string syms = run("nm '" + soPath + "'");
  EXPECT_NE(syms.find("hg_gpu_kernels_binary"), std::string::npos) << syms;
  // The loader is a constructor in .init_array (a legacy .ctors section is never run by lld's
  // output, and the kernels would then never load).
  EXPECT_EQ(run("readelf -SW '" + soPath + "'").find(".ctors"), std::string::npos);
  std::string loader = run("nm '" + soPath + "' | awk '/ hg_gpu_kernels_load$/ { print $1 }'");
  loader = loader.substr(loader.find_first_not_of('0'));
  loader = loader.substr(0, loader.find_first_of(" \n"));
  ASSERT_FALSE(loader.empty()) << syms;
  std::string relocs = run("readelf -rW '" + soPath + "'");
  EXPECT_NE(relocs.find(loader), std::string::npos)
      << "no relocation (.init_array entry) points at hg_gpu_kernels_load " << loader;
  std::string undefined = run("nm -D --undefined-only '" + soPath + "'");
  for (const char *fn : {"mgpuModuleLoad", "mgpuLaunchKernel", "mgpuStreamSynchronize",
                         "hgrt_gpu_available", "hgrt_gpu_alias", "hgrt_gpu_check_batch"})
    EXPECT_NE(undefined.find(fn), std::string::npos) << fn << " not called:\n" << undefined;
}

TEST_F(HybridAot, CpuFallbackMatchesReferenceAtEverySplit) {
  mc::AotLibrary aot(soPath);
  EXPECT_EQ(hgrt_gpu_available(), 0);
  Shape s;
  s.qHeads = spec.qHeads;
  s.kvHeads = spec.kvHeads;
  s.headDim = spec.headDim;
  s.blockSize = spec.blockSize;
  s.kvType = DType::bf16;
  std::mt19937_64 rng(testSeed() + 40);
  Problem p = makeProblem(s, {1, 3000, 17, 2049}, rng);
  std::vector<double> want = referenceAttention(p);
  // 0 (all on the GPU side), interior, and past every length (all on the CPU side).
  for (int64_t split : {int64_t(0), int64_t(1000), int64_t(1) << 40}) {
    setRuntimeSplit(split);
    std::fill(p.out.begin(), p.out.end(), -1.0f);
    std::vector<mc::Arg> args;
    for (const MemRefArg &a : p.args())
      args.push_back({a.data, static_cast<mc::ElemType>(a.dtype), a.shape, a.strides});
    aot.call("hg_attention", args);
    EXPECT_LE(relativeError(p.out, want), 1e-2) << "split " << split;
  }
  clearRuntimeSplit();
}

TEST_F(HybridAot, JitFallbackMatchesReference) {
  // The same module JIT-compiled with the kernels: the ExecutionEngine runs the module loader
  // and resolves the mgpu* ABI from the runtime it loads.
  hybridgen::driver::CompileOptions opts;
  opts.gpuKernels = true;
  auto jit = hybridgen::driver::JitModule::compile(hybridgen::driver::buildAttentionModule(spec),
                                                   opts);
  Shape s;
  s.qHeads = spec.qHeads;
  s.kvHeads = spec.kvHeads;
  s.headDim = spec.headDim;
  s.blockSize = spec.blockSize;
  s.kvType = DType::bf16;
  std::mt19937_64 rng(testSeed() + 41);
  Problem p = makeProblem(s, {300, 33}, rng);
  std::vector<double> want = referenceAttention(p);
  for (int64_t split : {int64_t(0), int64_t(100), int64_t(1) << 40}) {
    setRuntimeSplit(split);
    std::fill(p.out.begin(), p.out.end(), -1.0f);
    jit->call("hg_attention", p.args());
    EXPECT_LE(relativeError(p.out, want), 1e-2) << "split " << split;
  }
  clearRuntimeSplit();
}
