//===- Pipelines.h - named hybridgen pass pipelines -------------*- C++ -*-===//
#ifndef HYBRIDGEN_TRANSFORMS_PIPELINES_H
#define HYBRIDGEN_TRANSFORMS_PIPELINES_H

#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <string>

namespace mlir::hybridgen {

/// Bounds and defaults of the CPU lowering's options, one definition for the pass, the pipelines
/// and the driver's checks.
/// Largest chunk accepted: far beyond any useful one (a chunk is one thread's share of a
/// sequence), and small enough that no index arithmetic on it can overflow.
constexpr int64_t kMaxChunkTokens = int64_t(1) << 24;
/// The dense vector kernel's far L2 prefetch (DenseBlock::logitsByTree): K and V lines this many
/// bytes of one K stream ahead of the piece in use, in whole pieces. 8 KiB measured best on the
/// Zen 4 guest of docs/cpu-path.md (1-4 pieces alike) and on Emerald Rapids with K transposed
/// (against 32 KiB). The driver turns it on for target CPU znver4 with AVX-512 and for transposed
/// K on every target. 1 MiB is a generous upper bound.
constexpr int64_t kDefaultFarPrefetchBytes = 8192;
constexpr int64_t kMaxFarPrefetchBytes = int64_t(1) << 20;
/// The most pieces the overlapped dense kernel's p.V may run behind its logits (each costs a
/// stack buffer of probabilities; 2 is the deepest any CPU has asked for).
constexpr int64_t kMaxOverlapPvLag = 4;
/// The far-prefetch setting that asks for the target's default. The lowering alone does not know
/// the CPU and takes it as off; the driver resolves it (kDefaultFarPrefetchBytes with transposed
/// K, or on znver4 with AVX-512; else off: slower with row-major K on AMD Zen 3 and on Intel
/// Sapphire and Emerald Rapids, docs/cpu-path.md).
constexpr int64_t kTargetFarPrefetchBytes = -1;

/// Options of `hg-cpu-pipeline` (hg dialect -> LLVM dialect, CPU only).
struct CPUPipelineOptions {
  /// Lower partials of every device to CPU code (the no-GPU fallback).
  bool allDevices = true;
  /// Tokens per parallel chunk of the CPU kernel (0: the lowering's default).
  int64_t chunkTokens = 0;
  /// Also emit the AMX-BF16 kernel path for bf16 KV (the target must have AMX; the kernel still
  /// asks the runtime at each call whether the OS lets it use the tiles).
  bool amx = false;
  /// Vector register width the CPU kernels are sized for (512 AVX-512, 256 AVX2, 128 SSE).
  int64_t vectorBits = 512;
  /// Vector width of the bf16/f16 KV kernels (0: vectorBits), e.g. 256 on AMD Zen 4.
  int64_t vectorBits16 = 0;
  /// The f32 KV kernels planned as for a target of this vector width, lanes and register count
  /// (0: vectorBits), e.g. 256 (AVX2's 16 registers) on AMD Zen 4 with K transposed.
  int64_t vectorBitsF32 = 0;
  /// Far L2 prefetch distance of the dense vector kernel in bytes of one K stream (0: off;
  /// kTargetFarPrefetchBytes: the target's default).
  int64_t farPrefetchBytes = kTargetFarPrefetchBytes;
  /// The target has AVX512-BF16 (and VL): bf16 KV kernels use bf16 dot products (vdpbf16ps).
  bool bf16Dot = false;
  /// As bf16Dot (implied), with q and p rounded once to bf16 instead of as hi + lo halves.
  bool bf16DotRounded = false;
  /// K pool pieces stored transposed, [head_dim][block_size] (hg-lower-attention-to-cpu's
  /// k-transposed).
  bool kTransposed = false;
  /// With kTransposed: the dense kernel's prefetches spread over the whole piece
  /// (hg-lower-attention-to-cpu's spread-prefetch; the driver turns it on for znver4).
  bool spreadPrefetch = false;
  /// spreadPrefetch for bf16/f16 KV: -1 as spreadPrefetch, 0 off, 1 on (the driver sets it on
  /// znver4; hg-lower-attention-to-cpu's spread-prefetch-16bit-kv).
  int64_t spreadPrefetch16 = -1;
  /// With kTransposed: the dense kernel overlaps each piece's logits with the previous piece's
  /// p.V (hg-lower-attention-to-cpu's overlap-pieces; the driver's default except on znver4).
  bool overlapPieces = false;
  /// overlapPieces for bf16/f16 KV: -1 as overlapPieces, 0 off, 1 on (for A/Bs of one dtype
  /// against another; the driver leaves it at -1; hg-lower-attention-to-cpu's
  /// overlap-pieces-16bit-kv).
  int64_t overlapPieces16 = -1;
  /// With overlapPieces: pieces p.V runs behind the logits (hg-lower-attention-to-cpu's
  /// overlap-pv-lag, 1 to kMaxOverlapPvLag).
  int64_t overlapPvLag = 1;
  /// p.V loads splatted probabilities (hg-lower-attention-to-cpu's splat-probs).
  bool splatProbs = false;
  /// Ahead-of-time code: name the CPU and its features on every llvm.func.
  bool aot = false;
  /// With aot: the CPU ("host" = this machine) and a feature list (empty = the CPU's).
  std::string targetCpu = "host";
  std::string targetFeatures;
  /// Host code of the hybrid pipeline: also lower the gpu dialect's host ops (launches, copies,
  /// streams) to calls of the `mgpu*` C ABI (gpu-to-llvm) before the final cast cleanup.
  bool gpuHost = false;
};

/// Appends the passes of `hg-cpu-pipeline` to |pm| (which must run on builtin.module).
void buildCPUPipeline(OpPassManager &pm, const CPUPipelineOptions &opts);

/// Options of `hg-gpu-to-nvvm`: the gpu.module of hg-lower-attention-to-gpu -> NVVM -> a
/// gpu.binary (PTX, cubin or fatbin) that the host code embeds.
struct GPUToNVVMOptions {
  /// Always explicit: the upstream defaults (sm_50, +ptx60) fail with CUDA 13.
  std::string chip = "sm_90";
  std::string features = "+ptx80";
  /// isa (PTX, JIT-compiled by the CUDA driver at load), bin (cubin), fatbin, or auto: fatbin
  /// when ptxas and fatbinary are found (toolkit/bin, then PATH), else isa.
  std::string format = "auto";
  /// Where libdevice (nvvm/libdevice) and ptxas live; without it __nv_expf is left unresolved.
  std::string toolkit = "/usr/local/cuda";
  unsigned optLevel = 3;
};

/// Appends the passes of `hg-gpu-to-nvvm` to |pm| (on builtin.module).
void buildGPUToNVVMPipeline(OpPassManager &pm, const GPUToNVVMOptions &opts);
/// The serialization format |opts|.format means on this machine ("auto" resolved).
std::string resolveGPUBinaryFormat(const GPUToNVVMOptions &opts);

/// Tuning of the GPU partial kernel (hg-lower-attention-to-gpu's unroll, pieces-per-lane,
/// async-stages, resident-blocks; docs/gpu-path.md "Kernel tuning"). 0 = the lowering's choice.
struct GPUKernelTuning {
  /// Row groups a warp step takes (0: 4, or 2 for GQA groups of 8).
  int64_t unroll = 0;
  /// 16-byte pieces of a row each lane loads (a power of two; clamped to the row's pieces).
  int64_t piecesPerLane = 1;
  /// Stages of a cp.async ring in shared memory that loads run ahead into (0: the loop carries
  /// the next step's loads in registers instead; else 2..8, within 48 KiB of shared memory).
  int64_t asyncStages = 0;
  /// Blocks per multiprocessor the kernel is built for (nvvm.minctasm) and the chunk count fills
  /// (0: 2; else 1..8).
  int64_t residentBlocks = 0;
};

/// Options of `hg-hybrid-pipeline`: CPU loops + GPU kernels + host orchestration -> LLVM dialect.
struct HybridPipelineOptions {
  /// The CPU side (its allDevices = true makes the whole pipeline the no-GPU fallback, exactly
  /// hg-cpu-pipeline).
  CPUPipelineOptions cpu;
  GPUToNVVMOptions gpu;
  /// Multiprocessors the GPU kernel's chunk count is sized for (132: H200).
  int64_t smCount = 132;
  int64_t minChunkTokens = 256;
  GPUKernelTuning tuning;
};

/// Appends the passes of `hg-hybrid-pipeline` to |pm| (on builtin.module).
void buildHybridPipeline(OpPassManager &pm, const HybridPipelineOptions &opts);

/// Registers `hg-gpu-to-nvvm` and `hg-hybrid-pipeline` (lib/Transforms/GPU).
void registerGPUPipelines();

} // namespace mlir::hybridgen

#endif // HYBRIDGEN_TRANSFORMS_PIPELINES_H
