# Tiny configs, random safetensors checkpoints (single, sharded; f32/f16/bf16) and the corruption
# helpers of hybridgen.models.checkpoint: each must produce exactly the defect it names.
import json
import struct

import numpy as np
import pytest
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load_file

from hybridgen.models import (ModelError, TINY_ARCHS, architecture, drop_tensor, forward,
                              lie_about_offsets, load_checkpoint, tiny_config, truncate_file,
                              weight_shapes, write_random_checkpoint, wrong_shape)


def _header(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), len(raw) - 8 - n


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_tiny_configs_are_valid_and_overridable(arch):
    cfg = tiny_config(arch, num_hidden_layers=3)
    assert cfg["num_hidden_layers"] == 3
    assert architecture(cfg) in ("llama", "mistral", "qwen2", "opt")
    assert tiny_config(arch)["num_hidden_layers"] == 2  # overrides never leak into the defaults
    with pytest.raises(ModelError, match="gpt2"):
        tiny_config("gpt2")


@pytest.mark.parametrize("dtype,tag", [("float32", "F32"), ("float16", "F16"), ("bfloat16", "BF16")])
def test_single_file_round_trip(tmp_path, dtype, tag):
    cfg = tiny_config("llama")
    w = write_random_checkpoint(tmp_path, cfg, dtype=dtype, seed=1)
    assert json.loads((tmp_path / "config.json").read_text()) == cfg
    header, _ = _header(tmp_path / "model.safetensors")
    assert {k for k in header if k != "__metadata__"} == set(weight_shapes(cfg)) == set(w)
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {tag}
    for name, v in load_file(str(tmp_path / "model.safetensors")).items():
        assert v.shape == w[name].shape
        np.testing.assert_array_equal(v.astype(np.float32), w[name])  # returned = stored values
    _, back = load_checkpoint(tmp_path)
    assert set(back) == set(w)


def test_sharded_round_trip(tmp_path):
    cfg = tiny_config("qwen2")
    w = write_random_checkpoint(tmp_path, cfg, dtype="bfloat16", shards=3, seed=2)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3)]
    assert not (tmp_path / "model.safetensors").exists()
    assert set(index["weight_map"]) == set(w)
    assert index["metadata"]["total_size"] == sum(a.size * 2 for a in w.values())
    for f in files:
        with safe_open(str(tmp_path / f), "np") as st:
            for name in st.keys():
                assert index["weight_map"][name] == f
                np.testing.assert_array_equal(st.get_tensor(name).astype(np.float32), w[name])
    config, back = load_checkpoint(tmp_path)
    assert config == cfg and all(np.array_equal(back[k], w[k]) for k in w)


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_random_logits_are_order_one_and_not_degenerate(tmp_path, arch):
    cfg = tiny_config(arch)
    w = write_random_checkpoint(tmp_path, cfg, seed=7)
    logits = forward(cfg, w, np.random.default_rng(0).integers(0, 256, 16))
    assert np.all(np.isfinite(logits))
    assert 0.2 < logits.std() < 5.0
    assert np.abs(logits).max() < 30.0
    assert len(set(np.argmax(logits, axis=1).tolist())) >= 4  # greedy choices differ by position


def test_seed_changes_weights(tmp_path):
    cfg = tiny_config("llama")
    a = write_random_checkpoint(tmp_path / "a", cfg, seed=0)
    b = write_random_checkpoint(tmp_path / "b", cfg, seed=0)
    c = write_random_checkpoint(tmp_path / "c", cfg, seed=1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["model.norm.weight"], c["model.norm.weight"])


def test_truncate_file(tmp_path):
    write_random_checkpoint(tmp_path, tiny_config("llama"))
    f = tmp_path / "model.safetensors"
    size = f.stat().st_size
    truncate_file(f, 10)
    assert f.stat().st_size == size - 10
    with pytest.raises(SafetensorError):
        load_file(str(f))
    with pytest.raises(ModelError):
        truncate_file(f, size)


def test_truncate_the_last_shard_of_a_directory(tmp_path):
    write_random_checkpoint(tmp_path, tiny_config("opt"), shards=3)
    last = tmp_path / "model-00003-of-00003.safetensors"
    sizes = {p.name: p.stat().st_size for p in tmp_path.glob("*.safetensors")}
    assert truncate_file(tmp_path, 5) == last
    assert last.stat().st_size == sizes[last.name] - 5
    assert all(p.stat().st_size == sizes[p.name] for p in tmp_path.glob("*.safetensors") if p != last)


def test_lie_about_offsets(tmp_path):
    w = write_random_checkpoint(tmp_path, tiny_config("llama"))
    f = tmp_path / "model.safetensors"
    before, data_len = _header(f)
    lie_about_offsets(tmp_path, "model.layers.0.mlp.up_proj.weight", past_end=64)
    after, data_len2 = _header(f)
    assert data_len2 == data_len  # the data bytes are untouched
    assert after["model.layers.0.mlp.up_proj.weight"]["data_offsets"] == \
        [before["model.layers.0.mlp.up_proj.weight"]["data_offsets"][0], data_len + 64]
    assert {k: v for k, v in after.items() if k != "model.layers.0.mlp.up_proj.weight"} == \
        {k: v for k, v in before.items() if k != "model.layers.0.mlp.up_proj.weight"}
    with pytest.raises(SafetensorError):
        load_file(str(f))
    assert len(w) == len(after) - 1  # every tensor is still listed (minus __metadata__)


def test_drop_tensor_sharded(tmp_path):
    w = write_random_checkpoint(tmp_path, tiny_config("mistral"), shards=2)
    f = drop_tensor(tmp_path, "model.norm.weight")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["model.norm.weight"] == f.name  # the index still names it
    got = load_file(str(f))  # the rest of the file is intact and loads
    assert "model.norm.weight" not in got
    assert got and all(np.array_equal(v, w[k]) for k, v in got.items())
    with pytest.raises(ModelError, match="model.norm.weight"):
        drop_tensor(f, "model.norm.weight")


def test_wrong_shape(tmp_path):
    w = write_random_checkpoint(tmp_path, tiny_config("llama"))
    name = "model.layers.1.self_attn.k_proj.weight"  # [32, 64]
    wrong_shape(tmp_path, name)
    got = load_file(str(tmp_path / "model.safetensors"))
    assert got[name].shape == (64, 32)
    np.testing.assert_array_equal(got[name].reshape(-1), w[name].reshape(-1))  # same bytes
    wrong_shape(tmp_path, "model.norm.weight")
    assert load_file(str(tmp_path / "model.safetensors"))["model.norm.weight"].shape == (1, 64)
    with pytest.raises(ModelError, match="elements"):
        wrong_shape(tmp_path, name, [3, 3])


def test_post_ln_opt_with_projections_has_hf_tensor_names(tmp_path):
    # facebook/opt-350m's layout: project_in [hidden, proj] and project_out [proj, hidden] without
    # biases, a proj-wide embedding (and tied head), both LayerNorms in every layer, and no decoder
    # final_layer_norm (HF's OPTDecoder builds it only when do_layer_norm_before is true).
    cfg = tiny_config("opt", do_layer_norm_before=False, word_embed_proj_dim=32)
    write_random_checkpoint(tmp_path, cfg)
    header, _ = _header(tmp_path / "model.safetensors")
    shapes = {k: v["shape"] for k, v in header.items() if k != "__metadata__"}
    assert shapes["model.decoder.project_in.weight"] == [64, 32]
    assert shapes["model.decoder.project_out.weight"] == [32, 64]
    assert shapes["model.decoder.embed_tokens.weight"] == [256, 32]
    assert shapes["model.decoder.embed_positions.weight"] == [130, 64]
    assert not any(k.startswith("model.decoder.project_") and k.endswith(".bias") for k in shapes)
    assert not any(k.startswith("model.decoder.final_layer_norm") for k in shapes)
    for i in range(cfg["num_hidden_layers"]):
        for ln in ("self_attn_layer_norm", "final_layer_norm"):
            assert shapes[f"model.decoder.layers.{i}.{ln}.weight"] == [64]
            assert shapes[f"model.decoder.layers.{i}.{ln}.bias"] == [64]
    # Pre-LN without project_in/out has neither projection but the final norm.
    pre = weight_shapes(tiny_config("opt"))
    assert "model.decoder.final_layer_norm.weight" in pre
    assert not any("project_" in k for k in pre)
