#!/usr/bin/env python3
"""What the KV cache's storage dtype and the bf16 attention arithmetic cost a model in accuracy.

One prompt is prefilled and a fixed continuation is then fed token by token (teacher forcing, so
every configuration sees the same tokens); each decode step's logits are compared with those of
the f32 KV cache and the exact kernels. Printed as a table and written as CSV per configuration:
the largest and mean relative logit error (per step, max |x - ref| / max |ref|), the mean and
largest KL(ref || x) of the next-token distributions, and how often the argmax agrees. Measured
numbers are in docs/models.md ("Accuracy of bf16 KV and rounded bf16 dot products").

    .venv/bin/python bench/models/accuracy.py /tmp/hybridgen-model-bench/smollm2 \\
        --prompt-tokens=8000 --steps=48 --csv=bench/results/models_accuracy.csv

The prompt is this repository's docs, tokenized with the model's tokenizer.json; a model dir
without one (the tests' random checkpoints) gets seeded random token ids instead.
"""
import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# (name, kv dtype, bf16_dot_rounded); the first is the reference.
CONFIGS = [
    ("f32 KV (reference)", "f32", False),
    ("bf16 KV", "bf16", False),
    ("bf16 KV, rounded bf16 dot products", "bf16", True),
    ("f16 KV", "f16", False),
]


def prompt_ids(model_dir: Path, count: int, seed: int) -> list:
    tokenizer = model_dir / "tokenizer.json"
    if tokenizer.exists():
        from tokenizers import Tokenizer
        text = "".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
        ids = Tokenizer.from_file(str(tokenizer)).encode(text).ids
        if ids:
            while len(ids) < count:  # a short docs folder repeats rather than failing
                ids = ids + ids
            return ids[:count]
    import json
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    return np.random.default_rng(seed).integers(0, vocab, count).tolist()


def decode_logits(hybridgen, model_dir, kv, rounded, prompt, follow, threads):
    model = hybridgen.Model(str(model_dir), kv_dtype=kv, threads=threads,
                            bf16_dot_rounded=rounded, max_context=len(prompt) + len(follow) + 16)
    model.prefill(np.array([prompt], np.int32))
    return np.array([model.decode(np.array([t], np.int32))[0] for t in follow], np.float64)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def compare(ref, x) -> dict:
    rel = np.abs(x - ref).max(-1) / np.abs(ref).max(-1)
    lp, lq = log_softmax(ref), log_softmax(x)
    kl = (np.exp(lp) * (lp - lq)).sum(-1)
    return {"max_rel_logit_err": float(rel.max()), "mean_rel_logit_err": float(rel.mean()),
            "mean_kl": float(kl.mean()), "max_kl": float(kl.max()),
            "top1_agree": float((x.argmax(-1) == ref.argmax(-1)).mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", type=Path, help="a Hugging Face style model dir (config.json, "
                    "safetensors; tokenizer.json for a text prompt)")
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=32, help="decode steps compared")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", default="", help="comma-separated KV configs to run besides the "
                    "reference: bf16, bf16-rounded, f16 (default: all)")
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args(argv)
    if not (args.model_dir / "config.json").is_file():
        ap.error(f"{args.model_dir} has no config.json: give a Hugging Face style model dir (each "
                 "configuration compiles its own artifact from it)")
    if args.prompt_tokens < 1 or args.steps < 1:
        ap.error("--prompt-tokens and --steps must be at least 1")
    sys.path.insert(0, str(ROOT / "build" / "python_packages"))
    import hybridgen

    keys = {"bf16": 1, "bf16-rounded": 2, "f16": 3}
    chosen = [k for k in args.configs.split(",") if k] if args.configs else list(keys)
    unknown = [k for k in chosen if k not in keys]
    if unknown or not chosen:
        ap.error(f"--configs: unknown {', '.join(unknown) or '(empty)'}; choose from "
                 f"{', '.join(keys)}")
    wanted = [0] + [keys[k] for k in chosen]
    ids = prompt_ids(args.model_dir, args.prompt_tokens + args.steps, args.seed)
    prompt, follow = ids[:args.prompt_tokens], ids[args.prompt_tokens:]
    print(f"{args.model_dir.name}: {len(prompt)}-token prompt, {len(follow)} decode steps "
          "compared with the f32 KV cache (teacher-forced)")
    # Where the CPU lacks AVX512-BF16 the rounded option changes nothing (docs/cpu-path.md).
    from hybridgen._host import cpu_has_flag
    if 2 in wanted and not cpu_has_flag("avx512_bf16"):
        print("note: this CPU has no AVX512-BF16, so the rounded configuration runs the exact "
              "kernel (its row equals the bf16 KV row)")
    ref = decode_logits(hybridgen, args.model_dir, "f32", False, prompt, follow, args.threads)
    rows = []
    for i in wanted[1:]:
        name, kv, rounded = CONFIGS[i]
        x = decode_logits(hybridgen, args.model_dir, kv, rounded, prompt, follow, args.threads)
        rows.append({"config": name, "kv_dtype": kv, "bf16_dot_rounded": int(rounded),
                     "prompt_tokens": len(prompt), "steps": len(follow), **compare(ref, x)})
    print("| config | max rel. logit error | mean | mean KL | max KL | top-1 agrees |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['max_rel_logit_err']:.2e} | {r['mean_rel_logit_err']:.2e} | "
              f"{r['mean_kl']:.2e} | {r['max_kl']:.2e} | {r['top1_agree']:.3f} |")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"CSV: {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
