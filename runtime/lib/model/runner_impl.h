// ModelRunner's state, shared by runner_load.cpp (opening an artifact) and runner.cpp (running it).
#pragma once

#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/kv_pool.h"
#include "hybridgen/runtime/memref_call.h"
#include "hybridgen/runtime/model/runner.h"
#include "hybridgen/runtime/safetensors.h"
#include "weight_arena.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hybridgen::rt::model {

/// One compiled function and, per layer (index 0 for whole-model functions), its weight
/// arguments resolved to memory; the other arguments are runtime buffers named in |args|.
struct BoundFunction {
  std::string name;
  std::vector<std::string> args;                       // metadata's names, in call order
  std::vector<std::vector<memref_call::Arg>> weights;  // [layer][arg index], data null for buffers
};

struct ModelRunner::Impl {
  RunnerOptions options;
  ModelConfig config;
  std::string configJson;
  std::string artifactDir;
  std::string weightDtype;
  std::string kvDtype;
  int64_t blockSize = 16;
  bool hasPrefill = false;
  bool kTransposed = false; // metadata.json k_transposed: the pool stores K pieces transposed
  bool gpuKernels = false;  // metadata.json gpu_kernels: compiled with hybridgen-compile --gpu
  bool deviceTier = false;  // the pool has a tier in device memory (placed per step, see runStep)

  std::unique_ptr<memref_call::AotLibrary> library;
  std::unique_ptr<Checkpoint> checkpoint;
  /// The weights the compiled code reads: copies of the checkpoint's tensors (converted where the
  /// artifact's weight dtype differs), or only the converted and realigned ones under
  /// RunnerOptions::mapWeights.
  WeightArena weightMemory;
  BoundFunction embed, layerPre, layerDecode, layerPrefill, final;
  /// Post-LN models (OPT's do_layer_norm_before false) run each layer's MLP block as its own
  /// function after layer_decode/layer_prefill; empty name otherwise.
  BoundFunction layerMlp;

  std::unique_ptr<KvPool> pool;
  std::shared_ptr<SchedulerContext> scheduler;
  std::vector<int64_t> sequences;
  /// Every sequence holds the same tokens (true after open and reset; prefill and decode keep it
  /// while all sequences get the same ids): a prefill of identical rows then runs once.
  bool sameHistory = true;
  RunnerStats stats;

  /// Activation buffers, grown on demand.
  std::vector<float> x, q, k, v, attn, logits;
  std::vector<int32_t> positions, table, lens;
  std::vector<uint16_t> kvStage16; // k/v of the new tokens in a 16-bit pool dtype
  std::vector<int64_t> layerId = {0};

};

/// Builds the argument list of |fn| for |layer| from the runtime buffers in |buffers|.
std::vector<memref_call::Arg> buildArgs(const BoundFunction &fn, int32_t layer,
                                        const std::map<std::string, memref_call::Arg> &buffers);

} // namespace hybridgen::rt::model
