//===- hybridgen-opt.cpp - run hg and upstream passes on MLIR files -----===//
#include "hybridgen/Dialect/HG/HGDialect.h"
#include "hybridgen/Transforms/Passes.h"
#include "hybridgen/Transforms/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::hybridgen::registerHybridGenPasses();
  mlir::hybridgen::registerPipelines();
  mlir::hybridgen::registerGPUPipelines();

  mlir::DialectRegistry registry;
  registry.insert<mlir::hybridgen::HGDialect>();
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  // GPU serialization (gpu-module-to-binary) translates to LLVM IR inside the tool.
  mlir::registerAllToLLVMIRTranslations(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "hybridgen optimizer driver\n", registry));
}
