# KV pool + scheduler from Python: decode steps over the pool's own arrays and the per-step trace.
import numpy as np
import pytest

import hybridgen as hg
from conftest import TWO_TIERS, requires_jit, tolerance


def new_cache(dtype="f32", **kw):
    return hg.KvCache(kv_heads=2, block_size=16, head_dim=32, dtype=dtype,
                      topology=hg.Topology.from_config(TWO_TIERS), **kw)


def test_topology_from_config():
    topo = hg.Topology.from_config(TWO_TIERS)
    names = [t["name"] for t in topo.tiers]
    assert names == ["hbm", "dram"] and topo.tiers[0]["emulated"]
    assert "hbm" in topo.describe()


def test_append_read_and_batch(rng):
    cache = new_cache("f16", num_layers=2)
    a, b = cache.create_sequence(), cache.create_sequence()
    ka = rng.standard_normal((2, 40, 2, 32)).astype(np.float16)
    assert cache.append(a, ka, ka) == 0
    assert cache.append(b, ka[:, :5], ka[:, :5]) == 0
    assert cache.append(a, ka[:, :3], ka[:, :3]) == 40
    k_read, _ = cache.read(a, layer=1)
    np.testing.assert_array_equal(k_read[:40], ka[1])
    np.testing.assert_array_equal(k_read[40:], ka[1, :3])
    table, lens = cache.batch([a, b])
    assert lens.tolist() == [43, 5] and table.shape == (2, 3) and table[1, 1] == -1
    np.testing.assert_array_equal(table[0], cache.block_table(a))
    used = sum(u for u, _ in cache.tier_usage().values())
    assert used == 4
    cache.free_sequence(b)
    assert sum(u for u, _ in cache.tier_usage().values()) == 3


def test_migrate_block_keeps_data(rng):
    cache = new_cache()
    seq = cache.create_sequence()
    k = rng.standard_normal((20, 2, 32)).astype(np.float32)
    cache.append(seq, k, k)
    before = cache.native.tier_of_block(int(cache.block_table(seq)[0]))
    target = "dram" if before == 0 else "hbm"
    cache.migrate_block(seq, 0, target)
    assert cache.native.tier_of_block(int(cache.block_table(seq)[0])) == cache.topology.find_tier(target)
    np.testing.assert_array_equal(cache.read(seq)[0], k)


def test_scheduler_trace_from_recorded_timings():
    """Feedback policy fed a CPU that is 3x slower per token moves the split toward the GPU side."""
    sched = hg.Scheduler("feedback", quantum=16)
    for step in range(1, 21):
        ctx = 256 * step
        sched.begin_step(ctx)
        split = min(sched.split_point(0), ctx)
        sched.record(0, cpu_seconds=3e-6 * split, gpu_seconds=1e-6 * (ctx - split), context_tokens=ctx,
                     split_used=split)
        sched.end_step()
    trace = sched.trace()
    assert trace.rows == 20
    assert trace["step"].dtype == np.int64 and trace["cpu_s"].dtype == np.float64
    np.testing.assert_array_equal(trace["step"], np.arange(1, 21))
    frac = trace["split"] / trace["context_tokens"]
    assert abs(frac[-1] - 0.25) < 0.05  # balanced: 3 s * x = 1 s * (1 - x)
    assert "step" in trace.to_csv().splitlines()[0]


@requires_jit
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_decode_session_steps_and_trace(rng, dtype):
    cache = new_cache(dtype)
    session = hg.DecodeSession(cache, q_heads=8, scheduler=hg.Scheduler("feedback", cache=cache))
    seqs = [cache.create_sequence() for _ in range(2)]
    for s, n in zip(seqs, (30, 7)):
        cache.append(s, rng.standard_normal((n, 2, 32)), rng.standard_normal((n, 2, 32)))
    steps = 6
    for _ in range(steps):
        for s in seqs:
            cache.append(s, rng.standard_normal((1, 2, 32)), rng.standard_normal((1, 2, 32)))
        q = rng.standard_normal((2, 8, 32)).astype(np.float32)
        out = session.step(seqs, q)
        table, lens = cache.batch(seqs)
        ref = hg.reference_attention(q, cache.k(), cache.v(), table, lens)
        np.testing.assert_allclose(out, ref, **tolerance(dtype))
    assert hg._native.installed_context() is None  # the session restores the previous state
    trace = session.trace()
    assert trace.rows == steps
    assert trace["context_tokens"].tolist() == list(range(31, 31 + steps))
    assert np.all((trace["split"] >= 0) & (trace["split"] <= trace["context_tokens"]))
    assert trace.tier_columns == ["blocks_hbm_emulated", "blocks_dram"]
    total_blocks = sum(trace[c] for c in trace.tier_columns)
    ctx = trace["context_tokens"]  # the longer sequence; the other is 23 tokens shorter
    np.testing.assert_array_equal(total_blocks, -(-ctx // 16) + -(-(ctx - 23) // 16))
    assert np.all(trace["segment_s"] > 0)


@requires_jit
def test_gpu_budget_and_modelled_gpu(rng):
    # A GPU modelled 100x faster per token than this CPU would take every token, but its HBM
    # budget holds only 32 of them: the rest must stay on the CPU side, and the rows say the GPU
    # times are modelled.
    cache = new_cache("f32")
    sched = hg.Scheduler("feedback", cache=cache, gpu_capacity_tokens=32,
                         modelled_gpu={"fixed_seconds": 5e-6, "per_token_seconds": 1e-10})
    session = hg.DecodeSession(cache, q_heads=8, scheduler=sched)
    seq = cache.create_sequence()
    cache.append(seq, rng.standard_normal((100, 2, 32)), rng.standard_normal((100, 2, 32)))
    for _ in range(5):
        cache.append(seq, rng.standard_normal((1, 2, 32)), rng.standard_normal((1, 2, 32)))
        q = rng.standard_normal((1, 8, 32)).astype(np.float32)
        out = session.step([seq], q)
        table, lens = cache.batch([seq])
        ref = hg.reference_attention(q, cache.k(), cache.v(), table, lens)
        np.testing.assert_allclose(out, ref, **tolerance("f32"))
    trace = session.trace()
    assert np.all(trace["split"] >= trace["context_tokens"] - 32)
    assert np.all(trace["modelled_devices"] == 2)  # bit 1: the GPU side
    gpu_tokens = trace["context_tokens"] - trace["split"]
    np.testing.assert_allclose(trace["gpu_s"], np.where(gpu_tokens > 0, 5e-6 + 1e-10 * gpu_tokens, 0))
    with pytest.raises(hg.ArgumentError):
        hg.Scheduler("feedback", gpu_capacity_tokens=-1)


def test_plot_trace(tmp_path):
    pytest.importorskip("matplotlib")
    sched = hg.Scheduler("static", static_split=32)
    for ctx in (64, 80, 96):
        sched.begin_step(ctx)
        sched.record(0, cpu_seconds=1e-3, gpu_seconds=2e-3, context_tokens=ctx, split_used=32)
    path = tmp_path / "trace.png"
    fig = sched.trace().plot(str(path))
    assert path.stat().st_size > 1000 and len(fig.axes) == 3


def test_install_is_what_the_c_abi_sees():
    sched = hg.Scheduler("static", static_split=48)
    assert not sched.installed
    with sched:
        assert sched.installed
        assert hg._native.hgrt_split_point(0) == 48
    assert not sched.installed
    assert hg._native.hgrt_split_point(0) == 2**63 - 1  # the contract's "no scheduler" answer
    with pytest.raises(hg.ArgumentError):
        hg.Scheduler("bogus")
