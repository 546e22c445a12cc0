"""The AMX path of the dense bf16 kernel against the vector path and the float64 reference.

Shapes the C++ driver tests do not cover: GQA groups 3 and 6 (AMX sub-groups of 1 and 2), head
dim 160 (five tile columns: passes of 2, 2 and 1), 48-token blocks (three tile slots per block),
zero-length sequences, and NaN in every row past a sequence's end. Where the machine has no AMX
both compiles run the vector path and the comparison is trivially tight.
"""
import numpy as np
import pytest

import hybridgen as hg
from conftest import make_case, poison_tails, tolerance

CASES = [
    # group, kv heads, head dim, block, lens, split, window, softcap
    (3, 2, 160, 48, [0, 517, 95], 200, None, None),
    (6, 1, 96, 16, [333, 1], 0, 50, None),
    (4, 2, 128, 64, [700, 64, 65], 10**9, None, 7.0),
    (1, 3, 32, 32, [257, 31], 100, 300, None),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"g{c[0]}_kv{c[1]}_d{c[2]}_b{c[3]}")
def test_amx_and_vector_paths_agree(rng, case):
    group, kv_heads, head_dim, block, lens, split, window, softcap = case
    shape = dict(q_heads=group * kv_heads, kv_heads=kv_heads, head_dim=head_dim, block_size=block)
    q, k, v, table, lens = make_case(rng, lens=lens, dtype="bf16", **shape)
    poison_tails(k, v, table, lens, block)
    kw = dict(kv_dtype="bf16", split=split, window=window, softcap=softcap, **shape)
    amx = hg.compile_attention(**kw)(q, k, v, table, lens)
    vector = hg.compile_attention(options={"amx": False}, **kw)(q, k, v, table, lens)
    ref = hg.reference_attention(q, k, v, table, lens, window=window, softcap=softcap)
    assert np.isfinite(amx).all() and np.isfinite(vector).all()
    np.testing.assert_allclose(amx, ref, **tolerance("bf16"))
    np.testing.assert_allclose(vector, ref, **tolerance("bf16"))
    # Both paths keep ~16 bits or more of every operand: they agree far inside the bf16 bound.
    assert np.abs(amx - vector).max() <= 1e-4 * np.abs(ref).max()
