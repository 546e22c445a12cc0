# Numerics of JIT-compiled hybrid attention against the float64 numpy reference.
import re

import numpy as np
import pytest

import hybridgen as hg
from hybridgen._host import cpu_has_flag
from conftest import make_case, poison_tails, requires_jit, tolerance

pytestmark = requires_jit


def compile_for(dtype, *, q_heads=8, kv_heads=2, head_dim=32, block_size=16, **kw):
    return hg.compile_attention(q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
                                block_size=block_size, kv_dtype=dtype, **kw)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("heads", [(8, 2), (4, 4), (8, 1)], ids=["gqa4", "mha", "mqa"])
def test_dense_matches_reference(rng, dtype, heads):
    qh, kvh = heads
    attn = compile_for(dtype, q_heads=qh, kv_heads=kvh, split=0)
    q, k, v, table, lens = make_case(rng, lens=[37, 1, 100, 16], q_heads=qh, kv_heads=kvh, dtype=dtype)
    out = attn(q, k, v, table, lens)
    assert out.dtype == np.float32 and out.shape == q.shape
    np.testing.assert_allclose(out, hg.reference_attention(q, k, v, table, lens), **tolerance(dtype))


def check_k_transposed(rng, dtype, case, options):
    """Sequences of 37, 1, 100, 16 and 0 tokens (NaN past each end for 16-bit KV) with case =
    (q heads, kv heads, head dim, block size, split), compiled with k_transposed and |options|,
    run on the transposed pool and checked against the float64 reference. Returns the kernel, the
    row-major case and the output."""
    qh, kvh, d, bs, split = case
    q, k, v, table, lens = make_case(rng, lens=[37, 1, 100, 16, 0], q_heads=qh, kv_heads=kvh,
                                     head_dim=d, block_size=bs, dtype=dtype)
    if dtype != "f32":
        poison_tails(k, v, table, lens, bs)
    attn = compile_for(dtype, q_heads=qh, kv_heads=kvh, head_dim=d, block_size=bs, split=split,
                       options={"k_transposed": True, **options})
    out = attn(q, hg.transpose_k_pieces(k), v, table, lens)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, hg.reference_attention(q, k, v, table, lens), **tolerance(dtype))
    return attn, (q, k, v, table, lens), out


# Where the transposed kernel's prefetches go: all in the logits; each piece's logits in one loop
# with the previous piece's p.V (overlap_pieces, the default except on Zen 4), also with p.V
# loading splatted probabilities (splat_probs), or with p.V two pieces behind the logits
# (overlap_pv_lag 2); spread over the piece (spread_prefetch, Zen 4's default).
PLACEMENTS = {"logits-prefetch": {"spread_prefetch": 0, "overlap_pieces": 0},
              "overlapped": {"spread_prefetch": 0, "overlap_pieces": 1},
              "overlapped-lag2": {"spread_prefetch": 0, "overlap_pieces": 1, "overlap_pv_lag": 2},
              "overlapped-splat": {"spread_prefetch": 0, "overlap_pieces": 1, "splat_probs": True},
              "spread-prefetch": {"spread_prefetch": 1, "overlap_pieces": 0}}


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", [(9, 3, 64, 16, 17), (8, 2, 128, 32, 0), (16, 2, 80, 16, 1000),
                                  (4, 4, 32, 8, 33)], ids=["g3", "g4-bs32", "g8-d80", "mha-bs8"])
def test_k_transposed_matches_reference(rng, dtype, case, placement):
    """k_transposed: K pieces stored [head_dim][block_size] (hg.transpose_k_pieces), the logits
    column by column. Partial blocks at both ends of a split, an empty sequence, NaN past each
    sequence's end (16-bit KV) and block sizes other than the register tile; the far prefetch
    on, its prefetches in the logits, overlapped (each piece's logits with the previous piece's
    p.V: all cases but 16-bit g8-d80, whose piece does not split evenly over p.V's row steps;
    also with p.V loading splatted probabilities, splat_probs) or spread over the piece (spread_prefetch, which applies to pieces of 4 KiB and more: g4-bs32,
    and f32 of g3 and g8-d80)."""
    attn, (q, k, v, table, lens), out = check_k_transposed(
        rng, dtype, case, {"far_prefetch_bytes": 8192, **PLACEMENTS[placement]})
    # The option changes what the kernel reads: the row-major pool is not what it computes on.
    assert not np.allclose(attn(q, k, v, table, lens)[:3], out[:3], rtol=1e-2)


@pytest.mark.parametrize("lag", [3, 4])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_overlap_pv_lag_deeper_queues(rng, dtype, lag):
    """p.V 3 or 4 pieces behind the logits (overlap_pv_lag up to its bound): the queue of pending
    pieces moves up through more entries, and a partial first block waits behind whole ones
    before its p.V runs alone; four units, so consecutive pieces belong to different units."""
    check_k_transposed(rng, dtype, (16, 4, 128, 16, 17),
                       {"far_prefetch_bytes": 8192, "spread_prefetch": 0, "overlap_pieces": 1,
                        "overlap_pv_lag": lag})


@pytest.mark.skipif(not (cpu_has_flag("avx2") and cpu_has_flag("fma") and cpu_has_flag("f16c")),
                    reason="x86-64-v3 code needs AVX2, FMA and F16C to run here")
@pytest.mark.parametrize("overlap,splat,lag", [(0, False, 1), (1, False, 1), (0, True, 1),
                                               (1, True, 1), (1, False, 2)],
                         ids=["logits-prefetch", "overlapped", "splat", "overlapped-splat",
                              "overlapped-lag2"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", [(8, 2, 128, 16, 17), (8, 2, 128, 16, 0), (9, 3, 64, 32, 40),
                                  (4, 4, 32, 8, 0)],
                         ids=["g4", "g4-split0", "g3-bs32", "mha-bs8"])
def test_k_transposed_on_avx2_code(rng, dtype, case, overlap, splat, lag):
    """The AVX2 kernels (target x86-64-v3: 8 lanes, 16 registers) on transposed K: bf16 tiles of
    16 rows widen each column as (even, odd) rows and zip the logits back (g4, g3-bs32); 8-row
    blocks keep one vector per column (mha-bs8). Partial blocks at both ends of the split and
    NaN past each sequence's end; the pieces one by one or overlapped (overlap_pieces; g4's
    logits then go in passes over the heads, 2 for 16-bit KV and 4 for f32; g3-bs32's 32-row
    blocks exceed AVX2's row tile, so there it does not apply); p.V broadcasting each
    probability or loading its splatted copy (splat_probs), one by one or overlapped; p.V one
    or two pieces behind the logits (overlap_pv_lag)."""
    check_k_transposed(rng, dtype, case, {"target_cpu": "x86-64-v3", "overlap_pieces": overlap,
                                          "splat_probs": splat, "overlap_pv_lag": lag})


# What znver4 code may use: Zen 4's AVX-512 subsets (Intel's Xeons since Sapphire Rapids have them);
# znver5 adds AVX-VNNI and VP2INTERSECT (the non-vector extras a KVM guest may hide are turned off
# below as the JIT names them).
ZEN4_FLAGS = ["avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_bf16",
              "avx512_vnni", "avx512ifma", "avx512vbmi", "avx512_vbmi2", "avx512_bitalg",
              "avx512_vpopcntdq", "gfni", "vaes", "vpclmulqdq"]
AMD_AVX512_FLAGS = {"znver4": ZEN4_FLAGS, "znver5": ZEN4_FLAGS + ["avx_vnni", "avx512_vp2intersect"]}


@pytest.mark.parametrize("target_cpu", ["znver4", "znver5"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", [(8, 2, 128, 16, 17), (8, 2, 128, 16, 0), (9, 3, 64, 16, 40),
                                  (8, 2, 128, 32, 33), (4, 4, 32, 8, 0)],
                         ids=["g4", "g4-split0", "g3", "g4-bs32", "mha-bs8"])
def test_k_transposed_amd_avx512_default(rng, dtype, case, target_cpu):
    """The driver's default for znver4 and znver5 on transposed K, which differs by KV dtype: f32
    planned as on AVX2 (8 lanes, 16 registers, the logits in passes over the heads) but compiled
    for the AMD target, with each piece's logits overlapped with the previous piece's p.V;
    bf16/f16 in 512-bit tiles, on znver4 with the prefetches spread over the piece (p.V in
    64-column tiles), on znver5 overlapped.
    Partial blocks at both ends of the split, NaN past each sequence's end. The JIT refuses a
    target that needs a feature this CPU lacks; the non-vector ones a KVM guest may hide (pku,
    mwaitx, ...) are turned off as the error names them."""
    if not all(cpu_has_flag(f) for f in AMD_AVX512_FLAGS[target_cpu]):
        pytest.skip(f"{target_cpu} code needs its AVX-512 subsets to run here")
    options = {"target_cpu": target_cpu}
    try:
        check_k_transposed(rng, dtype, case, options)
    except hg.CompileError as e:
        lacks = re.search(r"lacks (\S+) that", str(e))
        if lacks is None:
            raise
        options["target_features"] = ",".join("-" + f for f in lacks.group(1).split(","))
        check_k_transposed(rng, dtype, case, options)


@pytest.mark.parametrize("heads,bs", [((8, 2), 16), ((9, 3), 16), ((16, 2), 32)],
                         ids=["g4", "g3", "g8-bs32"])
@pytest.mark.parametrize("split", [0, 17, 33, 1000], ids=lambda s: f"split{s}")
@pytest.mark.parametrize("spread", [0, 1], ids=["logits-prefetch", "spread-prefetch"])
def test_k_transposed_with_bf16_dot_products(rng, heads, bs, split, spread):
    """k_transposed with bf16_dot / bf16_dot_rounded, where the CPU has AVX512-BF16: as (hi, lo)
    halves the logits stay f32 FMAs on transposed K and p.V takes vdpbf16ps, matching the f32
    path to f32 rounding; rounded once, q and p enter the dot products rounded to bf16 (the
    logits pair K's columns in registers; at bs 32 two registers of rows per column pair), and
    the result stays within the bf16-KV bound of the float64 reference and differs from the f32
    path by more than f32 rounding (the option is not silently ignored). Odd splits start and end
    partial pairs of rows; NaN past each sequence's end must not leak through p = 0; the far
    prefetch's placement (spread_prefetch) changes no result."""
    qh, kvh = heads
    q, k, v, table, lens = make_case(rng, lens=[37, 1, 100, 16, 0], q_heads=qh, kv_heads=kvh,
                                     head_dim=64, block_size=bs, dtype="bf16")
    poison_tails(k, v, table, lens, bs)
    kt = hg.transpose_k_pieces(k)
    kw = dict(q_heads=qh, kv_heads=kvh, head_dim=64, block_size=bs, split=split)
    run = lambda **o: compile_for("bf16", options={"amx": False, "k_transposed": True,
                                                   "far_prefetch_bytes": 8192,
                                                   "spread_prefetch": spread, **o},
                                  **kw)(q, kt, v, table, lens)
    fma, dot, rnd = run(), run(bf16_dot=True), run(bf16_dot_rounded=True)
    ref = hg.reference_attention(q, k, v, table, lens)
    scale = np.abs(ref).max()
    for out in (dot, rnd):
        assert np.isfinite(out).all()
    np.testing.assert_allclose(dot, ref, **tolerance("bf16"))
    assert np.abs(dot - fma).max() <= 2e-5 * scale
    assert np.abs(rnd - ref).max() <= 1e-2 * scale
    if cpu_has_flag("avx512_bf16"):
        assert 1e-5 * scale < np.abs(rnd - fma).max() <= 1e-2 * scale


def test_k_transposed_with_top_k_is_a_compile_error():
    with pytest.raises(hg.CompileError, match="not supported by the top-k kernel"):
        compile_for("f16", q_heads=8, kv_heads=2, head_dim=64, split=0, sparse=True, top_k=8,
                    options={"k_transposed": True})


@pytest.mark.parametrize("heads", [(8, 2), (9, 3), (10, 2), (16, 2)], ids=["g4", "g3", "g5", "g8"])
@pytest.mark.parametrize("split", [0, 17, 33, 1000], ids=lambda s: f"split{s}")
def test_bf16_dot_products_match_f32_path(rng, heads, split):
    """bf16 KV with vdpbf16ps (bf16_dot, where the CPU has AVX512-BF16; q and p as bf16 hi + lo
    halves) against the f32 FMA path: odd split points start and end partial pairs of rows, and
    NaN past each sequence's end must not leak through p = 0. Trivially tight without the
    instructions (both compiles then run the FMA path)."""
    qh, kvh = heads
    q, k, v, table, lens = make_case(rng, lens=[37, 1, 100, 16, 0], q_heads=qh, kv_heads=kvh,
                                     head_dim=64, dtype="bf16")
    poison_tails(k, v, table, lens, 16)
    kw = dict(q_heads=qh, kv_heads=kvh, head_dim=64, split=split)
    dot = compile_for("bf16", options={"amx": False, "bf16_dot": True}, **kw)(q, k, v, table, lens)
    fma = compile_for("bf16", options={"amx": False, "bf16_dot": False}, **kw)(q, k, v, table, lens)
    ref = hg.reference_attention(q, k, v, table, lens)
    assert np.isfinite(dot).all()
    np.testing.assert_allclose(dot, ref, **tolerance("bf16"))
    assert np.abs(dot - fma).max() <= 2e-5 * np.abs(ref).max()


@pytest.mark.parametrize("heads", [(8, 2), (9, 3)], ids=["g4", "g3"])
@pytest.mark.parametrize("split", [0, 33, 1000], ids=lambda s: f"split{s}")
def test_bf16_dot_rounded_within_bf16_tolerance(rng, heads, split):
    """bf16_dot_rounded: q and p rounded once to bf16 (as a bf16 model's attention). Against the
    float64 reference within the project's bf16-KV bound (1e-2 of the largest output); where the
    CPU has AVX512-BF16 it must differ from the f32 path by more than f32 rounding (the option is
    not silently ignored) and by less than bf16 rounding of q and p can explain."""
    qh, kvh = heads
    q, k, v, table, lens = make_case(rng, lens=[37, 1, 100, 16, 0], q_heads=qh, kv_heads=kvh,
                                     head_dim=64, dtype="bf16")
    poison_tails(k, v, table, lens, 16)
    kw = dict(q_heads=qh, kv_heads=kvh, head_dim=64, split=split)
    rnd = compile_for("bf16", options={"amx": False, "bf16_dot_rounded": True}, **kw)(
        q, k, v, table, lens)
    fma = compile_for("bf16", options={"amx": False}, **kw)(q, k, v, table, lens)
    ref = hg.reference_attention(q, k, v, table, lens)
    scale = np.abs(ref).max()
    assert np.isfinite(rnd).all()
    assert np.abs(rnd - ref).max() <= 1e-2 * scale
    if cpu_has_flag("avx512_bf16"):
        assert 1e-5 * scale < np.abs(rnd - fma).max() <= 1e-2 * scale


def rising_logits_case(rng, dtype, block_size=16):
    """A case whose logits climb block by block, in small steps and large ones: q's first element
    is 10 and K's first column lifts every row of a sequence's j-th block by offsets[j] logits
    (wrapping), so the online softmax's running maximum is raised mid-sequence, by 1.5 to 34,
    and each chunk's partial must carry the last one."""
    q, k, v, table, lens = make_case(rng, lens=[150, 37, 100], q_heads=8, kv_heads=2,
                                     head_dim=32, block_size=block_size, dtype=dtype)
    offsets = [0.0, 3.0, 25.0, 26.0, 60.0, 61.5, 58.0, 90.0, 95.0, 96.0]
    q[:, :, 0] = 10.0
    scale = 1.0 / np.sqrt(32)
    for b, n in enumerate(lens):
        for j in range(-(-int(n) // block_size)):
            k[table[b, j], :, :, 0] = offsets[j % len(offsets)] / (10.0 * scale)
    return q, k, v, table, lens


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("split", [0, 40, 1000], ids=lambda s: f"split{s}")
def test_rising_logits_partials_carry_the_true_maximum(rng, dtype, split):
    """With the maximum raised mid-sequence, each partial's m is the exact maximum of its logits,
    l the sum against it (the accumulators rescaled at every rise), and the output matches the
    float64 reference. (A lazily raised maximum, tried on Zen 5, had to pass this too.)"""
    q, k, v, table, lens = rising_logits_case(rng, dtype)
    attn = compile_for(dtype, split=split, return_partials=True, options={"amx": False})
    res = attn(q, k, v, table, lens)
    for got, ref in zip(res.partials, (hg.reference_partial(q, k, v, table, lens, 0, split),
                                       hg.reference_partial(q, k, v, table, lens, split, None))):
        nonempty = ref.l > 0
        np.testing.assert_allclose(got.m[nonempty], ref.m[nonempty], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got.l, ref.l, rtol=1e-4)
    np.testing.assert_allclose(res.out, hg.reference_attention(q, k, v, table, lens),
                               **tolerance(dtype))


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_rising_logits_k_transposed(rng, dtype, placement):
    """Rising logits in every placement of the transposed kernel, each sequence in one chunk:
    a softmax that kept its first block's maximum would overflow f32 (e^96)."""
    q, k, v, table, lens = rising_logits_case(rng, dtype)
    attn = compile_for(dtype, split=0, options={"k_transposed": True, **PLACEMENTS[placement]})
    out = attn(q, hg.transpose_k_pieces(k), v, table, lens)
    np.testing.assert_allclose(out, hg.reference_attention(q, k, v, table, lens),
                               **tolerance(dtype))


@pytest.mark.parametrize("split", [0, 20, 32, 100, 1000], ids=lambda s: f"split{s}")
def test_static_split_partials(rng, split):
    """Each device's partial covers its token range; the merge equals the dense result."""
    attn = compile_for("f32", split=split, return_partials=True)
    q, k, v, table, lens = make_case(rng, lens=[100, 45, 7])
    res = attn(q, k, v, table, lens)
    assert isinstance(res, hg.AttentionResult) and len(res.partials) == 2
    ref_first = hg.reference_partial(q, k, v, table, lens, 0, split)
    ref_second = hg.reference_partial(q, k, v, table, lens, split, None)
    for got, ref in zip(res.partials, (ref_first, ref_second)):
        nonempty = ref.l > 0
        np.testing.assert_allclose(got.l, ref.l, rtol=1e-4)
        np.testing.assert_allclose(got.m[nonempty], ref.m[nonempty], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got.o[nonempty], ref.o[nonempty], rtol=1e-4, atol=2e-5)
        assert np.all(got.o[~nonempty] == 0)
        assert np.all(np.isneginf(got.m[~nonempty]))
    merged = hg.merge_partials([ref_first, ref_second])
    np.testing.assert_allclose(res.out, merged.o, **tolerance("f32"))
    np.testing.assert_allclose(res.out, hg.reference_attention(q, k, v, table, lens), **tolerance("f32"))


def test_runtime_split_without_scheduler_puts_everything_first(rng):
    """No installed scheduler: hgrt_split_point is INT64_MAX, all tokens on the first device."""
    assert hg._native.installed_context() is None
    attn = compile_for("f16", split="runtime", return_partials=True)
    q, k, v, table, lens = make_case(rng, lens=[50, 3], dtype="f16")
    res = attn(q, k, v, table, lens)
    assert np.all(res.partials[1].l == 0)
    np.testing.assert_allclose(res.out, hg.reference_attention(q, k, v, table, lens), **tolerance("f16"))


@pytest.mark.parametrize("split", [0, 24, 64])
def test_runtime_split_reads_installed_scheduler(rng, split):
    attn = compile_for("bf16", split="runtime", return_partials=True, segment_id=3)
    q, k, v, table, lens = make_case(rng, lens=[64, 30], dtype="bf16")
    with hg.Scheduler("static", static_split=split) as sched:
        sched.begin_step(64)
        res = attn(q, k, v, table, lens)
    ref_first = hg.reference_partial(q, k, v, table, lens, 0, split)
    np.testing.assert_allclose(res.partials[0].l, ref_first.l, rtol=1e-4)
    np.testing.assert_allclose(res.out, hg.reference_attention(q, k, v, table, lens), **tolerance("bf16"))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_sparse_with_large_top_k_equals_dense(rng, dtype):
    q, k, v, table, lens = make_case(rng, lens=[90, 33], dtype=dtype)
    # Same arithmetic with the vector kernels only (the sparse kernel has no AMX path, while the
    # dense kernel, and the dense second device of the sparse module, take it where available).
    vector_only = {"amx": False}
    dense = compile_for(dtype, split=40, options=vector_only)(q, k, v, table, lens)
    sparse = compile_for(dtype, split=40, sparse=True, top_k=128, options=vector_only)(q, k, v, table, lens)
    np.testing.assert_allclose(sparse, dense, rtol=1e-5, atol=1e-6)
    dense = compile_for(dtype, split=40)(q, k, v, table, lens)
    sparse = compile_for(dtype, split=40, sparse=True, top_k=128)(q, k, v, table, lens)
    np.testing.assert_allclose(sparse, dense, **tolerance(dtype))
    np.testing.assert_allclose(sparse, hg.reference_attention(q, k, v, table, lens), **tolerance(dtype))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_sparse_top_k_keeps_largest_logits_on_first_device(rng, dtype):
    q, k, v, table, lens = make_case(rng, lens=[90, 60], dtype=dtype)
    attn = compile_for(dtype, split=64, sparse=True, top_k=8, return_partials=True)
    res = attn(q, k, v, table, lens)
    ref_first = hg.reference_partial(q, k, v, table, lens, 0, 64, top_k=8)
    np.testing.assert_allclose(res.partials[0].o, ref_first.o, rtol=1e-4, atol=2e-5)
    ref_second = hg.reference_partial(q, k, v, table, lens, 64, None)
    merged = hg.merge_partials([ref_first, ref_second])
    np.testing.assert_allclose(res.out, merged.o, rtol=1e-4, atol=2e-5)


def test_scale_softcap_window(rng):
    q, k, v, table, lens = make_case(rng, lens=[80, 20])
    attn = compile_for("f32", split=30, scale=0.3, softcap=5.0, window=50)
    ref = hg.reference_attention(q, k, v, table, lens, scale=0.3, softcap=5.0, window=50)
    np.testing.assert_allclose(attn(q, k, v, table, lens), ref, **tolerance("f32"))


def test_empty_sequence_gives_zeros(rng):
    q, k, v, table, lens = make_case(rng, lens=[0, 17])
    out = compile_for("f32", split=8)(q, k, v, table, lens)
    assert np.all(out[0] == 0)
    np.testing.assert_allclose(out[1], hg.reference_attention(q, k, v, table, lens)[1], **tolerance("f32"))


def test_mlir_text_module(rng):
    """MLIR text in, Function out: the attention spec's own module compiled by hand."""
    spec = hg.attention_spec(q_heads=4, kv_heads=2, head_dim=16, block_size=8, split=5)
    module = hg.compile(hg.build_attention_module(spec))
    fn = module["hg_attention"]
    assert [dt for dt, _ in fn.signature] == ["f32", "f32", "f32", "i32", "i32", "f32"]
    q, k, v, table, lens = make_case(rng, lens=[19, 8], q_heads=4, kv_heads=2, head_dim=16, block_size=8)
    out = np.zeros_like(q)
    fn(q, k, v, table, lens, out)
    np.testing.assert_allclose(out, hg.reference_attention(q, k, v, table, lens), **tolerance("f32"))
