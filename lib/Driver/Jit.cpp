//===- Jit.cpp - JitModule: hg modules compiled in-process with the MLIR ExecutionEngine ---===//
#include "Compiler.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Support/DynamicLibrary.h"
#include "llvm/Support/Error.h"

#include <functional>

namespace hybridgen::driver {

struct JitModule::Impl {
  std::unique_ptr<mlir::ExecutionEngine> engine;
  std::map<std::string, detail::FunctionInfo> functions;
  std::map<std::string, void *> entryPoints; // name -> _mlir_ciface_<name>
  memref_call::TakeArgumentErrorFn takeArgumentError = nullptr;
};

JitModule::JitModule() : impl(std::make_unique<Impl>()) {}
JitModule::~JitModule() = default;

namespace {

/// The JIT runs what it compiles on this machine: a target other than the host is taken (e.g.
/// x86-64-v3 on an AVX-512 CPU, to run the AVX2 kernels) when this CPU has every feature it
/// needs, refused by name otherwise or when unknown (it used to be ignored silently); so is a
/// shared library that cannot be loaded (the engine only warned and then failed to find its
/// symbols, or ran without them).
void checkJitOptions(const CompileOptions &options, const std::vector<std::string> &libs) {
  bool host = options.targetCpu.empty() || options.targetCpu == "host";
  if (!host || !options.targetFeatures.empty()) {
    // Names an unknown CPU or feature.
    std::unique_ptr<llvm::TargetMachine> target =
        detail::createTargetMachine(options.targetCpu, options.targetFeatures);
    // The host's ISA features it lacks (tuning flags are not in this map) must all be off.
    std::string missing;
    for (const auto &feature : llvm::sys::getHostCPUFeatures())
      if (!feature.second &&
          target->getMCSubtargetInfo()->checkFeatures("+" + feature.first().str()))
        missing += (missing.empty() ? "" : ",") + feature.first().str();
    if (!missing.empty())
      throw CompileError("the JIT runs its code on this machine, which lacks " + missing +
                         " that target_cpu '" + options.targetCpu + "' / target_features '" +
                         options.targetFeatures +
                         "' need; compile ahead of time (compileToSharedLibrary) for it");
  }
  for (const std::string &lib : libs) {
    std::string error;
    if (!llvm::sys::DynamicLibrary::getPermanentLibrary(lib.c_str(), &error).isValid())
      throw CompileError("JIT: cannot load shared library '" + lib + "': " + error);
  }
}

} // namespace

std::unique_ptr<JitModule> JitModule::compile(const std::string &mlirText,
                                              const CompileOptions &options) {
  checkJitOptions(options, detail::sharedLibraries(options));
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
  // The kernels report bad block ids and lengths to the runtime the engine loaded; calls take
  // the report from there (the same library instance as the kernels' references).
  if (auto take = jit->impl->engine->lookup("hgrt_take_kernel_argument_error"))
    jit->impl->takeArgumentError = reinterpret_cast<memref_call::TakeArgumentErrorFn>(*take);
  else
    llvm::consumeError(take.takeError());
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
  try {
    memref_call::callChecked(name, impl->entryPoints.at(name), callArgs,
                             impl->takeArgumentError);
  } catch (const std::invalid_argument &e) {
    throw ArgumentError(e.what());
  }
}

} // namespace hybridgen::driver
