//===- hybridgen-compile.cpp - compile an hg module ahead of time to a .so or .o ----------===//
//
//   hybridgen-compile in.mlir -o out.so [--object] [--target-cpu=CPU] [--target-features=F]
//   hybridgen-compile <model dir> -o <artifact dir> [--weight-dtype=f32|bf16|f16] [--kv-dtypes=..]
//
// A directory with a config.json is a Hugging Face model: it becomes an artifact directory
// (model.so, model.so.sig, metadata.json, model.mlir; see docs/models.md).
//
// The .so links only the hybridgen runtime and libomp (never libMLIR) and comes with out.so.sig,
// so AotLibrary (runtime/include/hybridgen/runtime/memref_call.h) can call it anywhere.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Driver/Driver.h"
#include "hybridgen/Models/ModelModule.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

static cl::OptionCategory compileCategory("hybridgen-compile options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .mlir>"), cl::init("-"),
                                      cl::cat(compileCategory));
static cl::opt<std::string> outputFile("o", cl::desc("Output file"), cl::value_desc("path"),
                                       cl::Required, cl::cat(compileCategory));
static cl::opt<bool> emitObject("object", cl::desc("Write a relocatable object, not a .so"),
                                 cl::cat(compileCategory));
static cl::opt<std::string> targetCpu("target-cpu", cl::desc("Target CPU ('host' = this one)"),
                                      cl::init("host"), cl::cat(compileCategory));
static cl::opt<std::string> targetFeatures("target-features",
                                           cl::desc("Target features, e.g. +avx2,+fma"),
                                           cl::init(""), cl::cat(compileCategory));
static cl::opt<bool> useAmx("amx",
                            cl::desc("Use AMX tiles for bf16 KV if the target has them "
                                     "(--amx=false: vector code only)"),
                            cl::init(true), cl::cat(compileCategory));
static cl::opt<bool> useBf16Dot("bf16-dot",
                                cl::desc("Use AVX512-BF16 dot products for bf16 KV if the target "
                                         "has them (default: f32 FMAs on widened KV)"),
                                cl::init(false), cl::cat(compileCategory));
static cl::opt<bool> useBf16DotRounded(
    "bf16-dot-rounded",
    cl::desc("As --bf16-dot, with q and p rounded once to bf16: faster, "
             "relative error ~1e-3 (the precision of a bf16 model's attention)"),
    cl::init(false), cl::cat(compileCategory));
static cl::opt<int64_t> chunkTokens("chunk-tokens",
                                    cl::desc("Tokens per parallel CPU chunk "
                                             "(0 = 1024, or 4096 on the AMX path)"),
                                    cl::init(0), cl::cat(compileCategory));
static cl::opt<int64_t> farPrefetchBytes(
    "far-prefetch-bytes",
    cl::desc("How far ahead the dense CPU kernel prefetches K and V into L2, bytes of one K "
             "stream (0 = off; -1 = the target's: 8192 with K transposed or on znver4 with "
             "AVX-512, else off)"),
    cl::init(hybridgen::driver::CompileOptions().farPrefetchBytes), cl::cat(compileCategory));
static cl::opt<int64_t> spreadPrefetch(
    "spread-prefetch",
    cl::desc("With K transposed and the far prefetch: issue the far V and next-piece K prefetches "
             "from p.V instead of the logits (0 = off, 1 = on; -1 = the target's: on for znver4 "
             "with AVX-512)"),
    cl::init(hybridgen::driver::CompileOptions().spreadPrefetch), cl::cat(compileCategory));
static cl::opt<int64_t> overlapPieces(
    "overlap-pieces",
    cl::desc("With K transposed: compute each piece's logits in one loop with the previous "
             "piece's p.V (0 = off, 1 = on; -1 = the target's: on with AVX2 or AVX-512, except "
             "for znver4, which takes the spread prefetch)"),
    cl::init(hybridgen::driver::CompileOptions().overlapPieces), cl::cat(compileCategory));
static cl::opt<int64_t> overlapPvLag(
    "overlap-pv-lag",
    cl::desc("With the pieces overlapped: how many pieces the attention kernel's p.V runs behind "
             "its logits (1-4; 0 = the target's: 1)"),
    cl::init(hybridgen::driver::CompileOptions().overlapPvLag), cl::cat(compileCategory));
static cl::opt<bool> splatProbs(
    "splat-probs",
    cl::desc("The attention kernel's p.V loads each probability splatted across the lanes "
             "instead of broadcasting it at every use (for AMD Zen 3/4 A/Bs; off by default)"),
    cl::init(false), cl::cat(compileCategory));
static cl::opt<int64_t> matmulRowPrefetchBytes(
    "matmul-row-prefetch-bytes",
    cl::desc("Model mode: how far ahead decode's matrix-vector rows prefetch their weights into "
             "L2, bytes (0 = off; -1 = the target's: 4096 on Intel CPUs, else off)"),
    cl::init(-1), cl::cat(compileCategory));
static cl::opt<int64_t> matmulSideBySideRows(
    "matmul-side-by-side-rows",
    cl::desc("Model mode: output rows decode's matrix-vector products read side by side where an "
             "input row is wider than 4096 f32 (0 = one after the other; -1 = the target's: 0 "
             "on Intel CPUs, else 8 with AVX-512 and 4 without)"),
    cl::init(-1), cl::cat(compileCategory));
static cl::opt<bool> gpuKernels("gpu",
                                cl::desc("Compile GPU partials to CUDA kernels embedded in the "
                                         "output (hg-hybrid-pipeline; CPU fallback at run time "
                                         "without a GPU)"),
                                cl::init(false), cl::cat(compileCategory));
static cl::opt<std::string> gpuChip("gpu-chip", cl::desc("GPU architecture (sm_80, sm_90)"),
                                    cl::init("sm_90"), cl::cat(compileCategory));
static cl::opt<std::string> gpuFeatures("gpu-features", cl::desc("PTX features (+ptx80)"),
                                        cl::init("+ptx80"), cl::cat(compileCategory));
static cl::opt<std::string> gpuFormat("gpu-format",
                                      cl::desc("auto | fatbin | bin | isa (PTX, JIT-compiled by "
                                               "the CUDA driver); auto: fatbin with ptxas"),
                                      cl::init("auto"), cl::cat(compileCategory));
static cl::opt<int64_t> gpuUnroll("gpu-unroll",
                                  cl::desc("GPU kernel: row groups per warp step (0 = auto)"),
                                  cl::init(0), cl::cat(compileCategory));
static cl::opt<int64_t> gpuPiecesPerLane("gpu-pieces-per-lane",
                                         cl::desc("GPU kernel: 16-byte pieces of a K/V row per lane"),
                                         cl::init(1), cl::cat(compileCategory));
static cl::opt<int64_t> gpuAsyncStages("gpu-async-stages",
                                       cl::desc("GPU kernel: stages of a cp.async shared-memory ring "
                                                "(0 = next step's loads in registers)"),
                                       cl::init(0), cl::cat(compileCategory));
static cl::opt<int64_t> gpuResidentBlocks("gpu-resident-blocks",
                                          cl::desc("GPU kernel: blocks per multiprocessor (0 = auto)"),
                                          cl::init(0), cl::cat(compileCategory));
static cl::opt<std::string> cudaToolkit("cuda-toolkit",
                                        cl::desc("CUDA toolkit (libdevice, ptxas, fatbinary)"),
                                        cl::init("/usr/local/cuda"), cl::cat(compileCategory));

static cl::opt<std::string> weightDtype("weight-dtype",
                                        cl::desc("Model mode: element type of the weights as "
                                                 "compiled (auto = the checkpoint's, f32, bf16, "
                                                 "f16)"),
                                        cl::init("auto"), cl::cat(compileCategory));
static cl::opt<std::string> kvDtypes("kv-dtypes",
                                     cl::desc("Model mode: KV pool element types to compile "
                                              "decode/prefill for, comma separated"),
                                     cl::init("f32,bf16"), cl::cat(compileCategory));

static cl::opt<bool> modelPrefill("prefill",
                                  cl::desc("Model mode: also compile chunked prefill "
                                           "(hg.prefill_attention)"),
                                  cl::init(true), cl::cat(compileCategory));
static cl::opt<bool> dynamicSegments("dynamic-segments",
                                     cl::desc("Model mode: one scheduler segment per layer "
                                              "(false: every layer is segment 0)"),
                                     cl::init(true), cl::cat(compileCategory));

static cl::opt<cl::boolOrDefault> kTransposed(
    "k-transposed",
    cl::desc("K pool pieces stored transposed, [head_dim][block_size] (model mode: the runner's "
             "pool; default on, off with --gpu. Attention modules: the caller's pools; default "
             "off)"),
    cl::cat(compileCategory));

/// Model mode: a Hugging Face model directory becomes an artifact directory.
static int compileModel(const hybridgen::driver::CompileOptions &compile) {
  hybridgen::models::ModelCompileOptions options;
  options.compile = compile;
  options.weightDtype = weightDtype;
  options.prefill = modelPrefill;
  options.dynamicSegments = dynamicSegments;
  options.kTransposed = kTransposed != cl::BOU_FALSE;
  options.matmulRowPrefetchBytes = matmulRowPrefetchBytes;
  options.matmulSideBySideRows = matmulSideBySideRows;
  options.kvDtypes.clear();
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(kvDtypes.getValue()).split(parts, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef p : parts)
    options.kvDtypes.push_back(p.trim().str());
  try {
    double seconds = hybridgen::models::compileModelDir(inputFile, outputFile, options);
    llvm::outs() << "hybridgen-compile: " << inputFile << " -> " << outputFile << " in "
                 << llvm::format("%.2f", seconds) << " s\n";
  } catch (const std::exception &e) {
    llvm::errs() << "hybridgen-compile: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // LLVM registers hundreds of backend flags; --help shows only the tool's own.
  cl::HideUnrelatedOptions(compileCategory);
  cl::ParseCommandLineOptions(argc, argv, "hybridgen ahead-of-time compiler\n");

  hybridgen::driver::CompileOptions options;
  options.targetCpu = targetCpu;
  options.targetFeatures = targetFeatures;
  options.chunkTokens = chunkTokens;
  options.farPrefetchBytes = farPrefetchBytes;
  options.spreadPrefetch = spreadPrefetch;
  options.overlapPieces = overlapPieces;
  options.overlapPvLag = overlapPvLag;
  options.splatProbs = splatProbs;
  options.amx = useAmx;
  options.bf16Dot = useBf16Dot;
  options.bf16DotRounded = useBf16DotRounded;
  options.gpuKernels = gpuKernels;
  options.gpuChip = gpuChip;
  options.gpuFeatures = gpuFeatures;
  options.gpuFormat = gpuFormat;
  options.cudaToolkit = cudaToolkit;
  options.gpuUnroll = gpuUnroll;
  options.gpuPiecesPerLane = gpuPiecesPerLane;
  options.gpuAsyncStages = gpuAsyncStages;
  options.gpuResidentBlocks = gpuResidentBlocks;
  bool bf16DotMissing = false;
  try {
    bf16DotMissing =
        (useBf16Dot || useBf16DotRounded) && !hybridgen::driver::targetHasBf16Dot(options);
  } catch (const std::exception &) {
    // An unknown target CPU: the compile below reports it.
  }
  if (bf16DotMissing)
    llvm::errs() << "hybridgen-compile: note: the target (" << targetCpu.getValue()
                 << ") has no AVX512-BF16, so --bf16-dot" << (useBf16DotRounded ? "-rounded" : "")
                 << " changes nothing: bf16 KV keeps the f32 FMA kernels\n";
  if (inputFile != "-" && llvm::sys::fs::is_directory(inputFile.getValue())) {
    if (kTransposed == cl::BOU_TRUE && gpuKernels) {
      llvm::errs() << "hybridgen-compile: --k-transposed does not go with --gpu (the GPU kernels "
                      "read K row-major)\n";
      return 1;
    }
    return compileModel(options);
  }
  options.kTransposed = kTransposed == cl::BOU_TRUE;

  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(inputFile);
  if (!buffer) {
    llvm::errs() << "hybridgen-compile: cannot read " << inputFile << ": "
                 << buffer.getError().message() << "\n";
    return 1;
  }
  options.sourceName = inputFile == "-" ? "<stdin>" : inputFile.getValue();
  try {
    std::string text = (*buffer)->getBuffer().str();
    if (emitObject)
      hybridgen::driver::compileToObject(text, outputFile, options);
    else
      hybridgen::driver::compileToSharedLibrary(text, outputFile, options);
  } catch (const std::exception &e) {
    llvm::errs() << e.what() << "\n";
    return 1;
  }
  return 0;
}
