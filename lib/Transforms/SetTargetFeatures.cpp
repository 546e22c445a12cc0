//===- SetTargetFeatures.cpp - hg-set-target-features -------------------===//
//
// Ahead-of-time code is compiled for baseline x86-64 unless each function names its CPU and
// features; the JIT picks the host's by itself. This pass makes AOT objects use AVX-512/AVX2.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Transforms/Passes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/TargetParser/Host.h"

namespace mlir::hybridgen {
#define GEN_PASS_DEF_HGSETTARGETFEATURES
#include "hybridgen/Transforms/Passes.h.inc"
} // namespace mlir::hybridgen

using namespace mlir;

namespace {

std::string hostFeatures() {
  SmallVector<std::string> features;
  for (const auto &feature : llvm::sys::getHostCPUFeatures())
    features.push_back((feature.second ? "+" : "-") + feature.first().str());
  llvm::sort(features);
  return llvm::join(features, ",");
}

struct SetTargetFeaturesPass
    : hybridgen::impl::HGSetTargetFeaturesBase<SetTargetFeaturesPass> {
  using Base::Base;
  void runOnOperation() override {
    bool host = cpu == "host";
    std::string cpuName = host ? llvm::sys::getHostCPUName().str() : cpu.getValue();
    std::string featureList = !features.empty() ? features.getValue()
                              : host            ? hostFeatures()
                                                : std::string();
    MLIRContext *ctx = &getContext();
    getOperation()->walk([&](LLVM::LLVMFuncOp fn) {
      if (fn.isExternal())
        return;
      fn.setTargetCpuAttr(StringAttr::get(ctx, cpuName));
      if (!featureList.empty())
        fn.setTargetFeaturesAttr(LLVM::TargetFeaturesAttr::get(ctx, featureList));
    });
  }
};

} // namespace
