// ModelRunner::open: artifact metadata, the compiled library, the weights bound to every
// function's arguments (checked against the config), the KV pool and the split scheduler.
#include "runner_impl.h"

#include "hybridgen/runtime/checked.h"
#include "hybridgen/runtime/cuda/device.h"

#include <nlohmann/json.hpp>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace hybridgen::rt::model {
namespace {

namespace fs = std::filesystem;
using memref_call::ElemType;
using nlohmann::json;

// Published H200 figures, as in hybridgen-run's attention demo: the GPU side is modelled here.
constexpr double kGpuBytesPerSecond = 4.3e12;
constexpr double kGpuLaunchSeconds = 5e-6;

Result<DType> poolDType(const std::string &name) {
  if (name == "f32")
    return DType::kF32;
  if (name == "bf16")
    return DType::kBF16;
  if (name == "f16")
    return DType::kF16;
  return invalidArgument("kv dtype must be f32, bf16 or f16, got '" + name + "'");
}

bool sameDType(TensorDType t, ElemType e) {
  return (t == TensorDType::f32 && e == ElemType::f32) ||
         (t == TensorDType::bf16 && e == ElemType::bf16) ||
         (t == TensorDType::f16 && e == ElemType::f16);
}

/// memcpy by the OpenMP team, in static shares of 2 MiB pieces: the copy (and the zeroing of the
/// huge pages it faults in) runs on every thread, and each thread first-touches about the share
/// of every weight matrix that its static share of the matmul rows later reads, which on a
/// multi-socket machine puts those pages on its own node.
void copyOnTeam(void *dst, const void *src, size_t bytes) {
  constexpr size_t kPiece = size_t(2) << 20;
  if (bytes < 4 * kPiece) {
    std::memcpy(dst, src, bytes);
    return;
  }
  auto *d = static_cast<char *>(dst);
  const auto *s = static_cast<const char *>(src);
  const int64_t pieces = int64_t((bytes + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < pieces; ++i) {
    size_t at = size_t(i) * kPiece;
    std::memcpy(d + at, s + at, std::min(kPiece, bytes - at));
  }
}

/// Resolves weight arguments by tensor name, converting or realigning once per tensor.
class WeightBinder {
public:
  WeightBinder(ModelRunner::Impl &impl) : impl_(impl) {}

  Result<memref_call::Arg> tensor(const std::string &name, ElemType type,
                                  const std::vector<int64_t> &shape) {
    auto it = cache_.find(name);
    if (it != cache_.end())
      return it->second;
    for (int64_t d : shape)
      if (d < 0)
        return invalidArgument("artifact: weight '" + name + "' has a dynamic dimension");
    Result<const TensorInfo *> found = impl_.checkpoint->require(name, shape);
    if (!found)
      return invalidArgument(found.status().message() + " (the weights do not fit the model's "
                             "config.json)");
    const TensorInfo &t = **found;
    memref_call::Arg arg;
    arg.type = type;
    arg.shape = shape;
    size_t elt = type == ElemType::f32 ? 4 : 2;
    bool aligned = reinterpret_cast<uintptr_t>(t.data) % elt == 0;
    auto memoryFor = [&](size_t bytes) -> Result<void *> {
      Result<void *> buf = impl_.weightMemory.allocate(bytes);
      if (!buf)
        return Status(buf.status().code(),
                      t.file + ": tensor '" + name + "': " + buf.status().message());
      return buf;
    };
    if (sameDType(t.dtype, type) && aligned && impl_.options.mapWeights) {
      arg.data = const_cast<void *>(t.data); // compiled code only reads weights
    } else if (sameDType(t.dtype, type)) {
      Result<void *> buf = memoryFor(t.nbytes);
      if (!buf)
        return buf.status();
      copyOnTeam(*buf, t.data, t.nbytes);
      arg.data = *buf;
    } else {
      Result<std::vector<float>> f32 = tensorToF32(t);
      if (!f32)
        return f32.status();
      bool narrow = type == ElemType::bf16 || type == ElemType::f16;
      if (type != ElemType::f32 && !narrow)
        return invalidArgument(t.file + ": tensor '" + name + "' is " + t.dtypeName +
                               ", but the artifact's weight argument is " +
                               memref_call::elemTypeName(type));
      Result<void *> buf = memoryFor(f32->size() * (narrow ? 2 : 4));
      if (!buf)
        return buf.status();
      if (!narrow) {
        std::memcpy(*buf, f32->data(), f32->size() * 4);
      } else {
        // Narrowing (f32 -> 16 bits, or between the two 16-bit types) rounds to nearest even.
        auto *dst = static_cast<uint16_t *>(*buf);
        for (size_t i = 0; i < f32->size(); ++i)
          dst[i] = type == ElemType::bf16 ? f32ToBf16((*f32)[i]) : f32ToF16((*f32)[i]);
      }
      arg.data = *buf;
    }
    cache_[name] = arg;
    return arg;
  }

  Status bind(const json &functions, const std::string &fnName, BoundFunction &fn) {
    if (!functions.contains(fnName) || !functions[fnName].is_array())
      return invalidArgument(impl_.artifactDir + "/metadata.json: no function '" + fnName + "'");
    fn.name = fnName;
    fn.args = functions[fnName].get<std::vector<std::string>>();
    const memref_call::Signature *sig = nullptr;
    try {
      sig = &impl_.library->signature(fnName);
    } catch (const std::exception &e) {
      return invalidArgument(e.what());
    }
    if (sig->types.size() != fn.args.size())
      return invalidArgument(impl_.artifactDir + ": " + fnName + " takes " +
                             std::to_string(sig->types.size()) + " arguments but metadata.json "
                             "names " + std::to_string(fn.args.size()));
    bool perLayer = false;
    for (const std::string &a : fn.args)
      perLayer |= a.rfind("layer:", 0) == 0;
    int64_t layers = perLayer ? impl_.config.layers : 1;
    std::string layerPrefix =
        impl_.config.family == Family::kOpt ? "model.decoder.layers." : "model.layers.";
    fn.weights.assign(size_t(layers), std::vector<memref_call::Arg>(fn.args.size()));
    for (int64_t l = 0; l < layers; ++l)
      for (size_t i = 0; i < fn.args.size(); ++i) {
        const std::string &a = fn.args[i];
        std::string name;
        if (a.rfind("layer:", 0) == 0)
          name = layerPrefix + std::to_string(l) + "." + a.substr(6);
        else if (a.rfind("tensor:", 0) == 0)
          name = a.substr(7);
        else
          continue;
        Result<memref_call::Arg> arg = tensor(name, sig->types[i], sig->shapes[i]);
        if (!arg)
          return arg.status();
        fn.weights[size_t(l)][i] = *arg;
      }
    return Status::ok();
  }

private:
  ModelRunner::Impl &impl_;
  std::map<std::string, memref_call::Arg> cache_;
};

Result<SchedulerConfig> parsePolicy(const std::string &policy, int64_t blockSize) {
  SchedulerConfig cfg;
  cfg.quantum = blockSize;
  if (policy == "feedback") {
    cfg.policy = SchedulerPolicy::kFeedback;
  } else if (policy == "cpu") {
    // Every token on the first device of the [cpu, gpu] split.
    cfg.policy = SchedulerPolicy::kStatic;
    cfg.staticSplit = int64_t(1) << 50;
  } else if (policy.rfind("static:", 0) == 0) {
    std::string n = policy.substr(7);
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos)
      return invalidArgument("policy '" + policy + "': static:S needs a token count S >= 0");
    cfg.policy = SchedulerPolicy::kStatic;
    cfg.staticSplit = std::stoll(n);
  } else {
    return invalidArgument("unknown policy '" + policy + "' (feedback, static:S, cpu)");
  }
  return cfg;
}

} // namespace

Result<std::unique_ptr<ModelRunner>> ModelRunner::open(const std::string &artifactDir,
                                                       const RunnerOptions &options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->artifactDir = artifactDir;
  if (options.batch < 1)
    return invalidArgument("batch must be >= 1, got " + std::to_string(options.batch));
  if (options.maxContext < 1)
    return invalidArgument("max context must be >= 1");
  if (options.prefillChunk < 1)
    return invalidArgument("prefill chunk must be >= 1");
  if (options.gpuTokens < 0)
    return invalidArgument("gpu tokens must be >= 0, got " + std::to_string(options.gpuTokens));

  std::string metaPath = (fs::path(artifactDir) / "metadata.json").string();
  std::ifstream in(metaPath);
  if (!in)
    return notFound("cannot read " + metaPath + " (not a hybridgen-compile artifact directory?)");
  json meta = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || meta.value("format", "") != "hybridgen-model")
    return invalidArgument(metaPath + ": not hybridgen model metadata");
  if (meta.value("version", 0) != 1)
    return invalidArgument(metaPath + ": unsupported metadata version");
  try {
    impl->configJson = meta.at("config").dump();
    impl->weightDtype = meta.at("weight_dtype").get<std::string>();
    impl->blockSize = meta.at("block_size").get<int64_t>();
    impl->hasPrefill = meta.value("prefill", false);
    impl->kTransposed = meta.value("k_transposed", false);
    impl->gpuKernels = meta.value("gpu_kernels", false);
    std::vector<std::string> kvs = meta.at("kv_dtypes").get<std::vector<std::string>>();
    if (kvs.empty())
      return invalidArgument(metaPath + ": kv_dtypes is empty");
    impl->kvDtype = options.kvDtype.empty() ? kvs[0] : options.kvDtype;
    if (std::find(kvs.begin(), kvs.end(), impl->kvDtype) == kvs.end())
      return invalidArgument("kv dtype '" + impl->kvDtype + "' was not compiled into " +
                             artifactDir + " (it has: " + meta.at("kv_dtypes").dump() + ")");
  } catch (const json::exception &e) {
    return invalidArgument(metaPath + ": " + e.what());
  }
  Result<ModelConfig> config = parseModelConfig(impl->configJson, metaPath + " (config)");
  if (!config)
    return config.status();
  impl->config = *config;
  const ModelConfig &c = impl->config;

  try {
    impl->library = std::make_unique<memref_call::AotLibrary>(
        (fs::path(artifactDir) / meta.value("library", "model.so")).string());
  } catch (const std::exception &e) {
    return invalidArgument(e.what());
  }
  std::string weights = options.weightsPath.empty() ? meta.value("weights", "") : options.weightsPath;
  Result<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::open(weights);
  if (!ckpt)
    return ckpt.status();
  impl->checkpoint = std::move(*ckpt);

  // The run's thread count already for the weight copy (copyOnTeam).
  if (options.threads > 0)
    omp_set_num_threads(options.threads);
  WeightBinder binder(*impl);
  const json &fns = meta["functions"];
  for (auto [name, fn] : {std::pair<std::string, BoundFunction *>{"embed", &impl->embed},
                          {"layer_pre", &impl->layerPre},
                          {"layer_decode_" + impl->kvDtype, &impl->layerDecode},
                          {"final", &impl->final}}) {
    Status s = binder.bind(fns, name, *fn);
    if (!s)
      return s;
  }
  if (impl->hasPrefill) {
    Status s = binder.bind(fns, "layer_prefill_" + impl->kvDtype, impl->layerPrefill);
    if (!s)
      return s;
  }
  if (!c.layerNormBefore) {
    Status s = binder.bind(fns, "layer_mlp", impl->layerMlp);
    if (!s)
      return s;
  }
  // Every weight is now in the arena (unless mapped): let the file's mapping go.
  if (!options.mapWeights)
    impl->checkpoint.reset();

  // The KV pool: one layer of the pool per model layer, sized for batch x maxContext tokens.
  Result<DType> kvType = poolDType(impl->kvDtype);
  if (!kvType)
    return kvType.status();
  KvLayout layout{int32_t(c.kvHeads), int32_t(impl->blockSize), int32_t(c.headDim), *kvType,
                  impl->kTransposed};
  int64_t blocksPerSeq = (options.maxContext + impl->blockSize - 1) / impl->blockSize + 1;
  DiscoverOptions discover;
  discover.probeBytes = 16ull << 20;
  discover.defaultCapacityBytes = uint64_t(options.batch) * uint64_t(blocksPerSeq + 1) * 2 *
                                  uint64_t(c.layers) * layout.blockBytes();
  Result<Topology> topo = Topology::fromEnvironment(discover);
  if (!topo)
    return topo.status();
  // The real GPU side: the budget's blocks (every sequence and layer, one spare each) in an HBM
  // tier in the device's memory, placed first; the host tiers keep room for every token.
  const bool tiersConfigured = std::getenv("HYBRIDGEN_TIERS") || std::getenv("HYBRIDGEN_TIERS_FILE");
  if (impl->gpuKernels && options.gpuTokens > 0 && !tiersConfigured && cuda::processDevice()) {
    std::vector<TierInfo> tiers = topo->tiers();
    TierInfo hbm;
    hbm.name = "hbm";
    hbm.kind = TierKind::kHbm;
    hbm.wantsDevice = true;
    // A budget beyond the context holds nothing more (and a huge one would overflow the sizing).
    const int64_t budget = std::min(options.gpuTokens, options.maxContext);
    const uint64_t gpuBlocks = uint64_t((budget + impl->blockSize - 1) / impl->blockSize);
    hbm.capacityBytes = uint64_t(options.batch) * (gpuBlocks + 1) * 2 * uint64_t(c.layers) *
                        layout.blockBytes(); // K and V of every layer, as the host tiers' sizing
    tiers.insert(tiers.begin(), hbm);
    topo = Topology::fromTiers(std::move(tiers), discover);
    if (!topo)
      return topo.status();
  }
  PoolConfig poolCfg;
  poolCfg.numLayers = int32_t(c.layers);
  poolCfg.layout = layout;
  // Every block batch x maxContext can use, written now: the first prefill then pays no page
  // faults, and a machine without the memory says so here. Each sequence's blocks come in runs
  // (FreeBlocks), so a batch spans its blocks rounded up to whole runs.
  const int64_t run = FreeBlocks::kAllocRunBlocks;
  poolCfg.commitBlocksPerTier = int64_t(options.batch) * (ceilDiv(blocksPerSeq + 1, run) * run);
  Result<std::unique_ptr<KvPool>> pool = KvPool::create(*topo, poolCfg);
  if (!pool)
    return pool.status();
  impl->pool = std::move(*pool);
  impl->stats.kvCommittedBytes = impl->pool->committedBytes();
  impl->stats.kvCommitSeconds = impl->pool->commitSeconds();
  for (int32_t b = 0; b < options.batch; ++b)
    impl->sequences.push_back(impl->pool->createSequence());

  Result<SchedulerConfig> sched = parsePolicy(options.policy, impl->blockSize);
  if (!sched)
    return sched.status();
  sched->secondDeviceCapacityTokens = options.gpuTokens;
  impl->scheduler = std::make_shared<SchedulerContext>(*sched, impl->pool.get());
  // Kernels that can run on a device tier report CUDA-event times; else the time is modelled.
  std::vector<int32_t> hostTiers;
  for (int32_t t = 0; t < impl->pool->topology().tierCount(); ++t) {
    if (impl->pool->tierMemory(t).onDevice())
      impl->deviceTier = true;
    else
      hostTiers.push_back(t);
  }
  if (impl->deviceTier) {
    if (!impl->gpuKernels || hostTiers.empty())
      return invalidArgument("a tier in device memory needs an artifact compiled with --gpu and a host tier "
                             "(the CPU side and prefill read host memory)");
    // New tokens land in host memory, where prefill (CPU kernels) reads them; each decode step
    // then moves the GPU side's blocks into device memory (runStep).
    if (Status s = impl->pool->setAppendTierOrder(hostTiers); !s)
      return s;
    impl->stats.gpuSide = "cuda: " + cuda::processDevice()->describe();
  } else {
    double tokenBytes = 2.0 * double(layout.kvHeads) * layout.rowBytes();
    impl->scheduler->setDeviceTimeModel(1, [tokenBytes](int64_t tokens) {
      return tokens > 0 ? kGpuLaunchSeconds + double(tokens) * tokenBytes / kGpuBytesPerSecond : 0.0;
    });
  }
  installContext(impl->scheduler);
  impl->stats.policy = options.policy;
  return std::unique_ptr<ModelRunner>(new ModelRunner(std::move(impl)));
}

} // namespace hybridgen::rt::model
