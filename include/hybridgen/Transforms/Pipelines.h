//===- Pipelines.h - named hybridgen pass pipelines -------------*- C++ -*-===//
#ifndef HYBRIDGEN_TRANSFORMS_PIPELINES_H
#define HYBRIDGEN_TRANSFORMS_PIPELINES_H

#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <string>

namespace mlir::hybridgen {

/// Options of `hg-cpu-pipeline` (hg dialect -> LLVM dialect, CPU only).
struct CPUPipelineOptions {
  /// Lower partials of every device to CPU code (the no-GPU fallback).
  bool allDevices = true;
  /// Tokens per parallel chunk of the CPU kernel (0: the lowering's default).
  int64_t chunkTokens = 0;
  /// Also emit the AMX-BF16 kernel path for bf16 KV (the target must have AMX; the kernel still
  /// asks the runtime at each call whether the OS lets it use the tiles).
  bool amx = false;
  /// Vector register width the CPU kernels are sized for (512 AVX-512, 256 AVX2, 128 SSE).
  int64_t vectorBits = 512;
  /// Ahead-of-time code: name the CPU and its features on every llvm.func.
  bool aot = false;
  /// With aot: the CPU ("host" = this machine) and a feature list (empty = the CPU's).
  std::string targetCpu = "host";
  std::string targetFeatures;
};

/// Appends the passes of `hg-cpu-pipeline` to |pm| (which must run on builtin.module).
void buildCPUPipeline(OpPassManager &pm, const CPUPipelineOptions &opts);

} // namespace mlir::hybridgen

#endif // HYBRIDGEN_TRANSFORMS_PIPELINES_H
