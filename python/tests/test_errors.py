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


# --- issue 17: hostile input to the runtime and the package's own error types ------------------

def _cache(**kw):
    return hg.KvCache(kv_heads=2, block_size=16, head_dim=8,
                      topology=hg.Topology.from_config(TWO_TIERS), **kw)


def _pool_state(cache):
    """Everything a refused call must leave as it was: the bytes of every pool array, each
    sequence's length and block table, and the tier occupancy."""
    arrays = [a.copy() for layer in range(cache.num_layers) for a in (cache.k(layer), cache.v(layer))]
    seqs = {s: (cache.seq_len(s), cache.block_table(s).tolist()) for s in cache.sequences()}
    return arrays, seqs, cache.tier_usage()


def _same_state(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a[0], b[0])) and a[1:] == b[1:]


@pytest.fixture
def filled():
    cache = _cache()
    rng = np.random.default_rng(7)
    seqs = []
    for n in (40, 9):
        s = cache.create_sequence()
        cache.append(s, rng.standard_normal((n, 2, 8)), rng.standard_normal((n, 2, 8)))
        seqs.append(s)
    return cache, seqs


def test_huge_positions_and_counts_are_argument_errors_and_change_nothing(filled):
    cache, (a, b) = filled
    before = _pool_state(cache)
    one = np.zeros((1, 2, 8), np.float32)
    for bad in (lambda: cache.write(a, 0, 2**63 - 1, one, one),   # segfaulted: pos + n wrapped
                lambda: cache.read(a, 0, 2**63 - 1, 1),
                lambda: cache.native.read_tokens(a, 0, 2**63 - 1, 1, one.copy(), one.copy()),
                lambda: cache.native.append_tokens(b, 2**63 - 10),  # was accepted: ~2^63 tokens
                lambda: cache.native.append_tokens(b, 2**31),
                lambda: cache.read(a, 0, 0, 2**62),                  # a huge output buffer
                lambda: cache.read(a, 0, 0, -1),
                lambda: cache.write(a, 0, -5, one, one),
                lambda: cache.migrate_block(a, 2**62, 0),
                lambda: cache.batch([a], 2**40)):
        with pytest.raises(hg.ArgumentError):
            bad()
    assert _same_state(before, _pool_state(cache))
    assert cache.seq_len(b) == 9


@pytest.mark.parametrize("call", [
    lambda c, s: c.seq_len(2**64),
    lambda c, s: c.seq_len("0"),
    lambda c, s: c.k(2**40),
    lambda c, s: c.read(s, 2**40),
    lambda c, s: c.migrate_block(s, 0, 2**40),
    lambda c, s: c.migrate_block(s, 0, 1.5),
    lambda c, s: c.batch([2**70]),
    lambda c, s: c.batch([s], max_blocks="x"),
    lambda c, s: hg.KvCache(kv_heads=2**40, block_size=16, head_dim=8, topology=c.topology),
    lambda c, s: hg.KvCache(kv_heads=2, block_size=16, head_dim=8, topology="dram"),
    lambda c, s: hg.KvCache(kv_heads=2, block_size=16, head_dim=8, topology=c.topology,
                            max_blocks_per_tier=[2**70]),
    lambda c, s: c.append(s, [[1.0], [1.0, 2.0]], [[1.0]]),            # ragged: numpy ValueError
    lambda c, s: c.append(s, np.array([["a"] * 8] * 2), np.zeros((1, 2, 8))),
    lambda c, s: hg.Topology.from_config(5),
    lambda c, s: c.topology.find_tier(3),
], ids=["seq-2**64", "seq-str", "layer-2**40", "read-layer", "tier-2**40", "tier-float", "batch-seq",
        "batch-width-str", "kv-heads-2**40", "topology-str", "max-blocks-2**70", "ragged", "strings",
        "config-int", "find-tier-int"])
def test_out_of_range_and_mistyped_arguments_raise_argument_error(filled, call):
    cache, (a, _) = filled
    with pytest.raises(hg.ArgumentError) as info:
        call(cache, a)
    assert not isinstance(info.value, TypeError) and str(info.value)


def test_every_native_entry_point_translates_argument_mismatches(filled):
    """The shared mechanism: every function, method and constructor of the extension, called with
    an argument it cannot take, raises ArgumentError (never nanobind's TypeError)."""
    cache, _ = filled
    sched = hg.Scheduler(cache=cache)
    instances = {hg._native.KvPool: cache.native, hg._native.Topology: cache.topology,
                 hg._native.SchedulerContext: sched.native, hg._native.CostModel: hg._native.CostModel(),
                 hg._native.SchedulerConfig: hg._native.SchedulerConfig(),
                 hg._native.PlacementConfig: hg._native.PlacementConfig()}
    junk = object()
    checked = 0
    for name, attr in vars(hg._native).items():
        targets = []
        if callable(attr) and type(attr).__name__ == "function":  # wrapped free functions
            targets.append((name, attr))
        elif isinstance(attr, type) and getattr(attr, "_hg_translated", False):
            for meth, fn in vars(attr).items():
                if meth.startswith("__") and meth != "__init__":
                    continue
                if isinstance(fn, staticmethod):
                    targets.append((f"{name}.{meth}", getattr(attr, meth)))
                elif callable(fn) and attr in instances and meth != "__init__":
                    targets.append((f"{name}.{meth}", getattr(instances[attr], meth)))
                elif isinstance(fn, property) and fn.fset is not None and attr in instances:
                    targets.append((f"{name}.{meth}=", lambda v, o=instances[attr], m=meth: setattr(o, m, v)))
        for label, fn in targets:
            args = (junk,) if label.endswith("=") else (junk,) * 10  # no signature takes ten objects
            with pytest.raises(hg.ArgumentError):
                fn(*args)
            checked += 1
    assert checked > 40


def test_every_native_constructor_translates_argument_mismatches():
    """`Class(bad args)` goes through the class's (wrapped) __init__ too: nanobind's fast
    construction path used to skip it and raise its TypeError."""
    junk = object()
    modules = [hg._native] + ([hg._jit_native] if hg.has_jit else [])
    constructed = []
    for module in modules:
        for name, attr in vars(module).items():
            # Classes with a bound constructor (its translated wrapper is a Python function; a
            # class without one, such as Topology, keeps nanobind's "no constructor defined").
            init = vars(attr).get("__init__") if isinstance(attr, type) else None
            if type(init).__name__ == "function" and getattr(attr, "_hg_translated", False):
                with pytest.raises(hg.ArgumentError, match=r"__init__\(\): incompatible"):
                    attr(*(junk,) * 10)  # no constructor takes ten objects
                constructed.append(name)
    assert {"ModelRunner", "Sampler", "SchedulerConfig", "CostModel"} <= set(constructed)
    assert not hg.has_jit or {"AttentionSpec", "CompileOptions"} <= set(constructed)
    # Construction with good arguments is unchanged.
    assert hg._native.SchedulerConfig().__class__ is hg._native.SchedulerConfig


def test_read_only_outputs_of_native_pool_calls_are_named(filled):
    cache, (a, _) = filled
    k = np.zeros((3, 2, 8), np.float32)
    k.setflags(write=False)
    with pytest.raises(hg.ArgumentError, match="read-only"):
        cache.native.read_tokens(a, 0, 0, 3, k, np.zeros((3, 2, 8), np.float32))
    table, lens = np.zeros((1, 3), np.int32), np.zeros(1, np.int32)
    lens.setflags(write=False)
    with pytest.raises(hg.ArgumentError, match="read-only"):
        cache.native.fill_batch([a], 3, table, lens)
    with pytest.raises(hg.ArgumentError, match="C-contiguous"):
        cache.native.fill_batch([a], 3, np.zeros((1, 6), np.int32)[:, ::2], np.zeros(1, np.int32))
    # Input arrays may be read-only: the pool only reads them.
    ro = np.ones((1, 2, 8), np.float32)
    ro.setflags(write=False)
    cache.write(a, 0, 0, ro, ro)


@pytest.mark.parametrize("make", [
    lambda: np.zeros((0, 2, 8), np.float32),
    lambda: np.zeros((5, 2, 16), np.float32)[:0, :, ::2],   # empty, strides of a larger array
    lambda: np.zeros((2, 8, 0), np.float32).transpose(2, 0, 1),
])
def test_contiguous_empty_arrays_are_accepted(filled, make):
    cache, (a, _) = filled
    before = _pool_state(cache)
    e = make()
    assert e.flags.c_contiguous
    cache.write(a, 0, 3, e, e)
    cache.native.write_tokens(a, 0, 3, e, e)
    cache.native.read_tokens(a, 0, 3, 0, make(), make())
    cache.native.append(a, e[None], e[None])
    k, v = cache.read(a, 0, 40, 0)
    assert k.shape == (0, 2, 8) and v.shape == (0, 2, 8)
    assert _same_state(before, _pool_state(cache))


@pytest.mark.parametrize("kwargs", [
    dict(quantum=0), dict(quantum=-16), dict(quantum=2**70), dict(smoothing=float("nan")),
    dict(smoothing=0.0), dict(damping=2.0), dict(initial_fraction=-1.0), dict(smoothing="fast"),
    dict(static_split=-1), dict(gpu_capacity_tokens=-1), dict(gpu_capacity_tokens="all"),
    dict(prior={"cpu_per_token": float("nan")}), dict(prior={"bogus": 1.0}), dict(prior=[1, 2]),
    dict(placement={"sink_tokens": -1}), dict(placement={"bogus": 1}),
    dict(modelled_gpu={"fixed_seconds": 1e-5}),                 # incomplete: was a KeyError
    dict(modelled_gpu={"per_token_seconds": "x"}), dict(modelled_gpu={"per_token_seconds": float("inf")}),
    dict(modelled_gpu=[1e-5, 1e-9]), dict(modelled_gpu={"per_token_seconds": 1e-9, "typo": 1}),
    dict(no_such_option=1), dict(cache="not a cache"),
], ids=lambda kw: ",".join(f"{k}={v!r}"[:40] for k, v in kw.items()))
def test_degenerate_scheduler_configs_are_argument_errors(kwargs):
    with pytest.raises(hg.ArgumentError):
        hg.Scheduler(**kwargs)


def test_scheduler_calls_refuse_non_finite_and_negative_values():
    s = hg.Scheduler()
    for bad in (lambda: s.record(0, cpu_seconds=float("nan"), gpu_seconds=1e-3, context_tokens=10,
                                 split_used=5),
                lambda: s.record(0, cpu_seconds=-1.0, gpu_seconds=1e-3, context_tokens=10, split_used=5),
                lambda: s.record(0, cpu_seconds=1e-3, gpu_seconds=1e-3, context_tokens=-10, split_used=5),
                lambda: s.begin_step(-1), lambda: s.begin_step(2**64), lambda: s.split_point("a"),
                lambda: s.native.record_device_time(0, 1, float("inf")),
                lambda: s.native.set_linear_device_model(1, 0.0, float("nan"))):
        with pytest.raises(hg.ArgumentError):
            bad()
    assert s.trace().rows == 0  # nothing refused reached the trace


@pytest.mark.parametrize("field", ["node=nan", "node=1e300", "node=-7", "node=2.5", "bandwidth=nan",
                                   "bandwidth=inf", "capacity=99999999999999999999999T", "emulated=maybe"])
def test_tier_fields_are_checked(field):
    with pytest.raises(hg.ArgumentError):
        hg.Topology.from_config(f"name=d,kind=dram,capacity=1MiB,{field}")


def test_tiers_file_is_bounded(tmp_path, monkeypatch):
    import os
    import time

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_text("kind=dram,capacity=1MiB\n")
    os.truncate(big, 64 << 20)
    start = time.monotonic()
    for path in ("/dev/zero", str(fifo), str(big), str(tmp_path)):
        monkeypatch.setenv("HYBRIDGEN_TIERS_FILE", path)
        monkeypatch.delenv("HYBRIDGEN_TIERS", raising=False)
        with pytest.raises(hg.ArgumentError):
            hg.Topology.from_environment()
    assert time.monotonic() - start < 10


def test_merge_partials_and_reference_refuse_bad_input():
    with pytest.raises(hg.ArgumentError, match="at least one"):
        hg.merge_partials([])
    with pytest.raises(hg.ArgumentError):
        hg.merge_partials([1, 2])
    o, m = np.zeros((1, 2, 4)), np.zeros((1, 2))
    with pytest.raises(hg.ArgumentError):
        hg.merge_partials([hg.Partial(o, m, m), hg.Partial(o[:, :1], m, m)])
    with pytest.raises(hg.ArgumentError):
        hg.reference_attention(np.zeros((1, 2)), 1, 2, 3, 4)
    q, k = np.zeros((1, 4, 8)), np.zeros((3, 2, 16, 8))
    with pytest.raises(hg.ArgumentError, match="block ids"):
        hg.reference_attention(q, k, k, np.array([[5]]), np.array([3]))


def test_trace_errors_are_hybridgen_errors_and_keep_the_mapping_protocol():
    t = hg.Scheduler().trace()
    with pytest.raises(hg.NotFoundError):
        t["no_such_column"]
    assert "no_such_column" not in t and t.get("no_such_column") is None
    with pytest.raises(hg.ArgumentError):
        hg.Trace({"split": ["x"]})
    with pytest.raises(hg.ArgumentError):
        hg.Trace([1, 2])


@requires_jit
def test_jit_options_and_specs_raise_argument_error():
    with pytest.raises(hg.ArgumentError):
        hg.compile("module {}", options={"no_such_option": 1})
    with pytest.raises(hg.ArgumentError):
        hg.compile("module {}", options=["opt"])
    with pytest.raises(hg.ArgumentError):
        hg.compile(b"module {}")
    with pytest.raises(hg.ArgumentError):
        hg.attention_spec(q_heads=8, kv_heads=2, head_dim=32, split="half")
    with pytest.raises(hg.ArgumentError):
        hg.attention_spec(q_heads="eight", kv_heads=2, head_dim=32)
    with pytest.raises(hg.ArgumentError):
        hg.attention_spec(q_heads=8, kv_heads=2, head_dim=32, devices=5)
