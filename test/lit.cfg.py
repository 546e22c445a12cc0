# lit configuration for the hybridgen test suite.
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "HYBRIDGEN"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.hybridgen_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%runtime_lib_dir", config.runtime_lib_dir))
config.substitutions.append(("%mlir_lib_dir", config.mlir_lib_dir))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.hybridgen_tools_dir, append_path=True)

tools = ["hybridgen-opt", "hybridgen-run-mlir", "hybridgen-compile"]
llvm_config.add_tool_substitutions(
    [ToolSubst(t, unresolved="ignore") for t in tools],
    [config.hybridgen_tools_dir, config.llvm_tools_dir],
)

# The GPU path (issue 15): ptxas/fatbinary from the CUDA toolkit (PTX is checked and assembled
# without a GPU), a Python to unescape gpu.binary objects, and whether the runtime library
# provides the mgpu* host ABI that gpu-to-llvm code calls (needed to run hybrid modules at all).
import shutil
import subprocess
import sys

cuda_bin = os.environ.get("HYBRIDGEN_CUDA_BIN", "/usr/local/cuda/bin")
ptxas = shutil.which("ptxas", path=cuda_bin + os.pathsep + config.environment.get("PATH", ""))
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(
    ("%extract_gpu_object",
     sys.executable + " " + os.path.join(config.test_source_root, "Inputs", "extract_gpu_object.py")))
runtime_so = os.path.join(config.runtime_lib_dir, "libhybridgen_runtime.so")
try:
    symbols = subprocess.run(["nm", "-D", "--defined-only", runtime_so], capture_output=True,
                             text=True).stdout
    if "mgpuLaunchKernel" in symbols and "hgrt_gpu_available" in symbols:
        config.available_features.add("hgrt-mgpu")
except OSError:
    pass
