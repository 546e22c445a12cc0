# Zero-copy contract: compiled code reads and writes the caller's buffers in place, numpy or DLPack.
import numpy as np
import pytest

import hybridgen as hg
from conftest import TWO_TIERS, make_case, requires_jit, tolerance


class DLPackOnly:
    """A tensor that offers nothing but the DLPack protocol (stands in for torch/cupy/jax on CPU)."""

    def __init__(self, array):
        self._a = array

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.fixture(scope="module")
def attn():
    return hg.compile_attention(q_heads=8, kv_heads=2, head_dim=32, block_size=16, split=24)


@requires_jit
def test_out_is_written_in_place(rng, attn):
    q, k, v, table, lens = make_case(rng, lens=[40, 70])
    big = np.full((4,) + q.shape[1:], 7.0, dtype=np.float32)
    out = big[1:3]  # a contiguous view into a larger buffer
    result = attn(q, k, v, table, lens, out=out)
    assert result is out
    assert np.all(big[0] == 7.0) and np.all(big[3] == 7.0)
    np.testing.assert_allclose(big[1:3], hg.reference_attention(q, k, v, table, lens), **tolerance("f32"))


@requires_jit
def test_pool_is_read_in_place_not_copied(rng, attn):
    """Writing through a view of the pool between calls changes the next result: no cached copy."""
    q, k, v, table, lens = make_case(rng, lens=[40, 70])
    backing = np.zeros((2,) + v.shape, dtype=v.dtype)
    backing[1] = v
    v_view = backing[1]
    assert np.shares_memory(v_view, backing)
    first = attn(q, k, v_view, table, lens).copy()
    backing[1] *= 2.0  # attention is linear in V
    second = attn(q, k, v_view, table, lens)
    np.testing.assert_allclose(second, 2.0 * first, rtol=1e-5, atol=1e-6)


@requires_jit
def test_dlpack_tensors_in_and_out(rng, attn):
    q, k, v, table, lens = make_case(rng, lens=[33, 64])
    out = np.zeros_like(q)
    attn(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), DLPackOnly(table), DLPackOnly(lens),
         out=DLPackOnly(out))
    np.testing.assert_allclose(out, hg.reference_attention(q, k, v, table, lens), **tolerance("f32"))


@requires_jit
def test_read_only_inputs_are_accepted(rng, attn):
    q, k, v, table, lens = make_case(rng, lens=[20])
    for a in (q, k, v, table, lens):
        a.setflags(write=False)
    np.testing.assert_allclose(attn(q, k, v, table, lens), hg.reference_attention(q, k, v, table, lens),
                               **tolerance("f32"))


@requires_jit
def test_bf16_pool_view_not_copied(rng):
    """An ml_dtypes.bfloat16 pool travels as a uint16 view of the same memory."""
    q, k, v, table, lens = make_case(rng, lens=[48], dtype="bf16")
    attn = hg.compile_attention(q_heads=8, kv_heads=2, head_dim=32, block_size=16, kv_dtype="bf16",
                                split=16)
    first = attn(q, k, v, table, lens).copy()
    v *= 2  # exact in bf16 (exponent change only)
    np.testing.assert_allclose(attn(q, k, v, table, lens), 2 * first, rtol=1e-5, atol=1e-6)


def test_pool_arrays_are_views_of_the_pool():
    cache = hg.KvCache(kv_heads=2, block_size=16, head_dim=8, dtype="bf16",
                       topology=hg.Topology.from_config(TWO_TIERS))
    k1, k2 = cache.k(), cache.k()
    assert np.shares_memory(k1, k2)
    assert k1.shape == (cache.num_blocks, 2, 16, 8) and k1.dtype == hg._arrays.bfloat16
    seq = cache.create_sequence()
    cache.append(seq, np.ones((5, 2, 8)), np.ones((5, 2, 8)))
    block = cache.block_table(seq)[0]
    k1[block, 1, 3, :] = 3.0  # write through the view, read back through the pool's API
    k_read, _ = cache.read(seq)
    assert np.all(k_read[3, 1].astype(np.float32) == 3.0)
    assert np.all(k_read[3, 0].astype(np.float32) == 1.0)


@requires_jit
def test_dlpack_query_without_out(rng, attn):
    """out is allocated from the shape of a DLPack-only q (viewed through np.from_dlpack)."""
    q, k, v, table, lens = make_case(rng, lens=[25])
    out = attn(DLPackOnly(q), k, v, table, lens)
    np.testing.assert_allclose(out, hg.reference_attention(q, k, v, table, lens), **tolerance("f32"))


def test_pool_view_outlives_the_cache():
    """A numpy view keeps the pool alive: no dangling memory after the cache object is gone."""
    import gc

    cache = hg.KvCache(kv_heads=2, block_size=16, head_dim=8, topology=hg.Topology.from_config(TWO_TIERS))
    seq = cache.create_sequence()
    cache.append(seq, np.full((3, 2, 8), 5.0), np.zeros((3, 2, 8)))
    block = cache.block_table(seq)[0]
    k = cache.k()
    del cache
    gc.collect()
    assert np.all(k[block, :, :3] == 5.0)
