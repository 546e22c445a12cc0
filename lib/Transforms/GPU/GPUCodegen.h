//===- GPUCodegen.h - shared pieces of the GPU attention lowering -*- C++ -*-===//
//
// The kernels are written op by op with the CPU lowering's Emitter (arith/scf helpers); this
// header adds what only the GPU side needs: the kernel configuration, its thread mapping and the
// builders of the two kernels and of their host-side launch.
//
//===----------------------------------------------------------------------===//
#ifndef HYBRIDGEN_LIB_TRANSFORMS_GPU_GPUCODEGEN_H
#define HYBRIDGEN_LIB_TRANSFORMS_GPU_GPUCODEGEN_H

#include "../CPU/CPUCodegen.h"

#include "hybridgen/Dialect/HG/HGOps.h"
#include "hybridgen/Transforms/Pipelines.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir::hybridgen::gpu_lowering {

using cpu::Emitter;

/// Threads of a partial-attention block: 4 warps. Each warp streams its own rows of the chunk,
/// so a block keeps 4 x rows-per-warp x unroll K and V rows in flight per step.
constexpr int64_t kWarps = 4;
constexpr int64_t kWarpSize = 32;
/// Threads of a combine block (one block per (sequence, query head), one thread per column).
constexpr int64_t kCombineThreads = 128;
/// A global load moves 16 bytes per lane (ld.global.nc.v4.u32).
constexpr int64_t kLoadBytes = 16;

/// What one pair of generated kernels (partial + combine) is specialized for.
struct GpuKernelConfig {
  Type kvType;       // f32, f16 or bf16
  int64_t qHeads;    // query heads
  int64_t kvHeads;   // kv heads (group = qHeads / kvHeads)
  int64_t blockSize; // tokens per KV block
  int64_t headDim;   // elements per row
  float scale;       // logit scale
  int64_t window;    // 0: no sliding window
  float softcap;     // 0: no softcap
  GPUKernelTuning tuning; // of the whole pass (not part of the kernel names)

  int64_t group() const { return qHeads / kvHeads; }
  int64_t eltBytes() const { return kvType.isF32() ? 4 : 2; }
  /// Elements of one 16-byte load.
  int64_t pieceElems() const { return kLoadBytes / eltBytes(); }
  /// 16-byte pieces of a row one lane loads (adjacent columns).
  int64_t piecesPerLane() const {
    return std::clamp<int64_t>(tuning.piecesPerLane, 1, headDim * eltBytes() / kLoadBytes);
  }
  /// Elements of a row one lane holds.
  int64_t lanesElems() const { return piecesPerLane() * pieceElems(); }
  /// Lanes that share one row.
  int64_t lanesPerRow() const { return headDim / lanesElems(); }
  /// Rows a warp reads at once (one per lanesPerRow lanes).
  int64_t rowsPerWarp() const { return kWarpSize / lanesPerRow(); }
  /// Row groups each warp loads per step: more loads in flight, more registers. Auto: 4 pieces
  /// of K and of V per lane and step (2 for GQA groups of 8), whatever the pieces per lane.
  int64_t unroll() const {
    if (tuning.unroll)
      return tuning.unroll;
    return std::max<int64_t>(1, (group() >= 8 ? 2 : 4) / piecesPerLane());
  }
  /// Stages of the shared-memory ring that cp.async fills ahead of the arithmetic (0: the loop
  /// carries the next step's words in registers instead).
  int64_t asyncStages() const { return tuning.asyncStages; }
  /// Bytes of the cp.async ring: kWarps x stages x (K and V) x unroll x 32 lanes x 16 bytes.
  int64_t ringBytes() const {
    return kWarps * asyncStages() * 2 * unroll() * piecesPerLane() * kWarpSize * kLoadBytes;
  }
  /// Blocks the kernel is built to keep resident per multiprocessor (nvvm.minctasm: ptxas keeps
  /// each thread within 65536 / (128 x 2) = 256 registers); the chunk count fills smCount x this
  /// many slots. Two blocks of the pipelined kernel beat three or four of lighter variants on the
  /// H200 (docs/gpu-path.md, "Kernel tuning").
  int64_t residentBlocks() const { return tuning.residentBlocks ? tuning.residentBlocks : 2; }
  /// Static shared memory of the partial kernel: the warps' (o, m, l) and the cp.async ring.
  int64_t sharedBytes() const { return kWarps * group() * (headDim + 2) * 4 + ringBytes(); }
  /// Tokens a block consumes per loop step (all warps).
  int64_t rowsPerStep() const { return kWarps * rowsPerWarp() * unroll(); }
  /// A stable name fragment that tells configurations apart.
  std::string mangle() const;
};

/// Why |c| cannot be lowered to the GPU kernels (empty when it can).
std::string unsupportedReason(const GpuKernelConfig &c);
/// What is wrong with the pass's tuning options for |c| (empty when nothing).
std::string tuningError(const GpuKernelConfig &c);
/// Most static shared memory a kernel may use without opting in (48 KiB).
constexpr int64_t kMaxStaticSharedBytes = 48 * 1024;

/// Argument types of the partial kernel: (q, k_addr, v_addr, num_blocks, block_table, lens,
/// begin, end, chunk_tokens, chunk_o, chunk_m, chunk_l). K and V are 64-bit device addresses
/// (the runtime's alias of the host pool), read with 16-byte global loads.
SmallVector<Type> partialKernelArgTypes(MLIRContext *ctx, const GpuKernelConfig &c);
/// Argument types of the combine kernel: (chunk_o, chunk_m, chunk_l, num_chunks, o, m, l).
SmallVector<Type> combineKernelArgTypes(MLIRContext *ctx, const GpuKernelConfig &c);

/// Emits the split-KV flash-decoding kernel |name| into |module| (see PartialKernel.cpp).
gpu::GPUFuncOp buildPartialKernel(gpu::GPUModuleOp module, StringRef name,
                                  const GpuKernelConfig &c, Location loc);
/// Emits the log-sum-exp combine kernel |name| into |module| (see CombineKernel.cpp).
gpu::GPUFuncOp buildCombineKernel(gpu::GPUModuleOp module, StringRef name,
                                  const GpuKernelConfig &c, Location loc);

/// The kernels of one configuration.
struct GpuKernels {
  gpu::GPUFuncOp partial, combine;
};

/// The stream of one launched GPU partial: its last token and the device buffers.
struct DeviceLaunch {
  Value token;
  Value o, m, l;               // the device's (o, m, l)
  SmallVector<Value> buffers;  // every device buffer, freed by emitDeviceFinish
};

/// Emits, at |b|, the asynchronous device part of |op| on one new stream: device buffers,
/// host-to-device copies of q, the block table and the lengths, and the two launches. |kAddr| and
/// |vAddr| are the pools' device addresses (i64). Nothing here waits for the device.
/// |maxSpan| is emitMaxSpan's value (positive: the caller skips the device for empty ranges).
DeviceLaunch emitDeviceLaunch(ImplicitLocOpBuilder &b, PartialAttentionOp op,
                              const GpuKernelConfig &c, const GpuKernels &kernels, Value kAddr,
                              Value vAddr, Value maxSpan, int64_t smCount, int64_t minChunkTokens);
/// The longest clamped token range of |op| over the batch, from the host's lengths (0: every
/// range empty, nothing to launch).
Value emitMaxSpan(ImplicitLocOpBuilder &b, PartialAttentionOp op, const GpuKernelConfig &c);
/// |op|'s end bound as an index (a huge constant for `len`: the kernels clamp to len).
Value partialEnd(ImplicitLocOpBuilder &b, PartialAttentionOp op);
/// Emits the end of |launch|'s stream: (o, m, l) copied into |op|'s host buffers and the device
/// buffers freed (both block the host until the kernels are done, so this goes after the CPU
/// work). Returns the token to wait on.
Value emitDeviceFinish(ImplicitLocOpBuilder &b, PartialAttentionOp op, const DeviceLaunch &launch);

/// (begin, end) of sequence |s| clamped as on the CPU: [0, len], the table's capacity, the window.
std::pair<Value, Value> clampedRange(Emitter &e, const GpuKernelConfig &c, Value lens,
                                     Value capacity, Value s, Value begin, Value end);

/// The private declaration of the external function |name| in |module|.
func::FuncOp declareExternal(ModuleOp module, StringRef name, TypeRange inputs,
                             TypeRange results = {});

} // namespace mlir::hybridgen::gpu_lowering

#endif // HYBRIDGEN_LIB_TRANSFORMS_GPU_GPUCODEGEN_H
