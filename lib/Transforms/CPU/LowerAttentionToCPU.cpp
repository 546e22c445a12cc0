//===- LowerAttentionToCPU.cpp - hg-lower-attention-to-cpu (skeleton) ---===//
#include "hybridgen/Dialect/HG/HGOps.h"
#include "hybridgen/Transforms/Passes.h"

namespace mlir::hybridgen {
#define GEN_PASS_DEF_HGLOWERATTENTIONTOCPU
#include "hybridgen/Transforms/Passes.h.inc"
} // namespace mlir::hybridgen

using namespace mlir;

namespace {
struct LowerAttentionToCPUPass
    : hybridgen::impl::HGLowerAttentionToCPUBase<LowerAttentionToCPUPass> {
  using Base::Base;
  void runOnOperation() override {
    getOperation()->emitError("hg-lower-attention-to-cpu is not implemented yet");
    signalPassFailure();
  }
};
} // namespace
