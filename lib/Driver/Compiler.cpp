//===- Compiler.cpp - parse, verify, lower and optimize hg modules for the driver -----===//
#include "Compiler.h"

#include "hybridgen/Driver/InputGuard.h"

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
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/thread.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

#include <cstdlib>
#include <exception>
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

/// The widest vector registers of |tm|'s target that the CPU kernels are sized for.
int64_t targetVectorBits(const llvm::TargetMachine &tm) {
  const llvm::MCSubtargetInfo *sti = tm.getMCSubtargetInfo();
  if (sti->checkFeatures("+avx512f"))
    return 512;
  return sti->checkFeatures("+avx2") ? 256 : 128;
}

/// Whether |tm|'s target has the AVX512-BF16 dot products (and AVX512-VL) of bf16Dot.
bool hasBf16Dot(const llvm::TargetMachine &tm) {
  return tm.getMCSubtargetInfo()->checkFeatures("+avx512bf16,+avx512vl");
}

/// Vectors wider than this are refused: LLVM's code generator allocates per lane (a
/// vector<4294967295xi1> argument ended in "LLVM ERROR: out of memory"), and no hg lowering
/// emits more than a few hundred lanes.
constexpr int64_t kMaxVectorElements = 1 << 16;
/// Largest constant (dense attribute) accepted, in elements.
constexpr int64_t kMaxConstantElements = int64_t(1) << 24;

/// The number of elements of |type| counting dynamic dimensions as 1, or nullopt when it
/// overflows int64.
std::optional<int64_t> elementCount(ShapedType type) {
  std::optional<int64_t> elements = 1;
  for (int64_t d : type.getShape())
    if (!ShapedType::isDynamic(d) && elements)
      elements = llvm::checkedMul(*elements, d);
  return elements;
}

/// Emits an error at |loc| when |type| (or a type nested in it) is a vector wider than
/// kMaxVectorElements or a shaped type whose element count overflows int64.
LogicalResult checkTypeSize(Type type, Location loc) {
  LogicalResult result = success();
  type.walk([&](Type t) {
    auto shaped = dyn_cast<ShapedType>(t);
    if (failed(result) || !shaped || !shaped.hasRank())
      return;
    std::optional<int64_t> elements = elementCount(shaped);
    if (!elements) {
      result = emitError(loc) << "type " << t << " has more elements than a 64-bit count holds";
    } else if (isa<VectorType>(t) && *elements > kMaxVectorElements) {
      result = emitError(loc) << "vector type " << t << " has " << *elements
                              << " elements; at most " << kMaxVectorElements << " are supported";
    }
  });
  return result;
}

/// Every type the module names (results, block arguments, attributes such as function types)
/// within the sizes code generation survives.
LogicalResult checkTypeSizes(ModuleOp module) {
  WalkResult walk = module->walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      if (failed(checkTypeSize(t, op->getLoc())))
        return WalkResult::interrupt();
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          if (failed(checkTypeSize(arg.getType(), arg.getLoc())))
            return WalkResult::interrupt();
    LogicalResult attrs = success();
    op->getAttrDictionary().walk(
        [&](Type t) {
          if (succeeded(attrs))
            attrs = checkTypeSize(t, op->getLoc());
        },
        [&](Attribute a) {
          // Translation materializes constants element by element, splats included (a 10^9
          // element memref.global initializer ended in "LLVM ERROR: out of memory").
          auto elements = dyn_cast<ElementsAttr>(a);
          if (failed(attrs) || !elements)
            return;
          std::optional<int64_t> count = elementCount(elements.getShapedType());
          if (!count || *count > kMaxConstantElements)
            attrs = emitError(op->getLoc())
                    << "constant of type " << elements.getShapedType()
                    << " has too many elements; at most " << kMaxConstantElements
                    << " are supported";
        });
    return failed(attrs) ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

/// Public functions the driver cannot call are refused here rather than at the first call.
LogicalResult checkCallable(func::FuncOp fn) {
  size_t memrefs = llvm::count_if(fn.getArgumentTypes(), llvm::IsaPred<MemRefType>);
  if (memrefs > memref_call::kMaxArgs)
    return fn.emitError() << "public function '" << fn.getSymName() << "' takes " << memrefs
                          << " memref arguments; compiled functions take at most "
                          << memref_call::kMaxArgs << " (pass fewer, larger buffers)";
  return success();
}

/// Refuses |value| of option |name| outside [0, max]; |zero| says what 0 means.
void checkRange(const char *name, int64_t value, int64_t max, const char *zero) {
  if (value < 0 || value > max)
    throw CompileError(std::string(name) + " must be in [0, " + std::to_string(max) + "] (0: " +
                       zero + "), got " + std::to_string(value));
}

void checkOptions(const CompileOptions &options) {
  // The lowering's own bounds (Pipelines.h), checked here to fail before any work.
  checkRange("chunk_tokens", options.chunkTokens, mlir::hybridgen::kMaxChunkTokens,
             "the lowering's default");
  if (options.farPrefetchBytes != mlir::hybridgen::kTargetFarPrefetchBytes)
    checkRange("far_prefetch_bytes", options.farPrefetchBytes,
               mlir::hybridgen::kMaxFarPrefetchBytes, "off; -1: the target's default");
  if (options.spreadPrefetch < -1 || options.spreadPrefetch > 1)
    throw CompileError("spread_prefetch must be -1 (the target's default), 0 or 1, got " +
                       std::to_string(options.spreadPrefetch));
  if (options.overlapPieces < -1 || options.overlapPieces > 1)
    throw CompileError("overlap_pieces must be -1 (the target's default), 0 or 1, got " +
                       std::to_string(options.overlapPieces));
  if (options.overlapPvLag < 0 || options.overlapPvLag > mlir::hybridgen::kMaxOverlapPvLag)
    throw CompileError("overlap_pv_lag must be 0 (the target's default) or in [1, " +
                       std::to_string(mlir::hybridgen::kMaxOverlapPvLag) + "], got " +
                       std::to_string(options.overlapPvLag));
}

void buildPipeline(OpPassManager &pm, const CompileOptions &options, bool aot) {
  // JIT and AOT code both target options.targetCpu/targetFeatures ("host" by default).
  std::unique_ptr<llvm::TargetMachine> tm =
      createTargetMachine(options.targetCpu, options.targetFeatures);
  mlir::hybridgen::CPUPipelineOptions opts;
  opts.amx = options.amx && tm->getMCSubtargetInfo()->checkFeatures("+amx-tile,+amx-bf16");
  opts.vectorBits = targetVectorBits(*tm);
  opts.bf16Dot = options.bf16Dot && hasBf16Dot(*tm);
  opts.bf16DotRounded = options.bf16DotRounded && hasBf16Dot(*tm);
  opts.kTransposed = options.kTransposed;
  if (options.vectorBits != 0) {
    if (options.vectorBits != 128 && options.vectorBits != 256 && options.vectorBits != 512)
      throw CompileError("vector_bits must be 0 (the target's), 128, 256 or 512, got " +
                         std::to_string(options.vectorBits));
    if (options.vectorBits > opts.vectorBits)
      throw CompileError("vector_bits " + std::to_string(options.vectorBits) +
                         " is wider than the target's " + std::to_string(opts.vectorBits));
    opts.vectorBits = options.vectorBits;
  } else if (opts.vectorBits == 512 && tm->getTargetCPU() == "znver4" && !options.kTransposed) {
    // Zen 4 runs 512-bit instructions as two 256-bit halves. There the bf16/f16 KV kernels with
    // AVX2-sized register tiles (2-head logit passes, 64-lane accumulator tiles; ymm code on
    // the AVX-512 target) read 0.37-0.46 of the roof on one thread against 0.28-0.36 with
    // 512-bit tiles (16K/64K tokens, batch 1/8); f32 measured alike or better with 512 and
    // keeps it (docs/cpu-runs.md, "Memory behaviour on Zen 4"). With K transposed the 512-bit
    // tiles compute faster (bf16, SmolLM2's shape, cache-resident: 24.4-24.9 against 19.4-21.9
    // GB/s; docs/cpu-runs.md, "K transposed per block").
    opts.vectorBits16 = 256;
  }
  opts.allDevices = options.allDevicesOnCpu;
  opts.chunkTokens = options.chunkTokens;
  // With row-major K the far prefetch pays on AMD Zen 4 with AVX-512 (mean 0.35 -> 0.45 of the
  // roof there) and costs everywhere else it was measured: AMD Zen 3 (0.58 -> 0.51), Intel
  // Sapphire Rapids (f16 0.53 -> 0.48, f32 0.69 -> 0.66) and Emerald Rapids (0.77 -> 0.65). The
  // transposed-K kernel has no near prefetch of the next piece's K, so the far one is its only
  // software prefetch of K: on Emerald Rapids it took the Llama-3-8B shape from 0.68 to 0.78 of
  // the roof (128K tokens, batch 1) and SmolLM2's from 0.58 to 0.74 (64K, batch 8); it is on
  // for transposed K on every target (docs/cpu-runs.md, "The far prefetch with K transposed").
  bool zen4 = tm->getTargetCPU() == "znver4" && targetVectorBits(*tm) == 512;
  opts.farPrefetchBytes = options.farPrefetchBytes != mlir::hybridgen::kTargetFarPrefetchBytes
                              ? options.farPrefetchBytes
                          : zen4 || options.kTransposed ? mlir::hybridgen::kDefaultFarPrefetchBytes
                                                        : 0;
  // Spread prefetches: measured on Zen 4 only (docs/cpu-runs.md, "Prefetches spread over the
  // piece"); Emerald Rapids keeps the logits' far prefetch it was tuned with.
  opts.spreadPrefetch = options.spreadPrefetch == -1 ? zen4 : options.spreadPrefetch == 1;
  // Overlapped pieces on every AVX2 or AVX-512 target but Zen 4, which keeps the spread prefetch
  // it was tuned with. AVX2's 16 registers take the logits in passes over the heads
  // (overlapLogitPasses): x86-64-v3 code on Emerald Rapids read bf16 0.68-0.69 -> 0.77-0.79 of
  // the roof, f16 0.68-0.70 -> 0.73-0.75, f32 0.77 -> 0.89-0.91 (docs/cpu-runs.md, "Each piece's
  // logits with the previous piece's p.V" and "Logits in passes over the heads").
  const int64_t bits = targetVectorBits(*tm);
  opts.overlapPieces = options.overlapPieces == -1 ? !zen4 && bits >= 256 : options.overlapPieces == 1;
  // On Zen 4 with K transposed the default differs by KV dtype: bf16/f16 keep the spread
  // prefetch and 512-bit tiles; f32 is planned as on AVX2 (8 lanes, 16 registers: the logits in
  // passes over the heads) with the pieces overlapped, which read 0.87-0.97 of the roof against
  // 0.70-0.83 on one thread with the 512-bit spread kernel (256-bit tiles over 32 registers:
  // 0.75-0.82; docs/cpu-runs.md, "Zen 4 again"). Zen 5 (full-width 512-bit units) takes the f32
  // plan only, which read +0.03-0.05 of the roof on one thread and +0.06-0.19 on two there. Its
  // spread 16-bit kernels read more than the overlapped ones in the kernel bench (one thread
  // ~0.71 against ~0.63) but decoded slower in the 2-layer Llama-3-8B model (bf16 KV, one thread
  // 8.2-23.3 against 12.0-29.0 tokens/s), so 16-bit KV keeps the overlapped 512-bit kernels there
  // (docs/cpu-runs.md, "Zen 5"). Naming the vector bits, the spread or the overlap keeps the
  // rules above.
  bool zen5 = tm->getTargetCPU() == "znver5" && targetVectorBits(*tm) == 512;
  if ((zen4 || zen5) && options.kTransposed && options.vectorBits == 0 &&
      options.spreadPrefetch == -1 && options.overlapPieces == -1) {
    opts.vectorBitsF32 = 256;
    opts.overlapPieces = true;
    if (zen4) {
      opts.spreadPrefetch = false;
      opts.spreadPrefetch16 = 1;
      opts.overlapPieces16 = 0;
    }
  }
  // p.V one piece behind the logits everywhere so far: on Emerald Rapids, whose out-of-order
  // window covers the softmax, two read the same (docs/cpu-runs.md, "p.V two pieces behind").
  opts.overlapPvLag = options.overlapPvLag == 0 ? 1 : options.overlapPvLag;
  opts.splatProbs = options.splatProbs;
  opts.aot = aot;
  opts.targetCpu = options.targetCpu;
  opts.targetFeatures = options.targetFeatures;
  if (options.gpuKernels) {
    if (options.kTransposed)
      throw CompileError("k_transposed is not supported with GPU kernels (the GPU lowering reads "
                         "K row-major)");
    mlir::hybridgen::HybridPipelineOptions hybrid;
    hybrid.cpu = opts;
    hybrid.cpu.allDevices = false;
    hybrid.gpu.chip = options.gpuChip;
    hybrid.gpu.features = options.gpuFeatures;
    hybrid.gpu.format = options.gpuFormat;
    hybrid.gpu.toolkit = options.cudaToolkit;
    hybrid.tuning = {options.gpuUnroll, options.gpuPiecesPerLane, options.gpuAsyncStages,
                     options.gpuResidentBlocks};
    mlir::hybridgen::buildHybridPipeline(pm, hybrid);
    return;
  }
  mlir::hybridgen::buildCPUPipeline(pm, opts);
}

} // namespace

namespace {

/// Stack of the thread that parses, verifies and lowers: the input guard bounds nesting, and this
/// bounds the stack that nesting may use whatever thread calls the driver (a Python thread may
/// have a small one).
constexpr unsigned kCompileStackBytes = 64u << 20;

LoweredModule parseAndLowerHere(const std::string &text, const CompileOptions &options, bool aot);

} // namespace

LoweredModule parseAndLower(const std::string &text, const CompileOptions &options, bool aot,
                            bool ownStack) {
  checkOptions(options);
  if (!ownStack)
    return parseAndLowerHere(text, options, aot);
  LoweredModule out;
  std::exception_ptr error;
  llvm::thread worker(std::optional<unsigned>(kCompileStackBytes), [&] {
    try {
      out = parseAndLowerHere(text, options, aot);
    } catch (...) {
      error = std::current_exception();
    }
  });
  worker.join();
  if (error)
    std::rethrow_exception(error);
  return out;
}

namespace {

LoweredModule parseAndLowerHere(const std::string &text, const CompileOptions &options, bool aot) {
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

  if (std::optional<InputProblem> problem = checkInputText(text))
    throw CompileError("parsing failed:\n" + formatInputProblem(options.sourceName, *problem));
  out.module = parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(ctx));
  if (!out.module)
    throw fail("parsing");
  if (failed(mlir::verify(*out.module)))
    throw fail("verification");
  if (failed(checkTypeSizes(*out.module)))
    throw fail("verification");

  for (auto fn : out.module->getOps<func::FuncOp>()) {
    if (fn.isDeclaration() || !fn.isPublic())
      continue;
    if (failed(checkCallable(fn)))
      throw fail("verification");
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

} // namespace

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
  // LLVM only warns about an unknown CPU or feature and then fails later (or aborts): refuse
  // them here, by name.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(triple, "", ""));
  if (!host && !sti->isCPUStringValid(cpuName))
    throw CompileError("unknown target CPU '" + cpuName + "' for " + triple.str() +
                       " (e.g. x86-64-v3, sapphirerapids, znver4, or 'host')");
  llvm::SmallVector<llvm::StringRef> requested;
  llvm::StringRef(featureList).split(requested, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef f : requested) {
    llvm::StringRef name = f.trim();
    if (!name.consume_front("+") && !name.consume_front("-"))
      throw CompileError("target feature '" + f.str() + "' must start with + or -");
    bool known = llvm::any_of(sti->getAllProcessorFeatures(),
                              [&](const llvm::SubtargetFeatureKV &kv) { return name == kv.Key; });
    if (!known)
      throw CompileError("unknown target feature '" + name.str() + "' for " + triple.str());
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

namespace hybridgen::driver {

bool targetHasBf16Dot(const CompileOptions &options) {
  return detail::hasBf16Dot(
      *detail::createTargetMachine(options.targetCpu, options.targetFeatures));
}

int64_t targetVectorBits(const CompileOptions &options) {
  return detail::targetVectorBits(
      *detail::createTargetMachine(options.targetCpu, options.targetFeatures));
}

} // namespace hybridgen::driver
