#!/usr/bin/env python3
"""llama.cpp's llama-bench on the same SmolLM2 GGUF, threads, contexts and prompt lengths as
hybridgen's bench/models run, printed next to hybridgen's numbers from that run (run.sh PEERS=1
calls this right after hybridgen_model_bench). llama-bench is built outside the repository by
`bash scripts/peers.sh ggml`.

    python llama_bench_peer.py --llama-bench PATH --gguf FILE --config CONFIG.json
        --hybridgen-csv models.csv [--out bench/results/models_peers.csv]
        [--contexts=1024,...] [--threads=1,2] [--prefill=512,...] [--steps=N] [other bench flags]

The models differ in what a token reads: the GGUF is Q4_1 (~4.5 bits per weight, llama.cpp runs
it as stored) while hybridgen runs the imported bf16 weights. So both tokens/s and bytes read per
decoded token are reported: llama.cpp's = its model tensors (llama-bench's model_size) + its KV
cache of `context` tokens; hybridgen's = bytes_per_step of its bench at batch 1. llama.cpp runs
twice: with its default KV cache (f16) and with bf16 K/V like hybridgen's (-ctk/-ctv bf16 -fa on);
with --gguf-bf16 also on a bf16 copy of the GGUF with bf16 K/V, byte for byte what hybridgen reads. Decode runs at depth `context` (llama-bench -d), prefill from an empty cache.
"""
import argparse
import csv
import datetime
import json
import subprocess
import sys
from pathlib import Path


def llama_bench(exe, args):
    cmd = [str(exe), *args, "-o", "json"]
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        raise SystemExit(f"llama_bench_peer: llama-bench exited {proc.returncode}")
    return json.loads(proc.stdout)


def join(decode, prefill, hybrid, kv_bytes_per_token, kv="bf16"):
    """llama-bench's JSON tests (decode at depth, prefill; KV cache type |kv|) next to hybridgen's
    batch-1 rows of the same (phase, context or prompt, threads); |hybrid| maps that key to its
    models.csv row."""
    rows = []
    for t in decode:
        ctx, threads = int(t["n_depth"]), int(t["n_threads"])
        rows.append({"phase": "decode", "context": ctx, "threads": threads, "kv": kv,
                     "llama_tokens_per_s": t["avg_ts"], "llama_stddev": t.get("stddev_ts"),
                     "llama_bytes_per_token": int(t["model_size"]) + kv_bytes_per_token * ctx,
                     "type": t.get("model_type", "")})
    for t in prefill:
        rows.append({"phase": "prefill", "context": int(t["n_prompt"]), "kv": kv,
                     "threads": int(t["n_threads"]), "llama_tokens_per_s": t["avg_ts"],
                     "llama_stddev": t.get("stddev_ts"),
                     "llama_bytes_per_token": None, "type": t.get("model_type", "")})
    for r in rows:
        h = hybrid.get((r["phase"], r["context"], r["threads"]))
        r["hybridgen_tokens_per_s"] = float(h["tokens_per_s"]) if h else None
        r["hybridgen_bytes_per_token"] = (float(h["bytes_per_step"])
                                          if h and h.get("bytes_per_step") else None)
        r["hybridgen_over_llama"] = (r["hybridgen_tokens_per_s"] / r["llama_tokens_per_s"]
                                     if h else None)

    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--gguf-bf16", help="a bf16 copy of it (bf16_gguf.py): the same bytes per "
                                        "weight as hybridgen")
    ap.add_argument("--config", required=True, help="config.json of the imported model")
    ap.add_argument("--hybridgen-csv", required=True)
    ap.add_argument("--name", default="smollm2", help="hybridgen's model name in that CSV")
    ap.add_argument("--out", default="bench/results/models_peers.csv")
    ap.add_argument("--contexts", default="1024")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--prefill", default="512")
    ap.add_argument("--steps", default="8")
    ap.add_argument("--repetitions", default="3")
    args, _ = ap.parse_known_args()  # the rest of hybridgen's grid flags (batches, ...)

    cfg = json.loads(Path(args.config).read_text())
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    kv_bytes_per_token = (cfg["num_hidden_layers"] * 2 * cfg.get("num_key_value_heads", heads)
                          * head_dim * 2)  # 2-byte K and V (bf16 or f16)
    hybrid = {}
    with open(args.hybridgen_csv) as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            if r["model"] == args.name and r["batch"] == "1":
                hybrid[(r["phase"], int(r["context"]), int(r["threads"]))] = r

    # Decode: at least 16 generated tokens per measurement (llama-bench times them as one run).
    gen = str(max(16, int(args.steps)))
    rows = []
    # llama.cpp's default KV cache (f16, flash attention on auto) and bf16 as hybridgen runs it
    # (a non-f16 V cache needs flash attention on): both 2 bytes per element.
    bf16_kv = ["-ctk", "bf16", "-ctv", "bf16", "-fa", "on"]
    runs = [(args.gguf, "f16", []), (args.gguf, "bf16", bf16_kv)]
    if args.gguf_bf16:  # bf16 weights and KV: what hybridgen runs, byte for byte
        runs.append((args.gguf_bf16, "bf16", bf16_kv))
    for gguf, kv, extra in runs:
        common = ["-m", gguf, "-t", args.threads, "-r", args.repetitions, *extra]
        decode = llama_bench(args.llama_bench, [*common, "-p", "0", "-n", gen, "-d", args.contexts])
        prefill = llama_bench(args.llama_bench, [*common, "-p", args.prefill, "-n", "0"])
        rows += join(decode, prefill, hybrid, kv_bytes_per_token, kv)

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = decode[0].get("cpu_info", "") if decode else ""
    fields = ["date", "cpu_info", "phase", "context", "threads", "llama_kv", "hybridgen_tokens_per_s",
              "hybridgen_bytes_per_token", "llama_tokens_per_s", "llama_tokens_per_s_stddev",
              "llama_bytes_per_token",
              "hybridgen_over_llama", "llama_model_type"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in rows:
            w.writerow([date, cpu, r["phase"], r["context"], r["threads"], r["kv"],
                        *("" if x is None else f"{x:.6g}" for x in (
                            r["hybridgen_tokens_per_s"], r["hybridgen_bytes_per_token"],
                            r["llama_tokens_per_s"], r["llama_stddev"], r["llama_bytes_per_token"],
                            r["hybridgen_over_llama"])), r["type"]])

    def show(x, scale=1.0, digits=1):
        return "-" if x is None else f"{x / scale:.{digits}f}"

    print(f"\nSmolLM2-135M, batch 1, {cpu}, {date}: hybridgen bf16 weights + bf16 KV")
    print("| phase | context / prompt | threads | hybridgen tok/s | hybridgen MB/token | "
          "llama.cpp model | llama.cpp KV | llama.cpp tok/s | llama.cpp MB/token | "
          "hybridgen / llama.cpp |")
    print("|" + "---|" * 10)
    for r in rows:
        print(f"| {r['phase']} | {r['context']} | {r['threads']} | "
              f"{show(r['hybridgen_tokens_per_s'])} | {show(r['hybridgen_bytes_per_token'], 1e6)} | "
              f"{r['type']} | {r['kv']} | {show(r['llama_tokens_per_s'])} ± {show(r['llama_stddev'])} | "
              f"{show(r['llama_bytes_per_token'], 1e6)} | "
              f"{show(r['hybridgen_over_llama'], digits=2)} |")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
