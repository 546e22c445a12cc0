# Models compiled with GPU kernels (hybridgen-compile --gpu) in the runtime: with a usable CUDA
# device and a --gpu-tokens budget, the budget's KV goes to an HBM tier in device memory, the
# kernels launch there and the summary names the device; otherwise the GPU partial runs on the
# CPU and the summary says its time is modelled. CI has no GPU: the device is the runtime tests'
# fake driver, which loads the module and counts launches but runs no kernel, so only the plumbing
# is checked there; the CPU fallback's tokens must be the float64 reference's.
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import hybridgen as hg
from hybridgen.models import Reference, greedy, random_weights, tiny_config, write_checkpoint

BUILD = Path(hg.__file__).resolve().parents[2]
COMPILE, RUN = BUILD / "bin" / "hybridgen-compile", BUILD / "bin" / "hybridgen-run"
FAKE_CUDA = BUILD / "runtime" / "libhybridgen_fake_cuda.so"
pytestmark = pytest.mark.skipif(not (COMPILE.exists() and RUN.exists() and FAKE_CUDA.exists()),
                                reason="needs the build's hybridgen-compile, hybridgen-run and fake CUDA driver")

PROMPT = [3, 14, 15, 9, 2]


@pytest.fixture(scope="module")
def gpu_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-model")
    cfg = tiny_config("llama")
    w = {k: v.astype(np.float32) for k, v in random_weights(cfg, seed=7).items()}
    write_checkpoint(root / "model", cfg, w)
    r = subprocess.run([COMPILE, root / "model", "-o", root / "art", "--gpu", "--kv-dtypes=f32",
                        "--weight-dtype=f32"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return root / "art", cfg, w


def _run(art, driver, *flags):
    env = dict(os.environ, HYBRIDGEN_CUDA_LIBRARY=str(driver), FAKE_CUDA_MEM_FREE=str(8 << 30))
    env.pop("HYBRIDGEN_TIERS", None)
    env.pop("HYBRIDGEN_TIERS_FILE", None)
    return subprocess.run([RUN, art, "--prompt-ids", ",".join(map(str, PROMPT)),
                           "--max-new-tokens", "4", *flags], capture_output=True, text=True,
                          timeout=300, env=env)


def _tier_used(stdout, name):
    line = next(ln for ln in stdout.splitlines() if ln.startswith(f"tier {name} "))
    return int(line.split()[2])


def test_artifact_says_it_has_gpu_kernels(gpu_model):
    import json
    meta = json.loads((gpu_model[0] / "metadata.json").read_text())
    assert meta["gpu_kernels"] is True and meta["k_transposed"] is False


def test_without_a_gpu_the_gpu_side_is_the_cpu_with_a_modelled_time(gpu_model):
    art, cfg, w = gpu_model
    r = _run(art, "/nonexistent/libcuda.so.1", "--gpu-tokens", "16")
    assert r.returncode == 0, r.stderr
    assert "MODELLED" in r.stdout and "GPU side: cuda" not in r.stdout
    assert "tier hbm" not in r.stdout
    assert "no usable CUDA device" in r.stderr
    want = greedy(Reference(cfg, w), PROMPT, 4)
    assert want == [int(t) for t in _generated(r.stdout)]


def test_with_a_device_the_budget_is_in_device_memory_and_the_kernels_launch(gpu_model):
    art = gpu_model[0]
    r = _run(art, FAKE_CUDA, "--gpu-tokens", "16", "--policy", "static:0")
    assert r.returncode == 0, r.stderr
    assert "GPU side: cuda: " in r.stdout and "MODELLED" not in r.stdout
    assert _tier_used(r.stdout, "hbm") > 0  # the GPU side's blocks were placed on the device


def test_with_a_device_tier_the_cpu_side_never_reads_device_memory(gpu_model):
    # Prefill (CPU kernels) and a CPU-only policy read only host memory: new tokens land there and
    # blocks the GPU side held come back before such a step. The fake runs no kernel, so only
    # steps without a GPU share can be checked for numbers: all of them under --policy cpu.
    art, cfg, w = gpu_model
    r = _run(art, FAKE_CUDA, "--gpu-tokens", "16", "--policy", "cpu")
    assert r.returncode == 0, r.stderr
    assert "GPU side: cuda: " in r.stdout
    assert greedy(Reference(cfg, w), PROMPT, 4) == [int(t) for t in _generated(r.stdout)]
    # A split run places the GPU side's blocks before the kernels run, so the batch check that
    # would send a step to the CPU fallback never refuses one.
    r = _run(art, FAKE_CUDA, "--gpu-tokens", "16", "--policy", "feedback")
    assert r.returncode == 0, r.stderr
    assert "not in device memory" not in r.stderr
    assert _tier_used(r.stdout, "hbm") > 0


def test_a_zero_budget_or_no_device_tier_keeps_the_model(gpu_model):
    r = _run(gpu_model[0], FAKE_CUDA)  # --gpu-tokens 0: no HBM tier, so nothing to run kernels on
    assert r.returncode == 0, r.stderr
    assert "MODELLED" in r.stdout and "tier hbm" not in r.stdout


def _generated(stdout):
    lines = stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("== generated token ids"))
    return lines[at + 1].split()
