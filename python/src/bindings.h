// Shared declarations of the _hybridgen extension: the per-layer binders and the Python exception types.
#ifndef HYBRIDGEN_PYTHON_BINDINGS_H
#define HYBRIDGEN_PYTHON_BINDINGS_H

#include <nanobind/nanobind.h>

namespace hybridgen::python {

/// Python exception classes, created once at import (all derive from HybridgenError).
struct ExceptionTypes {
  PyObject *base = nullptr;      // HybridgenError(Exception)
  PyObject *compile = nullptr;   // CompileError(HybridgenError, RuntimeError)
  PyObject *argument = nullptr;  // ArgumentError(HybridgenError, ValueError)
  PyObject *exhausted = nullptr; // ExhaustedError(HybridgenError, MemoryError)
  PyObject *notFound = nullptr;  // NotFoundError(HybridgenError, LookupError)
  PyObject *system = nullptr;    // SystemError_(HybridgenError, OSError)
};
const ExceptionTypes &exceptionTypes();

/// Raises ArgumentError with |message| as a C++ exception that the translator maps.
[[noreturn]] void throwArgument(const std::string &message);

void bindDriver(nanobind::module_ &m);
void bindRuntime(nanobind::module_ &m);   // topology + pool (runtime_bindings.cpp)
void bindScheduler(nanobind::module_ &m); // scheduler_bindings.cpp, called by bindRuntime
void bindModels(nanobind::module_ &m);    // model_bindings.cpp (needs the driver)

} // namespace hybridgen::python

#endif // HYBRIDGEN_PYTHON_BINDINGS_H
