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
/// The runtime extension creates the types in |m| and registers the translator ...
void createExceptionTypes(nanobind::module_ &m);
/// ... the compiler extension |m| uses that module's types (one class per error across both) and
/// exports them too.
void useExceptionTypesOf(nanobind::module_ &m, const char *moduleName);

/// Lets Python's __init__ of every class in |m| take part in construction. nanobind's types call
/// their C++ constructor through a fast path that skips the class's __init__ attribute, so the
/// package's wrapper (hybridgen/_errors.py, which turns a mismatched argument's TypeError into
/// ArgumentError) was bypassed by `Class(bad args)`. Without that path CPython's type call runs
/// tp_new and then __init__ from the class dict, wrapper included. Call once all classes are bound.
void constructThroughInit(nanobind::module_ &m);

/// Raises ArgumentError with |message| as a C++ exception that the translator maps.
[[noreturn]] void throwArgument(const std::string &message);

// _hybridgen (runtime only):
void bindRuntime(nanobind::module_ &m);     // topology + pool (runtime_bindings.cpp)
void bindScheduler(nanobind::module_ &m);   // scheduler_bindings.cpp, called by bindRuntime
void bindModelRunner(nanobind::module_ &m); // model_bindings.cpp
// _hybridgen_jit (LLVM/MLIR):
void bindDriver(nanobind::module_ &m);        // driver_bindings.cpp
void bindModelCompiler(nanobind::module_ &m); // model_compiler_bindings.cpp

} // namespace hybridgen::python

#endif // HYBRIDGEN_PYTHON_BINDINGS_H
