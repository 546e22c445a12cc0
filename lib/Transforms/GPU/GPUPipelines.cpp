//===- GPUPipelines.cpp - hg-gpu-to-nvvm and hg-hybrid-pipeline -----------------===//
//
// The GPU kernels are lowered and serialized first, so that the host lowering (the CPU
// pipeline) only ever sees a gpu.binary and never walks into kernel code. Order constraints
// (shared/TOOLCHAIN.md): chip and PTX features always explicit, the toolkit path for libdevice,
// gpu-to-llvm after the memref and func conversions of the host code.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Transforms/Passes.h"
#include "hybridgen/Transforms/Pipelines.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/Program.h"

using namespace mlir;
using namespace mlir::hybridgen;

namespace {

bool toolFound(StringRef name, StringRef toolkit) {
  SmallVector<StringRef> paths;
  std::string bin = toolkit.empty() ? "" : (toolkit + "/bin").str();
  if (!bin.empty()) {
    paths.push_back(bin);
    if (llvm::sys::findProgramByName(name, paths))
      return true;
  }
  return static_cast<bool>(llvm::sys::findProgramByName(name));
}

struct GPUToNVVMCLOptions : PassPipelineOptions<GPUToNVVMCLOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("GPU architecture (sm_80, sm_90, ...)"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{*this, "features", llvm::cl::desc("PTX features, e.g. +ptx80"),
                               llvm::cl::init("+ptx80")};
  Option<std::string> format{*this, "format",
                             llvm::cl::desc("isa | bin | fatbin | auto (fatbin when ptxas is "
                                            "found, else PTX for the driver's JIT)"),
                             llvm::cl::init("auto")};
  Option<std::string> toolkit{*this, "toolkit", llvm::cl::desc("CUDA toolkit (libdevice, ptxas)"),
                              llvm::cl::init("/usr/local/cuda")};
  Option<unsigned> optLevel{*this, "O", llvm::cl::desc("Device code optimization level"),
                            llvm::cl::init(3)};

  GPUToNVVMOptions get() const {
    GPUToNVVMOptions o;
    o.chip = chip;
    o.features = features;
    o.format = format;
    o.toolkit = toolkit;
    o.optLevel = optLevel;
    return o;
  }
};

struct HybridCLOptions : PassPipelineOptions<HybridCLOptions> {
  Option<bool> allDevices{*this, "all-devices",
                          llvm::cl::desc("No-GPU fallback: every partial on the CPU "
                                         "(exactly hg-cpu-pipeline)"),
                          llvm::cl::init(false)};
  Option<int64_t> chunkTokens{*this, "chunk-tokens",
                              llvm::cl::desc("Tokens per parallel CPU chunk (0: the default)"),
                              llvm::cl::init(0)};
  Option<bool> amx{*this, "amx", llvm::cl::desc("AMX-BF16 path of the CPU kernel"),
                   llvm::cl::init(false)};
  Option<bool> bf16Dot{*this, "bf16-dot",
                       llvm::cl::desc("AVX512-BF16 dot products in the CPU kernel's bf16 path"),
                       llvm::cl::init(false)};
  Option<bool> bf16DotRounded{
      *this, "bf16-dot-rounded",
      llvm::cl::desc("As bf16-dot (implied), with q and p rounded once to bf16 (half the "
                     "dot products)"),
      llvm::cl::init(false)};
  Option<bool> aot{*this, "aot", llvm::cl::desc("Set target CPU and features on every llvm.func"),
                   llvm::cl::init(false)};
  Option<std::string> chip{*this, "chip", llvm::cl::desc("GPU architecture (sm_80, sm_90, ...)"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{*this, "features", llvm::cl::desc("PTX features, e.g. +ptx80"),
                               llvm::cl::init("+ptx80")};
  Option<std::string> format{*this, "format", llvm::cl::desc("isa | bin | fatbin | auto"),
                             llvm::cl::init("auto")};
  Option<std::string> toolkit{*this, "toolkit", llvm::cl::desc("CUDA toolkit (libdevice, ptxas)"),
                              llvm::cl::init("/usr/local/cuda")};
  Option<int64_t> smCount{*this, "sm-count", llvm::cl::desc("Multiprocessors to fill"),
                          llvm::cl::init(132)};
  Option<int64_t> unroll{*this, "unroll", llvm::cl::desc("GPU kernel: row groups per warp step (0: auto)"),
                         llvm::cl::init(0)};
  Option<int64_t> piecesPerLane{*this, "pieces-per-lane",
                                llvm::cl::desc("GPU kernel: 16-byte pieces of a row per lane"),
                                llvm::cl::init(1)};
  Option<int64_t> asyncStages{*this, "async-stages",
                              llvm::cl::desc("GPU kernel: cp.async ring stages (0: off)"),
                              llvm::cl::init(0)};
  Option<int64_t> residentBlocks{*this, "resident-blocks",
                                 llvm::cl::desc("GPU kernel: blocks per multiprocessor (0: auto)"),
                                 llvm::cl::init(0)};
};

} // namespace

std::string mlir::hybridgen::resolveGPUBinaryFormat(const GPUToNVVMOptions &opts) {
  if (opts.format != "auto")
    return opts.format;
  // Without ptxas the PTX is embedded and the CUDA driver JIT-compiles it when the module loads.
  return toolFound("ptxas", opts.toolkit) && toolFound("fatbinary", opts.toolkit) ? "fatbin"
                                                                                  : "isa";
}

void mlir::hybridgen::buildGPUToNVVMPipeline(OpPassManager &pm, const GPUToNVVMOptions &opts) {
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  kernels.addPass(createSCFToControlFlowPass());
  kernels.addPass(createConvertGpuOpsToNVVMOps());
  kernels.addPass(createReconcileUnrealizedCastsPass());
  GpuNVVMAttachTargetOptions target;
  target.chip = opts.chip;
  target.features = opts.features;
  target.optLevel = opts.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(target));
  GpuModuleToBinaryPassOptions binary;
  binary.toolkitPath = opts.toolkit;
  binary.compilationTarget = resolveGPUBinaryFormat(opts);
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

void mlir::hybridgen::buildHybridPipeline(OpPassManager &pm, const HybridPipelineOptions &opts) {
  if (opts.cpu.allDevices) {
    buildCPUPipeline(pm, opts.cpu);
    return;
  }
  pm.addPass(createHGSplitAttention());
  HGLowerAttentionToGPUOptions gpuOpts;
  gpuOpts.smCount = opts.smCount;
  gpuOpts.minChunkTokens = opts.minChunkTokens;
  gpuOpts.unroll = opts.tuning.unroll;
  gpuOpts.piecesPerLane = opts.tuning.piecesPerLane;
  gpuOpts.asyncStages = opts.tuning.asyncStages;
  gpuOpts.residentBlocks = opts.tuning.residentBlocks;
  pm.addPass(createHGLowerAttentionToGPU(gpuOpts));
  buildGPUToNVVMPipeline(pm, opts.gpu);
  CPUPipelineOptions cpu = opts.cpu;
  cpu.gpuHost = true;
  // The split already ran; its second run in the CPU pipeline finds nothing to do.
  buildCPUPipeline(pm, cpu);
}

void mlir::hybridgen::registerGPUPipelines() {
  PassPipelineRegistration<GPUToNVVMCLOptions>(
      "hg-gpu-to-nvvm",
      "Lower the hg GPU kernels (gpu.module) to NVVM and serialize them (PTX/cubin/fatbin)",
      [](OpPassManager &pm, const GPUToNVVMCLOptions &cl) {
        buildGPUToNVVMPipeline(pm, cl.get());
      });
  PassPipelineRegistration<HybridCLOptions>(
      "hg-hybrid-pipeline",
      "Lower hybrid hg attention to the LLVM dialect: GPU kernels (embedded binary) launched "
      "asynchronously, CPU loops run meanwhile, merge on the host",
      [](OpPassManager &pm, const HybridCLOptions &cl) {
        HybridPipelineOptions opts;
        opts.cpu.allDevices = cl.allDevices;
        opts.cpu.chunkTokens = cl.chunkTokens;
        opts.cpu.amx = cl.amx;
        opts.cpu.bf16Dot = cl.bf16Dot;
        opts.cpu.bf16DotRounded = cl.bf16DotRounded;
        opts.cpu.aot = cl.aot;
        opts.gpu.chip = cl.chip;
        opts.gpu.features = cl.features;
        opts.gpu.format = cl.format;
        opts.gpu.toolkit = cl.toolkit;
        opts.smCount = cl.smCount;
        opts.tuning = {cl.unroll, cl.piecesPerLane, cl.asyncStages, cl.residentBlocks};
        buildHybridPipeline(pm, opts);
      });
}
