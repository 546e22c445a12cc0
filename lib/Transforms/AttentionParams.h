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
