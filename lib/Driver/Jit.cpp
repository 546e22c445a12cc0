//===- Jit.cpp - JitModule: hg modules compiled in-process with the MLIR ExecutionEngine ---===//
#include "Compiler.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "llvm/Support/Error.h"

#include <functional>

namespace hybridgen::driver {

struct JitModule::Impl {
  std::unique_ptr<mlir::ExecutionEngine> engine;
  std::map<std::string, detail::FunctionInfo> functions;
  std::map<std::string, void *> entryPoints; // name -> _mlir_ciface_<name>
};

JitModule::JitModule() : impl(std::make_unique<Impl>()) {}
JitModule::~JitModule() = default;

std::unique_ptr<JitModule> JitModule::compile(const std::string &mlirText,
                                              const CompileOptions &options) {
  detail::LoweredModule lowered = detail::parseAndLower(mlirText, options, /*aot=*/false);

  // The same target and optimizer as the AOT path, so both produce the same code: the host by
  // default, or the CPU and features of |options| (e.g. an AVX2 target on an AVX-512 machine, to
  // measure that path anywhere).
  std::unique_ptr<llvm::TargetMachine> tm =
      detail::createTargetMachine(options.targetCpu, options.targetFeatures);
  // ExecutionEngineOptions keeps a non-owning reference: this must outlive create().
  std::function<llvm::Error(llvm::Module *)> transformer = [&](llvm::Module *m) {
    return detail::optimizeModule(m, tm.get());
  };
  std::vector<std::string> libs = detail::sharedLibraries(options);
  std::vector<llvm::StringRef> libRefs(libs.begin(), libs.end());

  mlir::ExecutionEngineOptions engineOptions;
  engineOptions.transformer = transformer;
  engineOptions.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  engineOptions.sharedLibPaths = libRefs;
  engineOptions.enableGDBNotificationListener = false;
  engineOptions.enablePerfNotificationListener = false;
  auto engine = mlir::ExecutionEngine::create(
      *lowered.module, engineOptions,
      detail::createTargetMachine(options.targetCpu, options.targetFeatures));
  if (!engine)
    throw CompileError("JIT compilation failed: " + llvm::toString(engine.takeError()));

  std::unique_ptr<JitModule> jit(new JitModule());
  jit->impl->engine = std::move(*engine);
  for (const auto &[name, info] : lowered.functions) {
    if (!info.unsupported.empty())
      continue;
    auto sym = jit->impl->engine->lookup("_mlir_ciface_" + name);
    if (!sym)
      throw CompileError("JIT: no entry point _mlir_ciface_" + name + ": " +
                         llvm::toString(sym.takeError()));
    jit->impl->entryPoints[name] = *sym;
  }
  jit->impl->functions = std::move(lowered.functions);
  return jit;
}

const std::vector<ArgSpec> &JitModule::signature(const std::string &name) const {
  auto it = impl->functions.find(name);
  if (it == impl->functions.end())
    throw ArgumentError("the module has no public function '" + name + "'");
  return it->second.specs;
}

void JitModule::call(const std::string &name, const std::vector<MemRefArg> &args) const {
  auto it = impl->functions.find(name);
  if (it == impl->functions.end())
    throw ArgumentError("the module has no public function '" + name + "'");
  if (!it->second.unsupported.empty())
    throw ArgumentError("function '" + name + "' cannot be called with memref arguments: it " +
                        it->second.unsupported);
  std::vector<memref_call::Arg> callArgs;
  callArgs.reserve(args.size());
  for (const MemRefArg &a : args)
    callArgs.push_back({a.data, static_cast<memref_call::ElemType>(a.dtype), a.shape, a.strides});
  std::string err = memref_call::checkArgs(name, it->second.sig, callArgs);
  if (!err.empty())
    throw ArgumentError(err);
  memref_call::callCInterface(impl->entryPoints.at(name), callArgs);
}

} // namespace hybridgen::driver
