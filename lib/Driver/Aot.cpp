//===- Aot.cpp - ahead-of-time objects and shared libraries that need no MLIR at run time ---===//
#include "Compiler.h"

#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace hybridgen::driver {
namespace {

/// Translates, optimizes and codegens |lowered| into the object file |outPath|.
void emitObject(detail::LoweredModule &lowered, const std::string &outPath,
                const CompileOptions &options) {
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> module =
      mlir::translateModuleToLLVMIR(*lowered.module, llvmContext, "hybridgen");
  if (!module)
    throw CompileError("translation to LLVM IR failed");
  std::unique_ptr<llvm::TargetMachine> tm =
      detail::createTargetMachine(options.targetCpu, options.targetFeatures);
  module->setTargetTriple(tm->getTargetTriple());
  module->setDataLayout(tm->createDataLayout());
  if (llvm::Error err = detail::optimizeModule(module.get(), tm.get()))
    throw CompileError("LLVM optimization failed: " + llvm::toString(std::move(err)));

  std::error_code ec;
  llvm::raw_fd_ostream os(outPath, ec, llvm::sys::fs::OF_None);
  if (ec)
    throw CompileError("cannot write " + outPath + ": " + ec.message());
  llvm::legacy::PassManager codegen;
  if (tm->addPassesToEmitFile(codegen, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw CompileError("the target cannot emit object files");
  codegen.run(*module);
  os.flush();
  if (os.has_error())
    throw CompileError("error writing " + outPath);
}

std::string linkerDriver() {
  if (const char *env = std::getenv("HYBRIDGEN_CLANG"))
    return env;
  return HYBRIDGEN_CLANG_PATH;
}

/// `-L dir -l name -Wl,-rpath,dir` for a shared library given by path, so the .so records the
/// library's soname rather than a build-tree path.
void addLibrary(std::vector<std::string> &args, const std::string &path) {
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  llvm::StringRef file = llvm::sys::path::filename(path);
  if (!file.consume_front("lib")) {
    args.push_back(path);
    return;
  }
  file = file.take_front(file.find(".so"));
  args.push_back("-L" + dir.str());
  args.push_back("-l" + file.str());
  args.push_back("-Wl,-rpath," + dir.str());
}

/// An artifact with nothing to call is a mistake (an empty or truncated input file), not a
/// success: refuse it before writing anything.
void requireFunctions(const detail::LoweredModule &lowered, const CompileOptions &options) {
  for (const auto &entry : lowered.functions)
    if (entry.second.unsupported.empty())
      return;
  throw CompileError(options.sourceName +
                     ": the module has no public function callable with memref arguments; "
                     "nothing to compile");
}

} // namespace

void compileToObject(const std::string &mlirText, const std::string &outPath,
                     const CompileOptions &options) {
  detail::LoweredModule lowered = detail::parseAndLower(mlirText, options, /*aot=*/true);
  requireFunctions(lowered, options);
  emitObject(lowered, outPath, options);
}

void compileToSharedLibrary(const std::string &mlirText, const std::string &outPath,
                            const CompileOptions &options) {
  detail::LoweredModule lowered = detail::parseAndLower(mlirText, options, /*aot=*/true);
  requireFunctions(lowered, options);

  llvm::SmallString<128> objPath;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("hybridgen", "o", objPath))
    throw CompileError("cannot create a temporary object file: " + ec.message());
  llvm::FileRemover removeObj(objPath);
  emitObject(lowered, objPath.str().str(), options);

  // $ORIGIN first: a deployment can put the runtime and libomp next to the module.
  std::string clang = linkerDriver();
  std::vector<std::string> args = {clang,      "-shared", "-fuse-ld=lld", "-o", outPath,
                                   objPath.str().str(), "-Wl,-rpath,$ORIGIN"};
  for (const std::string &lib : detail::sharedLibraries(options))
    addLibrary(args, lib);
  args.push_back("-lm");

  llvm::SmallString<128> logPath;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("hybridgen-link", "log", logPath))
    throw CompileError("cannot create a temporary log file: " + ec.message());
  llvm::FileRemover removeLog(logPath);
  std::vector<llvm::StringRef> argRefs(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, logPath.str(), logPath.str()};
  std::string execError;
  int rc = llvm::sys::ExecuteAndWait(clang, argRefs, std::nullopt, redirects, 0, 0, &execError);
  if (rc != 0) {
    std::string log;
    if (auto buf = llvm::MemoryBuffer::getFile(logPath))
      log = (*buf)->getBuffer().str();
    std::string cmd;
    for (const std::string &a : args)
      cmd += a + " ";
    throw CompileError("linking " + outPath + " failed (" +
                       (execError.empty() ? "exit " + std::to_string(rc) : execError) +
                       "): " + cmd + "\n" + log);
  }

  std::error_code ec;
  llvm::raw_fd_ostream sig(outPath + ".sig", ec, llvm::sys::fs::OF_Text);
  if (ec)
    throw CompileError("cannot write " + outPath + ".sig: " + ec.message());
  sig << detail::formatSignatures(lowered.functions);
}

} // namespace hybridgen::driver
