//===- Compiler.h - shared parse/lower/codegen steps of the driver (internal) -*- C++ -*-===//
#ifndef HYBRIDGEN_LIB_DRIVER_COMPILER_H
#define HYBRIDGEN_LIB_DRIVER_COMPILER_H

#include "hybridgen/Driver/Driver.h"
#include "hybridgen/runtime/memref_call.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Target/TargetMachine.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hybridgen::driver::detail {

/// A public function's memref signature, or why it cannot be called through MemRefArgs.
struct FunctionInfo {
  memref_call::Signature sig;
  std::vector<ArgSpec> specs;
  std::string unsupported; // non-empty: scalar arguments or results
};

/// A module lowered to the LLVM dialect, with the signatures read before lowering.
struct LoweredModule {
  std::unique_ptr<mlir::MLIRContext> context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::map<std::string, FunctionInfo> functions;
};

/// Parses, verifies and lowers |text| with the hg CPU pipeline (ahead-of-time flavour when |aot|).
/// Throws CompileError carrying every diagnostic with its file:line:col. Runs on a thread of its
/// own with a 64 MiB stack unless |ownStack| is false (the fuzzer, whose stack is known).
LoweredModule parseAndLower(const std::string &text, const CompileOptions &options, bool aot,
                            bool ownStack = true);

/// A TargetMachine for |cpu| ("host" = this machine) and |features| (empty = the CPU's own) at
/// -O3, position independent so the object can go into a shared library.
std::unique_ptr<llvm::TargetMachine> createTargetMachine(const std::string &cpu,
                                                         const std::string &features);

/// Runs LLVM's -O3 pipeline for |tm|. JIT and AOT both use it, so they optimize identically.
llvm::Error optimizeModule(llvm::Module *module, llvm::TargetMachine *tm);

/// The shared libraries compiled code needs (libomp, the runtime): |options|.sharedLibs, else
/// $HYBRIDGEN_SHARED_LIBS (colon separated), else the paths found at build time.
std::vector<std::string> sharedLibraries(const CompileOptions &options);

/// The `.sig` text of |functions| (format of memref_call.h).
std::string formatSignatures(const std::map<std::string, FunctionInfo> &functions);

} // namespace hybridgen::driver::detail

#endif // HYBRIDGEN_LIB_DRIVER_COMPILER_H
