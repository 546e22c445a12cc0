# The summary of bench/cpu_attention/ab.py (interleaved A/B runs of the CPU attention bench):
# per-case medians with slow-mode runs left out, and the mean of each variant's medians.
import importlib.util
import pathlib

import pytest

AB = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cpu_attention" / "ab.py"


@pytest.fixture(scope="module")
def ab():
    spec = importlib.util.spec_from_file_location("ab", AB)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(variant, context, threads, ratio):
    return {"variant": variant, "context": str(context), "batch": "8", "dtype": "bf16",
            "threads": str(threads), "ratio": str(ratio)}


def test_medians_leave_out_slow_runs(ab):
    rows = [row("a", 65536, 1, x) for x in (0.80, 0.45, 0.84, 0.82)]
    rows += [row("b", 65536, 1, x) for x in (0.70, 0.90, 0.75)]
    table, means = ab.summarize(rows, ["a", "b"], slow=0.6)
    assert table == [((65536, 8, "bf16", 1), {"a": (0.82, 0.80, 0.84, 1),
                                              "b": (0.75, 0.70, 0.90, 0)})]
    assert means == {"a": 0.82, "b": 0.75}


def test_all_slow_keeps_every_run_and_cases_are_sorted(ab):
    rows = [row("a", 131072, 2, 0.5), row("a", 131072, 2, 0.4), row("a", 16384, 1, 0.9),
            row("b", 16384, 1, 0.7)]
    table, means = ab.summarize(rows, ["a", "b"], slow=0.6)
    assert [case for case, _ in table] == [(16384, 8, "bf16", 1), (131072, 8, "bf16", 2)]
    assert table[1][1] == {"a": (0.45, 0.4, 0.5, 0)}  # no fast runs: the slow ones count
    assert means == {"a": pytest.approx((0.9 + 0.45) / 2), "b": 0.7}


def test_bad_variant_specs_exit(ab):
    with pytest.raises(SystemExit, match="not NAME=VALUE"):
        ab.parse_pairs(["nameonly"], "--variant")
    assert ab.parse_pairs(["old=", "new=--chunk-tokens=4096"], "--variant") == {
        "old": "", "new": "--chunk-tokens=4096"}
