// Calling compiled hg functions through their `_mlir_ciface_` symbols without MLIR (JIT and AOT).
//
// Header-only and MLIR-free on purpose: the driver uses it to call JIT code, and AotLibrary uses it
// on machines that only carry the ahead-of-time .so, the runtime and libomp. A compiled function
// `f(memref<...>, ...)` is reachable as `void _mlir_ciface_f(Desc *...)`, one pointer per
// argument to a strided descriptor {allocated, aligned, offset, sizes[N], strides[N]} (8-byte
// fields each).
#pragma once

#include "hybridgen/runtime/c_api.h"

#include <dlfcn.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hybridgen::memref_call {

/// Most memref arguments a compiled function may take through callCInterface, and the highest
/// rank a .sig entry may name.
constexpr size_t kMaxArgs = 16;
constexpr size_t kMaxRank = 16;

/// Element types of memref arguments, in the order of hybridgen::driver::DType.
enum class ElemType { f32, f16, bf16, i32, i64 };

inline const char *elemTypeName(ElemType t) {
  static const char *names[] = {"f32", "f16", "bf16", "i32", "i64"};
  return names[static_cast<int>(t)];
}
inline bool parseElemType(const std::string &name, ElemType &out) {
  for (int i = 0; i < 5; ++i)
    if (name == elemTypeName(static_cast<ElemType>(i))) {
      out = static_cast<ElemType>(i);
      return true;
    }
  return false;
}

/// One argument: a view of caller memory (strides in elements; empty = row-major).
struct Arg {
  void *data = nullptr;
  ElemType type = ElemType::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

/// The memref argument types of one function; -1 marks a dynamic dimension.
struct Signature {
  std::vector<ElemType> types;
  std::vector<std::vector<int64_t>> shapes;
};

/// Empty when |args| fit |sig| (count, rank, element type, static dims, non-null data), else a
/// message naming the first offending argument.
inline std::string checkArgs(const std::string &fn, const Signature &sig,
                             const std::vector<Arg> &args) {
  std::ostringstream os;
  if (args.size() != sig.types.size()) {
    os << fn << ": expected " << sig.types.size() << " memref arguments, got " << args.size();
    return os.str();
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg &a = args[i];
    const std::vector<int64_t> &want = sig.shapes[i];
    if (a.type != sig.types[i]) {
      os << fn << ": argument " << i << " has element type " << elemTypeName(a.type)
         << ", expected " << elemTypeName(sig.types[i]);
      return os.str();
    }
    if (a.shape.size() != want.size()) {
      os << fn << ": argument " << i << " has rank " << a.shape.size() << ", expected "
         << want.size();
      return os.str();
    }
    if (!a.strides.empty() && a.strides.size() != a.shape.size()) {
      os << fn << ": argument " << i << " has " << a.strides.size() << " strides for rank "
         << a.shape.size();
      return os.str();
    }
    int64_t elems = 1;
    for (size_t d = 0; d < want.size(); ++d) {
      if (a.shape[d] < 0 || (want[d] >= 0 && a.shape[d] != want[d])) {
        os << fn << ": argument " << i << " dimension " << d << " is " << a.shape[d]
           << ", expected " << (want[d] < 0 ? std::string("a size >= 0") : std::to_string(want[d]));
        return os.str();
      }
      if (__builtin_mul_overflow(elems, a.shape[d], &elems)) {
        os << fn << ": argument " << i << " has more elements than a 64-bit count holds";
        return os.str();
      }
    }
    // A zero-sized buffer may legitimately have no storage.
    if (!a.data && elems != 0) {
      os << fn << ": argument " << i << " is a null pointer";
      return os.str();
    }
  }
  return {};
}

/// Storage for one rank-N descriptor: {allocated, aligned, offset, sizes[N], strides[N]}.
class Descriptor {
public:
  explicit Descriptor(const Arg &a) : words(3 + 2 * a.shape.size()) {
    size_t rank = a.shape.size();
    words[0] = reinterpret_cast<intptr_t>(a.data);
    words[1] = reinterpret_cast<intptr_t>(a.data);
    words[2] = 0;
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      words[3 + d] = a.shape[d];
      words[3 + rank + d] = a.strides.empty() ? stride : a.strides[d];
      stride *= a.shape[d];
    }
  }
  void *get() { return words.data(); }

private:
  static_assert(sizeof(intptr_t) == sizeof(int64_t), "descriptor fields are 8 bytes");
  std::vector<intptr_t> words;
};


/// Calls the `_mlir_ciface_` function |fn| with one descriptor pointer per argument. The caller has
/// checked the arguments; a call with more than kMaxArgs arguments throws std::invalid_argument.
inline void callCInterface(void *fn, const std::vector<Arg> &args) {
  std::vector<Descriptor> descs;
  descs.reserve(args.size());
  for (const Arg &a : args)
    descs.emplace_back(a);
  void *p[kMaxArgs] = {};
  if (args.size() > kMaxArgs)
    throw std::invalid_argument("compiled functions take at most 16 memref arguments");
  for (size_t i = 0; i < descs.size(); ++i)
    p[i] = descs[i].get();
  using V = void *;
  // One cast per arity: the C ABI passes each pointer in a register or on the stack by position.
  switch (args.size()) {
  case 0: return reinterpret_cast<void (*)()>(fn)();
  case 1: return reinterpret_cast<void (*)(V)>(fn)(p[0]);
  case 2: return reinterpret_cast<void (*)(V, V)>(fn)(p[0], p[1]);
  case 3: return reinterpret_cast<void (*)(V, V, V)>(fn)(p[0], p[1], p[2]);
  case 4: return reinterpret_cast<void (*)(V, V, V, V)>(fn)(p[0], p[1], p[2], p[3]);
  case 5: return reinterpret_cast<void (*)(V, V, V, V, V)>(fn)(p[0], p[1], p[2], p[3], p[4]);
  case 6:
    return reinterpret_cast<void (*)(V, V, V, V, V, V)>(fn)(p[0], p[1], p[2], p[3], p[4], p[5]);
  case 7:
    return reinterpret_cast<void (*)(V, V, V, V, V, V, V)>(fn)(p[0], p[1], p[2], p[3], p[4], p[5],
                                                               p[6]);
  case 8:
    return reinterpret_cast<void (*)(V, V, V, V, V, V, V, V)>(fn)(p[0], p[1], p[2], p[3], p[4],
                                                                  p[5], p[6], p[7]);
  default:
    // Callees ignore trailing arguments beyond their arity in the SysV ABI, so larger arities
    // share one 16-pointer call.
    return reinterpret_cast<void (*)(V, V, V, V, V, V, V, V, V, V, V, V, V, V, V, V)>(fn)(
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13],
        p[14], p[15]);
  }
}

//===----------------------------------------------------------------------===//
// Argument errors that compiled kernels report through the runtime (c_api.h)
//===----------------------------------------------------------------------===//

/// `hgrt_take_kernel_argument_error`, found at run time (the JIT loads the runtime with dlopen,
/// an AOT library links it), so this header needs no link-time dependency on the runtime.
using TakeArgumentErrorFn = int32_t (*)(hgrt_argument_error *);

/// What |rec| (a violation the kernels of function |fn| reported) means, for an error message.
inline std::string describeArgumentError(const std::string &fn, const hgrt_argument_error &rec) {
  std::ostringstream os;
  os << fn << ": ";
  switch (rec.kind) {
  case HGRT_ARG_BLOCK_ID:
    os << "block_table[" << rec.sequence << "][" << rec.index << "] = " << rec.value
       << " is outside the pool of " << rec.limit << " blocks (sequence " << rec.sequence << ")";
    break;
  case HGRT_ARG_LENGTH:
    os << "seq_lens[" << rec.sequence << "] = " << rec.value << " is outside [0, " << rec.limit
       << "], the block table's capacity in tokens (sequence " << rec.sequence << ")";
    break;
  case HGRT_ARG_BATCH: {
    const char *names[] = {"q", "k_pool", "v_pool", "block_table", "seq_lens",
                           "begin", "end", "output", "max", "sum"};
    const char *name = rec.index >= 0 && rec.index < 10 ? names[rec.index] : "a buffer";
    os << "the attention's " << name << " has " << rec.value << " rows for a batch of "
       << rec.limit;
    break;
  }
  case HGRT_ARG_SHAPE:
    os << "hg.merge: a partial's dimension " << rec.index << " is " << rec.value
       << " but the output's is " << rec.limit;
    break;
  default:
    os << "a compiled kernel refused its arguments (kind " << rec.kind << ")";
  }
  if (rec.count > 1)
    os << " (" << rec.count - 1 << " more violations in this call)";
  os << "; nothing was read outside the buffers";
  return os.str();
}

/// Calls |fn| like callCInterface and throws std::invalid_argument when a kernel reported an
/// argument error during the call (the record of this thread is cleared first). |take| may be
/// null (no runtime loaded: no kernel can report).
inline void callChecked(const std::string &name, void *fn, const std::vector<Arg> &args,
                        TakeArgumentErrorFn take) {
  if (take)
    take(nullptr); // a record left by an earlier, unchecked call is not this call's
  callCInterface(fn, args);
  hgrt_argument_error rec;
  if (take && take(&rec))
    throw std::invalid_argument(describeArgumentError(name, rec));
}

//===----------------------------------------------------------------------===//
// The `.sig` file next to an AOT library: one line per function,
// `name type:d0xd1x... type:...` with `?` for dynamic dimensions (rank 0: `type:`).
//===----------------------------------------------------------------------===//

inline std::string formatSignatureLine(const std::string &name, const Signature &sig) {
  std::ostringstream os;
  os << name;
  for (size_t i = 0; i < sig.types.size(); ++i) {
    os << ' ' << elemTypeName(sig.types[i]) << ':';
    for (size_t d = 0; d < sig.shapes[i].size(); ++d) {
      if (d)
        os << 'x';
      if (sig.shapes[i][d] < 0)
        os << '?';
      else
        os << sig.shapes[i][d];
    }
  }
  return os.str();
}

/// Parses a whole .sig text; throws std::runtime_error on a malformed line.
inline std::map<std::string, Signature> parseSignatures(const std::string &text) {
  std::map<std::string, Signature> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name, word;
    if (!(words >> name) || name[0] == '#')
      continue;
    Signature sig;
    while (words >> word) {
      size_t colon = word.find(':');
      ElemType t;
      if (colon == std::string::npos || !parseElemType(word.substr(0, colon), t))
        throw std::runtime_error("malformed signature entry '" + word + "' for " + name);
      std::vector<int64_t> shape;
      std::istringstream dims(word.substr(colon + 1));
      std::string dim;
      while (std::getline(dims, dim, 'x')) {
        if (dim == "?") {
          shape.push_back(-1);
          continue;
        }
        // Digits only, and no more than int64 holds (std::stoll threw std::out_of_range).
        bool digits = !dim.empty() && dim.size() <= 19 &&
                      dim.find_first_not_of("0123456789") == std::string::npos;
        if (!digits || (dim.size() == 19 && dim > "9223372036854775807"))
          throw std::runtime_error("malformed dimension '" + dim + "' for " + name +
                                   " (expected '?' or an integer below 2^63)");
        shape.push_back(std::stoll(dim));
      }
      if (shape.size() > kMaxRank)
        throw std::runtime_error("signature entry '" + word + "' for " + name + " has rank " +
                                 std::to_string(shape.size()) + "; at most " +
                                 std::to_string(kMaxRank) + " is supported");
      sig.types.push_back(t);
      sig.shapes.push_back(std::move(shape));
    }
    if (sig.types.size() > kMaxArgs)
      throw std::runtime_error(name + " has " + std::to_string(sig.types.size()) +
                               " memref arguments; compiled functions take at most " +
                               std::to_string(kMaxArgs));
    out[name] = std::move(sig);
  }
  return out;
}

//===----------------------------------------------------------------------===//
// AotLibrary
//===----------------------------------------------------------------------===//

/// An ahead-of-time compiled module (`hybridgen-compile in.mlir -o f.so`), opened with dlopen and
/// called through its `_mlir_ciface_` symbols after checking arguments against `f.so.sig`.
/// Loading throws std::runtime_error; bad arguments throw std::invalid_argument.
class AotLibrary {
public:
  explicit AotLibrary(const std::string &path) : path(path) {
    std::ifstream sigFile(path + ".sig");
    if (!sigFile)
      throw std::runtime_error("cannot read signature file " + path + ".sig");
    std::stringstream text;
    text << sigFile.rdbuf();
    sigs = parseSignatures(text.str());
    // RTLD_LOCAL keeps two loaded modules' helper symbols apart.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *err = dlerror();
      throw std::runtime_error("cannot load " + path + ": " + (err ? err : "unknown error"));
    }
    // Searched in the library and its dependencies (it links the runtime).
    take = reinterpret_cast<TakeArgumentErrorFn>(dlsym(handle, "hgrt_take_kernel_argument_error"));
  }
  AotLibrary(const AotLibrary &) = delete;
  AotLibrary &operator=(const AotLibrary &) = delete;
  ~AotLibrary() {
    if (handle)
      dlclose(handle);
  }

  std::vector<std::string> functions() const {
    std::vector<std::string> names;
    for (const auto &entry : sigs)
      names.push_back(entry.first);
    return names;
  }
  const Signature &signature(const std::string &name) const {
    auto it = sigs.find(name);
    if (it == sigs.end())
      throw std::invalid_argument(path + " has no function '" + name + "'");
    return it->second;
  }
  void call(const std::string &name, const std::vector<Arg> &args) const {
    std::string err = checkArgs(name, signature(name), args);
    if (!err.empty())
      throw std::invalid_argument(err);
    void *fn = dlsym(handle, ("_mlir_ciface_" + name).c_str());
    if (!fn)
      throw std::invalid_argument(path + " does not export _mlir_ciface_" + name);
    callChecked(name, fn, args, take);
  }

private:
  std::string path;
  std::map<std::string, Signature> sigs;
  void *handle = nullptr;
  TakeArgumentErrorFn take = nullptr;
};

} // namespace hybridgen::memref_call
