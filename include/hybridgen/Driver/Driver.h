//===- Driver.h - compile hg modules: JIT or ahead of time -------*- C++ -*-===//
//
// The compiler driver used by the tools and by Python. This header names no MLIR type on purpose:
// users (the Python extension, benchmarks) include it without the MLIR headers.
//
// Calling convention: every public function of a compiled module is emitted with
// `llvm.emit_c_interface`, so it is reachable as `_mlir_ciface_<name>(Desc *...)`, one pointer to a
// strided memref descriptor per memref argument (and plain values for scalars). JIT and ahead-of-
// time artifacts use the same symbols, so one MemRefArg list calls both and gets the same result.
//
//===----------------------------------------------------------------------===//
#ifndef HYBRIDGEN_DRIVER_DRIVER_H
#define HYBRIDGEN_DRIVER_DRIVER_H

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hybridgen::driver {

/// Diagnostics of a failed compilation (parse, verify, a pass, translation), with their
/// locations, as one human-readable text in what().
class CompileError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Bad arguments to a compiled function (shape, dtype, null pointer, lengths beyond the pool).
class ArgumentError : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

enum class DType { f32, f16, bf16, i32, i64 };
/// "f32", "f16", "bf16", "i32", "i64"; throws ArgumentError for anything else.
DType parseDType(const std::string &name);
const char *dtypeName(DType dtype);
size_t dtypeSize(DType dtype);

struct CompileOptions {
  /// Lower the partials of every device to CPU code (the no-GPU fallback). Until the GPU lowering
  /// exists this is the only way to run a [cpu, gpu] split.
  bool allDevicesOnCpu = true;
  /// Tokens per parallel CPU chunk (0: the lowering chooses).
  int64_t chunkTokens = 0;
  /// Target CPU of JIT and ahead-of-time code ("host" = this machine). The CPU kernels' register
  /// tiles follow its vector width (AVX-512, AVX2 or SSE).
  std::string targetCpu = "host";
  std::string targetFeatures; // e.g. "+avx2,+fma"; empty = the CPU's own
  /// Use AMX tiles for bf16 KV when the target has AMX-BF16 (the kernel still checks at run time
  /// that the OS grants the tile state, and runs its vector path otherwise).
  bool amx = true;
  /// How far ahead the dense CPU kernel prefetches K and V into L2, in bytes of one K stream
  /// (0: off; rounded up to whole KV blocks of one kv head). docs/cpu-path.md has the measurements.
  /// -1, the default: 8192 with kTransposed (that kernel has no other software prefetch of K) or
  /// on AMD Zen 4 with AVX-512, where it measured faster; else 0 (resolved in buildPipeline).
  int64_t farPrefetchBytes = -1;
  /// With kTransposed and the far prefetch: spread the dense kernel's prefetches over the whole
  /// piece (far V rows and the next piece's K asked for in p.V, not all in the logits). -1, the
  /// default: on for AMD Zen 4 with AVX-512, where Llama-3-8B's shape read 20-45% more of the
  /// roof with it on one thread, off elsewhere (not measured there); 0 off, 1 on
  /// (docs/cpu-runs.md, "Prefetches spread over the piece").
  int64_t spreadPrefetch = -1;
  /// With kTransposed: the dense kernel computes each piece's logits in one loop with the
  /// previous piece's p.V, so that K and V stream together and the math is spread evenly over
  /// both (where spreadPrefetch does not apply). -1, the default: on for AVX2 and AVX-512
  /// targets but AMD Zen 4, which has its own spread prefetch; 0 off, 1 on (docs/cpu-runs.md,
  /// "Each piece's logits with the previous piece's p.V", "Logits in passes over the heads").
  int64_t overlapPieces = -1;
  /// With overlapPieces: how many pieces p.V runs behind the logits, 1 to 4 (0, the default:
  /// the target's, 1 on every target so far). At 2 no overlapped step waits on the softmax just
  /// before it, for cores whose out-of-order window does not cover the softmax's dependency
  /// chain (docs/cpu-runs.md, "p.V two pieces behind the logits").
  int64_t overlapPvLag = 0;
  /// The dense kernel's p.V loads each probability as a copy splatted across the lanes (written
  /// once per piece) instead of broadcasting it at every use. Off by default: LLVM's models of
  /// AMD Zen 3/4 predict it faster there (a broadcast load takes an FP pipe beside the FMAs),
  /// not yet measured on one; on Emerald Rapids it measured 2-4% slower cache-resident (AVX2
  /// code) and read 0.01-0.04 less of the roof from DRAM for 16-bit KV (AVX-512 code)
  /// (docs/cpu-runs.md, "Predicted core cycles for a CPU not at hand").
  bool splatProbs = false;
  /// Vector width the CPU kernels' register tiles are sized for: 0 = the target's widest (512
  /// with AVX-512, 256 with AVX2, else 128); 256 or 128 narrower on purpose (must not exceed it).
  int64_t vectorBits = 0;
  /// Use AVX512-BF16 dot products (vdpbf16ps) in the bf16 KV kernels when the target has them
  /// (AMD Zen 4/5, Intel Cooper Lake and later), q and p as bf16 hi + lo halves (~2^-17). Off by
  /// default: on AMD Zen 4 it measured as fast as the f32 FMAs on widened KV, which keep f32's
  /// precision (docs/cpu-runs.md, "The bf16 dot-product path").
  bool bf16Dot = false;
  /// bf16Dot with q and p rounded once to bf16 instead of as halves (implies bf16Dot): half the
  /// dot products, relative error ~1e-3 instead of ~4e-6, the precision of a bf16 model's
  /// attention in PyTorch. Off by default; on AMD Zen 4 decode attention read 12-28% more of
  /// the memory roof with it on one thread at batch 1 (docs/cpu-runs.md, "bf16 dot products
  /// with q and p rounded once"). With kTransposed the logits take them too, on K's columns
  /// paired in registers (head dims that are a multiple of 8).
  bool bf16DotRounded = false;
  /// The K pools the compiled code reads hold each (block, kv head) piece transposed,
  /// [head_dim][block_size] instead of [block_size][head_dim] (V unchanged; the runtime's
  /// KvLayout::kTransposed writes them so). The dense CPU kernel then computes the logits
  /// without sum trees, in the same exact f32 arithmetic: on AMD Zen 4, one thread, SmolLM2's
  /// bf16 attention read 0.77-0.91 of the memory roof against 0.53-0.70 (docs/cpu-runs.md, "K
  /// transposed per block"). Off by default here (the caller owns the pools); model artifacts
  /// turn it on. Not supported with top-k attention or GPU kernels (a CompileError says so).
  bool kTransposed = false;
  /// Shared libraries the JIT loads (libomp, the runtime); empty = the defaults found at build time.
  std::vector<std::string> sharedLibs;
  /// File name that diagnostics (file:line:col) name for the MLIR text.
  std::string sourceName = "<input>";
  /// The hybrid pipeline (hg-hybrid-pipeline): GPU partials become CUDA kernels embedded in the
  /// code (fatbin, or PTX for the driver's JIT without ptxas), launched asynchronously while the
  /// CPU partial runs; without a usable GPU at run time every token goes to the CPU. Overrides
  /// allDevicesOnCpu.
  bool gpuKernels = false;
  /// With gpuKernels: the GPU architecture and PTX features, the binary format (auto | fatbin |
  /// bin | isa) and the CUDA toolkit (libdevice, ptxas, fatbinary).
  std::string gpuChip = "sm_90";
  std::string gpuFeatures = "+ptx80";
  std::string gpuFormat = "auto";
  std::string cudaToolkit = "/usr/local/cuda";
  /// With gpuKernels: the partial kernel's tuning (docs/gpu-path.md "Kernel tuning"; defaults are
  /// the measured best on the H200).
  int64_t gpuUnroll = 0, gpuPiecesPerLane = 1, gpuAsyncStages = 0, gpuResidentBlocks = 0;
};

/// A hybrid decode attention described by shapes, for users who do not write MLIR.
struct AttentionSpec {
  int64_t batch = -1;          // -1 = dynamic
  int64_t qHeads = 32;
  int64_t kvHeads = 8;
  int64_t headDim = 128;
  int64_t blockSize = 16;
  int64_t numBlocks = -1;      // -1 = dynamic
  int64_t maxBlocksPerSeq = -1; // -1 = dynamic
  std::string kvDtype = "f32"; // f32 | f16 | bf16
  std::optional<float> scale;  // default 1/sqrt(headDim)
  std::optional<int64_t> window;
  std::optional<float> softcap;
  std::vector<std::string> devices = {"cpu", "gpu"};
  std::optional<int64_t> splitPoint; // nullopt = read from the runtime (segment `segmentId`)
  bool sparse = false;
  int64_t topK = 0;
  int64_t segmentId = 0;
  /// Also expose each device's (o, m, l) partial as function arguments (after `out`).
  bool returnPartials = false;
};

/// MLIR text of `func.func @hg_attention(q, k_pool, v_pool, block_table, seq_lens, out
/// [, o_0, m_0, l_0, o_1, m_1, l_1])` for |spec|. Throws ArgumentError on an inconsistent spec.
std::string buildAttentionModule(const AttentionSpec &spec);

/// One memref argument: a view of caller memory, never copied.
struct MemRefArg {
  void *data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides; // in elements; empty = row-major contiguous
};

/// The memref arguments a compiled function expects (static dims as given, -1 where dynamic).
struct ArgSpec {
  DType dtype;
  std::vector<int64_t> shape;
};

/// A module compiled in-process with the MLIR ExecutionEngine (JIT).
class JitModule {
public:
  /// Parses, verifies, lowers (the hg CPU pipeline) and JIT-compiles |mlirText|.
  /// Throws CompileError with the diagnostics.
  static std::unique_ptr<JitModule> compile(const std::string &mlirText,
                                            const CompileOptions &options = {});
  ~JitModule();

  /// The memref signature of public function |name|; throws ArgumentError if there is none.
  const std::vector<ArgSpec> &signature(const std::string &name) const;
  /// Calls |name| on |args| after checking them against its signature (rank, dtype, static dims,
  /// non-null data). Does not hold any lock: callers may release the GIL around it.
  void call(const std::string &name, const std::vector<MemRefArg> &args) const;

private:
  JitModule();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// Ahead of time: lower |mlirText| and write a relocatable object (.o) for the target of |options|.
void compileToObject(const std::string &mlirText, const std::string &outPath,
                     const CompileOptions &options = {});
/// Ahead of time: a shared library linked against the runtime and libomp only (never libMLIR),
/// plus a `<outPath>.sig` text file describing each function's memref signature.
void compileToSharedLibrary(const std::string &mlirText, const std::string &outPath,
                            const CompileOptions &options = {});

/// Whether the target of |options| has the AVX512-BF16 dot products (and AVX512-VL) that
/// bf16Dot and bf16DotRounded need; without them both options change nothing.
bool targetHasBf16Dot(const CompileOptions &options);

/// The widest vector registers (bits: 512 with AVX-512, 256 with AVX2, else 128) of the target of
/// |options| (targetCpu / targetFeatures, the host's by default).
int64_t targetVectorBits(const CompileOptions &options);

/// Checks decode-attention buffers (q, k_pool, v_pool, block_table, seq_lens, out) for consistency
/// before a call: shapes agree, GQA ratio whole, lengths within the pool and the block table,
/// block ids within the pool. Throws ArgumentError with a clear message.
void validateAttentionArgs(const std::vector<MemRefArg> &args, int64_t blockSize);

} // namespace hybridgen::driver

#endif // HYBRIDGEN_DRIVER_DRIVER_H
