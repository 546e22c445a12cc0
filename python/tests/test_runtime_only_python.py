# Compiled artifacts run from Python with the runtime extension alone: _hybridgen links no LLVM/MLIR,
# and with the compiler extension (_hybridgen_jit) unavailable, as on a deployment machine without
# LLVM, hybridgen still imports, Model runs an artifact (the float64 reference's tokens) and no
# LLVM/MLIR library is ever mapped; compiling a model dir is then a clear error.
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hybridgen as hg
from hybridgen.models import Reference, greedy, random_weights, tiny_config, write_checkpoint

PKG = Path(hg.__file__).resolve().parent
PROMPT = [5, 17, 3, 99, 42]

CHILD = r"""
import json, sys
sys.modules["hybridgen._hybridgen_jit"] = None  # as if the compiler extension were not installed
import hybridgen as hg
args = json.loads(sys.argv[1])
out = {"has_jit": hg.has_jit}
m = hg.Model(args["artifact"], policy="static:16", max_context=64)
out["tokens"] = [int(t) for t in m.generate([args["prompt"]], 6)[0]]
try:
    hg.Model(args["model_dir"])
    out["compile_error"] = ""
except hg.ArgumentError as e:
    out["compile_error"] = str(e)
maps = open("/proc/self/maps").read()
out["llvm_mapped"] = [n for n in ("libMLIR", "libLLVM") if n in maps]
out["jit_loaded"] = any(k.endswith("_hybridgen_jit") and v is not None for k, v in sys.modules.items())
print(json.dumps(out))
"""


def test_the_runtime_extension_links_no_llvm_or_mlir():
    ext = next(PKG.glob("_hybridgen.cpython-*.so"))
    needed = subprocess.run(["/usr/lib/llvm-22/bin/llvm-readelf", "-d", str(ext)], capture_output=True,
                            text=True, check=True).stdout
    assert "libhybridgen_runtime.so" in needed
    assert "libMLIR" not in needed and "libLLVM" not in needed, needed


@pytest.mark.skipif(not hg.has_jit, reason="needs the compiler to build the artifact")
def test_an_artifact_runs_without_the_compiler_extension(tmp_path):
    cfg = tiny_config("llama")
    w = {k: v.astype(np.float32) for k, v in random_weights(cfg, seed=3).items()}
    write_checkpoint(tmp_path / "model", cfg, w)
    art = hg.compile_model(tmp_path / "model", tmp_path / "art", kv_dtypes=["f32"], weight_dtype="f32")
    args = {"artifact": str(art), "model_dir": str(tmp_path / "model"), "prompt": PROMPT}
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["has_jit"] is False and out["jit_loaded"] is False
    assert out["llvm_mapped"] == []
    assert out["tokens"] == greedy(Reference(cfg, w), PROMPT, 6)
    assert "needs hybridgen's compiler" in out["compile_error"]
