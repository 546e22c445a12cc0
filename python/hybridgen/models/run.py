"""`python -m hybridgen run`: text in, tokens (greedy or sampled) streamed out, over hybridgen.Model.

The compiled model (hybridgen.Model, issue 16's runner) does the work; this module tokenizes,
applies the chat template, streams the decoded text of sequence 0 as tokens come, and prints the
summary of Model.stats() at the end.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from .errors import ModelError
from .text import TextCodec

PREFILL_CHUNK = 512  # prompt tokens per prefill call: a long prefill shows progress between chunks


def _model_class():
    import hybridgen

    model = getattr(hybridgen, "Model", None)
    if model is None:
        raise ModelError("this build of hybridgen has no hybridgen.Model (the compiled-model runner); "
                         "`run` needs it")
    return model


def _prefill(m, ids: np.ndarray, label: str, err):
    """Chunked prefill of ids [batch, T]; progress on stderr when it takes several chunks."""
    logits = None
    total = ids.shape[1]
    for at in range(0, total, PREFILL_CHUNK):
        logits = m.prefill(np.ascontiguousarray(ids[:, at:at + PREFILL_CHUNK]))
        if total > PREFILL_CHUNK:
            done = min(total, at + PREFILL_CHUNK)
            print(f"\r{label}: {done}/{total} tokens", end="", file=err, flush=True)
    if total > PREFILL_CHUNK:
        print(file=err)
    return logits


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} ({_fmt(x)})" if isinstance(x, dict) else f"{k}={_fmt(x)}"
                         for k, x in v.items())
    if isinstance(v, (list, tuple, np.ndarray)):
        a = list(v)
        if len(a) > 8 and all(isinstance(x, (int, float, np.number)) for x in a):
            arr = np.asarray(a, dtype=np.float64)
            if arr.min() == arr.max():
                return f"{len(a)} values, all {arr[0]:.4g}"
            return (f"{len(a)} values, min {arr.min():.4g}, median {np.median(arr):.4g}, "
                    f"max {arr.max():.4g}")
        return "[" + ", ".join(_fmt(x) for x in a) + "]"
    return str(v)


def print_summary(stats: dict, measured: dict, out):
    """Model.stats() as lines a person reads: rates first, then the scheduler's view. What the
    stats lack (an older runner) falls back to the wall-clock numbers measured here."""
    stats = dict(stats or {})
    shared = stats.pop("prefill_shared_tokens", 0)
    print("\n--- summary ---", file=out)
    for phase in ("prefill", "decode"):
        tokens, secs = stats.pop(f"{phase}_tokens", None), stats.pop(f"{phase}_seconds", None)
        rate = stats.pop(f"{phase}_tokens_per_s", None)
        steps = stats.pop(f"{phase}_steps", None)
        if tokens is None or rate is None:
            print(f"{phase}: {measured[phase]}", file=out)
            continue
        extra = f" ({steps} steps)" if steps is not None else ""
        took = f" in {secs:.3f} s" if secs is not None else ""
        copied = (f" ({shared} of them copied, not computed: every sequence had the same "
                  f"prompt)" if phase == "prefill" and shared else "")
        print(f"{phase}: {tokens} tokens{extra}{took}, {rate:.1f} tokens/s{copied}", file=out)
    committed, commit_s = stats.pop("kv_committed_bytes", None), stats.pop("kv_commit_seconds", None)
    if committed is not None and commit_s is not None:
        print(f"kv pool: {committed / 2**20:.1f} MiB committed at load in {commit_s:.3f} s "
              "(not in the prefill's time)", file=out)
    for k, v in stats.items():
        print(f"{k.replace('_', ' ')}: {_fmt(v)}", file=out)


def decode_tokens(m, logits, max_new_tokens: int, eos=(), on_token=None, sampler=None):
    """Tokens of every sequence of hybridgen.Model |m| from the prefill's |logits| [batch, vocab]:
    (token lists, decode steps run), by Model.steps (greedy unless |sampler|, Model.sampler(),
    picks). A sequence stops at an id in |eos| (kept); the others go on, and |on_token| gets
    sequence 0's tokens as they come, until it stops."""
    outs = [[] for _ in range(np.asarray(logits).shape[0])]
    steps = -1
    for steps, picked in enumerate(m.steps(logits, max_new_tokens, sampler, eos)):
        for b, t in enumerate(picked):
            if t >= 0:
                outs[b].append(t)
        if on_token is not None and picked[0] >= 0:
            on_token(picked[0])
    return outs, max(steps, 0)


def greedy_decode(m, logits, max_new_tokens: int, eos=(), on_token=None):
    """decode_tokens() with argmax picks."""
    return decode_tokens(m, logits, max_new_tokens, eos, on_token)


def _sampler(model, sampling, prompt_ids):
    """model.sampler(**sampling) having seen every sequence's prompt, or None (greedy) when
    |sampling| is empty."""
    if not sampling:
        return None
    sampler = model.sampler(**sampling)
    ids = np.ascontiguousarray(prompt_ids, dtype=np.int32)
    for b in range(sampler.batch):
        sampler.observe(b, ids)
    return sampler


def generate_text(model, prompt: str, tokenizer, *, chat: bool = True, system=None,
                  max_new_tokens: int = 64, on_text=None, sampling=None) -> str:
    """The answer of hybridgen.Model |model| to text |prompt| (every sequence of the batch gets it;
    sequence 0's answer is returned): greedy, or sampled with |sampling| (Model.sampler()'s
    keywords, e.g. {"temperature": 0.8, "top_p": 0.95, "seed": 1}). |tokenizer|: a model dir or a
    TextCodec; |chat| applies its chat template; |on_text| gets the answer's text as it comes.
    Resets the model's KV first."""
    codec = tokenizer if isinstance(tokenizer, TextCodec) else TextCodec(tokenizer)
    ids = codec.encode_chat(prompt, system) if chat else codec.encode(prompt)
    model.reset()
    batch = int(getattr(model, "batch", 1))
    logits = model.prefill(np.tile(np.asarray(ids, dtype=np.int32), (batch, 1)))
    stream = codec.stream()
    pieces = []

    def emit(token):
        piece = stream.push(token)
        pieces.append(piece)
        if on_text is not None and piece:
            on_text(piece)

    decode_tokens(model, logits, max_new_tokens, codec.eos_token_ids, on_token=emit,
                  sampler=_sampler(model, sampling, ids))
    rest = stream.flush()
    if on_text is not None and rest:
        on_text(rest)
    return "".join(pieces) + rest


def read_prompt_file(path: str) -> str:
    """The text of |path| ('-': stdin), as UTF-8; a clear error when it cannot be read."""
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"cannot read the prompt file {path}: {e}") from e


def sampling_options(args) -> dict:
    """The CLI's sampling flags as Model.sampler() keywords; {} (greedy, no sampler) when none is
    given. The sampler checks their ranges."""
    names = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed")
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def run_text(args, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if args.batch < 1 or args.max_new_tokens < 0 or args.context < 0:
        raise ModelError("run: --batch must be >= 1, --max-new-tokens and --context >= 0")
    codec = None
    if getattr(args, "prompt_file", None) is not None:
        args.prompt = read_prompt_file(args.prompt_file)
    tok_dir = Path(args.tokenizer or args.model)
    if args.prompt is not None or (tok_dir / "tokenizer.json").is_file():
        codec = TextCodec(tok_dir)
    if args.prompt is not None:
        ids = codec.encode_chat(args.prompt, args.system) if args.chat else codec.encode(args.prompt)
    elif args.prompt_ids:
        try:
            ids = [int(x) for x in args.prompt_ids.split(",") if x.strip()]
        except ValueError as e:
            raise ModelError(f"run: --prompt-ids must be comma-separated integers ({e})") from e
    elif args.context == 0:
        raise ModelError("run: give --prompt, --prompt-ids or --context N")
    else:
        ids = []
    if args.chat and args.prompt is None:
        raise ModelError("run: --chat needs --prompt")
    Model = _model_class()
    need = args.context + len(ids) + args.max_new_tokens + 1
    # Options beyond the contract's are passed only when given, so any Model takes the defaults.
    extra = {k: v for k, v in (("gpu_tokens", getattr(args, "gpu_tokens", None)),
                               ("weight_dtype", getattr(args, "weight_dtype", None)),
                               ("map_weights", getattr(args, "map_weights", None)),
                               ("bf16_dot_rounded", getattr(args, "bf16_dot_rounded", None)))
             if v is not None}
    # The pool is committed at load (every block it can use), so it is sized for this run only.
    m = Model(args.model, kv_dtype=args.kv_dtype, threads=args.threads, policy=args.policy,
              batch=args.batch, max_context=args.max_context or need, **extra)
    vocab = int(m.config["vocab_size"])
    if ids and (min(ids) < 0 or max(ids) >= vocab):
        raise ModelError(f"run: prompt token ids must be in [0, {vocab})")

    measured = {}
    logits = None
    t_prefill = 0.0
    n_prefill = 0
    if args.context:
        # Seeded random ids stand in for a long document: the cache is full, the text is not real.
        synth = np.random.default_rng(0).integers(0, vocab, (args.batch, args.context), dtype=np.int32)
        print(f"[synthetic context: {args.context} random tokens per sequence, for benchmarking]",
              file=err)
        t0 = time.perf_counter()
        logits = _prefill(m, synth, "prefill (synthetic)", err)
        t_prefill += time.perf_counter() - t0
        n_prefill += args.context
    if ids:
        prompt = np.tile(np.asarray(ids, dtype=np.int32), (args.batch, 1))
        t0 = time.perf_counter()
        logits = _prefill(m, prompt, "prefill", err)
        t_prefill += time.perf_counter() - t0
        n_prefill += len(ids)
    measured["prefill"] = (f"{n_prefill} tokens x {args.batch} in {t_prefill:.3f} s "
                           f"({n_prefill * args.batch / max(t_prefill, 1e-9):.1f} tokens/s, measured here)")

    eos = codec.eos_token_ids if codec else set()
    stream = codec.stream() if codec else None

    def show(token):  # sequence 0 as text while it runs (special tokens decode to nothing)
        out.write(stream.push(token))
        out.flush()

    sampler = _sampler(m, sampling_options(args), ids)
    t0 = time.perf_counter()
    outs, steps = decode_tokens(m, logits, args.max_new_tokens, eos,
                                on_token=show if stream is not None else None, sampler=sampler)
    t_decode = time.perf_counter() - t0
    if stream is None:
        print(" ".join(map(str, outs[0])), file=out)
    else:
        print(stream.flush(), file=out)
    if args.batch > 1 and codec is not None:
        for b in range(1, args.batch):
            if outs[b] != outs[0]:
                print(f"[sequence {b}] {codec.decode(outs[b])}", file=out)
    if args.show_ids:
        for b in range(args.batch):
            print(f"[ids {b}] {' '.join(map(str, outs[b]))}", file=out)
    measured["decode"] = (f"{steps} steps x {args.batch} in {t_decode:.3f} s "
                          f"({steps * args.batch / max(t_decode, 1e-9):.1f} tokens/s, measured here)")
    print_summary(m.stats(), measured, out)
    return 0
