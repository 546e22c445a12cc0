//===- AttentionParams.h - what every attention lowering reads off an hg op -------*- C++ -*-===//
//
// The CPU and GPU lowerings specialize their kernels for the same parameters (KV dtype, heads,
// block size, head dim, scale, window, softcap) and need the same row-major layouts; both read
// them here, so the two can never disagree about an op.
//
//===----------------------------------------------------------------------===//
#ifndef HYBRIDGEN_LIB_TRANSFORMS_ATTENTIONPARAMS_H
#define HYBRIDGEN_LIB_TRANSFORMS_ATTENTIONPARAMS_H

#include "hybridgen/Dialect/HG/HGOps.h"

#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/bit.h"
#include "llvm/Support/FormatVariadic.h"

#include <string>

namespace mlir::hybridgen {

/// Sets |c|'s kvType, qHeads, kvHeads, blockSize, headDim, scale, window and softcap from the
/// partial attention |op| (a config type with those fields: cpu::KernelConfig, GpuKernelConfig).
template <typename Config> void readAttentionParams(PartialAttentionOp op, Config &c) {
  auto kType = cast<MemRefType>(op.getKPool().getType());
  auto qType = cast<MemRefType>(op.getQ().getType());
  c.kvType = kType.getElementType();
  c.qHeads = qType.getDimSize(1);
  c.kvHeads = kType.getDimSize(1);
  c.blockSize = kType.getDimSize(2);
  c.headDim = kType.getDimSize(3);
  c.scale = op.getScale().convertToFloat();
  c.window = op.getWindow().value_or(0);
  c.softcap = op.getSoftcap() ? op.getSoftcap()->convertToFloat() : 0.0f;
}

/// The part of a kernel's name that these parameters make (dtype, heads, block size, head dim,
/// and the bit patterns of scale and softcap), e.g. `f32_q32_kv8_b16_d128_s3db504f3_w0_c0`: each
/// lowering appends what else it specializes on.
template <typename Config> std::string mangleAttentionParams(const Config &c) {
  std::string type;
  llvm::raw_string_ostream os(type);
  os << c.kvType;
  return llvm::formatv("{0}_q{1}_kv{2}_b{3}_d{4}_s{5:x}_w{6}_c{7:x}", type, c.qHeads, c.kvHeads,
                       c.blockSize, c.headDim, llvm::bit_cast<uint32_t>(c.scale), c.window,
                       llvm::bit_cast<uint32_t>(c.softcap))
      .str();
}

/// Fails with "the <lowering> lowering needs identity (row-major) layouts, got T" on |op| for the
/// first memref of |operands| with another layout (other operands are skipped).
inline LogicalResult requireIdentityLayouts(Operation *op, ValueRange operands,
                                            StringRef lowering) {
  for (Value v : operands)
    if (auto type = dyn_cast<MemRefType>(v.getType()); type && !type.getLayout().isIdentity())
      return op->emitOpError("the ")
             << lowering << " lowering needs identity (row-major) layouts, got " << v.getType();
  return success();
}

} // namespace mlir::hybridgen

#endif // HYBRIDGEN_LIB_TRANSFORMS_ATTENTIONPARAMS_H
