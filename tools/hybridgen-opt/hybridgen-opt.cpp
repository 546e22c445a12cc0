//===- hybridgen-opt.cpp - run hg and upstream passes on MLIR files -----===//
#include "hybridgen/Dialect/HG/HGDialect.h"
#include "hybridgen/Driver/InputGuard.h"
#include "hybridgen/Transforms/Passes.h"
#include "hybridgen/Transforms/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

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

  // MlirOptMain(argc, argv, ...) split in its steps, so the input guard sees the text before the
  // parser does (deep nesting would overflow the parser's stack; see InputGuard.h).
  auto [inputFile, outputFile] = mlir::registerAndParseCLIOptions(
      argc, argv, "hybridgen optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = mlir::openInputFile(inputFile, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (auto problem = hybridgen::driver::checkInputText(input->getBuffer())) {
    llvm::errs() << hybridgen::driver::formatInputProblem(inputFile, *problem) << "\n";
    return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> output = mlir::openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry, config)))
    return 1;
  output->keep();
  return 0;
}
