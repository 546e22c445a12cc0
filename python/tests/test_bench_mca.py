# bench/cpu_attention/mca_loops.py: llvm-mca's prediction of a kernel's core cycles, weighted by
# callgrind's counts (instructions.py --mca). Parsing is checked on written-out inputs; the
# prediction on loops whose throughput is known from the FMA units alone.
import importlib.util
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cpu_attention"


@pytest.fixture(scope="module")
def mca():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("mca_loops", BENCH / "mca_loops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CALLGRIND = """\
# callgrind format
positions: instr line
events: Ir
ob=(1) /tmp/other.so
fn=(1) f
0x10 0 5
ob=(2) /tmp/kernel.so
fn=(2) g
0x100 0 3
+4 0 3
cob=(1)
cfn=(1)
calls=3 0x10
+2 0 999
+2 0 30
* 0 1
-2 0 30
ob=(1)
fn=(1)
0x104 0 7
"""


def test_callgrind_counts_per_address_of_one_object(mca, tmp_path):
    out = tmp_path / "callgrind.out"
    out.write_text(CALLGRIND)
    counts = mca.instruction_counts(out, "/tmp/kernel.so")
    # The call's inclusive cost (999) is not the caller's; "*" repeats the address; "-2" steps
    # back; lines after "ob=(1)" belong to the other object.
    assert counts == {0x100: 3, 0x104: 3, 0x106: 30, 0x108: 31}


CODE = [(0x00, "movl $0x0,%eax"),
        (0x05, "vfmadd231ps %ymm1,%ymm2,%ymm3"),   # inner loop 0x05..0x0e
        (0x0a, "addq $0x1,%rax"),
        (0x0e, "jne 5 <k+0x5>"),
        (0x10, "cmpq %rdx,%rax"),
        (0x13, "jb 0 <k>"),                          # outer loop: contains the inner one
        (0x15, "retq")]


def test_innermost_loops_and_straight_runs(mca):
    counts = {0x00: 4, 0x05: 40, 0x0a: 40, 0x0e: 40, 0x10: 4, 0x13: 4, 0x15: 1}
    loops = mca.innermost_loops(CODE, counts)
    assert [(loop.start, len(loop.body), loop.iterations) for loop in loops] == [(0x05, 3, 40)]
    runs = mca.straight_runs(CODE, counts, loops)
    assert [(r.start, len(r.body), r.iterations) for r in runs] == \
        [(0x00, 1, 4), (0x10, 2, 4), (0x15, 1, 1)]


def fma_loop(mca, chains):
    body = [(4 * i, f"vfmadd231ps %ymm14,%ymm15,%ymm{i % chains}") for i in range(8)]
    body.append((32, "jne 0 <k>"))
    return mca.Region(start=0, body=body, iterations=1, instructions=len(body))


@pytest.mark.parametrize("mcpu", ["znver3", "emeraldrapids"])
def test_fma_loops_run_at_the_units_rate(mca, mcpu):
    if not pathlib.Path(mca.LLVM_MCA).exists():
        pytest.fail(f"{mca.LLVM_MCA} is missing: LLVM 22's tools are part of the toolchain")
    # 8 independent FMAs on two 256-bit FMA units: 4 cycles; one chain of 8: 8 x 4-cycle latency.
    independent = mca.cycles_per_iteration(fma_loop(mca, 8), mcpu)
    dependent = mca.cycles_per_iteration(fma_loop(mca, 1), mcpu)
    assert independent == pytest.approx(4.0, abs=0.3)
    assert dependent == pytest.approx(32.0, abs=1.0)
