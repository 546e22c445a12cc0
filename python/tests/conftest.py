# Shared fixtures of the hybridgen pytest suite: random paged-attention cases and skip markers.
import numpy as np
import pytest

import hybridgen as hg

requires_jit = pytest.mark.skipif(not hg.has_jit, reason="built without the compiler driver (JIT)")

# Two tiers so traces show occupancy per tier: emulated HBM (host memory) for the newest tokens and
# DRAM for the rest. Small capacities keep tests fast and make exhaustion reachable.
TWO_TIERS = ("name=hbm,kind=hbm,capacity=4MiB,bandwidth=4800,emulated=1;"
             "name=dram,kind=dram,node=0,capacity=8MiB,bandwidth=40")


def np_dtype(name):
    return hg._arrays.numpy_dtype(name)


def make_case(rng, *, lens, q_heads=8, kv_heads=2, head_dim=32, block_size=16, dtype="f32",
              extra_blocks=3, max_blocks=None):
    """Random q, pools, a shuffled block table and lens for a ragged batch (docs/interfaces.md)."""
    lens = np.asarray(lens, dtype=np.int32)
    per_seq = [-(-int(n) // block_size) for n in lens]
    max_blocks = max_blocks or max(1, max(per_seq))
    num_blocks = sum(per_seq) + extra_blocks
    perm = rng.permutation(num_blocks).astype(np.int32)
    table = np.full((len(lens), max_blocks), -1, dtype=np.int32)
    used = 0
    for b, nb in enumerate(per_seq):
        table[b, :nb] = perm[used:used + nb]
        used += nb
    shape = (num_blocks, kv_heads, block_size, head_dim)
    k = rng.standard_normal(shape).astype(np_dtype(dtype))
    v = rng.standard_normal(shape).astype(np_dtype(dtype))
    q = rng.standard_normal((len(lens), q_heads, head_dim)).astype(np.float32)
    return q, k, v, table, lens


def poison_tails(k, v, table, lens, block_size):
    """NaN (as bf16 bits) in every row of a sequence's last block past its length."""
    kb, vb = k.view(np.uint16), v.view(np.uint16)
    for b, n in enumerate(lens):
        blocks = -(-int(n) // block_size)
        if blocks and n % block_size:
            blk = table[b, blocks - 1]
            kb[blk, :, n % block_size:, :] = 0x7FC0
            vb[blk, :, n % block_size:, :] = 0x7FC0


def tolerance(dtype):
    # The KV values are exact in every dtype (the reference reads the same rounded values), so only
    # f32 accumulation error remains.
    return dict(rtol=2e-4, atol=2e-5)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
