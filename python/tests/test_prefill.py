# hg.prefill_attention compiled through hybridgen.compile against reference_prefill_attention, and
# the reference itself against a brute-force causal attention (so the two cannot share a mistake).
import numpy as np
import pytest

import hybridgen as hg
from hybridgen.reference import reference_attention, reference_prefill_attention
from conftest import make_case, requires_jit, tolerance


def prefill_mlir(*, q_heads, kv_heads, head_dim, block_size, dtype, scale, window=None,
                 softcap=None):
    q = f"memref<?x?x{q_heads}x{head_dim}xf32>"
    kv = f"memref<?x{kv_heads}x{block_size}x{head_dim}x{dtype}>"
    attrs = f"scale = {scale:.9e} : f32"
    if window is not None:
        attrs += f", window = {window}"
    if softcap is not None:
        attrs += f", softcap = {softcap:.6e} : f32"
    return f"""
func.func @prefill(%q: {q}, %k: {kv}, %v: {kv}, %bt: memref<?x?xi32>, %lens: memref<?xi32>,
                   %o: {q}) {{
  hg.prefill_attention q(%q : {q}) kv(%k, %v : {kv}, {kv}) table(%bt : memref<?x?xi32>)
      lens(%lens : memref<?xi32>) out(%o : {q}) {{{attrs}}}
  return
}}
"""


def test_reference_matches_token_by_token_decode(rng):
    """Row t of a chunk is decode attention over the first p + 1 tokens (p its position)."""
    q_heads, kv_heads, chunk = 8, 2, 5
    _, k, v, table, lens = make_case(rng, lens=[40, 5], q_heads=q_heads, kv_heads=kv_heads)
    q = rng.standard_normal((2, chunk, q_heads, 32)).astype(np.float32)
    got = reference_prefill_attention(q, k, v, table, lens, window=7, softcap=4.0)
    for t in range(chunk):
        pos_lens = (lens - chunk + t + 1).astype(np.int32)
        want = reference_attention(q[:, t], k, v, table, pos_lens, window=7, softcap=4.0)
        np.testing.assert_allclose(got[:, t], want, rtol=1e-12, atol=1e-12)


@requires_jit
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("heads", [(8, 2), (4, 4)], ids=["gqa4", "mha"])
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_prefill_matches_reference(rng, dtype, heads, chunk):
    q_heads, kv_heads = heads
    head_dim, block_size = 32, 16
    prefixes = [0, 3, 150]
    lens = [p + chunk for p in prefixes]
    _, k, v, table, lens = make_case(rng, lens=lens, q_heads=q_heads, kv_heads=kv_heads,
                                     head_dim=head_dim, dtype=dtype)
    scale = 1.0 / np.sqrt(head_dim)
    module = hg.compile(prefill_mlir(q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
                                     block_size=block_size, dtype=dtype, scale=scale))
    q = rng.standard_normal((len(lens), chunk, q_heads, head_dim)).astype(np.float32)
    out = np.full_like(q, np.nan)
    module.call("prefill", q, k, v, table, lens, out)
    want = reference_prefill_attention(q, k, v, table, lens, scale=np.float32(scale))
    np.testing.assert_allclose(out, want, **tolerance(dtype))


@requires_jit
def test_prefill_window_softcap(rng):
    _, k, v, table, lens = make_case(rng, lens=[90, 33], q_heads=8, kv_heads=2)
    scale = 0.125
    module = hg.compile(prefill_mlir(q_heads=8, kv_heads=2, head_dim=32, block_size=16,
                                     dtype="f32", scale=scale, window=20, softcap=3.0))
    q = rng.standard_normal((2, 30, 8, 32)).astype(np.float32)
    out = np.full_like(q, np.nan)
    module.call("prefill", q, k, v, table, lens, out)
    want = reference_prefill_attention(q, k, v, table, lens, scale=scale, window=20, softcap=3.0)
    np.testing.assert_allclose(out, want, **tolerance("f32"))


@requires_jit
def test_prefill_with_split_is_a_compile_error():
    text = prefill_mlir(q_heads=8, kv_heads=2, head_dim=32, block_size=16, dtype="f32",
                        scale=0.125).replace("scale = ", "split = #hg.split<[cpu, gpu], point = 4>, scale = ")
    with pytest.raises(hg.CompileError, match="takes no split: prefill runs on one device"):
        hg.compile(text)


@requires_jit
@pytest.mark.parametrize("head_dim", [4, 8, 20, 256])
@pytest.mark.parametrize("block_size", [1, 8])
def test_prefill_head_dims_and_blocks(rng, head_dim, block_size):
    """Row steps of 4/2/1 K/V rows (and a sum tree narrower than 16 lanes), blocks of one token."""
    _, k, v, table, lens = make_case(rng, lens=[23, 9], q_heads=4, kv_heads=2, head_dim=head_dim,
                                     block_size=block_size)
    module = hg.compile(prefill_mlir(q_heads=4, kv_heads=2, head_dim=head_dim,
                                     block_size=block_size, dtype="f32", scale=0.3))
    q = rng.standard_normal((2, 9, 4, head_dim)).astype(np.float32)
    out = np.full_like(q, np.nan)
    module.call("prefill", q, k, v, table, lens, out)
    want = reference_prefill_attention(q, k, v, table, lens, scale=np.float32(0.3))
    np.testing.assert_allclose(out, want, **tolerance("f32"))


@requires_jit
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", [(9, 3, 64, 16, 7), (8, 2, 32, 8, 64), (4, 4, 20, 1, 5)],
                         ids=["g3-d64", "g4-bs8", "mha-d20-bs1"])
def test_prefill_k_transposed(rng, dtype, case):
    """k_transposed: K pieces stored [head_dim][block_size]; the prefill kernel's logits then
    take each column of a block once for up to 4 query rows. Query rows not a multiple of 4,
    partial blocks at both ends, a window and a softcap."""
    q_heads, kv_heads, head_dim, block_size, chunk = case
    lens = [p + chunk for p in (0, 3, 150)]
    _, k, v, table, lens = make_case(rng, lens=lens, q_heads=q_heads, kv_heads=kv_heads,
                                     head_dim=head_dim, block_size=block_size, dtype=dtype)
    scale = 1.0 / np.sqrt(head_dim)
    text = prefill_mlir(q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, dtype=dtype, scale=scale, window=100, softcap=5.0)
    module = hg.compile(text, {"k_transposed": True})
    q = rng.standard_normal((len(lens), chunk, q_heads, head_dim)).astype(np.float32)
    out = np.full_like(q, np.nan)
    module.call("prefill", q, hg.transpose_k_pieces(k), v, table, lens, out)
    want = reference_prefill_attention(q, k, v, table, lens, scale=np.float32(scale), window=100,
                                       softcap=5.0)
    np.testing.assert_allclose(out, want, **tolerance(dtype))
