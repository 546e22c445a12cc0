# Hostile input to the compiler from Python (issue 17): every case raises the package's own error
# types (CompileError, ArgumentError), never crashes the interpreter or computes garbage.
import numpy as np
import pytest

import hybridgen as hg
from conftest import make_case, requires_jit

# Raw MLIR with dynamic batch, pool and table, called through module[name] - the path that used to
# trust its block table.
RAW = """
func.func @attn(%q: memref<?x8x32xf32>, %k: memref<?x2x16x32xf32>, %v: memref<?x2x16x32xf32>,
                %bt: memref<?x?xi32>, %n: memref<?xi32>, %o: memref<?x8x32xf32>) {
  hg.attention q(%q : memref<?x8x32xf32>) kv(%k, %v : memref<?x2x16x32xf32>, memref<?x2x16x32xf32>)
      table(%bt : memref<?x?xi32>) lens(%n : memref<?xi32>) out(%o : memref<?x8x32xf32>)
      {scale = 0.125 : f32}
  return
}
"""


@pytest.fixture(scope="module")
def raw():
    if not hg.has_jit:
        pytest.skip("built without the compiler driver (JIT)")
    return hg.compile(RAW)


@requires_jit
@pytest.mark.parametrize("bad_id", [2**30, -1, 2**31 - 1])
def test_raw_module_bad_block_id_raises(raw, rng, bad_id):
    q, k, v, table, lens = make_case(rng, lens=[40, 20])
    table[1, 1] = bad_id
    out = np.full_like(q, 7.0)
    with pytest.raises(hg.ArgumentError, match=rf"block_table\[1\]\[1\] = {bad_id} is outside the "
                                               rf"pool of {k.shape[0]} blocks \(sequence 1\)"):
        raw["attn"](q, k, v, table, lens, out)
    assert not out.any()  # the refused call wrote the empty partial, not garbage


@requires_jit
def test_raw_module_bad_length_raises(raw, rng):
    q, k, v, table, lens = make_case(rng, lens=[40, 20])
    lens[0] = table.shape[1] * 16 + 1
    with pytest.raises(hg.ArgumentError, match=r"seq_lens\[0\]"):
        raw["attn"](q, k, v, table, lens, np.zeros_like(q))


@requires_jit
def test_kv_heads_zero_is_a_compile_error():
    text = RAW.replace("?x2x16x32", "8x0x16x32")
    with pytest.raises(hg.CompileError, match="kv_heads = 0"):
        hg.compile(text)


@requires_jit
@pytest.mark.parametrize("chunk", [2**63 - 16, -1, -1024])
def test_chunk_tokens_out_of_range(chunk):
    with pytest.raises(hg.CompileError, match=r"chunk_tokens must be in \[0, 16777216\]"):
        hg.compile(RAW, {"chunk_tokens": chunk})


@requires_jit
@pytest.mark.parametrize("nbytes", [-2, 2**20 + 1, 2**62])
def test_far_prefetch_bytes_out_of_range(nbytes):
    with pytest.raises(hg.CompileError, match=r"far_prefetch_bytes must be in \[0, 1048576\]"):
        hg.compile(RAW, {"far_prefetch_bytes": nbytes})


@requires_jit
@pytest.mark.parametrize("value", [-2, 2, 2**40])
def test_spread_prefetch_out_of_range(value):
    with pytest.raises(hg.CompileError, match=r"spread_prefetch must be -1 .*, 0 or 1, got"):
        hg.compile(RAW, {"spread_prefetch": value})


@requires_jit
@pytest.mark.parametrize("value", [-1, 5, 2**40])
def test_overlap_pv_lag_out_of_range(value):
    with pytest.raises(hg.CompileError, match=r"overlap_pv_lag must be 0 .* or in \[1, 4\], got"):
        hg.compile(RAW, {"overlap_pv_lag": value})


@requires_jit
@pytest.mark.parametrize("field,value", [("q_heads", 2**64), ("split_point", -2**70),
                                         ("block_size", "16"), ("window", 1.5)])
def test_out_of_range_spec_integers_are_argument_errors(field, value):
    spec = hg.AttentionSpec()
    with pytest.raises(hg.ArgumentError, match=field):
        setattr(spec, field, value)


@requires_jit
def test_out_of_range_option_and_unknown_option():
    with pytest.raises(hg.ArgumentError, match="chunk_tokens"):
        hg.compile(RAW, {"chunk_tokens": 2**64})
    with pytest.raises(hg.ArgumentError, match="unknown compile option"):
        hg.compile(RAW, {"chunk_size": 8})


@requires_jit
def test_bogus_target_and_missing_library():
    with pytest.raises(hg.CompileError, match="unknown target CPU 'bogus'"):
        hg.compile(RAW, {"target_cpu": "bogus"})
    with pytest.raises(hg.CompileError, match="cannot load shared library"):
        hg.compile(RAW, {"shared_libs": ["/nonexistent/libhybridgen_runtime.so"]})


@requires_jit
def test_seventeen_memrefs_refused_at_compile_time():
    args = ", ".join(f"%a{i}: memref<4xf32>" for i in range(17))
    with pytest.raises(hg.CompileError, match="takes 17 memref arguments"):
        hg.compile(f"func.func @wide({args}) {{\n  return\n}}\n")


@requires_jit
def test_deep_nesting_and_nul_bytes_are_compile_errors():
    n = 5000
    deep = ("func.func @f() {" + "scf.execute_region {" * n + "scf.yield" + "} scf.yield" * (n - 1)
            + "} return }")
    with pytest.raises(hg.CompileError, match="nesting deeper than 512"):
        hg.compile(deep)
    with pytest.raises(hg.CompileError, match="NUL byte"):
        hg.compile("\0" * 16)


@requires_jit
def test_contiguous_empty_arrays_are_accepted():
    module = hg.compile("""
func.func @copy(%a: memref<?x?xf32>, %b: memref<?x?xf32>) {
  memref.copy %a, %b : memref<?x?xf32> to memref<?x?xf32>
  return
}
""")
    for shape in [(3, 0), (0, 5)]:
        a = np.zeros(shape, np.float32)
        module["copy"](a, np.zeros(shape, np.float32))  # numpy gives empty arrays 0 strides
