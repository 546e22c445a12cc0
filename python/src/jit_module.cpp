// Entry point of the _hybridgen_jit extension: the compiler driver (JIT) and the model compiler. It
// links LLVM/MLIR; Python imports it when present (hybridgen.has_jit) and raises the exception
// types of the runtime extension (_hybridgen) for its errors.
#include "bindings.h"

namespace nb = nanobind;

NB_MODULE(_hybridgen_jit, m) {
  using namespace hybridgen::python;
  m.doc() = "The compiler half of hybridgen: JIT compilation and the model compiler (LLVM/MLIR).";
  useExceptionTypesOf(m, "hybridgen._hybridgen");
  bindDriver(m);
  bindModelCompiler(m);
  constructThroughInit(m);
}
