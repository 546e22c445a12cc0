"""The dense kernel under different OpenMP thread counts.

The kernel splits a chunk's kv-head units into groups when (sequence, chunk) pairs are fewer than
two per thread (docs/cpu-path.md), so the thread count changes the loop structure: with 1 thread
every iteration walks all units, with 16 threads short sequences get one unit per iteration (on
the AMX path, one kv head with all its units). Each
count runs in its own process (OpenMP reads OMP_NUM_THREADS once), on the same inputs; results
must match the float64 reference and be bit-identical across counts, since a unit's arithmetic
does not depend on which iteration runs it.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hybridgen as hg
from conftest import make_case, requires_jit, tolerance

# group, kv heads, head dim, dtype, lens, amx: group 16 has two units per kv head (sub-groups of 8)
# on the vector path and four (sub-groups of 4) on the AMX path. Where the machine has no AMX the
# amx cases run the vector path.
CASES = [
    (4, 8, 128, "f32", [1500], False),
    (16, 2, 64, "bf16", [40, 3000], False),
    (2, 3, 80, "f16", [17, 1025, 0], False),
    (4, 8, 128, "bf16", [1500, 0], True),
    (16, 3, 64, "bf16", [40, 3000], True),
]

RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import hybridgen as hg
    data = dict(np.load(sys.argv[1]))
    for pool in ("k", "v"):  # stored as raw bits: .npz has no bf16
        data[pool] = data[pool].view(hg._arrays.numpy_dtype(sys.argv[3]))
    kw = dict(kv_dtype=sys.argv[3], q_heads=int(data["q"].shape[1]),
              kv_heads=int(data["k"].shape[1]), head_dim=int(data["q"].shape[2]),
              block_size=int(data["k"].shape[2]))
    fn = hg.compile_attention(options={"amx": sys.argv[4] == "1"}, **kw)
    out = fn(data["q"], data["k"], data["v"], data["table"], data["lens"])
    np.save(sys.argv[2], out)
""")


@requires_jit
@pytest.mark.parametrize("case", CASES,
                         ids=lambda c: f"g{c[0]}_kv{c[1]}_{c[3]}" + ("_amx" if c[5] else ""))
def test_thread_counts_agree(rng, tmp_path, case):
    group, kv_heads, head_dim, dtype, lens, amx = case
    q, k, v, table, lens = make_case(rng, lens=lens, dtype=dtype, q_heads=group * kv_heads,
                                     kv_heads=kv_heads, head_dim=head_dim)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, q=q, k=k.view(f"u{k.itemsize}"), v=v.view(f"u{v.itemsize}"), table=table,
             lens=lens)
    ref = hg.reference_attention(q, k, v, table, lens)
    outputs = []
    for threads in (1, 16):
        out = tmp_path / f"out{threads}.npy"
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        subprocess.run([sys.executable, "-c", RUN, str(inputs), str(out), dtype, str(int(amx))],
                       env=env, check=True, timeout=300)
        outputs.append(np.load(out))
    for out in outputs:
        np.testing.assert_allclose(out, ref, **tolerance(dtype))
    assert np.array_equal(outputs[0], outputs[1])
