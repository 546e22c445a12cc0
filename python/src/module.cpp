// Entry point of the _hybridgen extension: the runtime's bindings (topology, KV pool, scheduler, model
// runner). It links the runtime only, no LLVM/MLIR, so compiled artifacts run from Python where
// LLVM is not installed; the compiler's bindings are the _hybridgen_jit extension (jit_module.cpp).
#include "bindings.h"

namespace nb = nanobind;

NB_MODULE(_hybridgen, m) {
  using namespace hybridgen::python;
  m.doc() = "Native core of hybridgen: the runtime (KV pool, scheduler, model runner), no MLIR.";
  createExceptionTypes(m);
  bindRuntime(m);
  bindModelRunner(m);
  constructThroughInit(m);
}
