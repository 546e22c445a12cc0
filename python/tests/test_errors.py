# Bad input becomes a Python exception with the compiler's or runtime's message, never a crash.
import numpy as np
import pytest

import hybridgen as hg
from conftest import TWO_TIERS, make_case, requires_jit


@pytest.fixture(scope="module")
def attn():
    if not hg.has_jit:
        pytest.skip("built without the compiler driver (JIT)")
    return hg.compile_attention(q_heads=8, kv_heads=2, head_dim=32, block_size=16, split=16)


@pytest.fixture
def case(rng):
    return list(make_case(rng, lens=[40, 20]))


@requires_jit
def test_invalid_ir_raises_compile_error_with_diagnostics():
    with pytest.raises(hg.CompileError) as info:
        hg.compile("func.func @f(%a: memref<4xf32>) {\n  %x = hg.bogus %a\n  return\n}\n")
    text = str(info.value)
    assert "error" in text.lower() and "2:" in text  # the diagnostic names the line


@requires_jit
def test_unparsable_text_raises_compile_error():
    with pytest.raises(hg.CompileError):
        hg.compile("this is not MLIR")


@requires_jit
def test_inconsistent_spec_raises_argument_error():
    with pytest.raises(hg.ArgumentError):
        hg.compile_attention(q_heads=6, kv_heads=4, head_dim=32)


@requires_jit
@pytest.mark.parametrize("index,bad", [
    (0, lambda a: np.ascontiguousarray(a[:, :4])),   # q with too few heads (wrong shape)
    (0, lambda a: a.astype(np.float64)),             # q in the wrong dtype
    (1, lambda a: a.astype(np.float16)),             # pool dtype differs from the compiled one
    (1, lambda a: np.asfortranarray(a)),             # non-contiguous pool
    (2, lambda a: a.transpose(0, 1, 3, 2)),          # a transposed (strided) view
    (3, lambda a: a.astype(np.int64)),               # int64 block table
    (4, lambda a: a + 1000),                         # lengths beyond the block table
    (3, lambda a: a + 500),                          # block ids beyond the pool
    (5, lambda a: a[:1]),                            # out with the wrong batch
], ids=["q-shape", "q-dtype", "pool-dtype", "fortran", "transposed", "table-dtype", "lens",
        "block-ids", "out-shape"])
def test_bad_arguments_raise_argument_error(attn, case, index, bad):
    out = np.zeros_like(case[0])
    args = case + [out]
    args[index] = bad(args[index])
    with pytest.raises(hg.ArgumentError) as info:
        attn(*args)
    assert str(info.value)


@requires_jit
def test_error_type_is_also_a_value_error(attn, case):
    case[0] = case[0][:, :4]
    with pytest.raises(ValueError):
        attn(*case)


@requires_jit
def test_read_only_out_is_refused(attn, case):
    out = np.zeros_like(case[0])
    out.setflags(write=False)
    with pytest.raises(hg.ArgumentError, match="writable"):
        attn(*case, out=out)


@requires_jit
def test_non_array_argument(attn, case):
    case[1] = "not an array"
    with pytest.raises(hg.ArgumentError):
        attn(*case)


@requires_jit
def test_unknown_function(attn):
    with pytest.raises(hg.ArgumentError):
        attn.module.function("no_such_function")


@requires_jit
def test_still_works_after_errors(attn, case):
    with pytest.raises(hg.ArgumentError):
        attn(case[0].astype(np.float64), *case[1:])
    out = attn(*case)
    np.testing.assert_allclose(out, hg.reference_attention(*case), rtol=1e-4, atol=1e-4)


def test_runtime_errors():
    cache = hg.KvCache(kv_heads=2, block_size=16, head_dim=8,
                       topology=hg.Topology.from_config(TWO_TIERS), spill=True)
    with pytest.raises(hg.NotFoundError):
        cache.seq_len(12345)
    seq = cache.create_sequence()
    with pytest.raises(hg.ArgumentError):
        cache.append(seq, np.zeros((3, 3, 8)), np.zeros((3, 3, 8)))  # wrong kv_heads
    with pytest.raises(hg.ExhaustedError):
        n = cache.num_blocks * 16 + 1  # more tokens than the whole pool holds
        cache.append(seq, np.zeros((n, 2, 8), np.float32), np.zeros((n, 2, 8), np.float32))
    assert cache.seq_len(seq) == 0  # all or nothing
    with pytest.raises(hg.ArgumentError):
        hg.KvCache(kv_heads=2, block_size=16, head_dim=8, dtype="f64",
                   topology=hg.Topology.from_config(TWO_TIERS))
    with pytest.raises(hg.ArgumentError):
        hg.Topology.from_config("name=x,kind=nonsense")


@requires_jit
def test_raw_uint16_is_not_taken_for_bf16(rng):
    attn = hg.compile_attention(q_heads=8, kv_heads=2, head_dim=32, block_size=16, kv_dtype="bf16",
                                split=0)
    q, k, v, table, lens = make_case(rng, lens=[20], dtype="bf16")
    with pytest.raises(hg.ArgumentError, match="k_pool.*ml_dtypes"):
        attn(q, k.view(np.uint16), v, table, lens)


def test_interpreter_exits_cleanly_with_an_installed_scheduler():
    """The process-global context is released at exit while Python still runs (no leak, no crash)."""
    import subprocess
    import sys

    code = ("import hybridgen as hg\n"
            f"c = hg.KvCache(kv_heads=2, block_size=16, head_dim=8, "
            f"topology=hg.Topology.from_config({TWO_TIERS!r}))\n"
            "hg.Scheduler(cache=c).install()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "leaked" not in proc.stderr


@requires_jit
def test_bad_partials_and_non_arrays(rng):
    attn = hg.compile_attention(q_heads=8, kv_heads=2, head_dim=32, block_size=16, split=8,
                                return_partials=True)
    q, k, v, table, lens = make_case(rng, lens=[20, 9])
    small = hg.Partial(np.zeros((1, 8, 32), np.float32), np.zeros((1, 8), np.float32),
                       np.zeros((1, 8), np.float32))
    with pytest.raises(hg.ArgumentError, match="partial 0"):
        attn(q, k, v, table, lens, partials=[small, small])
    with pytest.raises(hg.ArgumentError, match="triples"):
        attn(q, k, v, table, lens, partials=[small])
    with pytest.raises(hg.ArgumentError, match="q"):
        attn(q.tolist(), k, v, table, lens, out=np.zeros_like(q))
