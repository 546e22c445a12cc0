# The headline table of bench/cpu_attention/run.py: per case the median over whole sweeps (not
# the best sweep), every sweep's ratio beside it, and the per-layout count of cells at the target.
import importlib.util
import pathlib
import sys

import pytest

RUN = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cpu_attention" / "run.py"


@pytest.fixture(scope="module")
def run():
    sys.path.insert(0, str(RUN.parent))  # run.py imports peers.py from its folder
    spec = importlib.util.spec_from_file_location("bench_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_row(ratio, gbps, roof):
    return {"ratio": str(ratio), "gbps": str(gbps), "roof_gbps": str(roof), "kv_bytes": "64"}


def test_median_over_sweeps_not_best(run):
    key = ("row-major", 65536, 8, "f16", 1)
    runs = {key: [bench_row(0.70, 10.0, 14.0), bench_row(0.95, 13.0, 13.5),
                  bench_row(0.72, 10.5, 14.5)]}
    [row] = run.median_rows(runs, {})
    assert row["ratio"] == "0.720"  # the best sweep (0.95) would have hidden the other two
    assert row["ratio_all"] == "0.700 0.950 0.720"
    assert (row["gbps"], row["roof_gbps"]) == ("10.50", "14.00")
    assert (row["layout"], row["context"], row["batch"], row["dtype"], row["threads"]) == key
    assert row["vector_ratio"] == ""


def test_vector_bf16_median_joins_its_case(run):
    key = ("row-major", 16384, 1, "bf16", 2)
    [row] = run.median_rows({key: [bench_row(0.9, 20, 22)]}, {key: [0.6, 0.8, 0.7]})
    assert row["vector_ratio"] == "0.700"


def test_target_summary_counts_cells_per_layout_and_dtype(run):
    rows = [{"layout": "k-transposed", "dtype": "f16", "ratio": r} for r in ("0.85", "0.79")]
    rows += [{"layout": "row-major", "dtype": "f16", "ratio": r} for r in ("0.70", "0.80", "0.75")]
    assert run.target_summary(rows) == [
        "k-transposed f16: 0.790-0.850 of the roof, median 0.820, 1 of 2 cells >= 0.8 (target)",
        "row-major f16: 0.700-0.800 of the roof, median 0.750, 1 of 3 cells >= 0.8 (target)"]
