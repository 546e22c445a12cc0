"""Float64 numpy forward of the decoder LLMs hybridgen compiles, independent of the compiler.

Written from the published architecture definitions with Hugging Face's modeling semantics and
weight names: Linear weights are [out, in] (y = x W^T + b), RoPE is the rotate_half form on the HF
layout (the two halves of each head are the pair of a rotation), attention is causal with optional
sliding window (token j is visible from position p when j <= p and j > p - window).

    logits = forward(config, weights, ids)             # full causal forward, [T, vocab] float64
    ref = Reference(config, weights)                   # weights converted to float64 once
    cache = ref.new_cache()
    step = ref.forward(ids[:5], cache)                 # prefill, then one token at a time
    step = ref.forward(ids[5:6], cache)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

from .errors import ModelError, UnsupportedModelError

# HF `architectures` entry -> the family name used throughout hybridgen.models.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "OPTForCausalLM": "opt",
}
_REQUIRED = object()


def architecture(config: Mapping) -> str:
    """The family ("llama", "mistral", "qwen2", "opt") of an HF config dict; clear error otherwise."""
    archs = config.get("architectures") or []
    for a in archs:
        if a in ARCHITECTURES:
            return ARCHITECTURES[a]
    if archs:
        raise UnsupportedModelError(
            f"config.json: architectures {list(archs)} is not supported "
            f"(supported: {', '.join(ARCHITECTURES)})")
    model_type = config.get("model_type")
    if model_type in ARCHITECTURES.values():
        return model_type
    raise UnsupportedModelError(
        f"config.json: neither 'architectures' nor 'model_type' ({model_type!r}) names a supported "
        f"architecture (supported: {', '.join(ARCHITECTURES)})")


def config_field(config: Mapping, name: str, default=_REQUIRED):
    """config[name], or |default|; a missing required field is a ModelError naming it."""
    value = config.get(name, None)
    if value is None:
        if default is _REQUIRED:
            raise ModelError(f"config.json: missing field '{name}'")
        return default
    return value


def rope_inv_freq(config: Mapping, head_dim: Optional[int] = None) -> np.ndarray:
    """Per-pair inverse frequencies [head_dim/2] float64, rope_scaling applied (llama3, linear)."""
    if head_dim is None:
        head_dim = _head_dim(config)
    theta = float(config_field(config, "rope_theta", 10000.0))
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    scaling = config.get("rope_scaling")
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return inv_freq
    if kind == "linear":
        # Positions divided by the factor: the same as dividing every frequency by it.
        return inv_freq / float(_scaling_field(scaling, "factor"))
    if kind == "llama3":
        factor = float(_scaling_field(scaling, "factor"))
        low = float(_scaling_field(scaling, "low_freq_factor"))
        high = float(_scaling_field(scaling, "high_freq_factor"))
        old_len = float(_scaling_field(scaling, "original_max_position_embeddings"))
        wavelen = 2 * math.pi / inv_freq
        # Long wavelengths (low frequencies) are slowed down by |factor|, short ones kept, and the
        # band between interpolates smoothly in old_len / wavelen.
        scaled = np.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return np.where(medium, smoothed, scaled)
    raise UnsupportedModelError(
        f"config.json: rope_scaling type {kind!r} is not supported (supported: llama3, linear)")


def _scaling_field(scaling: Mapping, name: str):
    if scaling.get(name) is None:
        raise ModelError(f"config.json: rope_scaling is missing field '{name}'")
    return scaling[name]


def rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """RoPE of x [..., T, head_dim] at integer |positions| [T] (rotate_half form, HF layout)."""
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([angles, angles], axis=-1)  # [T, head_dim]
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def _head_dim(config: Mapping) -> int:
    hidden = int(config_field(config, "hidden_size"))
    heads = int(config_field(config, "num_attention_heads"))
    return int(config.get("head_dim") or hidden // heads)


@dataclass
class KVCache:
    """Per-layer keys (after RoPE) and values [kv_heads, n, head_dim] of one sequence."""

    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    length: int = 0


def _silu(x):
    return x * 0.5 * (1.0 + np.tanh(0.5 * x))  # x * sigmoid(x), overflow-free


def _rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class Reference:
    """One model's float64 forward; holds float64 copies of the weights it has used."""

    def __init__(self, config: Mapping, weights: Mapping[str, np.ndarray]):
        self.config = dict(config)
        self.arch = architecture(config)
        self._weights = weights
        self._f64: dict = {}
        c = config
        self.hidden = int(config_field(c, "hidden_size"))
        self.layers = int(config_field(c, "num_hidden_layers"))
        self.heads = int(config_field(c, "num_attention_heads"))
        self.vocab = int(config_field(c, "vocab_size"))
        if self.arch == "opt":
            self.kv_heads = self.heads
            self.head_dim = self.hidden // self.heads
            self.tied = bool(c.get("tie_word_embeddings", True))
            act = c.get("activation_function", "relu")
            if act != "relu":
                raise UnsupportedModelError(
                    f"config.json: activation_function {act!r} is not supported for OPT (relu)")
            self.windows = [None] * self.layers
        else:
            self.kv_heads = int(config_field(c, "num_key_value_heads", self.heads))
            self.head_dim = _head_dim(c)
            self.tied = bool(c.get("tie_word_embeddings", False))
            act = c.get("hidden_act", "silu")
            if act != "silu":
                raise UnsupportedModelError(f"config.json: hidden_act {act!r} is not supported (silu)")
            self.inv_freq = rope_inv_freq(c, self.head_dim)
            self.windows = self._layer_windows(c)
        if self.heads % self.kv_heads:
            raise ModelError(f"config.json: num_attention_heads {self.heads} is not a multiple of "
                             f"num_key_value_heads {self.kv_heads}")

    def _layer_windows(self, c):
        if self.arch == "mistral":
            w = c.get("sliding_window")
            return [int(w) if w else None] * self.layers
        if self.arch == "qwen2" and c.get("use_sliding_window") and c.get("sliding_window"):
            first = int(c.get("max_window_layers", 0))
            return [int(c["sliding_window"]) if i >= first else None for i in range(self.layers)]
        return [None] * self.layers

    def w(self, name: str, shape=None) -> np.ndarray:
        """Weight |name| as float64; a missing tensor or a wrong shape is a ModelError naming it."""
        got = self._f64.get(name)
        if got is None:
            if name not in self._weights:
                raise ModelError(f"weights: missing tensor '{name}'")
            got = np.asarray(self._weights[name], dtype=np.float64)  # no copy when float64
            self._f64[name] = got
        if shape is not None and tuple(got.shape) != tuple(shape):
            raise ModelError(f"weights: tensor '{name}' has shape {list(got.shape)}, "
                             f"expected {list(shape)}")
        return got

    def _has(self, name):
        return name in self._weights

    def _linear(self, x, prefix, out, inp, bias):
        y = x @ self.w(prefix + ".weight", (out, inp)).T
        if bias:
            y = y + self.w(prefix + ".bias", (out,))
        return y

    def new_cache(self) -> KVCache:
        return KVCache([None] * self.layers, [None] * self.layers, 0)

    def forward(self, ids, cache: Optional[KVCache] = None) -> np.ndarray:
        """Logits [T, vocab] float64 of tokens |ids| [T] that follow what |cache| holds (appended)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            raise ModelError(f"token ids must be in [0, {self.vocab}); got {ids.min()}..{ids.max()}")
        if cache is None:
            cache = self.new_cache()
        positions = cache.length + np.arange(ids.size)
        if self.arch == "opt":
            logits = self._opt(ids, positions, cache)
        else:
            logits = self._llama(ids, positions, cache)
        cache.length += ids.size
        return logits

    # -- attention shared by every family ------------------------------------------------------

    def _attention(self, q, k, v, positions, layer, cache, rope):
        """q [T, qh*d], k/v [T, kvh*d] -> [T, qh*d]; appends this chunk's k/v to |cache|."""
        t, d, qh, kvh = q.shape[0], self.head_dim, self.heads, self.kv_heads
        q = q.reshape(t, qh, d).transpose(1, 0, 2)
        k = k.reshape(t, kvh, d).transpose(1, 0, 2)
        v = v.reshape(t, kvh, d).transpose(1, 0, 2)
        if rope:
            q = apply_rope(q, positions, self.inv_freq)
            k = apply_rope(k, positions, self.inv_freq)
        if cache.keys[layer] is not None:
            k = np.concatenate([cache.keys[layer], k], axis=1)
            v = np.concatenate([cache.values[layer], v], axis=1)
        cache.keys[layer], cache.values[layer] = k, v
        n = k.shape[1]
        j = np.arange(n)[None, :]
        p = positions[:, None]
        visible = j <= p
        if self.windows[layer] is not None:
            visible &= j > p - self.windows[layer]
        group = qh // kvh
        qg = q.reshape(kvh, group, t, d)
        s = np.einsum("hgtd,hnd->hgtn", qg, k) / math.sqrt(d)
        s = np.where(visible[None, None], s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = np.einsum("hgtn,hnd->hgtd", s, v).reshape(qh, t, d)
        return o.transpose(1, 0, 2).reshape(t, qh * d)

    # -- Llama, Mistral, Qwen2 -----------------------------------------------------------------

    def _llama(self, ids, positions, cache):
        c, h, d = self.config, self.hidden, self.head_dim
        eps = float(c.get("rms_norm_eps", 1e-6))
        qkv_bias = self.arch == "qwen2" or bool(c.get("attention_bias", False))
        o_bias = self.arch != "qwen2" and bool(c.get("attention_bias", False))
        mlp_bias = bool(c.get("mlp_bias", False))
        inter = int(config_field(c, "intermediate_size"))
        qd, kvd = self.heads * d, self.kv_heads * d
        x = self.w("model.embed_tokens.weight", (self.vocab, h))[ids]
        for i in range(self.layers):
            p = f"model.layers.{i}."
            a = _rms_norm(x, self.w(p + "input_layernorm.weight", (h,)), eps)
            q = self._linear(a, p + "self_attn.q_proj", qd, h, qkv_bias)
            k = self._linear(a, p + "self_attn.k_proj", kvd, h, qkv_bias)
            v = self._linear(a, p + "self_attn.v_proj", kvd, h, qkv_bias)
            o = self._attention(q, k, v, positions, i, cache, rope=True)
            x = x + self._linear(o, p + "self_attn.o_proj", h, qd, o_bias)
            m = _rms_norm(x, self.w(p + "post_attention_layernorm.weight", (h,)), eps)
            g = self._linear(m, p + "mlp.gate_proj", inter, h, mlp_bias)
            u = self._linear(m, p + "mlp.up_proj", inter, h, mlp_bias)
            x = x + self._linear(_silu(g) * u, p + "mlp.down_proj", h, inter, mlp_bias)
        x = _rms_norm(x, self.w("model.norm.weight", (h,)), eps)
        head = "model.embed_tokens.weight" if self.tied else "lm_head.weight"
        return x @ self.w(head, (self.vocab, h)).T

    # -- OPT -----------------------------------------------------------------------------------

    def _opt(self, ids, positions, cache):
        c, h = self.config, self.hidden
        eps = 1e-5  # OPT's LayerNorms use torch's default epsilon
        bias = bool(c.get("enable_bias", True))
        ffn = int(config_field(c, "ffn_dim"))
        before = bool(c.get("do_layer_norm_before", True))
        proj = int(c.get("word_embed_proj_dim") or h)
        pre = "model.decoder."
        x = self.w(pre + "embed_tokens.weight", (self.vocab, proj))[ids]
        if proj != h:
            x = x @ self.w(pre + "project_in.weight", (h, proj)).T
        max_pos = int(config_field(c, "max_position_embeddings"))
        if positions.size and positions[-1] >= max_pos:
            raise ModelError(f"OPT: position {positions[-1]} is past max_position_embeddings {max_pos}")
        # OPT's learned positions are stored with an offset of 2 (rows 0 and 1 are never used).
        x = x + self.w(pre + "embed_positions.weight", (max_pos + 2, h))[positions + 2]

        def ln(y, name):
            return _layer_norm(y, self.w(name + ".weight", (h,)), self.w(name + ".bias", (h,)), eps)

        for i in range(self.layers):
            p = f"{pre}layers.{i}."
            a = ln(x, p + "self_attn_layer_norm") if before else x
            q = self._linear(a, p + "self_attn.q_proj", h, h, bias)
            k = self._linear(a, p + "self_attn.k_proj", h, h, bias)
            v = self._linear(a, p + "self_attn.v_proj", h, h, bias)
            o = self._attention(q, k, v, positions, i, cache, rope=False)
            x = x + self._linear(o, p + "self_attn.out_proj", h, h, bias)
            if not before:
                x = ln(x, p + "self_attn_layer_norm")
            m = ln(x, p + "final_layer_norm") if before else x
            m = np.maximum(self._linear(m, p + "fc1", ffn, h, bias), 0.0)
            x = x + self._linear(m, p + "fc2", h, ffn, bias)
            if not before:
                x = ln(x, p + "final_layer_norm")
        if before and not c.get("_remove_final_layer_norm", False):
            x = ln(x, pre + "final_layer_norm")
        if proj != h:
            x = x @ self.w(pre + "project_out.weight", (proj, h)).T
        head = pre + "embed_tokens.weight" if self.tied or not self._has("lm_head.weight") \
            else "lm_head.weight"
        return x @ self.w(head, (self.vocab, proj)).T


def forward(config: Mapping, weights: Mapping[str, np.ndarray], ids) -> np.ndarray:
    """Float64 logits [T, vocab] of a full causal forward over token ids [T] (HF weight names)."""
    return Reference(config, weights).forward(ids)


def greedy(ref: Reference, prompt_ids, max_new_tokens: int, eos_token_id=None) -> list:
    """Greedy continuation of |prompt_ids| (a prefill, then one token at a time); stops at eos."""
    cache = ref.new_cache()
    logits = ref.forward(prompt_ids, cache)
    out = []
    if eos_token_id is None:
        eos = set()
    elif isinstance(eos_token_id, (int, np.integer)):
        eos = {int(eos_token_id)}
    else:
        eos = {int(e) for e in eos_token_id}
    for _ in range(max_new_tokens):
        tok = int(np.argmax(logits[-1]))
        out.append(tok)
        if tok in eos:
            break
        logits = ref.forward([tok], cache)
    return out
