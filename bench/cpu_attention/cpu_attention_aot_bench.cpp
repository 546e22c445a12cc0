// The CPU attention benchmark over ahead-of-time compiled kernels: the same cases and roof as
// hybridgen_cpu_attention_bench, but it links only the runtime and libomp, so it runs where LLVM
// is not installed (the GPU host; bench/cpu_attention/device.sh).
//
//   hybridgen_cpu_attention_aot_bench --load=DIR [--no-amx] [the common flags of bench_core.h]
//
// DIR holds attention_<dtype>[_noamx].so from `hybridgen_cpu_attention_bench --save-aot=DIR`.
#include "bench_core.h"

#include <dlfcn.h>

#include <cstdio>
#include <memory>

namespace mc = hybridgen::memref_call;

int main(int argc, char **argv) {
  hybridgen::bench::BenchOptions opts;
  std::string dir;
  bool amx = true;
  bool ok = hybridgen::bench::parseFlags(argc, argv, opts, [&](const std::string &a) {
    if (a.rfind("--load=", 0) == 0)
      dir = a.substr(7);
    else if (a == "--no-amx")
      amx = false;
    else
      return false;
    return true;
  });
  if (!ok)
    return 2;
  if (dir.empty()) {
    std::fprintf(stderr, "usage: %s --load=DIR [--no-amx] [flags]\n", argv[0]);
    return 2;
  }
  std::unique_ptr<mc::AotLibrary> lib;
  try {
    hybridgen::bench::runCases(opts, [&](const std::string &dtype) {
      lib = std::make_unique<mc::AotLibrary>(hybridgen::bench::kernelPath(dir, dtype, amx));
      // Which path bf16 takes here: the kernels ask the runtime at each call.
      void *rt = amx && dtype == "bf16" ? dlopen("libhybridgen_runtime.so", RTLD_NOW | RTLD_NOLOAD)
                                        : nullptr;
      if (rt)
        if (auto *available = reinterpret_cast<int32_t (*)()>(dlsym(rt, "hgrt_amx_available")))
          std::fprintf(stderr, "%s: AMX %s\n", dtype.c_str(),
                       available() ? "available" : "not available (vector path)");
      return [l = lib.get()](const std::vector<mc::Arg> &args) { l->call("hg_attention", args); };
    });
  } catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
