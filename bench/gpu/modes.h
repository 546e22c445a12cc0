// The device check's measurements (one .cpp each) and what they share: options, the compiled
// attention library of a shape, a pool over a device HBM tier, and the CSV output.
#pragma once

#include "check_util.h"

#include "hybridgen/runtime/cuda/device.h"

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hybridgen::devcheck {

struct Options {
  std::string libDir, csv;
  std::string modelDir; // model mode: artifact/, checkpoint/, expected.txt
  std::vector<int64_t> contexts = {8192, 32768, 131072, 524288};
  std::vector<int64_t> batches = {1, 8};
  std::vector<std::string> dtypes = {"bf16", "f16"};
  int runs = 20;                 // timed runs per case (medians), after 3 warm-up runs
  int64_t hybridContext = 131072;
  int steps = 30;                // feedback steps in the hybrid run
  /// Measure even when the libraries launch no kernels (their GPU partial runs on the CPU): only
  /// for exercising the flow (CI on the fake driver); a real check stops instead of timing that.
  bool allowCpuFallback = false;
};

int runNumerics(const Options &o);
int runBandwidth(const Options &o);
int runHybrid(const Options &o);
int runModel(const Options &o);

/// The shape a compiled library was built for; its file name in the library directory.
struct Shape {
  std::string dtype = "bf16";
  int32_t headDim = 128, kvHeads = 8, group = 4, blockSize = 16;
  int32_t qHeads() const { return kvHeads * group; }
  std::string file() const {
    return "attn_" + dtype + "_d" + std::to_string(headDim) + "_kv" + std::to_string(kvHeads) + "_g" +
           std::to_string(group) + ".so";
  }
  double scale() const { return 1.0 / std::sqrt(double(headDim)); }
};

inline std::unique_ptr<mc::AotLibrary> loadLibrary(const Options &o, const Shape &s) {
  return std::make_unique<mc::AotLibrary>(o.libDir + "/" + s.file());
}

/// A one-layer pool: HBM on the GPU (`device=cuda`, emulated without one) + one DRAM tier.
inline std::unique_ptr<rt::KvPool> makePool(const Shape &s, uint64_t hbmBytes, uint64_t dramBytes) {
  rt::DiscoverOptions d;
  d.probeBandwidth = false;
  std::string cfg = "name=hbm,kind=hbm,device=cuda,capacity=" + std::to_string(hbmBytes) +
                    ",bandwidth=4300;name=dram,kind=dram,node=0,capacity=" + std::to_string(dramBytes) +
                    ",bandwidth=100";
  rt::Topology topo = rt::Topology::fromConfig(cfg, d).valueOrThrow();
  rt::PoolConfig pc;
  pc.numLayers = 1;
  if (!parseDType(s.dtype, pc.layout.dtype))
    throw std::invalid_argument("unknown dtype " + s.dtype);
  pc.layout.kvHeads = s.kvHeads;
  pc.layout.headDim = s.headDim;
  pc.layout.blockSize = s.blockSize;
  return rt::KvPool::create(topo, pc).valueOrThrow();
}

/// Moves every block to where split |split| wants it (no per-step migration bound). One rebalance
/// skips moves into a tier that is still full, so repeat until nothing moves.
inline void placeFor(rt::KvPool &pool, int64_t split) {
  rt::PlacementConfig pc;
  pc.maxMigrationsPerStep = int64_t(1) << 40;
  for (int round = 0; round < 16; ++round)
    if (rt::PlacementPolicy(pc).rebalance(pool, split).valueOrThrow() == 0)
      break;
}

namespace cuda_ns = hybridgen::rt::cuda;

/// Median GPU (CUDA events), CPU and segment wall seconds of one compiled step.
struct StepTimes {
  double gpu = 0, cpu = 0, wall = 0;
};
/// |lib| over |seqs| at static split |split|: medians of |runs| after 3 warm-ups.
/// Throws when the GPU had tokens but nothing was launched, unless |allowCpuFallback|.
StepTimes attentionSeconds(mc::AotLibrary &lib, rt::KvPool &pool, const std::vector<int64_t> &seqs,
                           const Shape &s, int64_t split, int runs, int64_t context, bool allowCpuFallback);
/// Seconds per device-to-device copy of |bytes| (median of |runs| after 3 warm-ups).
double copySeconds(cuda_ns::CudaDevice &d, size_t bytes, int runs);
/// Fills the device HBM tier of layer 0 with a 16-bit |pattern|.
void fillDeviceTier(cuda_ns::CudaDevice &d, rt::KvPool &pool, uint16_t pattern);

/// CSV rows to stdout and, with --csv, to that file (header once).
class Csv {
public:
  Csv(const std::string &path, const std::string &header) {
    if (!path.empty() && !(f_ = std::fopen(path.c_str(), "w")))
      throw std::runtime_error("cannot write " + path);
    row(header);
  }
  ~Csv() {
    if (f_)
      std::fclose(f_);
  }
  void row(const std::string &line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (f_)
      std::fprintf(f_, "%s\n", line.c_str());
  }

private:
  FILE *f_ = nullptr;
};

inline std::string fmt(double v, const char *f = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

} // namespace hybridgen::devcheck
