// CPU decode attention (Llama-3-8B shapes) compiled by the hybridgen JIT, measured as KV bytes
// read per second against a read-bandwidth roof taken right before on the same threads.
//
//   hybridgen_cpu_attention_bench [--contexts=4096,16384,...] [--batches=1,8] [--dtypes=bf16,f32]
//                                 [--threads=1,2] [--max-gib=4.5] [--min-seconds=0.4]
//                                 [--aot=PATH.so] [--save-aot=DIR] [--q-heads=32] [--block=16]
//                                 [--chunk-tokens=N] [--reuse-blocks=N] [--run-blocks=N]
//                                 [--no-amx]
//                                 [--bf16-dot] [--bf16-dot-rounded] [--k-transposed]
//                                 [--far-prefetch-bytes=N] [--spread-prefetch=-1|0|1]
//                                 [--overlap-pieces=-1|0|1] [--overlap-pv-lag=N] [--splat-probs]
//
// --aot compiles ahead of time to PATH.so (hybridgen-compile's path) and calls it through
// AotLibrary instead of the JIT, so `perf record -e cpu-clock` + `perf annotate` see symbols.
// --save-aot compiles each dtype to DIR/attention_<dtype>[_noamx].so and exits: the input of
// hybridgen_cpu_attention_aot_bench on machines without LLVM (bench/cpu_attention/device.sh).
// --q-heads, --block and --chunk-tokens change the GQA group, the block size and the tokens per
// parallel chunk (profiling experiments; 0: the lowering's default).
// --no-amx compiles without the AMX-BF16 path (bf16 KV then runs the vector kernel).
// --bf16-dot lets the bf16 vector kernel use AVX512-BF16 dot products where the target has them.
// --bf16-dot-rounded does so with q and p rounded once to bf16 (half the dot products).
// --far-prefetch-bytes, --spread-prefetch and --overlap-pieces set the CompileOptions of those
// names (-1: the target's default); --splat-probs sets splatProbs (p.V loads splatted
// probabilities instead of broadcasting them); --overlap-pv-lag=N how many pieces the overlapped
// kernel's p.V runs behind its logits (0: the target's, 1).
// --k-transposed compiles for K pools whose pieces are stored transposed (the pools hold random
// data either way, so only the speed differs).
// --reuse-blocks=N points every sequence's blocks at the first N pool blocks (cache-resident KV:
// the kernel's compute rate; GB/s then counts logical bytes).
// --run-blocks=N lays each sequence's blocks out in runs of N consecutive pool blocks (default 1:
// the sequences of a batch take turns block by block, as the runtime's pool hands them out).
//
// Prints one CSV row per case: context,batch,dtype,threads,kv_bytes,seconds,gbps,roof_gbps,ratio
// (seconds: the best call; roof: the best pass, both taken in alternating rounds).
#include "bench_core.h"

#include "hybridgen/Driver/Driver.h"

#include <cstdio>
#include <memory>

namespace drv = hybridgen::driver;
namespace mc = hybridgen::memref_call;

int main(int argc, char **argv) {
  hybridgen::bench::BenchOptions opts;
  std::string aotPath, saveDir;
  drv::CompileOptions options;
  bool ok = hybridgen::bench::parseFlags(argc, argv, opts, [&](const std::string &a) {
    if (a.rfind("--aot=", 0) == 0)
      aotPath = a.substr(6);
    else if (a.rfind("--save-aot=", 0) == 0)
      saveDir = a.substr(11);
    else if (a.rfind("--chunk-tokens=", 0) == 0)
      options.chunkTokens = std::stoll(a.substr(15));
    else if (a.rfind("--far-prefetch-bytes=", 0) == 0)
      options.farPrefetchBytes = std::stoll(a.substr(21));
    else if (a.rfind("--spread-prefetch=", 0) == 0)
      options.spreadPrefetch = std::stoll(a.substr(18));
    else if (a.rfind("--overlap-pieces=", 0) == 0)
      options.overlapPieces = std::stoll(a.substr(17));
    else if (a.rfind("--overlap-pv-lag=", 0) == 0)
      options.overlapPvLag = std::stoll(a.substr(17));
    else if (a == "--splat-probs")
      options.splatProbs = true;
    else if (a.rfind("--vector-bits=", 0) == 0)
      options.vectorBits = std::stoll(a.substr(14));
    else if (a == "--no-amx")
      options.amx = false;
    else if (a == "--bf16-dot")
      options.bf16Dot = true;
    else if (a == "--bf16-dot-rounded")
      options.bf16DotRounded = true;
    else if (a == "--k-transposed")
      options.kTransposed = true;
    else if (a.rfind("--target-cpu=", 0) == 0)
      options.targetCpu = a.substr(13);
    else if (a.rfind("--target-features=", 0) == 0)
      options.targetFeatures = a.substr(18);
    else
      return false;
    return true;
  });
  if (!ok)
    return 2;
  auto moduleFor = [&](const std::string &dtype) {
    drv::AttentionSpec spec;
    spec.qHeads = opts.qHeads;
    spec.kvHeads = opts.kvHeads;
    spec.headDim = opts.headDim;
    spec.blockSize = opts.block;
    spec.kvDtype = dtype;
    spec.devices = {"cpu"}; // the CPU path alone: no split, no merge
    return drv::buildAttentionModule(spec);
  };
  if (!saveDir.empty()) {
    for (const std::string &dtype : opts.dtypes) {
      std::string path = hybridgen::bench::kernelPath(saveDir, dtype, options.amx);
      drv::compileToSharedLibrary(moduleFor(dtype), path, options);
      std::fprintf(stderr, "wrote %s\n", path.c_str());
    }
    return 0;
  }

  // Kept alive across a dtype's cases; replaced by the next dtype's.
  std::unique_ptr<drv::JitModule> jit;
  std::unique_ptr<mc::AotLibrary> aot;
  using hybridgen::bench::AttentionCall;
  hybridgen::bench::runCases(opts, [&](const std::string &dtype) -> AttentionCall {
    double t0 = hybridgen::bench::now();
    jit.reset();
    aot.reset();
    if (aotPath.empty()) {
      jit = drv::JitModule::compile(moduleFor(dtype), options);
    } else {
      drv::compileToSharedLibrary(moduleFor(dtype), aotPath, options);
      aot = std::make_unique<mc::AotLibrary>(aotPath);
    }
    std::fprintf(stderr, "compiled %s attention in %.2f s\n", dtype.c_str(),
                 hybridgen::bench::now() - t0);
    if (aot)
      return [lib = aot.get()](const std::vector<mc::Arg> &args) {
        lib->call("hg_attention", args);
      };
    // The driver's own shape checks, outside the timed calls as far as possible: once per pool
    // (each case maps new ones; a pool mapped at a reused address only skips the check).
    return [module = jit.get(), block = opts.block,
            checked = (const void *)nullptr](const std::vector<mc::Arg> &args) mutable {
      std::vector<drv::MemRefArg> margs;
      for (const mc::Arg &a : args)
        margs.push_back({a.data, static_cast<drv::DType>(a.type), a.shape, a.strides});
      if (checked != args[1].data)
        drv::validateAttentionArgs(margs, block);
      checked = args[1].data;
      module->call("hg_attention", margs);
    };
  });
  return 0;
}
