// The GPU device check's C++ driver (scripts/device-check.sh runs it): ahead-of-time compiled
// hg_attention libraries over a KvPool whose HBM tier is device memory, called through their
// `_mlir_ciface_` symbols. Links only the runtime (no LLVM/MLIR), so it runs on the GPU machine.
//
//   hybridgen_device_check probe
//   hybridgen_device_check numerics  --lib-dir=DIR [--csv=PATH]
//   hybridgen_device_check bandwidth --lib-dir=DIR [--csv=PATH] [--contexts=8192,...] [--batches=1,8]
//                                    [--dtypes=bf16,f16] [--runs=20]
//   hybridgen_device_check hybrid    --lib-dir=DIR [--csv=PATH] [--context=131072] [--steps=30]
//   hybridgen_device_check model     --model-dir=DIR [--csv=PATH]   (a compiled model, model.cpp)
//   (bandwidth and hybrid stop when the libraries launch no kernels, unless --allow-cpu-fallback)
//
// DIR holds attn_<dtype>_d<head_dim>_kv<kv_heads>_g<group>.so (+ .sig) from
// scripts/build-device-artifacts.sh. Without a usable GPU, probe prints the runtime's notice and
// `gpu=0`; the GPU-only modes print "skipped" and exit 0; numerics runs on the CPU fallback.
#include "check_util.h"
#include "modes.h"

#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/cuda/device.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

using namespace hybridgen::devcheck;

namespace {

std::vector<int64_t> parseList(const std::string &s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty())
      out.push_back(std::stoll(item));
  return out;
}

std::vector<std::string> parseNames(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty())
      out.push_back(item);
  return out;
}

int usage(const char *argv0) {
  std::fprintf(stderr, "usage: %s probe|numerics|bandwidth|hybrid --lib-dir=DIR | model --model-dir=DIR [--csv=PATH] [options]\n",
               argv0);
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage(argv[0]);
  std::string mode = argv[1];
  Options o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char *key) -> const char * {
      size_t n = std::strlen(key);
      return a.compare(0, n, key) == 0 ? a.c_str() + n : nullptr;
    };
    try {
      if (const char *v = val("--lib-dir="))
        o.libDir = v;
      else if (const char *v = val("--model-dir="))
        o.modelDir = v;
      else if (const char *v = val("--csv="))
        o.csv = v;
      else if (const char *v = val("--contexts="))
        o.contexts = parseList(v);
      else if (const char *v = val("--batches="))
        o.batches = parseList(v);
      else if (const char *v = val("--dtypes="))
        o.dtypes = parseNames(v);
      else if (const char *v = val("--runs="))
        o.runs = int(std::stoi(v));
      else if (const char *v = val("--context="))
        o.hybridContext = std::stoll(v);
      else if (const char *v = val("--steps="))
        o.steps = int(std::stoi(v));
      else if (a == "--allow-cpu-fallback")
        o.allowCpuFallback = true;
      else
        return usage(argv[0]);
    } catch (const std::exception &) {
      std::fprintf(stderr, "bad value in '%s'\n", a.c_str());
      return 2;
    }
  }
  if (mode == "probe") {
    auto *d = hybridgen::rt::cuda::processDevice();
    if (d)
      std::printf("gpu=1 %s\n", d->describe().c_str());
    else
      std::printf("gpu=0\n");
    return 0;
  }
  try {
    if (mode == "model" && !o.modelDir.empty())
      return runModel(o); // runs on the CPU fallback too (the GPU side then modelled)
    if (o.libDir.empty())
      return usage(argv[0]);
    if (mode == "numerics")
      return runNumerics(o);
    if (hgrt_gpu_available() != 1) {
      std::printf("%s: skipped (no usable GPU)\n", mode.c_str());
      return 0;
    }
    if (mode == "bandwidth")
      return runBandwidth(o);
    if (mode == "hybrid")
      return runHybrid(o);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return usage(argv[0]);
}
