# hybridgen.Model on tiny random checkpoints: compiled logits vs the float64 reference of
# hybridgen.models (independent of the compiler), split policies, batches, checkpoint formats.
import re

import numpy as np
import pytest

import hybridgen as hg
from conftest import requires_jit

models = pytest.importorskip("hybridgen.models")

pytestmark = requires_jit
ARCHS = ("llama", "llama3", "mistral", "qwen2", "opt", "opt-350m")
# Options beyond the tiny defaults: opt-350m's post-LayerNorm with project_in/out
# (word_embed_proj_dim 32 != hidden 64, no decoder final_layer_norm), and a pre-LN OPT saved
# without its final norm (_remove_final_layer_norm, checkpoints tuned before transformers 4.20.1).
VARIANTS = {
    "opt-350m": ("opt", dict(do_layer_norm_before=False, word_embed_proj_dim=32)),
    "opt-no-final-norm": ("opt", dict(_remove_final_layer_norm=True)),
}
# Several context lengths: a decode walk over 40 tokens crosses blocks of 16 (and Mistral's
# window of 8); the policies put the split at 0, inside the sequence, past its end, and let the
# feedback scheduler choose.
POLICIES = ("static:0", "static:20", "cpu", "feedback")
TOL = 1e-4


def rel_err(got, ref):
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """arch -> (model dir, config, float32 weights, artifact dir), compiled once per arch."""
    cache = {}

    def get(arch):
        if arch not in cache:
            root = tmp_path_factory.mktemp(arch)
            base, extra = VARIANTS.get(arch, (arch, {}))
            cfg = models.tiny_config(base, **extra)
            weights = models.write_random_checkpoint(root / "model", cfg, seed=3)
            art = hg.compile_model(root / "model", root / "artifact")
            cache[arch] = (root / "model", cfg, weights, art)
        return cache[arch]

    return get


def use_emulated_hbm(monkeypatch):
    """Tiers for the models opened next: 64 KiB of emulated HBM (a device tier in host memory)
    and 64 MiB of DRAM."""
    monkeypatch.setenv("HYBRIDGEN_TIERS", "name=hbm,kind=hbm,capacity=64KiB,bandwidth=4800,"
                       "emulated=1;name=dram,kind=dram,node=0,capacity=64MiB,bandwidth=40")


def assert_prefill_then_decode_match(m, cfg, weights, ids, nxt):
    """Every row of a prefill of |ids| [batch, T] (all logits), then one decode step of |nxt|
    [batch], against the float64 reference of each sequence."""
    got = m.prefill(ids, all_logits=True)
    for b in range(len(ids)):
        assert rel_err(got[b], models.forward(cfg, weights, ids[b])) <= TOL
    dec = m.decode(nxt)
    for b in range(len(ids)):
        ref = models.forward(cfg, weights, np.concatenate([ids[b], nxt[b:b + 1]]))
        assert rel_err(dec[b], ref[-1]) <= TOL


def prompt(n, vocab, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=n).astype(np.int32)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("policy", POLICIES)
def test_decode_logits_match_reference(built, arch, policy):
    model_dir, cfg, weights, art = built(arch)
    ids = prompt(40, cfg["vocab_size"])
    ref = models.forward(cfg, weights, ids)
    m = hg.Model(art, policy=policy, max_context=64, weights=str(model_dir))
    got = np.stack([m.decode(np.array([t], np.int32))[0] for t in ids])
    assert rel_err(got, ref) <= TOL
    assert m.sequence_lengths() == [40]


@pytest.mark.parametrize("arch", ARCHS + ("opt-no-final-norm",))
def test_prefill_logits_match_reference(built, arch):
    model_dir, cfg, weights, art = built(arch)
    ids = prompt(37, cfg["vocab_size"], seed=1)
    ref = models.forward(cfg, weights, ids)
    # Chunks of 16: the second and third chunks attend the cached prefix.
    m = hg.Model(art, max_context=64, weights=str(model_dir), prefill_chunk=16)
    got = m.prefill(ids[None, :], all_logits=True)
    assert got.shape == (1, 37, cfg["vocab_size"])
    assert rel_err(got[0], ref) <= TOL
    # Decode continues after prefill: the next token's logits match too.
    nxt = np.array([7], np.int32)
    ref2 = models.forward(cfg, weights, np.concatenate([ids, nxt]))
    assert rel_err(m.decode(nxt)[0], ref2[-1]) <= TOL


@pytest.mark.parametrize("arch", ("llama3", "opt", "opt-350m"))
def test_greedy_identical_under_every_policy_and_prefill_vs_token_by_token(built, arch):
    model_dir, cfg, weights, art = built(arch)
    ids = prompt(12, cfg["vocab_size"], seed=2)
    runs = []
    for policy in POLICIES:
        m = hg.Model(art, policy=policy, max_context=64, weights=str(model_dir))
        runs.append(m.generate(ids, 10)[0])
    # Token by token: every prompt token through decode, then greedy decode.
    m = hg.Model(art, policy="feedback", max_context=64, weights=str(model_dir))
    for t in ids:
        logits = m.decode(np.array([t], np.int32))
    seq = []
    for _ in range(10):
        seq.append(int(np.argmax(logits[0])))
        logits = m.decode(np.array([seq[-1]], np.int32))
    runs.append(seq)
    expect = models.greedy(models.Reference(cfg, weights), ids, 10)
    for r in runs:
        assert r == expect


def test_batch_of_two_matches_each_sequence_alone(built):
    model_dir, cfg, weights, art = built("qwen2")
    a, b = prompt(20, cfg["vocab_size"], 4), prompt(20, cfg["vocab_size"], 5)
    m = hg.Model(art, batch=2, max_context=64, weights=str(model_dir), policy="static:16")
    got = m.prefill(np.stack([a, b]), all_logits=True)
    assert rel_err(got[0], models.forward(cfg, weights, a)) <= TOL
    assert rel_err(got[1], models.forward(cfg, weights, b)) <= TOL
    st = m.stats()
    assert st["prefill_tokens"] == 40 and len(st["split_per_layer"]) == cfg["num_hidden_layers"]
    assert sum(t["used_blocks"] for t in st["tier_occupancy"].values()) == 4
    # The pool was written at open: every block batch x max_context can use (64 tokens: 4 blocks
    # of 16, one spare, one more per sequence), K and V of every layer, f32.
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    block_bytes = cfg["num_key_value_heads"] * 16 * head_dim * 4
    assert st["kv_committed_bytes"] == 2 * 6 * 2 * cfg["num_hidden_layers"] * block_bytes
    assert st["kv_commit_seconds"] >= 0


@pytest.mark.parametrize("dtype,shards", [("float32", 3), ("bfloat16", 1), ("float16", 2)])
def test_sharded_and_16_bit_checkpoints(tmp_path, dtype, shards):
    cfg = models.tiny_config("llama")
    weights = models.write_random_checkpoint(tmp_path / "m", cfg, dtype=dtype, shards=shards)
    assert (tmp_path / "m" / "model.safetensors.index.json").exists() == (shards > 1)
    m = hg.Model(tmp_path / "m", artifact_dir=str(tmp_path / "art"), max_context=32)
    # weight_dtype "auto": compiled for the checkpoint's own element type, nothing converted.
    import json
    meta = json.loads((tmp_path / "art" / "metadata.json").read_text())
    assert meta["weight_dtype"] == {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[dtype]
    ids = prompt(9, cfg["vocab_size"], 6)
    got = np.stack([m.decode(np.array([t], np.int32))[0] for t in ids])
    assert rel_err(got, models.forward(cfg, weights, ids)) <= TOL


@pytest.mark.parametrize("dtype,weight_dtype,vocab", [("float32", "auto", None),
                                                      ("bfloat16", "auto", None),
                                                      ("bfloat16", "f32", None),
                                                      ("float32", "auto", 40960)])
def test_copied_and_mapped_weights_give_identical_logits(tmp_path, dtype, weight_dtype, vocab):
    # By default the runner copies the weights into huge-page memory; map_weights runs on the
    # file's mapping (converted tensors are copies either way). Same values, so the same bits.
    # A vocabulary of 40960 makes the f32 embedding 10 MiB: copied by the whole OpenMP team.
    cfg = models.tiny_config("llama", **({"vocab_size": vocab} if vocab else {}))
    weights = models.write_random_checkpoint(tmp_path / "m", cfg, dtype=dtype)
    art = hg.compile_model(tmp_path / "m", tmp_path / "art", weight_dtype=weight_dtype)
    ids = prompt(12, cfg["vocab_size"], 8)
    got = {}
    for mapped in (False, True):
        m = hg.Model(art, weights=str(tmp_path / "m"), max_context=32, map_weights=mapped)
        got[mapped] = np.concatenate([m.prefill(ids[None, :8], all_logits=True)[0],
                                      np.stack([m.decode(np.array([t], np.int32))[0]
                                                for t in ids[8:]])])
    np.testing.assert_array_equal(got[False], got[True])
    assert rel_err(got[False], models.forward(cfg, weights, ids)) <= TOL


@pytest.fixture()
def fresh_llama(tmp_path, built):
    _, cfg, _, art = built("llama")
    models.write_random_checkpoint(tmp_path / "m", cfg)
    return tmp_path / "m", art


@pytest.mark.parametrize("corrupt,needle", [
    (lambda d: models.drop_tensor(d, "model.layers.1.mlp.up_proj.weight"),
     "model.layers.1.mlp.up_proj.weight"),
    (lambda d: models.wrong_shape(d, "model.layers.0.self_attn.k_proj.weight"),
     "model.layers.0.self_attn.k_proj.weight"),
    (lambda d: models.lie_about_offsets(d, "model.norm.weight"), "model.norm.weight"),
    (lambda d: models.truncate_file(d / "model.safetensors", 8), "model.safetensors"),
])
@pytest.mark.parametrize("map_weights", [False, True])
def test_corrupted_checkpoint_fails_cleanly_naming_file_and_tensor(fresh_llama, corrupt, needle,
                                                                   map_weights):
    model_dir, art = fresh_llama
    corrupt(model_dir)
    with pytest.raises(hg.HybridgenError) as info:
        hg.Model(art, weights=str(model_dir), map_weights=map_weights)
    msg = str(info.value)
    # A missing tensor has no file: the checkpoint's path is named instead.
    assert needle in msg and str(model_dir) in msg


def test_config_that_disagrees_with_the_tensors_is_an_error(tmp_path, built):
    # Weights of a 64-wide model under an artifact compiled for 64 wide but 8 heads of 8... here
    # simply a checkpoint of another vocabulary size.
    _, cfg, _, art = built("llama")
    models.write_random_checkpoint(tmp_path / "m", dict(cfg, vocab_size=300))
    with pytest.raises(hg.ArgumentError, match="embed_tokens.weight"):
        hg.Model(art, weights=str(tmp_path / "m"))


@pytest.mark.parametrize("field,value,needle", [
    ("architectures", ["GPT2LMHeadModel"], "architectures"),
    ("rope_scaling", {"rope_type": "yarn", "factor": 2.0}, "rope_scaling.rope_type"),
    ("hidden_act", "gelu", "hidden_act"),
    ("num_key_value_heads", 3, "num_key_value_heads"),
    ("hidden_size", "64", "hidden_size"),
])
def test_unsupported_config_names_the_field(tmp_path, field, value, needle):
    cfg = models.tiny_config("llama")
    cfg[field] = value
    models.write_checkpoint(tmp_path / "m", cfg, {})
    with pytest.raises(hg.ArgumentError, match=needle):
        hg.compile_model(tmp_path / "m", tmp_path / "art")


def test_bad_ids_and_context_overflow_are_argument_errors(built):
    model_dir, cfg, _, art = built("llama")
    m = hg.Model(art, max_context=8, weights=str(model_dir))
    with pytest.raises(hg.ArgumentError, match="vocabulary"):
        m.decode(np.array([cfg["vocab_size"]], np.int32))
    with pytest.raises(hg.ArgumentError, match="batch"):
        m.decode(np.array([1, 2], np.int32))
    with pytest.raises(hg.ArgumentError, match="max_context"):
        m.prefill(np.zeros((1, 9), np.int32))


def test_widths_that_are_not_multiples_of_16_take_the_linalg_path(tmp_path):
    # hidden 72 and intermediate 120: the projections cannot use the 16-wide vector kernel.
    cfg = models.tiny_config("llama", hidden_size=72, intermediate_size=120)
    weights = models.write_random_checkpoint(tmp_path / "m", cfg, seed=8)
    art = hg.compile_model(tmp_path / "m", tmp_path / "art")
    assert "linalg.generic" in (tmp_path / "art" / "model.mlir").read_text()
    m = hg.Model(art, max_context=32, weights=str(tmp_path / "m"), prefill_chunk=5)
    ids = prompt(13, cfg["vocab_size"], 9)
    got = m.prefill(ids[None, :], all_logits=True)[0]
    assert rel_err(got, models.forward(cfg, weights, ids)) <= TOL


def test_every_kind_of_matmul_register_tile_matches_the_reference(tmp_path):
    # The vector matmul tiles 4 token rows x 4 output rows: for prefill-sized calls (>= 16 rows)
    # where the inputs are narrow (here 64 wide: q/k/v, gate/up), for every call where they are
    # >= 2048 wide (here down_proj's 2048), and never where the outputs are not a multiple of 4
    # (here vocab 250: blocks of one output row). Qwen2 adds q/k/v biases; prompt lengths and
    # chunks are not multiples of 4, so the single-row remainder runs as well.
    cfg = models.tiny_config("qwen2", vocab_size=250, intermediate_size=2048)
    weights = models.write_random_checkpoint(tmp_path / "m", cfg, seed=11)
    art = hg.compile_model(tmp_path / "m", tmp_path / "art")
    text = (tmp_path / "art" / "model.mlir").read_text()
    assert "%bacc:4 = scf.for" in text  # vocab 250
    assert text.count("%bacc:16 = scf.for") > text.count("%wide = arith.cmpi") > 0
    # The token tiles of narrow matmuls prefetch their weights; down_proj's 2048-wide rows do not
    # (on Intel targets decode's row loop and the first token group of wide tiles do: their
    # prefetches index with %rpf* and %tpd*).
    tile_views = set(re.findall(r"memref.prefetch (%\w+)\[%pd\d+\]", text))
    assert tile_views and not any("x2048x" in ln for ln in text.splitlines()
                   if "memref.collapse_shape" in ln and ln.split(" =")[0].strip() in tile_views)
    m = hg.Model(art, max_context=48, weights=str(tmp_path / "m"), prefill_chunk=11)
    ids = prompt(30, cfg["vocab_size"], 4)
    got = m.prefill(ids[None, :], all_logits=True)[0]
    assert rel_err(got, models.forward(cfg, weights, ids)) <= TOL
    nxt = np.array([5], np.int32)
    ref = models.forward(cfg, weights, np.concatenate([ids, nxt]))
    assert rel_err(m.decode(nxt)[0], ref[-1]) <= TOL


@pytest.mark.parametrize("side", [0, 2, 4, 8, 16, -1], ids=lambda s: f"side{s}")
def test_wide_input_rows_read_side_by_side_match_the_reference(tmp_path, side):
    # down_proj's input 4112 wide (> 4096 f32, more than half an L1): decode reads blocks of
    # |side| output rows side by side (-1: the target's choice), prefill and batch decode split
    # such blocks into 4 x 4 token tiles. Bias-free here, so qwen2's q/k/v biases go through the
    # narrow path; a 2-token batch and a 3-token prompt chunk leave token rows for the row loop.
    import json
    import subprocess
    from pathlib import Path
    cfg = models.tiny_config("qwen2", intermediate_size=4112)
    weights = models.write_random_checkpoint(tmp_path / "m", cfg, seed=12)
    tool = Path(hg.__file__).resolve().parents[2] / "bin" / "hybridgen-compile"
    art = tmp_path / "art"
    out = subprocess.run([str(tool), str(tmp_path / "m"), "-o", str(art), "--kv-dtypes=f32",
                          f"--matmul-side-by-side-rows={side}"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    meta = json.loads((art / "metadata.json").read_text())
    resolved = meta["matmul_side_by_side_rows"]
    assert resolved == side if side >= 0 else resolved in (0, 4, 8)
    text = (art / "model.mlir").read_text()
    assert (f"%sbacc:{resolved} = scf.for" in text) == (resolved > 1)
    assert "%sbacc" not in text.split("func.func @layer_pre")[1].split("func.func")[0]
    m = hg.Model(str(art), max_context=48, weights=str(tmp_path / "m"), prefill_chunk=3,
                 batch=2)
    ids = np.stack([prompt(9, cfg["vocab_size"], 5), prompt(9, cfg["vocab_size"], 6)])
    assert_prefill_then_decode_match(m, cfg, weights, ids, np.array([5, 7], np.int32))


def test_matmul_side_by_side_rows_outside_the_choices_is_an_error(tmp_path):
    import subprocess
    from pathlib import Path
    models.write_random_checkpoint(tmp_path / "m", models.tiny_config("llama"), seed=1)
    tool = Path(hg.__file__).resolve().parents[2] / "bin" / "hybridgen-compile"
    out = subprocess.run([str(tool), str(tmp_path / "m"), "-o", str(tmp_path / "art"),
                          "--matmul-side-by-side-rows=3"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0
    assert "matmul side-by-side rows must be -1 (the target's), 0 (off), 2, 4, 8 or 16, got 3" \
        in out.stderr


def test_hybridgen_run_model_mode_streams_tokens_and_summary(built, tmp_path):
    import subprocess
    from pathlib import Path
    model_dir, cfg, weights, art = built("llama3")
    tool = Path(hg.__file__).resolve().parents[2] / "bin" / "hybridgen-run"
    ids = prompt(10, cfg["vocab_size"], 10)
    out = subprocess.run([str(tool), art, "--prompt-ids", ",".join(map(str, ids)),
                          "--max-new-tokens", "6", "--policy", "static:4",
                          "--trace", str(tmp_path / "t.csv")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    tokens = lines[lines.index("== generated token ids:") + 1].split()
    assert [int(t) for t in tokens] == models.greedy(models.Reference(cfg, weights), ids, 6)
    assert "decode:" in out.stdout and "tokens/s" in out.stdout and "migrations" in out.stdout
    assert "kv pool:" in out.stdout and "committed at load" in out.stdout
    # One trace row per layer and decode step (5 decode steps after the prefill's token).
    assert len((tmp_path / "t.csv").read_text().splitlines()) == 1 + 5 * cfg["num_hidden_layers"]
    bad = subprocess.run([str(tool), art, "--context", "4", "--policy", "sideways"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unknown policy 'sideways'" in bad.stderr
    # On the file's mapping instead of a copy: the same tokens.
    mapped = subprocess.run([str(tool), art, "--prompt-ids", ",".join(map(str, ids)),
                             "--max-new-tokens", "6", "--policy", "static:4", "--map-weights", "1"],
                            capture_output=True, text=True, timeout=120)
    assert mapped.returncode == 0, mapped.stderr
    lines = mapped.stdout.splitlines()
    assert lines[lines.index("== generated token ids:") + 1].split() == tokens
    bad = subprocess.run([str(tool), art, "--context", "4", "--map-weights", "yes"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--map-weights needs 0 or 1" in bad.stderr


def test_feedback_scheduler_with_two_tiers_splits_every_layer_and_stays_exact(built, monkeypatch):
    # Emulated HBM + DRAM; the modelled GPU side may hold 32 tokens per sequence, so past that the
    # feedback scheduler must give the oldest tokens to the CPU side, layer by layer.
    use_emulated_hbm(monkeypatch)
    model_dir, cfg, weights, art = built("mistral")
    ids = prompt(80, cfg["vocab_size"], 11)
    m = hg.Model(art, policy="feedback", max_context=96, weights=str(model_dir), gpu_tokens=32)
    got = np.stack([m.decode(np.array([t], np.int32))[0] for t in ids])
    assert rel_err(got, models.forward(cfg, weights, ids)) <= TOL
    st = m.stats()
    assert len(st["split_per_layer"]) == cfg["num_hidden_layers"]
    assert all(80 - 32 <= s <= 80 for s in st["split_per_layer"])
    assert set(st["tier_occupancy"]) == {"hbm_emulated", "dram"}
    assert sum(t["used_blocks"] for t in st["tier_occupancy"].values()) == 5
    rows = m.trace_csv().splitlines()
    assert len(rows) == 1 + 80 * cfg["num_hidden_layers"]


def test_cached_artifact_is_rebuilt_for_a_newer_config_or_another_generator(tmp_path):
    import json
    import os
    cfg = models.tiny_config("llama")
    models.write_random_checkpoint(tmp_path / "m", cfg)
    art = tmp_path / "art"
    hg.compile_model(tmp_path / "m", art)
    so = art / "model.so"
    first = so.stat().st_mtime_ns
    hg.compile_model(tmp_path / "m", art)
    assert so.stat().st_mtime_ns == first  # up to date: reused
    meta = json.loads((art / "metadata.json").read_text())
    meta["generator"] = meta["generator"] - 1
    (art / "metadata.json").write_text(json.dumps(meta))
    os.utime(art / "metadata.json", ns=(first + 10**9, first + 10**9))
    hg.compile_model(tmp_path / "m", art)
    assert so.stat().st_mtime_ns != first  # another generator's artifact: rebuilt


@pytest.fixture(scope="module")
def kv16_artifact(built, tmp_path_factory):
    """qwen2's model dir, config, weights and an artifact with f32, bf16 and f16 KV functions."""
    model_dir, cfg, weights, _ = built("qwen2")
    art = hg.compile_model(model_dir, tmp_path_factory.mktemp("kv16") / "art",
                           kv_dtypes=("f32", "bf16", "f16"))
    return model_dir, cfg, weights, art


# Only the cache is rounded (k/v are computed in f32 and rounded once when written to the pool).
# f16 keeps 11 significant bits to bf16's 8: on this walk bf16's error is 3.5e-3 and f16's 6e-4,
# so f16's bound sits between the two and a cache rounded to bf16 precision would fail it.
@pytest.mark.parametrize("kv,tol", [("bf16", 2e-2), ("f16", 1.5e-3)])
def test_16_bit_kv_decode_walk_and_prefill_match_reference(kv16_artifact, kv, tol):
    model_dir, cfg, weights, art = kv16_artifact
    ids = prompt(40, cfg["vocab_size"], 12)
    ref = models.forward(cfg, weights, ids)
    for policy in ("static:20", "feedback"):
        m = hg.Model(art, kv_dtype=kv, policy=policy, max_context=64, weights=str(model_dir))
        assert m.kv_dtype == kv
        got = np.stack([m.decode(np.array([t], np.int32))[0] for t in ids])
        assert rel_err(got, ref) <= tol
    m = hg.Model(art, kv_dtype=kv, max_context=64, weights=str(model_dir), prefill_chunk=16)
    got = m.prefill(ids[None, :37], all_logits=True)[0]
    assert rel_err(got, ref[:37]) <= tol
    # Decode over the prefilled f16/bf16 cache.
    assert rel_err(m.decode(ids[37:38])[0], ref[37]) <= tol


def test_f16_kv_from_a_model_dir_and_through_hybridgen_run(built, tmp_path):
    import subprocess
    from pathlib import Path
    model_dir, cfg, weights, _ = built("opt-350m")
    # A model dir (not an artifact) with kv_dtype="f16": compiled with f16 KV on first use.
    m = hg.Model(model_dir, kv_dtype="f16", artifact_dir=str(tmp_path / "art"), max_context=64,
                 prefill_chunk=8)
    assert m.kv_dtype == "f16"
    ids = prompt(20, cfg["vocab_size"], 13)
    assert rel_err(m.prefill(ids[None, :], all_logits=True)[0],
                   models.forward(cfg, weights, ids)) <= 2e-3
    tool = Path(hg.__file__).resolve().parents[2] / "bin" / "hybridgen-run"
    out = subprocess.run([str(tool), str(tmp_path / "art"), "--kv-dtype", "f16", "--prompt-ids",
                          ",".join(map(str, ids[:10])), "--max-new-tokens", "6"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    tokens = lines[lines.index("== generated token ids:") + 1].split()
    assert [int(t) for t in tokens] == models.greedy(models.Reference(cfg, weights), ids[:10], 6)
    # From the model dir: hybridgen-run compiles the f16 functions in because they are asked for.
    out = subprocess.run([str(tool), str(model_dir), "--artifact-dir", str(tmp_path / "art2"),
                          "--kv-dtype", "f16", "--prompt-ids", ",".join(map(str, ids[:10])),
                          "--max-new-tokens", "6"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[lines.index("== generated token ids:") + 1].split() == tokens
    bad = subprocess.run([str(tool), str(tmp_path / "art"), "--kv-dtype", "f8", "--context", "4"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "kv dtype 'f8' was not compiled" in bad.stderr


def test_f32_checkpoint_runs_as_f16_weights(built, tmp_path):
    # --weight-dtype=f16 over an f32 checkpoint: the runner rounds every weight to f16 at load
    # (was refused). The error is that rounding's: measured 1e-3, where f32 weights give ~5e-7.
    model_dir, cfg, weights, _ = built("llama")
    art = hg.compile_model(model_dir, tmp_path / "art", weight_dtype="f16")
    m = hg.Model(art, max_context=32, weights=str(model_dir), prefill_chunk=8)
    ids = prompt(17, cfg["vocab_size"], 14)
    err = rel_err(m.prefill(ids[None, :], all_logits=True)[0], models.forward(cfg, weights, ids))
    assert 1e-5 < err <= 5e-3


@pytest.mark.parametrize("arch", ("llama", "opt-350m"))
def test_weight_bytes_per_step_counts_every_weight_a_decode_step_reads(built, arch):
    # Every checkpoint tensor but the token and position embeddings (a step gathers a few rows),
    # which count once when the tied head reads the whole table; f32: 4 bytes per element.
    model_dir, cfg, _, art = built(arch)
    m = hg.Model(art, max_context=16, weights=str(model_dir))
    shapes = models.weight_shapes(cfg)
    gathered = [n for n in shapes if n.endswith(("embed_tokens.weight", "embed_positions.weight"))]
    tied = cfg.get("tie_word_embeddings", arch.startswith("opt"))
    read = [n for n in shapes if n not in gathered or (tied and n.endswith("embed_tokens.weight"))]
    assert m.weight_bytes_per_step() == 4 * sum(int(np.prod(shapes[n])) for n in read)


@pytest.mark.parametrize("name", ["model.decoder.project_in.weight",
                                  "model.decoder.project_out.weight",
                                  "model.decoder.layers.1.self_attn_layer_norm.bias"])
def test_post_ln_opt_missing_tensor_is_named(built, tmp_path, name):
    # The new arguments (project_in in embed, project_out in final, layer_mlp's norms) are bound
    # and checked at open like every other weight.
    _, cfg, _, art = built("opt-350m")
    models.write_random_checkpoint(tmp_path / "m", cfg)
    models.drop_tensor(tmp_path / "m", name)
    with pytest.raises(hg.HybridgenError, match=name.replace(".", r"\.")):
        hg.Model(art, weights=str(tmp_path / "m"))


def test_bf16_dot_rounded_artifact_stays_within_the_bf16_bound_and_is_recorded(built, tmp_path):
    """compile_model(bf16_dot_rounded=True): p enters the bf16 KV attention's p.V rounded once to
    bf16 where the CPU has AVX512-BF16 (else the option changes nothing). The logits stay within
    the bf16-KV bound of the float64 reference; the metadata records the option, and an artifact
    dir compiled the other way is rebuilt rather than reused."""
    import json
    model_dir, cfg, weights, _ = built("llama3")
    art = tmp_path / "art"
    hg.compile_model(model_dir, art, kv_dtypes=("bf16",), bf16_dot_rounded=True)
    meta = json.loads((art / "metadata.json").read_text())
    # K stays transposed: the logits keep f32 FMAs on q, only p.V takes the dot products.
    assert meta["bf16_dot_rounded"] is True and meta["k_transposed"] is True
    ids = prompt(40, cfg["vocab_size"], 12)
    ref = models.forward(cfg, weights, ids)
    m = hg.Model(art, kv_dtype="bf16", policy="static:20", max_context=64, weights=str(model_dir))
    got = np.stack([m.decode(np.array([t], np.int32))[0] for t in ids])
    assert rel_err(got, ref) <= 2e-2
    first = (art / "model.so").stat().st_mtime_ns
    hg.compile_model(model_dir, art, kv_dtypes=("bf16",))
    assert json.loads((art / "metadata.json").read_text())["bf16_dot_rounded"] is False
    assert (art / "model.so").stat().st_mtime_ns != first


@pytest.mark.parametrize("arch", ("llama", "qwen2"))
def test_k_row_major_and_transposed_artifacts_agree_and_are_recorded(built, tmp_path, arch):
    """Model artifacts store K transposed in the runner's pool by default (k_transposed, recorded
    in metadata.json); compiled with k_transposed=False they read it row-major. Both match the
    float64 reference on the same weights, decode and prefill, and give the same greedy tokens."""
    import json
    from pathlib import Path
    model_dir, cfg, weights, art = built(arch)
    art = Path(art)
    assert json.loads((art / "metadata.json").read_text())["k_transposed"] is True
    rows = tmp_path / "rows"
    hg.compile_model(model_dir, rows, k_transposed=False)
    assert json.loads((rows / "metadata.json").read_text())["k_transposed"] is False
    ids = prompt(37, cfg["vocab_size"], 5)
    ref = models.forward(cfg, weights, ids)
    outs = {}
    for name, path in (("kt", art), ("rows", rows)):
        m = hg.Model(path, policy="static:20", max_context=64, weights=str(model_dir))
        got = np.stack([m.decode(np.array([t], np.int32))[0] for t in ids])
        assert rel_err(got, ref) <= TOL, name
        p = hg.Model(path, max_context=64, weights=str(model_dir), prefill_chunk=16)
        assert rel_err(p.prefill(ids[None, :], all_logits=True)[0], ref) <= TOL, name
        g = hg.Model(path, max_context=64, weights=str(model_dir))
        outs[name] = g.generate(ids[:9], max_new_tokens=6)
    assert list(outs["kt"]) == list(outs["rows"])


def _reference_walk(cfg, weights, ids, n, pick):
    """|n| tokens of the float64 reference model, each chosen by pick(logits float64 [vocab])."""
    ref = models.Reference(cfg, weights)
    cache = ref.new_cache()
    logits = ref.forward(ids, cache)[-1]
    out = []
    for _ in range(n):
        out.append(int(pick(logits)))
        logits = ref.forward([out[-1]], cache)[-1]
    return out


SAMPLING = dict(temperature=0.9, top_k=40, top_p=0.9, min_p=0.02, seed=11)


@pytest.mark.parametrize("arch", ("llama3", "opt"))
def test_sampled_tokens_are_the_reference_logits_through_the_same_sampler(built, arch):
    # The compiled model's sampled tokens under every policy equal the float64 reference's logits
    # fed to the same seeded sampler: a draw could differ only where it falls within rounding
    # (~1e-5) of a boundary between two tokens' probability mass.
    model_dir, cfg, weights, art = built(arch)
    ids = prompt(12, cfg["vocab_size"], seed=6)
    m = hg.Model(art, policy="feedback", max_context=64, weights=str(model_dir))
    sampler = m.sampler(**SAMPLING)
    sampler.observe(0, ids)
    want = _reference_walk(cfg, weights, ids, 12,
                           lambda lg: sampler.next(lg.astype(np.float32)[None, :])[0])
    for policy in POLICIES:
        m = hg.Model(art, policy=policy, max_context=64, weights=str(model_dir))
        assert m.generate(ids, 12, **SAMPLING)[0] == want, policy
    # Sampling really happened: greedy gives other tokens, and so does another seed.
    m.reset()
    assert m.generate(ids, 12)[0] != want
    m.reset()
    assert m.generate(ids, 12, **{**SAMPLING, "seed": 12})[0] != want


def test_repetition_penalty_follows_hugging_face_when_greedy(built):
    # The penalty written out here in numpy, as transformers' RepetitionPenaltyLogitsProcessor
    # applies it: every token already in the sequence (prompt and generated) once.
    model_dir, cfg, weights, art = built("llama3")
    ids = prompt(6, cfg["vocab_size"], seed=8)
    # The prompt ends with its own greedy continuation, so the penalty on prompt tokens matters.
    ids = np.concatenate([ids, models.greedy(models.Reference(cfg, weights), ids, 4)]).astype(np.int32)
    seen = set(int(t) for t in ids)

    def penalized_argmax(logits, penalty=1.8):
        lg = logits.copy()
        for t in seen:
            lg[t] = lg[t] / penalty if lg[t] > 0 else lg[t] * penalty
        t = int(np.argmax(lg))
        seen.add(t)
        return t

    want = _reference_walk(cfg, weights, ids, 16, penalized_argmax)
    m = hg.Model(art, policy="static:8", max_context=64, weights=str(model_dir))
    got = m.generate(ids, 16, repetition_penalty=1.8)[0]
    assert got == want
    m.reset()
    assert got != m.generate(ids, 16)[0]  # the penalty changed something


def test_generate_stops_each_sequence_at_eos_and_checks_the_sampling_options(built):
    model_dir, cfg, weights, art = built("qwen2")
    a, b = prompt(8, cfg["vocab_size"], 1), prompt(8, cfg["vocab_size"], 2)
    m = hg.Model(art, batch=2, policy="static:4", max_context=64, weights=str(model_dir))
    free = m.generate(np.stack([a, b]), 6)
    m.reset()
    eos = free[0][2]  # sequence 0's third token ends it; sequence 1 runs on unless it meets it
    got = m.generate(np.stack([a, b]), 6, eos_token_ids=[eos])
    assert got[0] == free[0][:3]
    cut = free[1].index(eos) + 1 if eos in free[1] else 6
    assert got[1] == free[1][:cut]
    for bad, needle in ((dict(temperature=-1), "temperature"), (dict(top_p=0.0), "top_p"),
                        (dict(top_k=-1), "top_k"), (dict(min_p=1.5), "min_p"),
                        (dict(repetition_penalty=0), "repetition_penalty"),
                        (dict(seed=-1), "seed = -1 is outside"), (dict(top_k=1.5), "top_k must be an integer"),
                        (dict(temperature="hot"), "temperature must be a number")):
        with pytest.raises(hg.ArgumentError, match=needle):
            m.generate(np.stack([a, b]), 2, **bad)
    s = m.sampler(temperature=1.0)
    with pytest.raises(hg.ArgumentError, match="batch=2"):
        s.next(np.zeros((1, cfg["vocab_size"]), np.float32))
    with pytest.raises(hg.ArgumentError, match="outside"):
        s.observe(0, np.array([cfg["vocab_size"]], np.int32))
    nan = np.zeros((2, cfg["vocab_size"]), np.float32)
    nan[1, 3] = np.nan
    with pytest.raises(hg.ArgumentError, match="sequence 1 hold NaN"):
        s.next(nan)


def test_sampler_frequencies_follow_the_filtered_softmax():
    # Through the Python binding, against probabilities computed here: temperature, top-k, top-p
    # and min-p together. 6 degrees of freedom at most; the 1e-6 tail of chi2(6) is ~36.
    logits = np.array([[1.2, -0.4, 2.0, 0.3, 1.9, -2.0, 0.8, 0.0, -np.inf, 1.0]], np.float32)
    t, k, p, mp = 0.8, 6, 0.85, 0.05
    s = hg._native.Sampler(1, 10, temperature=t, top_k=k, top_p=p, min_p=mp, seed=2)
    n = 20000
    counts = np.bincount([s.next(logits)[0] for _ in range(n)], minlength=10)
    w = np.exp((logits[0].astype(np.float64) - logits.max()) / t)
    order = np.argsort(-w, kind="stable")[:k]               # top-k
    cum = np.cumsum(w[order]) / w[order].sum()
    order = order[:int(np.searchsorted(cum, p) + 1)]         # top-p: first prefix reaching p
    order = order[w[order] >= mp]                            # min-p (the best has weight 1)
    expect = np.zeros(10)
    expect[order] = w[order] / w[order].sum()
    assert counts[expect == 0].sum() == 0
    e = n * expect[expect > 0]
    chi = float(((counts[expect > 0] - e) ** 2 / e).sum())
    assert chi < 36, (counts, expect)


def test_hybridgen_run_samples_as_model_generate_does(built):
    # hybridgen-run's ModelRunner::generate and Python's Model.generate loop share the sampler:
    # the same options and seed give the same tokens; a seed repeats a run.
    import subprocess
    from pathlib import Path
    model_dir, cfg, weights, art = built("llama3")
    tool = Path(hg.__file__).resolve().parents[2] / "bin" / "hybridgen-run"
    ids = prompt(10, cfg["vocab_size"], 10)

    def run(*flags):
        out = subprocess.run([str(tool), art, "--prompt-ids", ",".join(map(str, ids)),
                              "--max-new-tokens", "8", "--policy", "static:4", *flags],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        return [int(t) for t in lines[lines.index("== generated token ids:") + 1].split()], out.stdout

    flags = ("--temperature", "0.9", "--top-k", "40", "--top-p", "0.95",
             "--repetition-penalty", "1.3", "--seed", "5")
    first, stdout = run(*flags)
    assert "sampled, temperature 0.9, top-k 40, top-p 0.95" in stdout and "seed 5" in stdout
    assert run(*flags)[0] == first
    m = hg.Model(art, policy="static:4", max_context=64, weights=str(model_dir))
    assert m.generate(ids, 8, temperature=0.9, top_k=40, top_p=0.95, repetition_penalty=1.3,
                      seed=5)[0] == first
    assert run(*flags[:-1], "6")[0] != first
    for bad, needle in ((("--top-p", "2"), "top_p must be in (0, 1]"),
                        (("--temperature", "warm"), "--temperature needs a number"),
                        (("--seed", "-1"), "--seed needs a non-negative integer"),
                        (("--seed", "99999999999999999999"), "--seed must fit 64 bits")):
        out = subprocess.run([str(tool), art, "--context", "4", *bad], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode != 0 and needle in out.stderr, (bad, out.stderr)


@pytest.mark.parametrize("tiers", ("dram", "hbm+dram"))
def test_truncate_keeps_a_prefix_whose_continuation_matches_the_reference(built, monkeypatch, tiers):
    # A document, a first question and its answer, then back to the document and a second
    # question: the logits are those of the document followed by the second question alone.
    gpu_tokens = 0
    if tiers == "hbm+dram":
        use_emulated_hbm(monkeypatch)
        gpu_tokens = 16
    model_dir, cfg, weights, art = built("llama3")
    V = cfg["vocab_size"]
    doc, q1, q2 = prompt(30, V, 20), prompt(6, V, 21), prompt(9, V, 22)
    m = hg.Model(art, policy="feedback", max_context=64, weights=str(model_dir),
                 gpu_tokens=gpu_tokens)
    m.prefill(doc[None])
    logits = m.prefill(q1[None])
    for _ in range(3):
        logits = m.decode(np.array([int(np.argmax(logits[0]))], np.int32))
    assert m.sequence_lengths() == [39]
    m.truncate(30)
    assert m.sequence_lengths() == [30]
    got = m.prefill(q2[None], all_logits=True)[0]
    ref = models.forward(cfg, weights, np.concatenate([doc, q2]))
    assert rel_err(got, ref[30:]) <= TOL
    nxt = int(np.argmax(ref[-1]))
    ref2 = models.forward(cfg, weights, np.concatenate([doc, q2, [nxt]]))
    assert rel_err(m.decode(np.array([nxt], np.int32))[0], ref2[-1]) <= TOL
    # Out of range: an error that changes nothing; 0 empties the cache.
    for bad in (41, -1):
        with pytest.raises(hg.ArgumentError, match="truncate: cannot keep"):
            m.truncate(bad)
    assert m.sequence_lengths() == [40]
    m.truncate(0)
    assert m.sequence_lengths() == [0]
    assert rel_err(m.prefill(q2[None], all_logits=True)[0], models.forward(cfg, weights, q2)) <= TOL


@pytest.mark.parametrize("tiers,kv", (("dram", None), ("hbm+dram", None), ("dram", "bf16")))
def test_identical_prompts_are_prefilled_once_and_copied(built, monkeypatch, tiers, kv):
    # A batch whose sequences hold the same tokens and get the same prompt computes it for the
    # first sequence only and copies its KV (prefill_shared_tokens counts the copies). The copies
    # must be the KV each sequence would have computed: each then continues with its own tokens
    # and must match the reference of its own sequence. Prefill chunks of 8 make it several steps.
    gpu_tokens = 0
    if tiers == "hbm+dram":
        use_emulated_hbm(monkeypatch)
        gpu_tokens = 16
    model_dir, cfg, weights, art = built("qwen2")
    V = cfg["vocab_size"]
    tol = TOL if kv is None else 2e-2
    doc = prompt(21, V, 30)
    m = hg.Model(art, batch=3, policy="feedback", max_context=64, weights=str(model_dir),
                 prefill_chunk=8, gpu_tokens=gpu_tokens, kv_dtype=kv)
    got = m.prefill(np.stack([doc] * 3), all_logits=True)
    ref = models.forward(cfg, weights, doc)
    for b in range(3):
        assert rel_err(got[b], ref) <= tol
    assert m.stats()["prefill_shared_tokens"] == 2 * 21
    # Each sequence continues on its own: the copied KV must hold exactly the first's.
    own = [prompt(3, V, 40 + b) for b in range(3)]
    for t in range(3):
        logits = m.decode(np.array([own[b][t] for b in range(3)], np.int32))
    for b in range(3):
        want = models.forward(cfg, weights, np.concatenate([doc, own[b]]))[-1]
        assert rel_err(logits[b], want) <= tol
    # Now the histories differ: the same prompt again is computed for every sequence.
    tail = prompt(5, V, 50)
    got = m.prefill(np.stack([tail] * 3))
    assert m.stats()["prefill_shared_tokens"] == 2 * 21
    for b in range(3):
        want = models.forward(cfg, weights, np.concatenate([doc, own[b], tail]))[-1]
        assert rel_err(got[b], want) <= tol
    # After reset the batch shares again; different rows are not shared.
    m.reset()
    m.prefill(np.stack([doc[:9]] * 3))
    assert m.stats()["prefill_shared_tokens"] == 2 * 9
    m.reset()
    m.prefill(np.stack([doc[:9], doc[:9], doc[1:10]]))
    assert m.stats()["prefill_shared_tokens"] == 0


def test_matmuls_take_token_rows_in_chunks_that_fit_l2(tmp_path):
    # down_proj's input 4096 wide takes 32 token rows per chunk (512 KiB of f32 inputs), so a
    # 2 x 37-token prefill (74 rows: chunks [0, 32), [32, 64), [64, 72), then 2 rows for the row
    # loop with the last chunk) crosses chunks; gate/up (64 wide) fit in one. The chunk loop
    # is in the generated code, and every row matches the reference.
    cfg = models.tiny_config("llama", intermediate_size=4096)
    weights = models.write_random_checkpoint(tmp_path / "m", cfg, seed=13)
    art = hg.compile_model(tmp_path / "m", tmp_path / "art", kv_dtypes=("f32",))
    text = (tmp_path / "art" / "model.mlir").read_text()
    assert re.search(r"= arith\.constant 32 : index\n(.|\n)*scf\.for %tci = ", text)
    assert "scf.if %tlast {" in text and "scf.for %m0 = %tlo to %thi step" in text
    m = hg.Model(art, max_context=64, weights=str(tmp_path / "m"), batch=2)
    ids = np.stack([prompt(37, cfg["vocab_size"], 7), prompt(37, cfg["vocab_size"], 8)])
    assert_prefill_then_decode_match(m, cfg, weights, ids, np.array([3, 9], np.int32))
