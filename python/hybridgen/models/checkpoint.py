"""Tiny HF configs, random safetensors checkpoints and exact corruptions of them, for tests.

    cfg = tiny_config("llama3", num_hidden_layers=3)
    weights = write_random_checkpoint(dir, cfg, dtype="bfloat16", shards=2)  # float32 numpy
    drop_tensor(dir, "model.norm.weight")                                    # now one is missing

Weights are scaled by 1/sqrt(fan_in) (norm gains near 1, small biases) so that logits are O(1) and
differ from token to token. The returned float32 arrays hold exactly the stored values (already
rounded to |dtype|), so a reference on them matches what a loader reads from the files.
"""

from __future__ import annotations

import copy
import json
import os
import struct
from pathlib import Path
from typing import Mapping, Optional, Sequence

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from .errors import ModelError
from .reference import Reference, architecture

_LLAMA_BASE = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
    "mlp_bias": False, "rope_scaling": None, "bos_token_id": 1, "eos_token_id": 2,
    "torch_dtype": "float32",
}
_TINY = {
    "llama": {**_LLAMA_BASE, "architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    # Llama 3.1's scaling with its real constants: at head_dim 16 and theta 5e5 the 8 frequencies
    # cover all three bands (kept, smoothed, divided by the factor). Tied like Llama 3.2.
    "llama3": {**_LLAMA_BASE, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "rope_theta": 500000.0, "tie_word_embeddings": True, "bos_token_id": 0,
               "eos_token_id": 1,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192}},
    # A window shorter than the test sequences, so masking by it is visible.
    "mistral": {**_LLAMA_BASE, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                "sliding_window": 8, "rope_theta": 1000000.0},
    "qwen2": {**_LLAMA_BASE, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
              "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
              "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2},
    "opt": {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 64,
            "ffn_dim": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
            "max_position_embeddings": 128, "word_embed_proj_dim": 64,
            "do_layer_norm_before": True, "activation_function": "relu", "enable_bias": True,
            "layer_norm_elementwise_affine": True, "tie_word_embeddings": True,
            "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "torch_dtype": "float32"},
}
TINY_ARCHS = tuple(_TINY)
_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def tiny_config(arch: str, **overrides) -> dict:
    """A small valid HF config.json dict for "llama", "llama3", "mistral", "qwen2" or "opt"."""
    if arch not in _TINY:
        raise ModelError(f"tiny_config: unknown arch {arch!r} (one of {', '.join(_TINY)})")
    cfg = copy.deepcopy(_TINY[arch])
    cfg.update(overrides)
    return cfg


def weight_shapes(config: Mapping) -> dict:
    """Name -> shape of every tensor an HF checkpoint of |config| holds (tied heads not stored)."""
    ref = Reference(config, {})
    h, d, v = ref.hidden, ref.head_dim, ref.vocab
    qd, kvd = ref.heads * d, ref.kv_heads * d
    shapes = {}
    if ref.arch == "opt":
        pre = "model.decoder."
        proj = int(config.get("word_embed_proj_dim") or h)
        ffn = int(config["ffn_dim"])
        bias = bool(config.get("enable_bias", True))
        shapes[pre + "embed_tokens.weight"] = (v, proj)
        shapes[pre + "embed_positions.weight"] = (int(config["max_position_embeddings"]) + 2, h)
        if proj != h:
            shapes[pre + "project_in.weight"] = (h, proj)
            shapes[pre + "project_out.weight"] = (proj, h)
        for i in range(ref.layers):
            p = f"{pre}layers.{i}."
            for name, shape in (("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (h, h)),
                                ("self_attn.v_proj", (h, h)), ("self_attn.out_proj", (h, h)),
                                ("fc1", (ffn, h)), ("fc2", (h, ffn))):
                shapes[p + name + ".weight"] = shape
                if bias:
                    shapes[p + name + ".bias"] = (shape[0],)
            for ln in ("self_attn_layer_norm", "final_layer_norm"):
                shapes[p + ln + ".weight"] = shapes[p + ln + ".bias"] = (h,)
        if config.get("do_layer_norm_before", True) and not config.get("_remove_final_layer_norm"):
            shapes[pre + "final_layer_norm.weight"] = shapes[pre + "final_layer_norm.bias"] = (h,)
        if not ref.tied:
            shapes["lm_head.weight"] = (v, proj)
        return shapes
    inter = int(config["intermediate_size"])
    qkv_bias = ref.arch == "qwen2" or bool(config.get("attention_bias", False))
    o_bias = ref.arch != "qwen2" and bool(config.get("attention_bias", False))
    mlp_bias = bool(config.get("mlp_bias", False))
    shapes["model.embed_tokens.weight"] = (v, h)
    for i in range(ref.layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        for name, shape, b in (("self_attn.q_proj", (qd, h), qkv_bias),
                               ("self_attn.k_proj", (kvd, h), qkv_bias),
                               ("self_attn.v_proj", (kvd, h), qkv_bias),
                               ("self_attn.o_proj", (h, qd), o_bias),
                               ("mlp.gate_proj", (inter, h), mlp_bias),
                               ("mlp.up_proj", (inter, h), mlp_bias),
                               ("mlp.down_proj", (h, inter), mlp_bias)):
            shapes[p + name + ".weight"] = shape
            if b:
                shapes[p + name + ".bias"] = (shape[0],)
    shapes["model.norm.weight"] = (h,)
    if not ref.tied:
        shapes["lm_head.weight"] = (v, h)
    return shapes


def random_weights(config: Mapping, seed: int = 0) -> dict:
    """float64 random weights for |config|, scaled so that logits are O(1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(config).items():
        if name.endswith("norm.weight"):  # RMSNorm / LayerNorm gains
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.1 * rng.standard_normal(shape)
        elif "embed_positions" in name:
            a = 0.5 * rng.standard_normal(shape)
        elif "embed_tokens" in name or name == "lm_head.weight":
            # Rows of the (possibly tied) head ~ 1/sqrt(hidden): unit-RMS hidden states give O(1)
            # logits. Token embeddings get the same scale; every block normalizes its input anyway.
            a = rng.standard_normal(shape) / np.sqrt(shape[1])
        else:  # Linear [out, in]
            a = rng.standard_normal(shape) / np.sqrt(shape[-1])
        out[name] = a
    return out


def write_random_checkpoint(path, config: Mapping, dtype: str = "float32", shards: int = 1,
                            seed: int = 0) -> dict:
    """Writes config.json and model.safetensors (or |shards| files plus
    model.safetensors.index.json) into directory |path|; returns the weights as float32 numpy,
    holding exactly the values stored in |dtype|."""
    if dtype not in _DTYPES:
        raise ModelError(f"write_random_checkpoint: dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
    architecture(config)
    weights = random_weights(config, seed)
    stored = {k: np.ascontiguousarray(v.astype(_DTYPES[dtype])) for k, v in weights.items()}
    write_checkpoint(path, config, stored, shards=shards)
    return {k: v.astype(np.float32) for k, v in stored.items()}


def write_checkpoint(path, config: Mapping, tensors: Mapping[str, np.ndarray], shards: int = 1):
    """config.json plus |tensors| as safetensors in directory |path| (sharded when shards > 1)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    names = list(tensors)
    if shards <= 1:
        save_file(dict(tensors), str(path / "model.safetensors"), metadata={"format": "pt"})
        return
    if shards > len(names):
        raise ModelError(f"write_checkpoint: {shards} shards for only {len(names)} tensors")
    weight_map, total = {}, 0
    for s, part in enumerate(np.array_split(np.arange(len(names)), shards)):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        chunk = {names[i]: tensors[names[i]] for i in part}
        save_file(chunk, str(path / fname), metadata={"format": "pt"})
        for n, a in chunk.items():
            weight_map[n] = fname
            total += a.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def load_checkpoint(path) -> tuple:
    """(config, weights as float32 numpy) of an HF checkpoint directory written as above."""
    from safetensors.numpy import load_file

    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    index = path / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() \
        else ["model.safetensors"]
    weights = {}
    for f in files:
        weights.update({k: v.astype(np.float32) for k, v in load_file(str(path / f)).items()})
    return config, weights


# -- corruptions: each produces exactly the defect it names ------------------------------------

def _read(path: Path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def _write(path: Path, header: dict, data: bytes):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes with spaces
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _file_of(path, name: str) -> Path:
    """The .safetensors file holding |name| in a checkpoint dir (index-aware) or the file itself."""
    path = Path(path)
    if path.is_file():
        return path
    index = path / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        if name not in weight_map:
            raise ModelError(f"{index}: no tensor '{name}' in weight_map")
        return path / weight_map[name]
    return path / "model.safetensors"


def _entry(header: dict, name: str, where: Path) -> dict:
    if name not in header or name == "__metadata__":
        raise ModelError(f"{where}: no tensor '{name}'")
    return header[name]


def truncate_file(path, drop_bytes: int = 1) -> Path:
    """Cuts the last |drop_bytes| bytes off a .safetensors file (the last tensor is then short);
    |path| may be a checkpoint directory: its model.safetensors, or its last shard."""
    path = Path(path)
    if path.is_dir():
        index = path / "model.safetensors.index.json"
        path = path / (sorted(set(json.loads(index.read_text())["weight_map"].values()))[-1]
                       if index.exists() else "model.safetensors")
    size = path.stat().st_size
    if not 0 < drop_bytes < size:
        raise ModelError(f"truncate_file: cannot drop {drop_bytes} of {size} bytes")
    os.truncate(path, size - drop_bytes)
    return path


def lie_about_offsets(path, name: str, past_end: int = 64) -> Path:
    """Header entry of |name| claims data that ends |past_end| bytes after the data section; the
    data section itself is unchanged."""
    f = _file_of(path, name)
    header, data = _read(f)
    entry = _entry(header, name, f)
    begin, end = entry["data_offsets"]
    entry["data_offsets"] = [begin, len(data) + past_end]
    _write(f, header, data)
    return f


def drop_tensor(path, name: str) -> Path:
    """Removes tensor |name| (header entry and bytes) from the file that holds it; a sharded
    checkpoint's index still lists it."""
    f = _file_of(path, name)
    header, data = _read(f)
    _entry(header, name, f)
    meta = header.pop("__metadata__", None)
    kept = sorted(((k, v) for k, v in header.items() if k != name), key=lambda kv: kv[1]["data_offsets"][0])
    out, pieces, at = {}, [], 0
    if meta is not None:
        out["__metadata__"] = meta
    for k, v in kept:
        b, e = v["data_offsets"]
        pieces.append(data[b:e])
        out[k] = {**v, "data_offsets": [at, at + e - b]}
        at += e - b
    _write(f, out, b"".join(pieces))
    return f


def wrong_shape(path, name: str, shape: Optional[Sequence[int]] = None) -> Path:
    """Header shape of |name| replaced by |shape| of the same element count (default: the dims
    reversed, or an extra leading 1), so the bytes still fit and only the shape is wrong."""
    f = _file_of(path, name)
    header, data = _read(f)
    entry = _entry(header, name, f)
    old = list(entry["shape"])
    if shape is None:
        shape = old[::-1] if old != old[::-1] else [1] + old
    shape = [int(s) for s in shape]
    if int(np.prod(shape)) != int(np.prod(old)):
        raise ModelError(f"wrong_shape: {shape} has not the {int(np.prod(old))} elements of {old}")
    if shape == old:
        raise ModelError(f"wrong_shape: {shape} is the tensor's own shape")
    entry["shape"] = shape
    _write(f, header, data)
    return f
