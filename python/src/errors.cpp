// The Python exception types and the C++ -> Python error translation, compiled into both extensions:
// _hybridgen (runtime) creates the types, _hybridgen_jit (compiler) takes the same ones from it.
#include "bindings.h"

#include "hybridgen/runtime/status.h"
#ifdef HYBRIDGEN_PY_HAS_DRIVER
#include "hybridgen/Driver/Driver.h"
#endif

#include <stdexcept>
#include <string>

namespace nb = nanobind;

namespace hybridgen::python {

namespace {
ExceptionTypes gTypes;

/// Our own argument failures (the bindings' checks) travel as this type; it is translated like the
/// driver's ArgumentError so callers see one exception class for every bad argument.
class BindingArgumentError : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

PyObject *makeType(nb::module_ &m, const char *name, PyObject *base, PyObject *builtin,
                   const char *doc) {
  std::string qualified = std::string("hybridgen.") + name;
  // A tuple of bases lets `except ValueError` keep working for callers who do not know our types.
  PyObject *bases = builtin ? PyTuple_Pack(2, base, builtin) : PyTuple_Pack(1, base);
  PyObject *type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!type)
    throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

PyObject *typeForRuntime(rt::ErrorCode code) {
  switch (code) {
  case rt::ErrorCode::kInvalidArgument:
    return gTypes.argument;
  case rt::ErrorCode::kExhausted:
    return gTypes.exhausted;
  case rt::ErrorCode::kNotFound:
    return gTypes.notFound;
  case rt::ErrorCode::kSystem:
    return gTypes.system;
  case rt::ErrorCode::kOk:
    break;
  }
  return gTypes.base;
}

void translate(const std::exception_ptr &p, void *) {
  try {
    std::rethrow_exception(p);
  } catch (const BindingArgumentError &e) {
    PyErr_SetString(gTypes.argument, e.what());
#ifdef HYBRIDGEN_PY_HAS_DRIVER
  } catch (const driver::CompileError &e) {
    PyErr_SetString(gTypes.compile, e.what());
  } catch (const driver::ArgumentError &e) {
    PyErr_SetString(gTypes.argument, e.what());
#endif
  } catch (const rt::Error &e) {
    PyErr_SetString(typeForRuntime(e.status().code()), e.what());
  }
  // Anything else propagates to nanobind's default translators (RuntimeError etc.).
}
} // namespace

const ExceptionTypes &exceptionTypes() { return gTypes; }

void createExceptionTypes(nb::module_ &m) {
  gTypes.base = makeType(m, "HybridgenError", PyExc_Exception, nullptr,
                         "Base class of every error raised by hybridgen.");
  gTypes.compile = makeType(m, "CompileError", gTypes.base, PyExc_RuntimeError,
                            "Invalid IR or a failed lowering; the message holds the diagnostics.");
  gTypes.argument = makeType(m, "ArgumentError", gTypes.base, PyExc_ValueError,
                             "Bad arguments: shapes, dtypes, layouts, ids.");
  gTypes.exhausted = makeType(m, "ExhaustedError", gTypes.base, PyExc_MemoryError,
                              "Every KV tier that may take the data is full.");
  gTypes.notFound = makeType(m, "NotFoundError", gTypes.base, PyExc_LookupError,
                             "Unknown sequence, tier or segment.");
  gTypes.system = makeType(m, "SystemFailure", gTypes.base, PyExc_OSError,
                           "An operating-system call (mmap, mbind, libnuma) failed.");
  nb::register_exception_translator(translate);
}

void useExceptionTypesOf(nb::module_ &m, const char *moduleName) {
  nb::module_ runtime = nb::module_::import_(moduleName);
  auto type = [&](const char *name) {
    nb::object t = runtime.attr(name);
    m.attr(name) = t; // the same classes under both modules' names
    return t.inc_ref().ptr(); // kept for the life of the process, as the creating module's are
  };
  gTypes.base = type("HybridgenError");
  gTypes.compile = type("CompileError");
  gTypes.argument = type("ArgumentError");
  gTypes.exhausted = type("ExhaustedError");
  gTypes.notFound = type("NotFoundError");
  gTypes.system = type("SystemFailure");
  nb::register_exception_translator(translate);
}

void throwArgument(const std::string &message) { throw BindingArgumentError(message); }

void constructThroughInit(nb::module_ &m) {
  nb::dict members = nb::borrow<nb::dict>(PyModule_GetDict(m.ptr()));
  for (auto [name, value] : members)
    if (nb::type_check(value))
      reinterpret_cast<PyTypeObject *>(value.ptr())->tp_vectorcall = nullptr;
}

} // namespace hybridgen::python
