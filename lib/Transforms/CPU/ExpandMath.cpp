//===- ExpandMath.cpp - hg-expand-math: polynomial math for CPU kernels ===//
//
// Vector math.exp/tanh otherwise lower to one libm call per lane, which would dominate the
// attention kernel's inner loop.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Transforms/Passes.h"

#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::hybridgen {
#define GEN_PASS_DEF_HGEXPANDMATH
#include "hybridgen/Transforms/Passes.h.inc"
} // namespace mlir::hybridgen

using namespace mlir;

namespace {
struct ExpandMathPass : hybridgen::impl::HGExpandMathBase<ExpandMathPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
