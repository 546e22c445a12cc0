//===- ir_fuzz.cpp - libFuzzer target over the compiler's front end and pipelines ----------===//
//
// Each input is MLIR text. It goes through what hg.compile and hybridgen-compile run before LLVM's
// code generator: the input guard, parse, verify, the driver's type and signature checks, the hg
// CPU pipeline (the variant - JIT or AOT flavour, all devices or cpu only, AMX, chunk size -
// chosen by a hash of the input, so every variant is reached and each input replays the same
// way) or, for one input in eight, the hybrid CPU+GPU pipeline down to PTX, and translation to
// LLVM IR. It runs on libFuzzer's thread (8 MiB; the input guard bounds
// nesting) rather than the driver's 64 MiB one, which would cost a thread per execution. A
// CompileError is the expected answer to bad input; any other exception, a crash, an ASan
// report, a hang or a runaway allocation is a finding.
//
// Built by scripts/fuzz.sh in its own build directory with -fsanitize=fuzzer,address on the
// project's code; libMLIR.so and libLLVM.so are Debian's, so MLIR itself runs without ASan
// instrumentation (its heap is still checked by ASan's allocator).
//
//===----------------------------------------------------------------------===//
#include "Compiler.h"

#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace {

uint32_t fnv1a(const uint8_t *data, size_t size) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < size; ++i)
    h = (h ^ data[i]) * 16777619u;
  return h;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  namespace driver = hybridgen::driver;
  std::string text(reinterpret_cast<const char *>(data), size);
  uint32_t h = fnv1a(data, size);
  driver::CompileOptions options;
  options.amx = h & 1;
  options.allDevicesOnCpu = (h >> 1) & 3; // three in four: the no-GPU fallback
  bool aot = (h >> 3) & 1;
  static const int64_t kChunks[] = {0, 16, 48, 4096};
  options.chunkTokens = kChunks[(h >> 4) & 3];
  // One input in eight takes the hybrid pipeline instead (GPU partials to NVVM kernels and the
  // host launch code, issue 15), emitting PTX: ptxas would be an external process per input.
  if (((h >> 6) & 7) == 0) {
    options.gpuKernels = true;
    options.gpuFormat = "isa";
    options.gpuChip = (h >> 9) & 1 ? "sm_90" : "sm_80";
  }
  options.sourceName = "fuzz.mlir";
  try {
    driver::detail::LoweredModule lowered = driver::detail::parseAndLower(text, options, aot, /*ownStack=*/false);
    llvm::LLVMContext llvmContext;
    std::unique_ptr<llvm::Module> module =
        mlir::translateModuleToLLVMIR(*lowered.module, llvmContext, "fuzz");
    (void)module;
  } catch (const driver::CompileError &) {
    // The documented answer to bad input.
  }
  return 0;
}
