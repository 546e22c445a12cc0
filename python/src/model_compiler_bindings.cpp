// Python binding of the model compiler (lib/Models, MLIR): hybridgen.compile_model, in the
// _hybridgen_jit extension. The runner it feeds is model_bindings.cpp, in the runtime-only one.
#include "bindings.h"

#include "hybridgen/Models/ModelModule.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

namespace nb = nanobind;

namespace hybridgen::python {

void bindModelCompiler(nb::module_ &m) {
  m.def(
      "compile_model",
      [](const std::string &modelDir, const std::string &artifactDir,
         const std::string &weightDtype, const std::vector<std::string> &kvDtypes, bool prefill,
         bool force, bool bf16DotRounded, bool kTransposed) {
        models::ModelCompileOptions opts;
        opts.weightDtype = weightDtype;
        opts.kvDtypes = kvDtypes;
        opts.prefill = prefill;
        opts.compile.bf16DotRounded = bf16DotRounded;
        opts.kTransposed = kTransposed;
        nb::gil_scoped_release release;
        if (force) {
          if (artifactDir.empty())
            throwArgument("compile_model: force needs an artifact_dir");
          models::compileModelDir(modelDir, artifactDir, opts);
          return artifactDir;
        }
        return models::ensureArtifact(modelDir, artifactDir, opts);
      },
      nb::arg("model_dir"), nb::arg("artifact_dir") = "", nb::arg("weight_dtype") = "auto",
      nb::arg("kv_dtypes") = std::vector<std::string>{"f32", "bf16"}, nb::arg("prefill") = true,
      nb::arg("force") = false, nb::arg("bf16_dot_rounded") = false,
      nb::arg("k_transposed") = true,
      "Compiles a Hugging Face model dir into an artifact dir (reused while newer than its "
      "config.json unless |force|); returns the artifact dir.");
}

} // namespace hybridgen::python
