// The measuring half of the CPU attention benchmark, shared by the JIT bench
// (cpu_attention_bench.cpp, links the compiler) and the AOT-only bench
// (cpu_attention_aot_bench.cpp, links only the runtime and libomp, so it runs on machines without
// LLVM such as the GPU host).
// MLIR-free: kernels are called through memref_call::Arg views.
#pragma once

#include "hybridgen/runtime/free_blocks.h"
#include "hybridgen/runtime/memref_call.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hybridgen::bench {

/// What to measure; the flags common to both benches parse into this.
struct BenchOptions {
  std::vector<int64_t> contexts = {4096, 16384, 65536, 131072};
  std::vector<int64_t> batches = {1, 8};
  std::vector<std::string> dtypes = {"bf16", "f32"};
  std::vector<int> threads = {1, 2};
  double maxGiB = 4.5, minSeconds = 0.4;
  int64_t qHeads = 32, kvHeads = 8, headDim = 128, block = 16;
  int64_t reuseBlocks = 0; // >0: every sequence reads the first N pool blocks (cache-resident)
  // The sequences' blocks interleave in runs of N consecutive blocks; by default as the runtime's
  // pool hands them to a batch growing in lockstep (FreeBlocks). 1: one block of each in turn.
  int64_t runBlocks = rt::FreeBlocks::kAllocRunBlocks;
  // 0: every q element 0.01 (logits ~0, probabilities all alike); S > 0: q elements spread over
  // [-S/2, S/2] as K's are, so the logits spread like a model's (S = 30: ~+-10).
  double qScale = 0;
  // Bytes read between two calls' reads of the same KV (-1: twice the L3 this machine reports,
  // the default; 0: every call reads the same KV). A call reads one of enough copies of the KV,
  // in turn, that a pool the L3 could hold is not left there by the calls before it: on a Xeon
  // with 300 MiB of L3, 16K-64K-token pools read above the DRAM roof otherwise. In a model the
  // other layers' weights and KV pass through the caches between two reads of a layer's KV.
  int64_t coldBytes = -1;
};

/// The bytes that --cold-bytes=-1 stands for: twice the L3 size (sysconf), or 64 MiB when the
/// system does not say.
int64_t defaultColdBytes();

/// How many copies of |kvBytes| of KV keep |coldBytes| read between two reads of one copy (1
/// with |coldBytes| <= 0; a pool of at least |coldBytes| needs no second copy), no more than
/// fit |maxBytes| in all (at least 1).
int64_t coldCopies(double kvBytes, int64_t coldBytes, double maxBytes);

/// Steady-clock seconds (for timing compiles and calls).
double now();

/// Where `--save-aot=DIR` writes, and `--load=DIR` finds, the kernel of |dtype|:
/// DIR/attention_<dtype>[_noamx].so.
std::string kernelPath(const std::string &dir, const std::string &dtype, bool amx);

/// Parses the command line: the common flags (--contexts=, --batches=, --dtypes=, --threads=,
/// --max-gib=, --min-seconds=, --q-heads=, --kv-heads=, --head-dim=, --block=, --reuse-blocks=,
/// --run-blocks=, --q-scale=, --cold-bytes=)
/// into |opts|, every other argument through |own| (false: not one of its flags). Prints the
/// first unknown argument and returns false.
bool parseFlags(int argc, char **argv, BenchOptions &opts,
                const std::function<bool(const std::string &arg)> &own);

/// Calls the compiled `hg_attention` with (q, k pool, v pool, block table, lens, out).
using AttentionCall = std::function<void(const std::vector<memref_call::Arg> &)>;

/// Runs every (dtype, context, batch, threads) case of |opts|, printing one CSV row each:
/// context,batch,dtype,threads,kv_bytes,seconds,gbps,roof_gbps,ratio. |kernelFor| gives the
/// compiled kernel of a dtype (called once per dtype, before its cases).
void runCases(const BenchOptions &opts,
              const std::function<AttentionCall(const std::string &dtype)> &kernelFor);

/// The read roof in bytes/s at the current OpenMP thread count: the best of |rounds| rounds of
/// the same three passes runCases compares kernels against, over a fresh |bytes| buffer (for
/// other benchmarks, e.g. bench/models, that measure their own kernels against it).
double measureReadRoof(size_t bytes = size_t(1) << 30, int rounds = 3);

} // namespace hybridgen::bench
