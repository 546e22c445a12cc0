//===- Passes.h - hybridgen passes and pipelines ----------------*- C++ -*-===//
#ifndef HYBRIDGEN_TRANSFORMS_PASSES_H
#define HYBRIDGEN_TRANSFORMS_PASSES_H

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/Pass/Pass.h"

namespace mlir::hybridgen {

#define GEN_PASS_DECL
#include "hybridgen/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "hybridgen/Transforms/Passes.h.inc"

/// Registers the named pipelines (e.g. `hg-cpu-pipeline`) with the global pass registry.
void registerPipelines();

} // namespace mlir::hybridgen

#endif // HYBRIDGEN_TRANSFORMS_PASSES_H
