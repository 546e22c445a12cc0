//===- hybridgen-run.cpp - the main job: a hybrid decode loop with the feedback scheduler -===//
//
// With a model (`hybridgen-run <artifact or model dir> ...`, ModelRun.cpp) it generates tokens.
// Without one (only flags) it runs the attention demo: one Llama-3-8B-shaped attention layer
// (32 q heads, 8 kv heads, head_dim 128, bf16 KV in the runtime's paged pool) is JIT-compiled with
// a runtime split point, then run step by step while the sequence grows. Each step the runtime's
// feedback scheduler picks the split; the CPU side's time is measured, the GPU side's time comes
// from an H200 cost model (this machine has no GPU; the GPU partial runs on the CPU as the no-GPU
// fallback and its time is labelled "modelled"). Outputs are checked against a float64 reference.
//
//===----------------------------------------------------------------------===//
#include "ModelRun.h"

#include "hybridgen/Driver/Driver.h"
#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/kv_pool.h"
#include "hybridgen/runtime/topology.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace rt = hybridgen::rt;
namespace drv = hybridgen::driver;

namespace {

struct Options {
  int64_t startTokens = 4096;
  int64_t endTokens = 65536;
  int64_t steps = 24;
  int64_t checkEvery = 6;
  // HBM budget for this sequence's KV in this layer: the KV beyond it must live in host tiers.
  int64_t gpuTokens = 16384;
  std::string tracePath;
};

// Published H200 figures: ~4.3 TB/s measured device copy bandwidth, ~5 us launch overhead.
constexpr double kGpuBytesPerSecond = 4.3e12;
constexpr double kGpuLaunchSeconds = 5e-6;

/// Limits of the numeric flags. Sequence lengths are int32 in the kernels' tables, and the pool
/// for |end| tokens is sized up front (4 KiB per token in this layer), so 2^24 tokens (64 GiB) is
/// beyond any machine this runs on; steps bound the run time.
constexpr int64_t kMaxTokens = int64_t(1) << 24;
constexpr int64_t kMaxSteps = 1000000;

/// |text| as a whole decimal integer in [lo, hi], or false (atoll read "12x" as 12, "x" as 0 and
/// overflowed silently).
bool parseInt(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t &out) {
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    std::fprintf(stderr, "hybridgen-run: %s=%s is not an integer in [%lld, %lld]\n", flag, text,
                 (long long)lo, (long long)hi);
    return false;
  }
  out = v;
  return true;
}

bool parseArgs(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *flag) -> const char * {
      size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 && a.size() > n && a[n] == '=' ? argv[i] + n + 1 : nullptr;
    };
    if (const char *v = value("--start")) {
      if (!parseInt("--start", v, 1, kMaxTokens, o.startTokens))
        return false;
    } else if (const char *v = value("--end")) {
      if (!parseInt("--end", v, 1, kMaxTokens, o.endTokens))
        return false;
    } else if (const char *v = value("--steps")) {
      if (!parseInt("--steps", v, 1, kMaxSteps, o.steps))
        return false;
    } else if (const char *v = value("--check-every")) {
      if (!parseInt("--check-every", v, 1, kMaxSteps, o.checkEvery))
        return false;
    } else if (const char *v = value("--gpu-tokens")) {
      if (!parseInt("--gpu-tokens", v, 0, kMaxTokens, o.gpuTokens))
        return false;
    } else if (const char *v = value("--trace"))
      o.tracePath = v;
    else {
      bool help = a == "--help" || a == "-h";
      std::fprintf(help ? stdout : stderr,
                   "usage: hybridgen-run [--start=N] [--end=N] [--steps=N] [--check-every=N] "
                   "[--gpu-tokens=N (0: unlimited)] [--trace=out.csv]\n");
      if (!help)
        std::fprintf(stderr, "unknown argument '%s'\n", argv[i]);
      std::exit(help ? 0 : 2);
    }
  }
  if (o.startTokens < 1 || o.endTokens < o.startTokens || o.steps < 1 || o.checkEvery < 1 ||
      o.gpuTokens < 0) {
    std::fprintf(stderr, "hybridgen-run: need 1 <= start <= end, steps >= 1, check-every >= 1, "
                         "gpu-tokens >= 0\n");
    return false;
  }
  return true;
}

/// Appends |n| tokens of random bf16 K and V (in chunks, to keep the staging buffers small).
void appendRandomTokens(rt::KvPool &pool, int64_t seq, int64_t n, std::mt19937 &rng) {
  const rt::KvLayout &layout = pool.layout();
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t chunk = 4096;
  std::vector<uint16_t> k, v;
  for (int64_t done = 0; done < n; done += chunk) {
    int64_t m = std::min(chunk, n - done);
    size_t elems = size_t(m) * layout.kvHeads * layout.headDim;
    k.resize(elems);
    v.resize(elems);
    for (size_t i = 0; i < elems; ++i) {
      k[i] = rt::f32ToBf16(dist(rng));
      v[i] = rt::f32ToBf16(dist(rng));
    }
    rt::throwIfError(pool.append(seq, m, k.data(), v.data()));
  }
}

/// Float64 attention of one sequence over the pool: the independent reference.
double maxRelativeError(const rt::KvPool &pool, int64_t seq, const std::vector<float> &q,
                        const std::vector<float> &out, int64_t qHeads, float scale) {
  const rt::KvLayout &L = pool.layout();
  const auto *kBase = static_cast<const uint16_t *>(pool.kBase(0));
  const auto *vBase = static_cast<const uint16_t *>(pool.vBase(0));
  const std::vector<int32_t> &table = pool.blockTable(seq);
  int64_t len = pool.seqLen(seq), group = qHeads / L.kvHeads, D = L.headDim;
  double maxErr = 0, maxRef = 0;
  std::vector<double> logits(static_cast<size_t>(len)), acc(static_cast<size_t>(D));
  for (int64_t h = 0; h < qHeads; ++h) {
    int32_t kvh = int32_t(h / group);
    double m = -INFINITY;
    for (int64_t t = 0; t < len; ++t) {
      size_t off = L.elementOffset(table[size_t(t / L.blockSize)], kvh, int32_t(t % L.blockSize));
      double s = 0;
      for (int64_t d = 0; d < D; ++d)
        s += double(q[size_t(h * D + d)]) * rt::bf16ToF32(kBase[off + size_t(d)]);
      logits[size_t(t)] = s * scale;
      m = std::max(m, logits[size_t(t)]);
    }
    double l = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t t = 0; t < len; ++t) {
      double p = std::exp(logits[size_t(t)] - m);
      l += p;
      size_t off = L.elementOffset(table[size_t(t / L.blockSize)], kvh, int32_t(t % L.blockSize));
      for (int64_t d = 0; d < D; ++d)
        acc[size_t(d)] += p * rt::bf16ToF32(vBase[off + size_t(d)]);
    }
    for (int64_t d = 0; d < D; ++d) {
      double ref = acc[size_t(d)] / l;
      maxRef = std::max(maxRef, std::fabs(ref));
      maxErr = std::max(maxErr, std::fabs(ref - double(out[size_t(h * D + d)])));
    }
  }
  return maxErr / std::max(maxRef, 1e-30);
}

int run(const Options &opt) {
  const int64_t qHeads = 32, kvHeads = 8, headDim = 128, blockSize = 16;
  const float scale = 1.0f / std::sqrt(float(headDim));
  std::mt19937 rng(1234);

  // Memory tiers: HYBRIDGEN_TIERS / HYBRIDGEN_TIERS_FILE, or what libnuma reports.
  rt::DiscoverOptions discover;
  int64_t tokenBytes = 2 * kvHeads * headDim * 2; // K and V, bf16
  discover.defaultCapacityBytes = uint64_t(opt.endTokens + 4 * blockSize) * tokenBytes * 5 / 4;
  rt::Topology topo = rt::Topology::fromEnvironment(discover).valueOrThrow();
  std::printf("== memory tiers\n%s", topo.describe().c_str());

  rt::PoolConfig poolCfg;
  poolCfg.layout = rt::KvLayout{int32_t(kvHeads), int32_t(blockSize), int32_t(headDim),
                                rt::DType::kBF16};
  std::unique_ptr<rt::KvPool> pool = rt::KvPool::create(topo, poolCfg).valueOrThrow();
  int64_t seq = pool->createSequence();
  appendRandomTokens(*pool, seq, opt.startTokens, rng);

  drv::AttentionSpec spec;
  spec.batch = 1;
  spec.qHeads = qHeads;
  spec.kvHeads = kvHeads;
  spec.headDim = headDim;
  spec.blockSize = blockSize;
  spec.numBlocks = pool->numBlocks();
  spec.kvDtype = "bf16";
  spec.scale = scale;
  spec.splitPoint = std::nullopt; // read from the runtime's scheduler each step
  auto compileStart = std::chrono::steady_clock::now();
  std::unique_ptr<drv::JitModule> module =
      drv::JitModule::compile(drv::buildAttentionModule(spec));
  double compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - compileStart).count();
  std::printf("\n== compiled hybrid attention ([cpu, gpu], split = runtime) in %.2f s (JIT)\n",
              compileSeconds);

  rt::SchedulerConfig schedCfg;
  schedCfg.quantum = blockSize;
  schedCfg.secondDeviceCapacityTokens = opt.gpuTokens;
  auto ctx = std::make_shared<rt::SchedulerContext>(schedCfg, pool.get());
  ctx->setDeviceTimeModel(1, [&](int64_t gpuTokens) {
    return gpuTokens > 0 ? kGpuLaunchSeconds + double(gpuTokens * tokenBytes) / kGpuBytesPerSecond
                         : 0.0;
  });
  rt::installContext(ctx);

  std::vector<float> q(size_t(qHeads * headDim)), out(q.size());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("\n%5s %9s %9s %11s %17s %11s %10s\n", "step", "context", "cpu_tok", "cpu_ms",
              "gpu_ms(modelled)", "step_ms", "rel_err");
  double growth = std::pow(double(opt.endTokens) / double(opt.startTokens),
                           1.0 / double(std::max<int64_t>(opt.steps - 1, 1)));
  double worstErr = 0;
  for (int64_t step = 0; step < opt.steps; ++step) {
    int64_t target = std::min<int64_t>(
        opt.endTokens, int64_t(std::llround(double(opt.startTokens) * std::pow(growth, step))));
    if (target > pool->seqLen(seq))
      appendRandomTokens(*pool, seq, target - pool->seqLen(seq), rng);
    int64_t len = pool->seqLen(seq);
    for (float &x : q)
      x = dist(rng);

    int32_t maxBlocks = pool->maxBlocksInUse({seq});
    std::vector<int32_t> table(static_cast<size_t>(maxBlocks)), lens(1);
    rt::throwIfError(pool->fillBatch({seq}, maxBlocks, table.data(), lens.data()));
    ctx->beginStep(len);
    module->call("hg_attention",
                 {{q.data(), drv::DType::f32, {1, qHeads, headDim}, {}},
                  {pool->kBase(0), drv::DType::bf16, {pool->numBlocks(), kvHeads, blockSize, headDim}, {}},
                  {pool->vBase(0), drv::DType::bf16, {pool->numBlocks(), kvHeads, blockSize, headDim}, {}},
                  {table.data(), drv::DType::i32, {1, maxBlocks}, {}},
                  {lens.data(), drv::DType::i32, {1}, {}},
                  {out.data(), drv::DType::f32, {1, qHeads, headDim}, {}}});
    rt::throwIfError(ctx->endStep().status());
    rt::TraceRow row = ctx->lastTraceRow();

    std::string err = "-";
    if (step % opt.checkEvery == 0 || step == opt.steps - 1) {
      double e = maxRelativeError(*pool, seq, q, out, qHeads, scale);
      worstErr = std::max(worstErr, e);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2e", e);
      err = buf;
    }
    std::printf("%5lld %9lld %9lld %11.3f %17.3f %11.3f %10s\n", (long long)step, (long long)len,
                (long long)row.split, row.cpuSeconds * 1e3, row.gpuSeconds * 1e3,
                std::max(row.cpuSeconds + row.transferSeconds, row.gpuSeconds) * 1e3,
                err.c_str());
  }
  rt::uninstallContext();
  if (!opt.tracePath.empty())
    rt::throwIfError(ctx->trace().writeCsv(opt.tracePath));

  std::printf("\nworst relative error vs float64: %.2e (bf16 KV; bound 1e-2)\n", worstErr);
  std::printf("cpu_tok is the split point: tokens on the CPU side (the oldest, in host tiers); the GPU "
              "holds at most %lld tokens (--gpu-tokens).\n",
              (long long)opt.gpuTokens);
  std::printf(
"gpu_ms is MODELLED (H200: %.1f TB/s, %.0f us launch); this machine has no GPU and "
              "runs the GPU partial on the CPU.\n",
              kGpuBytesPerSecond / 1e12, kGpuLaunchSeconds * 1e6);
  return worstErr <= 1e-2 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  // `hybridgen-run <artifact or model dir> ...` runs a compiled model (ModelRun.cpp).
  if (looksLikeModelMode(argc, argv))
    return runModelMode(argc, argv);
  Options opt;
  if (!parseArgs(argc, argv, opt))
    return 2;
  try {
    return run(opt);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "hybridgen-run: %s\n", e.what());
    return 1;
  }
}
