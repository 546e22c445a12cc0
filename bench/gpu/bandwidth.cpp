// GPU decode-attention bandwidth (GPU-only split, KV bytes / kernel time from CUDA events, median
// after warm-up) over a device-to-device copy measured in the same run, Llama-3-8B shape.
#include "modes.h"

#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/cuda/device.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"

namespace hybridgen::devcheck {

namespace cu = hybridgen::rt::cuda;

/// Fills the HBM tier's part of layer 0's K and V with |pattern| (content does not matter for
/// bandwidth; writing 16 GiB of random rows through the host would take longer than the check).
void fillDeviceTier(cu::CudaDevice &d, rt::KvPool &pool, uint16_t pattern) {
  size_t bytes = size_t(pool.tierUsage(0).capacityBlocks) * pool.layout().blockBytes(); // tier 0 starts at id 0
  for (void *base : {pool.kBase(0), pool.vBase(0)}) {
    cu::CUdeviceptr dev = cu::deviceAlias(base);
    if (!dev)
      throw std::runtime_error("the HBM tier is not on the device");
    rt::throwIfError(d.check(d.api().cuMemsetD16Async(dev, pattern, bytes / 2, nullptr), "cuMemsetD16Async"));
  }
  rt::throwIfError(d.check(d.api().cuCtxSynchronize(), "cuCtxSynchronize"));
}

/// Seconds per device-to-device copy of |bytes| (median of |runs| after 3 warm-ups).
double copySeconds(cu::CudaDevice &d, size_t bytes, int runs) {
  const cu::DriverApi &a = d.api();
  cu::CUdeviceptr src = 0, dst = 0;
  rt::throwIfError(d.check(a.cuMemAlloc(&src, bytes), "cuMemAlloc"));
  rt::throwIfError(d.check(a.cuMemAlloc(&dst, bytes), "cuMemAlloc"));
  cu::CUevent e0, e1;
  rt::throwIfError(d.check(a.cuEventCreate(&e0, cu::kEventDefault), "cuEventCreate"));
  rt::throwIfError(d.check(a.cuEventCreate(&e1, cu::kEventDefault), "cuEventCreate"));
  std::vector<double> t;
  for (int i = 0; i < runs + 3; ++i) {
    a.cuEventRecord(e0, nullptr);
    a.cuMemcpyDtoDAsync(dst, src, bytes, nullptr);
    a.cuEventRecord(e1, nullptr);
    a.cuEventSynchronize(e1);
    float ms = 0;
    a.cuEventElapsedTime(&ms, e0, e1);
    if (i >= 3)
      t.push_back(double(ms) * 1e-3);
  }
  a.cuEventDestroy(e0);
  a.cuEventDestroy(e1);
  a.cuMemFree(src);
  a.cuMemFree(dst);
  return median(t);
}

StepTimes attentionSeconds(mc::AotLibrary &lib, rt::KvPool &pool, const std::vector<int64_t> &seqs,
                           const Shape &s, int64_t split, int runs, int64_t context, bool allowCpuFallback) {
  rt::SchedulerConfig sc;
  sc.policy = rt::SchedulerPolicy::kStatic;
  sc.staticSplit = split;
  sc.quantum = s.blockSize;
  auto ctx = std::make_shared<rt::SchedulerContext>(sc, &pool);
  rt::installContext(ctx);
  std::vector<float> q(seqs.size() * size_t(s.qHeads()) * size_t(s.headDim), 0.01f), out(q.size());
  BatchArgs ba;
  rt::throwIfError(makeArgs(pool, seqs, s.qHeads(), q, out, ba));
  std::vector<double> gpu, cpu, wall;
  for (int i = 0; i < runs + 3; ++i) {
    ctx->beginStep(context);
    uint64_t launches = cu::launchCount();
    lib.call("hg_attention", ba.args);
    // Timing a CPU fallback over a device tier's (empty) host pages would only waste device time.
    if (i == 0 && split < context && cu::launchCount() == launches && !allowCpuFallback) {
      rt::uninstallContext();
      throw std::runtime_error("the library launched no GPU kernels (compiled without the GPU path)");
    }
    rt::TraceRow r = ctx->lastTraceRow();
    if (i >= 3) {
      gpu.push_back(r.gpuSeconds);
      cpu.push_back(r.cpuSeconds);
      wall.push_back(r.segmentSeconds);
    }
  }
  rt::uninstallContext();
  return {median(gpu), median(cpu), median(wall)};
}

int runBandwidth(const Options &o) {
  cu::CudaDevice *d = cu::processDevice();
  Csv csv(o.csv, "dtype,context,batch,kv_bytes,kernel_s,kernel_gbps,copy_gbps,ratio,gpu_launches");
  for (const std::string &dtype : o.dtypes)
    for (int64_t context : o.contexts)
      for (int64_t batch : o.batches) {
        Shape s; // Llama-3-8B: 32 q heads over 8 kv heads, head dim 128
        s.dtype = dtype;
        rt::KvLayout l;
        l.kvHeads = s.kvHeads, l.headDim = s.headDim, l.blockSize = s.blockSize;
        parseDType(dtype, l.dtype);
        const uint64_t kvBytes = uint64_t(batch) * uint64_t(context) * l.kvHeads * l.rowBytes() * 2;
        auto mem = d->memInfo().valueOrThrow();
        if (kvBytes * 2 + (1ull << 30) > mem.first) { // the pool plus the copy's two buffers
          csv.row(dtype + "," + std::to_string(context) + "," + std::to_string(batch) + "," +
                  std::to_string(kvBytes) + ",,,,,skipped: does not fit");
          continue;
        }
        auto lib = loadLibrary(o, s);
        auto pool = makePool(s, kvBytes + (64ull << 20), 64ull << 20);
        std::vector<int64_t> seqs;
        for (int64_t b = 0; b < batch; ++b) {
          seqs.push_back(pool->createSequence());
          (void)pool->appendTokens(seqs.back(), context).valueOrThrow();
        }
        fillDeviceTier(*d, *pool, dtype == "f16" ? 0x3c00 : 0x3f80); // 1.0
        uint64_t launches = cu::launchCount();
        double kernel = attentionSeconds(*lib, *pool, seqs, s, /*split=*/0, o.runs, context, o.allowCpuFallback).gpu;
        launches = cu::launchCount() - launches;
        pool.reset(); // free the KV before the copy buffers
        double copy = copySeconds(*d, size_t(std::min<uint64_t>(kvBytes, 4ull << 30)), o.runs);
        // A copy reads and writes every byte: its bandwidth counts both, as HBM sees them.
        double copyGBs = 2.0 * double(std::min<uint64_t>(kvBytes, 4ull << 30)) / copy / 1e9;
        double gbps = double(kvBytes) / kernel / 1e9;
        csv.row(dtype + "," + std::to_string(context) + "," + std::to_string(batch) + "," + std::to_string(kvBytes) +
                "," + fmt(kernel) + "," + fmt(gbps, "%.1f") + "," + fmt(copyGBs, "%.1f") + "," +
                fmt(gbps / copyGBs, "%.3f") + "," + std::to_string(launches));
      }
  return 0;
}

} // namespace hybridgen::devcheck
