//===- PrefillKernel.h - the CPU kernel of hg.prefill_attention -*- C++ -*-===//
#ifndef HYBRIDGEN_LIB_TRANSFORMS_CPU_PREFILLKERNEL_H
#define HYBRIDGEN_LIB_TRANSFORMS_CPU_PREFILLKERNEL_H

#include "hybridgen/Dialect/HG/HGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::hybridgen::cpu {

/// Replaces |op| with a call to the generated prefill kernel of its configuration, creating the
/// kernel in |module| on first use (|kernels| caches them by configuration, so every layer of a
/// model shares one). Inside an hg.segment the call is bracketed by hgrt_device_begin/end (cpu).
/// Fails with a diagnostic on shapes the CPU lowering does not support. |kTransposed|: the K
/// pool's pieces are stored [head_dim][block_size] (KernelConfig::kTransposed).
LogicalResult lowerPrefillAttention(ModuleOp module, PrefillAttentionOp op,
                                    llvm::StringMap<func::FuncOp> &kernels, bool kTransposed);

} // namespace mlir::hybridgen::cpu

#endif // HYBRIDGEN_LIB_TRANSFORMS_CPU_PREFILLKERNEL_H
