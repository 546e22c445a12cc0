# The float64 reference forwards of hybridgen.models: incremental vs full, RoPE, llama3 scaling,
# tied heads, sliding windows, OPT's position offset, Qwen2's biases, and clear errors.
import math

import numpy as np
import pytest

import hybridgen as hg
from hybridgen.models import (ModelError, Reference, UnsupportedModelError, apply_rope,
                              architecture, forward, random_weights, rope_inv_freq, tiny_config)
from hybridgen.models.reference import rotate_half

ARCHS = ["llama", "llama3", "mistral", "qwen2", "opt"]
# Options beyond the tiny defaults: Llama with attention/MLP biases, Qwen2 with sliding layers,
# OPT-350m's post-LayerNorm with project_in/out.
VARIANTS = {
    "llama-biases": ("llama", dict(attention_bias=True, mlp_bias=True)),
    "qwen2-sliding": ("qwen2", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1)),
    "opt-350m": ("opt", dict(do_layer_norm_before=False, word_embed_proj_dim=32)),
}


def _ids(n, vocab=256, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, n)


@pytest.mark.parametrize("arch", ARCHS + list(VARIANTS))
def test_incremental_equals_full_forward(arch):
    base, extra = VARIANTS.get(arch, (arch, {}))
    cfg = tiny_config(base, **extra)
    w = random_weights(cfg, seed=3)
    ids = _ids(21)  # longer than mistral's window of 8
    full = forward(cfg, w, ids)
    ref = Reference(cfg, w)
    cache = ref.new_cache()  # the test keeps the cache: prefill 5, a chunk of 3, then one by one
    parts = [ref.forward(ids[:5], cache), ref.forward(ids[5:8], cache)]
    parts += [ref.forward(ids[t:t + 1], cache) for t in range(8, len(ids))]
    inc = np.concatenate(parts)
    assert cache.length == len(ids)
    assert inc.shape == full.shape == (len(ids), cfg["vocab_size"])
    np.testing.assert_allclose(inc, full, rtol=1e-10, atol=1e-10)


def test_rope_is_a_rotation_of_the_two_halves():
    d, inv = 8, rope_inv_freq({"rope_theta": 100.0}, 8)
    # e_i rotates inside the plane (i, i + d/2) by angle pos * inv_freq[i] (rotate_half layout).
    for i in range(d // 2):
        x = np.zeros((1, d))
        x[0, i] = 1.0
        y = apply_rope(x, np.array([3]), inv)[0]
        want = np.zeros(d)
        want[i], want[i + d // 2] = math.cos(3 * inv[i]), math.sin(3 * inv[i])
        np.testing.assert_allclose(y, want, atol=1e-15)
    np.testing.assert_array_equal(rotate_half(np.arange(4.0)), [-2.0, -3.0, 0.0, 1.0])


def test_rope_properties():
    rng = np.random.default_rng(0)
    inv = rope_inv_freq({"rope_theta": 10000.0}, 16)
    q, k = rng.standard_normal((2, 16))
    # Position 0 is the identity; norms are kept.
    np.testing.assert_allclose(apply_rope(q[None], np.array([0]), inv)[0], q, atol=1e-15)
    qs = apply_rope(np.repeat(q[None], 5, 0), np.arange(5) * 7, inv)
    np.testing.assert_allclose(np.linalg.norm(qs, axis=1), np.linalg.norm(q), rtol=1e-12)

    # q.k after RoPE depends only on the distance between the positions.
    def score(m, n):
        return apply_rope(q[None], np.array([m]), inv)[0] @ apply_rope(k[None], np.array([n]), inv)[0]
    assert score(10, 3) == pytest.approx(score(107, 100), rel=1e-9)
    assert score(10, 3) != pytest.approx(score(10, 4), rel=1e-3)


def test_llama3_scaling_hand_worked_frequencies():
    # head_dim 16, theta 5e5: inv_freq_i = 5e5^(-i/8), wavelength 2 pi / inv_freq_i. Llama 3.1's
    # constants (factor 8, low 1, high 4, original 8192) give the bands low_wavelen = 8192 and
    # high_wavelen = 2048:
    #   i = 0..3: wavelengths 6.28, 32.4, 167, 862 < 2048            -> kept
    #   i = 4:    inv = 1/sqrt(5e5) = 1.41421e-3, wavelength 4442.9,  -> smoothed with
    #             s = (8192 / 4442.9 - 1) / (4 - 1) = 0.28128, inv * ((1 - s) / 8 + s) = 5.2484e-4
    #   i = 5..7: wavelengths 22911, 118143, 609226 > 8192           -> inv / 8:
    #             2.74248e-4 / 8, 5.31830e-5 / 8, 1.03134e-5 / 8
    cfg = tiny_config("llama3")
    got = rope_inv_freq(cfg, 16)
    base = 500000.0 ** (-np.arange(8) / 8)
    np.testing.assert_allclose(got[:4], base[:4], rtol=1e-15)
    assert got[4] == pytest.approx(5.2484e-4, rel=1e-4)
    np.testing.assert_allclose(got[5:], base[5:] / 8, rtol=1e-15)
    np.testing.assert_allclose(got[5:], [3.4281e-5, 6.6479e-6, 1.2892e-6], rtol=1e-4)


def test_linear_scaling_divides_positions():
    cfg = {"rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 4.0}}
    x = np.random.default_rng(1).standard_normal((3, 16))
    scaled = apply_rope(x, np.array([4, 8, 40]), rope_inv_freq(cfg, 16))
    plain = apply_rope(x, np.array([1, 2, 10]), rope_inv_freq({"rope_theta": 10000.0}, 16))
    np.testing.assert_allclose(scaled, plain, rtol=1e-12, atol=1e-14)


def test_tied_head_is_the_embedding():
    tied = tiny_config("llama", tie_word_embeddings=True)
    w = random_weights(tied, seed=5)
    assert "lm_head.weight" not in w
    untied = dict(tied, tie_word_embeddings=False)
    ids = _ids(6)
    same = dict(w, **{"lm_head.weight": w["model.embed_tokens.weight"].copy()})
    np.testing.assert_allclose(forward(tied, w, ids), forward(untied, same, ids), rtol=1e-13)
    other = dict(w, **{"lm_head.weight": w["model.embed_tokens.weight"][::-1].copy()})
    assert not np.allclose(forward(tied, w, ids), forward(untied, other, ids))
    with pytest.raises(ModelError, match="lm_head.weight"):
        forward(untied, w, ids)  # untied needs its own head


def test_sliding_window_masks_exactly_the_old_tokens():
    # One layer, so the receptive field of position p is exactly tokens p - W + 1 .. p.
    cfg = tiny_config("mistral", num_hidden_layers=1, sliding_window=4)
    w = random_weights(cfg, seed=2)
    ids = _ids(12)
    base = forward(cfg, w, ids)
    p = 11
    outside, inside = ids.copy(), ids.copy()
    outside[p - 4] = (ids[p - 4] + 1) % 256   # distance 4 = window: not visible
    inside[p - 3] = (ids[p - 3] + 1) % 256    # distance 3: visible
    np.testing.assert_allclose(forward(cfg, w, outside)[p], base[p], rtol=1e-13)
    assert not np.allclose(forward(cfg, w, inside)[p], base[p])
    # A window longer than the sequence is plain causal attention.
    wide = dict(cfg, sliding_window=64)
    none = dict(cfg, sliding_window=None)
    np.testing.assert_allclose(forward(wide, w, ids), forward(none, w, ids), rtol=1e-13)
    assert not np.allclose(forward(cfg, w, ids), forward(none, w, ids))


def test_causal():
    cfg = tiny_config("llama")
    w = random_weights(cfg)
    ids = _ids(10)
    changed = ids.copy()
    changed[7] = (ids[7] + 1) % 256
    a, b = forward(cfg, w, ids), forward(cfg, w, changed)
    np.testing.assert_array_equal(a[:7], b[:7])
    assert not np.allclose(a[7:], b[7:])


def test_opt_positions_are_offset_by_two():
    cfg = tiny_config("opt")
    w = random_weights(cfg, seed=4)
    ids = _ids(5)
    base = forward(cfg, w, ids)
    pos = w["model.decoder.embed_positions.weight"]
    unused = dict(w, **{"model.decoder.embed_positions.weight": np.concatenate(
        [np.full((2, pos.shape[1]), np.nan), pos[2:]])})
    np.testing.assert_allclose(forward(cfg, unused, ids), base, rtol=1e-13)  # rows 0, 1 unused
    row2 = pos.copy()
    row2[2] += np.linspace(-1, 1, pos.shape[1])  # position 0 reads row 2 (not a constant: LN drops it)
    got = forward(cfg, dict(w, **{"model.decoder.embed_positions.weight": row2}), ids)
    assert not np.allclose(got[0], base[0])


def test_qwen2_biases_are_used_and_are_all_that_differs_from_llama():
    cfg = tiny_config("qwen2")
    w = random_weights(cfg, seed=6)
    ids = _ids(7)
    assert "model.layers.0.self_attn.q_proj.bias" in w and "model.layers.0.self_attn.o_proj.bias" not in w
    zero = {k: (np.zeros_like(v) if k.endswith("_proj.bias") else v) for k, v in w.items()}
    nobias = {k: v for k, v in w.items() if not k.endswith("_proj.bias")}
    llama = dict(cfg, architectures=["LlamaForCausalLM"], model_type="llama")
    np.testing.assert_allclose(forward(cfg, zero, ids), forward(llama, nobias, ids), rtol=1e-13)
    assert not np.allclose(forward(cfg, w, ids), forward(cfg, zero, ids))


def test_clear_errors():
    cfg = tiny_config("llama")
    w = random_weights(cfg)
    with pytest.raises(UnsupportedModelError, match="GPTNeoXForCausalLM"):
        architecture({"architectures": ["GPTNeoXForCausalLM"]})
    with pytest.raises(hg.HybridgenError, match="hidden_size"):
        Reference({k: v for k, v in cfg.items() if k != "hidden_size"}, w)
    with pytest.raises(UnsupportedModelError, match="yarn"):
        Reference(dict(cfg, rope_scaling={"rope_type": "yarn", "factor": 2.0}), w)
    with pytest.raises(ModelError, match="low_freq_factor"):
        rope_inv_freq(dict(cfg, rope_scaling={"rope_type": "llama3", "factor": 8.0}), 16)
    bad = dict(w, **{"model.norm.weight": np.ones(3)})
    with pytest.raises(ModelError, match=r"model.norm.weight.*\[3\].*\[64\]"):
        forward(cfg, bad, [1, 2])
    with pytest.raises(ModelError, match="token ids"):
        forward(cfg, w, [1, 256])


def test_variant_options_change_the_model():
    ids = _ids(12)
    for name, (base, extra) in VARIANTS.items():
        cfg = tiny_config(base, **extra)
        w = random_weights(cfg, seed=8)
        plain = tiny_config(base)
        if name == "llama-biases":
            assert "model.layers.0.self_attn.o_proj.bias" in w and "model.layers.0.mlp.up_proj.bias" in w
            nob = {k: v for k, v in w.items() if not k.endswith(".bias")}
            assert not np.allclose(forward(cfg, w, ids), forward(plain, nob, ids))
        elif name == "qwen2-sliding":
            # Layer 0 is full attention (max_window_layers 1), layer 1 is windowed.
            ref = Reference(cfg, w)
            assert ref.windows == [None, 4]
            assert not np.allclose(forward(cfg, w, ids), forward(plain, w, ids))
            # use_sliding_window False ignores sliding_window, as HF does.
            off = dict(cfg, use_sliding_window=False)
            np.testing.assert_allclose(forward(off, w, ids), forward(plain, w, ids), rtol=1e-13)
        else:
            assert w["model.decoder.embed_tokens.weight"].shape == (256, 32)
            assert "model.decoder.final_layer_norm.weight" not in w  # post-LN has no final LN
            assert np.all(np.isfinite(forward(cfg, w, ids)))
