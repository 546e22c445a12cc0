//===- LowerRuntimeCalls.cpp - hg-lower-runtime-calls -------------------===//
//
// Segments and split points become calls into the runtime's C ABI (docs/interfaces.md), so that
// the feedback scheduler sees every segment run and chooses each split point.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Dialect/HG/HGOps.h"
#include "hybridgen/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::hybridgen {
#define GEN_PASS_DEF_HGLOWERRUNTIMECALLS
#include "hybridgen/Transforms/Passes.h.inc"
} // namespace mlir::hybridgen

using namespace mlir;
using namespace mlir::hybridgen;

namespace {

/// Declares `func.func private @name(inputs) -> results` in |module| unless it exists.
func::FuncOp declareRuntimeFunction(ModuleOp module, StringRef name, TypeRange inputs,
                                    TypeRange results) {
  if (auto existing = module.lookupSymbol<func::FuncOp>(name))
    return existing;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto fn = func::FuncOp::create(b, module.getLoc(), name,
                                 b.getFunctionType(inputs, results));
  fn.setPrivate();
  return fn;
}

struct LowerRuntimeCallsPass : hybridgen::impl::HGLowerRuntimeCallsBase<LowerRuntimeCallsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    OpBuilder b(module.getContext());
    Type i64 = b.getI64Type();
    auto splitFn = declareRuntimeFunction(module, "hgrt_split_point", {i64}, {i64});
    auto beginFn = declareRuntimeFunction(module, "hgrt_segment_begin", {i64}, {});
    auto endFn = declareRuntimeFunction(module, "hgrt_segment_end", {i64}, {});

    // Split points first: they need their segment to find its id (a constant, or the run-time
    // value of a dynamic id, which dominates the segment and so every split point inside).
    SmallVector<SplitPointOp> points;
    module.walk([&](SplitPointOp op) { points.push_back(op); });
    for (SplitPointOp op : points) {
      b.setInsertionPoint(op);
      Location loc = op.getLoc();
      Value id = op.getSegment().buildIdValue(b, loc);
      Value raw = func::CallOp::create(b, loc, splitFn, ValueRange{id}).getResult(0);
      // A negative answer would make empty-range garbage of the partials: clamp it at 0.
      Value zero = arith::ConstantIntOp::create(b, loc, 0, 64);
      Value clamped = arith::MaxSIOp::create(b, loc, raw, zero);
      Value index = arith::IndexCastOp::create(b, loc, b.getIndexType(), clamped);
      op.getResult().replaceAllUsesWith(index);
      op.erase();
    }

    SmallVector<SegmentOp> segments;
    module.walk([&](SegmentOp op) { segments.push_back(op); });
    for (SegmentOp op : segments) {
      b.setInsertionPoint(op);
      Location loc = op.getLoc();
      Value id = op.buildIdValue(b, loc);
      func::CallOp::create(b, loc, beginFn, ValueRange{id});
      Block &body = op.getBody().front();
      op->getBlock()->getOperations().splice(Block::iterator(op), body.getOperations());
      b.setInsertionPoint(op);
      func::CallOp::create(b, loc, endFn, ValueRange{id});
      op.erase();
    }
  }
};

} // namespace
