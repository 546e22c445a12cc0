// The hybrid step with an HBM budget of half the KV: the feedback scheduler's steps, the static
// splits it should find, CPU-only, and GPU-only with the overflow copied host -> device each step.
#include "modes.h"

#include "hybridgen/runtime/cuda/gpu_runtime.h"

#include <cstdlib>

namespace hybridgen::devcheck {

namespace cu = hybridgen::rt::cuda;

namespace {

/// Host blocks get bytes 0x3f (bf16 ~0.75): untouched pages would all read the one zero page.
void fillHostBlocks(rt::KvPool &pool, const std::vector<int64_t> &seqs) {
  const size_t bb = pool.layout().blockBytes();
  for (int64_t seq : seqs)
    for (int32_t b : pool.blockTable(seq))
      if (!pool.tierMemory(pool.tierOfBlock(b)).onDevice())
        for (void *base : {pool.kBase(0), pool.vBase(0)})
          std::memset(static_cast<char *>(base) + size_t(b) * bb, 0x3f, bb);
}

/// Seconds of one pinned, asynchronous host -> device copy of |bytes| (median of |runs|).
double uploadSeconds(cu::CudaDevice &d, size_t bytes, int runs) {
  const cu::DriverApi &a = d.api();
  void *host = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  std::memset(host, 0x3f, bytes);
  rt::throwIfError(d.check(a.cuMemHostRegister(host, bytes, cu::kHostRegisterPortable), "cuMemHostRegister"));
  cu::CUdeviceptr dev = 0;
  rt::throwIfError(d.check(a.cuMemAlloc(&dev, bytes), "cuMemAlloc"));
  cu::CUevent e0, e1;
  a.cuEventCreate(&e0, cu::kEventDefault);
  a.cuEventCreate(&e1, cu::kEventDefault);
  std::vector<double> t;
  for (int i = 0; i < runs + 2; ++i) {
    a.cuEventRecord(e0, nullptr);
    a.cuMemcpyHtoDAsync(dev, host, bytes, nullptr);
    a.cuEventRecord(e1, nullptr);
    a.cuEventSynchronize(e1);
    float ms = 0;
    a.cuEventElapsedTime(&ms, e0, e1);
    if (i >= 2)
      t.push_back(double(ms) * 1e-3);
  }
  a.cuEventDestroy(e0);
  a.cuEventDestroy(e1);
  a.cuMemFree(dev);
  a.cuMemHostUnregister(host);
  std::free(host);
  return median(t);
}

} // namespace

int runHybrid(const Options &o) {
  cu::CudaDevice *d = cu::processDevice();
  Shape s; // Llama-3-8B, bf16
  const int64_t context = (o.hybridContext + s.blockSize - 1) / s.blockSize * s.blockSize;
  rt::KvLayout l;
  l.kvHeads = s.kvHeads, l.headDim = s.headDim, l.blockSize = s.blockSize, l.dtype = rt::DType::kBF16;
  const uint64_t tokenBytes = uint64_t(l.kvHeads) * l.rowBytes() * 2;
  const uint64_t kvBytes = uint64_t(context) * tokenBytes;
  const int64_t hbmTokens = context / 2 / s.blockSize * s.blockSize;
  auto lib = loadLibrary(o, s);
  Csv csv(o.csv, "kind,step,split,cpu_s,gpu_s,step_s,migrations");
  auto row = [&](const std::string &kind, int64_t step, int64_t split, const StepTimes &t, int64_t mig) {
    csv.row(kind + "," + std::to_string(step) + "," + std::to_string(split) + "," + fmt(t.cpu) + "," + fmt(t.gpu) +
            "," + fmt(t.wall) + "," + std::to_string(mig));
  };

  // The hybrid pool: HBM holds half the tokens, DRAM the rest plus room to migrate.
  auto pool = makePool(s, uint64_t(hbmTokens) * tokenBytes + (2ull << 20), kvBytes * 2);
  std::vector<int64_t> seqs = {pool->createSequence()};
  (void)pool->appendTokens(seqs[0], context).valueOrThrow();
  fillDeviceTier(*d, *pool, 0x3f80);
  fillHostBlocks(*pool, seqs);
  const int64_t floor = context - hbmTokens;

  // Static splits from the HBM floor to all-CPU: the best is what feedback should find.
  double bestStatic = 1e30;
  int64_t bestSplit = floor;
  StepTimes cpuOnly;
  for (int i = 0; i <= 6; ++i) {
    int64_t split = (floor + (context - floor) * i / 6) / s.blockSize * s.blockSize;
    placeFor(*pool, split);
    StepTimes t = attentionSeconds(*lib, *pool, seqs, s, split, 5, context, o.allowCpuFallback);
    row("static", 0, split, t, 0);
    if (t.wall < bestStatic)
      bestStatic = t.wall, bestSplit = split;
    if (i == 6)
      cpuOnly = t;
  }

  // Feedback from the bandwidth prior, the HBM budget as a hard floor, placement migrating.
  placeFor(*pool, floor);
  rt::SchedulerConfig sc;
  sc.quantum = s.blockSize;
  sc.secondDeviceCapacityTokens = hbmTokens;
  sc.prior = rt::bandwidthPrior(double(tokenBytes), rt::probeReadBandwidth(0, 0, 64ull << 20), 4300, 5e-6);
  auto ctx = std::make_shared<rt::SchedulerContext>(sc, pool.get());
  rt::installContext(ctx);
  std::vector<float> q(size_t(s.qHeads()) * size_t(s.headDim), 0.01f), out(q.size());
  int converged = -1;
  StepTimes last;
  int64_t lastSplit = 0;
  for (int step = 1; step <= o.steps; ++step) {
    BatchArgs ba; // the table changes as placement migrates blocks
    rt::throwIfError(makeArgs(*pool, seqs, s.qHeads(), q, out, ba));
    ctx->beginStep(context);
    lib->call("hg_attention", ba.args);
    int64_t mig = ctx->endStep().valueOrThrow();
    rt::TraceRow r = ctx->lastTraceRow();
    last = {r.gpuSeconds, r.cpuSeconds, r.segmentSeconds};
    lastSplit = r.split;
    row("feedback", step, r.split, last, mig);
    if (converged < 0 && r.segmentSeconds <= 1.05 * bestStatic)
      converged = step;
  }
  rt::uninstallContext();
  pool.reset();

  // GPU-only: every token resident (a pool with room for all), plus the overflow's upload.
  auto full = makePool(s, kvBytes + (2ull << 20), 64ull << 20);
  std::vector<int64_t> fseqs = {full->createSequence()};
  (void)full->appendTokens(fseqs[0], context).valueOrThrow();
  fillDeviceTier(*d, *full, 0x3f80);
  StepTimes gpuOnly = attentionSeconds(*lib, *full, fseqs, s, 0, 10, context, o.allowCpuFallback);
  full.reset();
  double upload = uploadSeconds(*d, size_t(floor) * tokenBytes, 10);
  StepTimes gpuPlus = gpuOnly;
  gpuPlus.wall = gpuOnly.gpu + upload;
  row("gpu-only+transfer", 0, 0, gpuPlus, 0);
  row("cpu-only", 0, context, cpuOnly, 0);

  std::fprintf(stderr,
               "hybrid: best static split %lld (%.3g s); feedback ends at split %lld, %.3g s per step "
               "(%.2f x max(cpu %.3g, gpu %.3g)); within 5%% of the best static step from step %d; "
               "gpu-only+transfer %.3g s (kernel %.3g + upload %.3g); cpu-only %.3g s\n",
               (long long)bestSplit, bestStatic, (long long)lastSplit, last.wall,
               last.wall / std::max(1e-12, std::max(last.cpu, last.gpu)), last.cpu, last.gpu, converged,
               gpuPlus.wall, gpuOnly.gpu, upload, cpuOnly.wall);
  return 0;
}

} // namespace hybridgen::devcheck
