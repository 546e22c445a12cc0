//===- Compiler.cpp - parse, verify, lower and optimize hg modules for the driver -----===//
#include "Compiler.h"

#include "hybridgen/Dialect/HG/HGDialect.h"
#include "hybridgen/Transforms/Passes.h"
#include "hybridgen/Transforms/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

#include <cstdlib>
#include <mutex>

using namespace mlir;

namespace hybridgen::driver::detail {
namespace {

void initializeOnce() {
  static std::once_flag flag;
  std::call_once(flag, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    // buildCPUPipeline names its passes by flag, so the registry must know them.
    registerAllPasses();
    mlir::hybridgen::registerHybridGenPasses();
  });
}

std::unique_ptr<MLIRContext> createContext() {
  DialectRegistry registry;
  registry.insert<mlir::hybridgen::HGDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  auto context = std::make_unique<MLIRContext>(registry);
  // One compile per call on a small machine: a thread pool per context costs more than it saves.
  context->disableMultithreading();
  return context;
}

std::optional<DType> toDType(Type t) {
  if (t.isF32())
    return DType::f32;
  if (t.isF16())
    return DType::f16;
  if (t.isBF16())
    return DType::bf16;
  if (t.isSignlessInteger(32))
    return DType::i32;
  if (t.isSignlessInteger(64))
    return DType::i64;
  return std::nullopt;
}

FunctionInfo describe(func::FuncOp fn) {
  FunctionInfo info;
  if (fn.getNumResults() != 0)
    info.unsupported = "returns values (compiled functions must write into memref arguments)";
  for (auto [i, type] : llvm::enumerate(fn.getArgumentTypes())) {
    auto memref = dyn_cast<MemRefType>(type);
    std::optional<DType> dtype = memref ? toDType(memref.getElementType()) : std::nullopt;
    if (!dtype || !memref.getLayout().isIdentity()) {
      if (info.unsupported.empty())
        info.unsupported = "has argument " + std::to_string(i) +
                           " that is not an identity-layout memref of f32/f16/bf16/i32/i64";
      continue;
    }
    std::vector<int64_t> shape;
    for (int64_t d : memref.getShape())
      shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
    info.specs.push_back({*dtype, shape});
    info.sig.types.push_back(static_cast<memref_call::ElemType>(*dtype));
    info.sig.shapes.push_back(std::move(shape));
  }
  return info;
}

/// Whether the code's target has AMX-BF16: the host for JIT, the named CPU/features for AOT.
bool targetHasAmx(const CompileOptions &options, bool aot) {
  std::unique_ptr<llvm::TargetMachine> tm =
      aot ? createTargetMachine(options.targetCpu, options.targetFeatures)
          : createTargetMachine("host", "");
  return tm->getMCSubtargetInfo()->checkFeatures("+amx-tile,+amx-bf16");
}

void buildPipeline(OpPassManager &pm, const CompileOptions &options, bool aot) {
  mlir::hybridgen::CPUPipelineOptions opts;
  opts.amx = options.amx && targetHasAmx(options, aot);
  opts.allDevices = options.allDevicesOnCpu;
  opts.chunkTokens = options.chunkTokens;
  opts.aot = aot;
  opts.targetCpu = options.targetCpu;
  opts.targetFeatures = options.targetFeatures;
  if (options.gpuKernels) {
    mlir::hybridgen::HybridPipelineOptions hybrid;
    hybrid.cpu = opts;
    hybrid.cpu.allDevices = false;
    hybrid.gpu.chip = options.gpuChip;
    hybrid.gpu.features = options.gpuFeatures;
    hybrid.gpu.format = options.gpuFormat;
    hybrid.gpu.toolkit = options.cudaToolkit;
    mlir::hybridgen::buildHybridPipeline(pm, hybrid);
    return;
  }
  mlir::hybridgen::buildCPUPipeline(pm, opts);
}

} // namespace

LoweredModule parseAndLower(const std::string &text, const CompileOptions &options, bool aot) {
  initializeOnce();
  LoweredModule out;
  out.context = createContext();
  MLIRContext *ctx = out.context.get();

  // Every diagnostic (parser, verifier, passes) lands in |diagText| as file:line:col text.
  std::string diagText;
  llvm::raw_string_ostream diagStream(diagText);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, options.sourceName),
                               llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sourceMgr, ctx, diagStream);
  auto fail = [&](const char *stage) -> CompileError {
    std::string msg = std::string(stage) + " failed";
    if (!diagText.empty())
      msg += ":\n" + diagText;
    return CompileError(msg);
  };

  out.module = parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(ctx));
  if (!out.module)
    throw fail("parsing");
  if (failed(mlir::verify(*out.module)))
    throw fail("verification");

  for (auto fn : out.module->getOps<func::FuncOp>()) {
    if (fn.isDeclaration() || !fn.isPublic())
      continue;
    out.functions[fn.getSymName().str()] = describe(fn);
    // Every public entry point gets the C interface the driver and AotLibrary call.
    if (fn.getNumResults() == 0)
      fn->setAttr("llvm.emit_c_interface", UnitAttr::get(ctx));
  }

  PassManager pm(ctx, ModuleOp::getOperationName());
  buildPipeline(pm, options, aot);
  if (failed(pm.run(*out.module)))
    throw fail("lowering");
  return out;
}

std::unique_ptr<llvm::TargetMachine> createTargetMachine(const std::string &cpu,
                                                         const std::string &features) {
  initializeOnce();
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    throw CompileError("no LLVM target for " + triple.str() + ": " + error);
  bool host = cpu.empty() || cpu == "host";
  std::string cpuName = host ? llvm::sys::getHostCPUName().str() : cpu;
  std::string featureList = features;
  if (featureList.empty() && host) {
    std::vector<std::string> list;
    for (const auto &feature : llvm::sys::getHostCPUFeatures())
      list.push_back((feature.second ? "+" : "-") + feature.first().str());
    llvm::sort(list);
    featureList = llvm::join(list, ",");
  }
  llvm::TargetOptions targetOptions;
  // Constructors in .init_array, as the platform ABI has them: lld keeps a legacy .ctors
  // section as is and nothing runs it, so the GPU module's loader (a global constructor that
  // calls mgpuModuleLoad) would never run in an AOT library.
  targetOptions.UseInitArray = true;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, cpuName, featureList, targetOptions, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm)
    throw CompileError("cannot create a target machine for cpu '" + cpuName + "'");
  return tm;
}

llvm::Error optimizeModule(llvm::Module *module, llvm::TargetMachine *tm) {
  return makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, tm)(module);
}

std::vector<std::string> sharedLibraries(const CompileOptions &options) {
  if (!options.sharedLibs.empty())
    return options.sharedLibs;
  std::vector<std::string> libs;
  if (const char *env = std::getenv("HYBRIDGEN_SHARED_LIBS")) {
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(env).split(parts, ':', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef p : parts)
      libs.push_back(p.str());
    return libs;
  }
  return {HYBRIDGEN_LIBOMP_PATH, HYBRIDGEN_RUNTIME_LIB_PATH};
}

std::string formatSignatures(const std::map<std::string, FunctionInfo> &functions) {
  std::string text = "# hybridgen AOT signatures: name type:dims ('?' = dynamic)\n";
  for (const auto &[name, info] : functions)
    if (info.unsupported.empty())
      text += memref_call::formatSignatureLine(name, info.sig) + "\n";
  return text;
}

} // namespace hybridgen::driver::detail
