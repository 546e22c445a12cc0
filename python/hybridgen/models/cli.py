"""The `python -m hybridgen` command line: import-gguf, run and chat. Errors print one line, exit 1."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._hybridgen import HybridgenError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hybridgen",
                                description="hybridgen: compiled hybrid CPU+GPU LLM decode")
    sub = p.add_subparsers(dest="command", required=True)

    imp = sub.add_parser("import-gguf", help="turn a GGUF file into an HF checkpoint directory")
    imp.add_argument("gguf", help="the .gguf file (llama architecture)")
    imp.add_argument("outdir", help="directory for config.json, model.safetensors, tokenizer.json")
    imp.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                     help="dtype of the written weights (default float32)")
    imp.add_argument("--shard-mib", type=int, default=2048,
                     help="weights beyond this many MiB go into shards with an index (default "
                          "2048); memory holds one shard at a time")
    imp.add_argument("--force", action="store_true",
                     help="import again even if OUTDIR already holds this file's import")

    run = sub.add_parser("run", help="prefill a prompt and generate (greedy, or sampled with "
                                     "--temperature) with hybridgen.Model")
    run.add_argument("model", help="HF model directory (compiled on first use) or an artifact")
    src = run.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text (needs tokenizer.json)")
    src.add_argument("--prompt-ids", help="comma-separated token ids instead of text")
    src.add_argument("--prompt-file", help="read the prompt text from this UTF-8 file (a long "
                                           "document; '-' reads stdin)")
    run.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    run.add_argument("--system", help="system message for --chat (default: the template's own)")
    run.add_argument("--max-new-tokens", type=int, default=64)
    run.add_argument("--policy", default="feedback", help="feedback | static:S | cpu")
    run.add_argument("--batch", type=int, default=1, help="sequences decoded together")
    run.add_argument("--context", type=int, default=0,
                     help="fill the cache with N synthetic tokens first (benchmarking)")
    run.add_argument("--threads", type=int, default=None)
    run.add_argument("--kv-dtype", default=None, help="KV cache dtype (default: the model's)")
    run.add_argument("--max-context", type=int, default=None,
                     help="KV capacity per sequence (default: what the run needs)")
    run.add_argument("--gpu-tokens", type=int, default=None,
                     help="KV budget per sequence and layer of the (modelled) GPU side; the "
                          "scheduler splits attention past it (default: the Model's)")
    run.add_argument("--weight-dtype", default=None,
                     help="weight dtype the model dir is compiled for (default: the Model's)")
    run.add_argument("--map-weights", action="store_true", default=None,
                     help="run on the checkpoint file's mapping instead of a copy of the weights "
                          "in huge-page memory (less memory and a faster start, slower decode)")
    run.add_argument("--bf16-dot-rounded", action="store_true", default=None,
                     help="compile a model dir with q and p rounded once to bf16 in the bf16 KV "
                          "attention (AVX512-BF16 CPUs: faster, relative error ~1e-3)")
    run.add_argument("--tokenizer", default=None,
                     help="directory with tokenizer.json (default: MODEL itself)")
    run.add_argument("--show-ids", action="store_true", help="print the generated token ids too")
    _add_sampling(run)

    chat = sub.add_parser("chat", help="talk with a model in the terminal; each turn reuses the KV "
                                       "cache of the conversation so far")
    chat.add_argument("model", help="HF model directory (compiled on first use) or an artifact")
    chat.add_argument("--system", help="system message (default: the template's own)")
    chat.add_argument("--max-new-tokens", type=int, default=256, help="per answer (default 256)")
    chat.add_argument("--max-context", type=int, default=None,
                      help="KV capacity of the conversation in tokens (default 4096)")
    chat.add_argument("--policy", default="feedback", help="feedback | static:S | cpu")
    chat.add_argument("--threads", type=int, default=None)
    chat.add_argument("--kv-dtype", default=None, help="KV cache dtype (default: the model's)")
    chat.add_argument("--gpu-tokens", type=int, default=None,
                      help="KV budget per layer of the (modelled) GPU side")
    chat.add_argument("--weight-dtype", default=None,
                      help="weight dtype the model dir is compiled for (default: the Model's)")
    chat.add_argument("--tokenizer", default=None,
                      help="directory with tokenizer.json (default: MODEL itself)")
    _add_sampling(chat)
    return p


def _add_sampling(parser) -> None:
    smp = parser.add_argument_group("sampling (greedy unless --temperature > 0; "
                                    "hybridgen.Model.sampler)")
    smp.add_argument("--temperature", type=float, default=None,
                     help="draw from softmax(logits / T); 0 (default) is greedy")
    smp.add_argument("--top-k", type=int, default=None, help="draw among the K most likely only")
    smp.add_argument("--top-p", type=float, default=None,
                     help="nucleus: the most likely tokens whose probabilities sum to >= P")
    smp.add_argument("--min-p", type=float, default=None,
                     help="drop tokens below P x the most likely one's probability")
    smp.add_argument("--repetition-penalty", type=float, default=None,
                     help="Hugging Face's penalty on tokens already in the sequence (1 is off; "
                          "applies when greedy too)")
    smp.add_argument("--seed", type=int, default=None,
                     help="seed of the draws (default 0): the same seed repeats a run")


_STAMP = ".hybridgen-import.json"


def _import_gguf(args) -> int:
    from .gguf_import import import_gguf

    src, out = Path(args.gguf), Path(args.outdir)
    # Idempotent: a second import of the same file (same size, mtime, dtype) into OUTDIR is a no-op.
    stamp = out / _STAMP
    key = None
    if src.is_file():
        st = src.stat()
        key = {"source": str(src.resolve()), "size": st.st_size, "mtime": st.st_mtime,
               "dtype": args.dtype, "shard_mib": args.shard_mib}
    weights_there = (out / "model.safetensors").is_file() or \
        (out / "model.safetensors.index.json").is_file()
    if key and not args.force and stamp.is_file() and weights_there:
        try:
            if json.loads(stamp.read_text()) == key:
                print(f"import-gguf: {out} is up to date with {src.name}")
                return 0
        except ValueError:
            pass
    stamp.unlink(missing_ok=True)  # an import that fails half way must not look up to date
    cfg = import_gguf(src, out, dtype=args.dtype, shard_bytes=args.shard_mib << 20)
    if key:
        stamp.write_text(json.dumps(key) + "\n")
    print(f"import-gguf: {src.name} -> {out} ({cfg['num_hidden_layers']} layers, hidden "
          f"{cfg['hidden_size']}, heads {cfg['num_attention_heads']}/{cfg['num_key_value_heads']}, "
          f"vocab {cfg['vocab_size']}, {args.dtype})")
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "import-gguf":
            return _import_gguf(args)
        if args.command == "chat":
            from .chat import run_chat

            return run_chat(args)
        from .run import run_text

        return run_text(args)
    except HybridgenError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
