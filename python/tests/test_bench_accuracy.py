# bench/models/accuracy.py: the accuracy cost of the KV cache's dtype and of the rounded bf16
# dot products, on a small random Llama checkpoint (the SmolLM2 numbers are in docs/models.md).
import csv
import importlib.util
import pathlib

import pytest

from conftest import requires_jit
from hybridgen._host import cpu_has_flag
from hybridgen.models.checkpoint import tiny_config, write_random_checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_accuracy():
    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "bench/models/accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compare_is_zero_for_equal_logits_and_sees_a_flipped_argmax():
    import numpy as np
    acc = load_accuracy()
    ref = np.array([[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]])
    same = acc.compare(ref, ref.copy())
    assert same["max_rel_logit_err"] == 0 and same["mean_kl"] == pytest.approx(0, abs=1e-15)
    assert same["top1_agree"] == 1
    flipped = ref.copy()
    flipped[0, 0] = 4.0  # step 0's argmax moves; |4 - 1| / 3 is its relative error
    got = acc.compare(ref, flipped)
    assert got["top1_agree"] == 0.5
    assert got["max_rel_logit_err"] == pytest.approx(1.0)
    assert got["max_kl"] > 0.5


def test_an_unknown_config_or_a_dir_without_config_json_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_accuracy().main([str(tmp_path)])
    assert exit_info.value.code == 2
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        load_accuracy().main([str(tmp_path), "--configs=bf16,fp8"])
    assert exit_info.value.code == 2
    assert "unknown fp8" in capsys.readouterr().err


@requires_jit
def test_accuracy_of_the_kv_dtypes_on_a_random_llama(tmp_path):
    model = tmp_path / "model"
    # Head dim 32: the bf16 dot products pair 2 x 16 lanes on AVX-512 (a head dim of 16 keeps
    # the FMA path there, and the rounded config would then change nothing).
    write_random_checkpoint(model, tiny_config("llama", hidden_size=128, head_dim=32), seed=3)
    out = tmp_path / "accuracy.csv"
    assert load_accuracy().main([str(model), "--prompt-tokens=70", "--steps=5", "--threads=2",
                                 f"--csv={out}"]) == 0
    rows = {r["config"]: r for r in csv.DictReader(open(out))}
    bf16, rounded, f16 = (rows["bf16 KV"], rows["bf16 KV, rounded bf16 dot products"],
                          rows["f16 KV"])
    for r in (bf16, rounded, f16):
        assert r["prompt_tokens"] == "70" and r["steps"] == "5"
        # Rounded storage changes the logits, within the project's 16-bit KV bound.
        assert 0 < float(r["max_rel_logit_err"]) < 2e-2, r
        assert 0 <= float(r["mean_kl"]) <= float(r["max_kl"]) < 1e-3, r
    # f16 keeps 3 more mantissa bits than bf16, so its storage error is clearly smaller: the
    # dtype really reaches the cache.
    assert float(f16["max_rel_logit_err"]) < float(bf16["max_rel_logit_err"])
    assert rounded["bf16_dot_rounded"] == "1" and bf16["bf16_dot_rounded"] == "0"
    if cpu_has_flag("avx512_bf16"):
        assert rounded["max_rel_logit_err"] != bf16["max_rel_logit_err"]
