// Bindings of the compiler driver: AttentionSpec, CompileOptions, JIT compile and zero-copy calls.
#include "bindings.h"

#include "hybridgen/Driver/Driver.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

namespace nb = nanobind;
using namespace hybridgen::driver;

namespace hybridgen::python {
namespace {

using AnyArray = nb::ndarray<nb::ro>;    // any dtype/shape/device; read-only views accepted
using WritableArray = nb::ndarray<>;     // same, but refuses read-only memory

std::string argName(size_t index) { return "argument " + std::to_string(index); }

/// Maps a DLPack element type (plus an explicit tag for bf16 carried as raw 16-bit words) to ours.
DType elementType(const nb::dlpack::dtype &dt, const std::string &tag, size_t index) {
  using Code = nb::dlpack::dtype_code;
  auto code = Code(dt.code);
  if (dt.lanes != 1)
    throwArgument(argName(index) + ": vector element types are not supported");
  if (!tag.empty()) {
    // The only tag that reinterprets memory: uint16/int16 words that hold bf16 values (the
    // package passes ml_dtypes.bfloat16 numpy arrays this way, as numpy has no DLPack bf16).
    if (tag != "bf16")
      throwArgument(argName(index) + ": unknown dtype tag '" + tag + "' (only 'bf16' is accepted)");
    bool raw16 = (code == Code::UInt || code == Code::Int) && dt.bits == 16;
    if (!raw16 && !(code == Code::Bfloat && dt.bits == 16))
      throwArgument(argName(index) + ": the 'bf16' tag needs 16-bit words");
    return DType::bf16;
  }
  if (code == Code::Float && dt.bits == 32)
    return DType::f32;
  if (code == Code::Float && dt.bits == 16)
    return DType::f16;
  if (code == Code::Bfloat && dt.bits == 16)
    return DType::bf16;
  if (code == Code::Int && dt.bits == 32)
    return DType::i32;
  if (code == Code::Int && dt.bits == 64)
    return DType::i64;
  std::string bits = std::to_string(int(dt.bits));
  std::string got = code == Code::Int     ? "int" + bits
                    : code == Code::UInt  ? "uint" + bits
                    : code == Code::Float ? "float" + bits
                    : code == Code::Bool  ? std::string("bool")
                                          : "DLPack code " + std::to_string(int(code)) + "/" + bits;
  if (code == Code::UInt && dt.bits == 16)
    got += " (pass bf16 as ml_dtypes.bfloat16, not raw uint16)";
  throwArgument(argName(index) + ": unsupported element type " + got +
                "; expected f32, f16, bf16, i32 or i64");
}

/// Builds a MemRefArg that views |a| in place. Non-contiguous or non-host arrays are refused rather
/// than copied: a silent copy would break writing results into the caller's buffers.
template <typename Array>
MemRefArg viewOf(const Array &a, const std::string &tag, size_t index) {
  if (a.device_type() != nb::device::cpu::value)
    throwArgument(argName(index) + ": array lives on device type " +
                  std::to_string(a.device_type()) + "; compiled modules read host memory");
  MemRefArg arg;
  arg.dtype = elementType(a.dtype(), tag, index);
  arg.data = const_cast<void *>(static_cast<const void *>(a.data()));
  int64_t expected = 1;
  arg.shape.resize(a.ndim());
  // An array with no elements is contiguous whatever its strides say (numpy gives 0 strides).
  bool empty = false;
  for (size_t d = 0; d < a.ndim(); ++d)
    empty |= a.shape(d) == 0;
  for (size_t d = a.ndim(); d-- > 0;) {
    arg.shape[d] = int64_t(a.shape(d));
    if (!empty && a.shape(d) != 1 && a.stride(d) != expected)
      throwArgument(argName(index) + " is not C-contiguous (strides do not match shape); pass "
                    "numpy.ascontiguousarray(x) explicitly if a copy is acceptable");
    expected *= int64_t(a.shape(d));
  }
  if (!arg.data && expected != 0)
    throwArgument(argName(index) + ": null data pointer");
  return arg;
}

struct CallArgs {
  std::vector<AnyArray> keepRo; // hold the views (and their owners) until the call returned
  std::vector<WritableArray> keepRw;
  std::vector<MemRefArg> args;
};

CallArgs convertArgs(const nb::sequence &arrays, const std::optional<std::vector<std::string>> &tags,
                     const std::optional<std::vector<bool>> &writable) {
  CallArgs out;
  size_t n = nb::len(arrays);
  if (tags && tags->size() != n)
    throwArgument("dtypes has " + std::to_string(tags->size()) + " entries for " + std::to_string(n) +
                  " arrays");
  if (writable && writable->size() != n)
    throwArgument("writable has " + std::to_string(writable->size()) + " entries for " +
                  std::to_string(n) + " arrays");
  for (size_t i = 0; i < n; ++i) {
    nb::handle h = arrays[i];
    std::string tag = tags ? (*tags)[i] : std::string();
    // By default every argument may be written (a memref has no const): demand writable memory.
    bool mustWrite = writable ? bool((*writable)[i]) : true;
    if (mustWrite) {
      WritableArray a;
      // convert=false: never let nanobind make a converted copy behind the caller's back.
      if (!nb::try_cast(h, a, /*convert=*/false))
        throwArgument(argName(i) + ": expected a writable array (numpy or DLPack), got " +
                      std::string(nb::str(nb::handle(h.type())).c_str()));
      out.args.push_back(viewOf(a, tag, i));
      out.keepRw.push_back(std::move(a));
    } else {
      AnyArray a;
      if (!nb::try_cast(h, a, /*convert=*/false))
        throwArgument(argName(i) + ": expected an array (numpy or DLPack), got " +
                      std::string(nb::str(nb::handle(h.type())).c_str()));
      out.args.push_back(viewOf(a, tag, i));
      out.keepRo.push_back(std::move(a));
    }
  }
  return out;
}

/// |value| as an int64 (Python ints and numpy integers), else ArgumentError naming |what|:
/// nanobind's own conversion raised TypeError for out-of-range integers.
int64_t toInt64(nb::handle value, const std::string &what) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
    throwArgument(what + ": expected an integer, got " +
                  std::string(nb::str(nb::handle(value.type())).c_str()));
  nb::object index = nb::steal(PyNumber_Index(value.ptr()));
  if (!index.is_valid()) {
    PyErr_Clear();
    throwArgument(what + ": expected an integer");
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    throwArgument(what + " = " + std::string(nb::str(index).c_str()) +
                  " is outside the 64-bit integer range");
  }
  return v;
}

/// An int64 attribute whose setter raises ArgumentError for anything but an in-range integer.
template <typename Class>
void intField(nb::class_<Class> &cls, const char *name, int64_t Class::*member) {
  cls.def_prop_rw(
      name, [member](const Class &self) { return self.*member; },
      [member, name](Class &self, nb::handle value) { self.*member = toInt64(value, name); });
}

/// The same for optional int64 attributes (None clears them).
template <typename Class>
void optionalIntField(nb::class_<Class> &cls, const char *name,
                      std::optional<int64_t> Class::*member) {
  cls.def_prop_rw(
      name, [member](const Class &self) { return self.*member; },
      [member, name](Class &self, nb::handle value) {
        self.*member = value.is_none() ? std::nullopt
                                       : std::optional<int64_t>(toInt64(value, name));
      },
      nb::for_setter(nb::arg("value").none()));
}

} // namespace

void bindDriver(nb::module_ &m) {
  nb::class_<AttentionSpec> spec(m, "AttentionSpec",
                                 "Shapes and policy of a hybrid decode attention.");
  spec.def(nb::init<>());
  intField(spec, "batch", &AttentionSpec::batch);
  intField(spec, "q_heads", &AttentionSpec::qHeads);
  intField(spec, "kv_heads", &AttentionSpec::kvHeads);
  intField(spec, "head_dim", &AttentionSpec::headDim);
  intField(spec, "block_size", &AttentionSpec::blockSize);
  intField(spec, "num_blocks", &AttentionSpec::numBlocks);
  intField(spec, "max_blocks_per_seq", &AttentionSpec::maxBlocksPerSeq);
  optionalIntField(spec, "window", &AttentionSpec::window);
  optionalIntField(spec, "split_point", &AttentionSpec::splitPoint);
  intField(spec, "top_k", &AttentionSpec::topK);
  intField(spec, "segment_id", &AttentionSpec::segmentId);
  spec.def_rw("kv_dtype", &AttentionSpec::kvDtype)
      .def_rw("scale", &AttentionSpec::scale)
      .def_rw("softcap", &AttentionSpec::softcap)
      .def_rw("devices", &AttentionSpec::devices)
      .def_rw("sparse", &AttentionSpec::sparse)
      .def_rw("return_partials", &AttentionSpec::returnPartials);

  nb::class_<CompileOptions> options(m, "CompileOptions",
                                     "How the driver lowers and compiles a module.");
  options.def(nb::init<>());
  intField(options, "chunk_tokens", &CompileOptions::chunkTokens);
  intField(options, "far_prefetch_bytes", &CompileOptions::farPrefetchBytes);
  intField(options, "spread_prefetch", &CompileOptions::spreadPrefetch);
  intField(options, "overlap_pieces", &CompileOptions::overlapPieces);
  intField(options, "overlap_pv_lag", &CompileOptions::overlapPvLag);
  intField(options, "vector_bits", &CompileOptions::vectorBits);
  options.def_rw("all_devices_on_cpu", &CompileOptions::allDevicesOnCpu)
      .def_rw("splat_probs", &CompileOptions::splatProbs)
      .def_rw("target_cpu", &CompileOptions::targetCpu)
      .def_rw("target_features", &CompileOptions::targetFeatures)
      .def_rw("amx", &CompileOptions::amx)
      .def_rw("bf16_dot", &CompileOptions::bf16Dot)
      .def_rw("bf16_dot_rounded", &CompileOptions::bf16DotRounded)
      .def_rw("k_transposed", &CompileOptions::kTransposed)
      .def_rw("shared_libs", &CompileOptions::sharedLibs)
      .def_rw("source_name", &CompileOptions::sourceName);

  m.def("build_attention_module", &buildAttentionModule, nb::arg("spec"),
        "MLIR text of func.func @hg_attention for the spec (raises ArgumentError if inconsistent).");

  nb::class_<JitModule>(m, "JitModule", "A module JIT-compiled in this process.")
      .def_static(
          "compile",
          [](const std::string &text, const CompileOptions &options) {
            // Lowering and codegen take milliseconds to seconds; let other Python threads run.
            nb::gil_scoped_release release;
            try {
              return JitModule::compile(text, options);
            } catch (const CompileError &) {
              throw;
            } catch (const ArgumentError &) {
              throw;
            } catch (const std::exception &e) {
              // Whatever else a compile raises is still a failed compile for the caller.
              throw CompileError(std::string("compilation failed: ") + e.what());
            }
          },
          nb::arg("mlir"), nb::arg("options") = CompileOptions())
      .def(
          "signature",
          [](const JitModule &self, const std::string &name) {
            nb::list result;
            for (const ArgSpec &s : self.signature(name))
              result.append(nb::make_tuple(dtypeName(s.dtype), nb::tuple(nb::cast(s.shape))));
            return result;
          },
          nb::arg("name"), "[(dtype, shape)] of each memref argument; -1 marks a dynamic dim.")
      .def(
          "call",
          [](const JitModule &self, const std::string &name, const nb::sequence &arrays,
             const std::optional<std::vector<std::string>> &dtypes,
             const std::optional<std::vector<bool>> &writable, nb::handle blockSizeArg) {
            int64_t attentionBlockSize = toInt64(blockSizeArg, "attention_block_size");
            CallArgs call = convertArgs(arrays, dtypes, writable);
            if (attentionBlockSize > 0) {
              // Only the six decode-attention buffers are cross-checked; partials follow them.
              std::vector<MemRefArg> head(call.args.begin(),
                                          call.args.begin() + std::min<size_t>(6, call.args.size()));
              validateAttentionArgs(head, attentionBlockSize);
            }
            nb::gil_scoped_release release;
            self.call(name, call.args);
          },
          nb::arg("name"), nb::arg("arrays"), nb::arg("dtypes").none() = nb::none(),
          nb::arg("writable").none() = nb::none(), nb::arg("attention_block_size") = 0,
          "Calls |name| on arrays viewed in place (never copied). dtypes: per-array tag ('bf16' "
          "marks 16-bit words as bf16) or ''. writable: per-array flag, default all True. "
          "attention_block_size > 0 also validates decode-attention buffers.");
}

} // namespace hybridgen::python
