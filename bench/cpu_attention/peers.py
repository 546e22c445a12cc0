#!/usr/bin/env python3
"""hybridgen's CPU decode attention against the peers a user would pick instead, in one run on the
same threads: ggml's CPU flash_attn_ext and PyTorch SDPA with the GQA group's query heads folded.
Both peers live outside the repository (scripts/peers.sh builds/installs them under
$HYBRIDGEN_PEERS_DIR, default ~/.cache/hybridgen-peers); a missing one is skipped with a one-line
notice.

    .venv/bin/python bench/cpu_attention/peers.py [--quick] [--rounds 3]
        [--contexts 16384,65536] [--batches 1,8] [--dtypes f32,f16,bf16] [--threads 1,2]
        [--target-cpu=x86-64-v3 --avx2-peers] [--target-features=...] [--out bench/results/cpu_attention_peers.csv]

Each round runs, per KV dtype, hybridgen_cpu_attention_bench (which measures the read roof in
alternating rounds in its own process on the same threads), then ggml, then torch, on the same
cases; every ratio is taken against the roof of the same case in the same round, and the table
shows the median over rounds. GB/s everywhere is logical K+V bytes / time (ggml reads the K/V of
a kv head once per query head of its group, so it moves more bytes than it is credited with).
"""
import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PEERS_DIR = Path(os.environ.get("HYBRIDGEN_PEERS_DIR", Path.home() / ".cache" / "hybridgen-peers"))
# The ISA flags that decide which kernels run; the CSV records them with the CPU model.
ISA_PREFIXES = ("avx", "fma", "f16c", "amx", "sse4", "bmi2")


def cpu_identity():
    """("model name (family F model M)", the ISA flags) of the first CPU in /proc/cpuinfo (a
    guest's model name can be as vague as "AMD EPYC"; family and model say which generation)."""
    fields, flags = {}, []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value.strip()
            elif key == "flags" and not flags:
                flags = [f for f in value.split() if f.startswith(ISA_PREFIXES)]
    except OSError:
        pass
    model = fields.get("model name", "unknown")
    if "cpu family" in fields and "model" in fields:
        model += f" (family {fields['cpu family']} model {fields['model']})"
    return model, " ".join(flags)


def run_csv(cmd, env=None):
    """Runs a bench that prints CSV on stdout; returns its rows (stderr passed through)."""
    print("$", " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"peers: {Path(str(cmd[0])).name} exited {proc.returncode}; its rows so far are kept",
              file=sys.stderr)
    return list(csv.DictReader(line for line in proc.stdout.splitlines() if "," in line))


def key(row):
    return (row["dtype"], int(row["context"]), int(row["batch"]), int(row["threads"]))


def available_peers(peers_dir=PEERS_DIR, avx2=False):
    """{name: (command, environment)} of the peers that are installed; prints one line for each
    one that is not. |avx2|: the peers' AVX2 code (ggml built without AVX-512, torch's kernels
    dispatched for AVX2), to stand beside hybridgen's AVX2 kernels on an AVX-512 machine."""
    peers = {}
    ggml = peers_dir / "bin" / ("ggml_flash_attn_avx2" if avx2 else "ggml_flash_attn")
    if os.access(ggml, os.X_OK):
        peers["ggml"] = ([ggml], None)
    else:
        print(f"peers: ggml skipped ({ggml} missing; `bash scripts/peers.sh "
              f"{'ggml-avx2' if avx2 else 'ggml'}` builds it)")
    torch_py = peers_dir / "torch-venv" / "bin" / "python"
    if os.access(torch_py, os.X_OK) and subprocess.run(
            [torch_py, "-c", "import torch"], capture_output=True).returncode == 0:
        # ATen's own kernels (SDPA's flash kernel among them) dispatch on ATEN_CPU_CAPABILITY;
        # the GEMMs it calls go through oneDNN and MKL, which have their own caps.
        env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2",
                   MKL_ENABLE_INSTRUCTIONS="AVX2") if avx2 else None
        peers["torch"] = ([torch_py, HERE / "peers" / "torch_sdpa.py"], env)
    else:
        print(f"peers: torch skipped (no importable torch in {torch_py.parent.parent}; "
              "`bash scripts/peers.sh torch` installs it)")
    return peers


def summarize(results, meta):
    """One row per case hybridgen ran: medians over rounds of each GB/s and of each ratio to the
    roof of its own round, and hybridgen / peer as the ratio of the GB/s medians.
    |results|: {name: {(dtype, context, batch, threads): [(gbps, roof_gbps of that round), ...]}}.
    """
    def median_of(name, case, ratio):
        vals = results.get(name, {}).get(case)
        if not vals:
            return None
        return statistics.median(g / roof if ratio else g for g, roof in vals)

    rows = []
    for case in sorted(results["hybridgen"]):
        dtype, ctx, batch, threads = case
        row = {**meta, "dtype": dtype, "context": ctx, "batch": batch, "threads": threads,
               "roof_gbps": statistics.median(roof for _, roof in results["hybridgen"][case])}
        for name in ("hybridgen", "ggml", "torch"):
            row[f"{name}_gbps"] = median_of(name, case, False)
            row[f"{name}_roof"] = median_of(name, case, True)
        for name in ("ggml", "torch"):
            peer = row[f"{name}_gbps"]
            row[f"hybridgen_over_{name}"] = row["hybridgen_gbps"] / peer if peer else None
        rows.append(row)
    return rows


def default_cold_bytes():
    """Twice the L3 this machine reports (bench_core.cpp, defaultColdBytes), else 64 MiB."""
    try:  # glibc's sysconf(_SC_LEVEL3_CACHE_SIZE), which Python's os.sysconf does not name
        l3 = int(subprocess.run(["getconf", "LEVEL3_CACHE_SIZE"], capture_output=True,
                                text=True).stdout.strip() or 0)
    except (ValueError, OSError):
        l3 = 0
    return 2 * l3 if l3 > 0 else 64 << 20


def fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--quick", action="store_true", help="16K tokens, batch 1, one round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--contexts", default="16384,65536")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--max-gib", default="4")
    ap.add_argument("--min-seconds", default="0.4")
    ap.add_argument("--cold-bytes", type=int, default=-1,
                    help="bytes read between two reads of one copy of a case's KV, the same for "
                         "every program (-1: twice the L3, as hybridgen's bench takes by default; "
                         "0: every call reads the same KV)")
    ap.add_argument("--target-cpu", default="",
                    help="hybridgen JIT target CPU, e.g. x86-64-v3 (the AVX2 kernels)")
    ap.add_argument("--target-features", default="",
                    help="hybridgen JIT target features, e.g. +avx2,+fma,+f16c,-avx512f")
    ap.add_argument("--avx2-peers", action="store_true",
                    help="the peers' AVX2 code (bash scripts/peers.sh ggml-avx2; torch with "
                         "ATEN_CPU_CAPABILITY=avx2 and oneDNN/MKL capped at AVX2); with "
                         "--target-cpu=x86-64-v3")
    ap.add_argument("--k-transposed", action="store_true",
                    help="hybridgen's kernels for K pools stored transposed per block (the layout "
                         "of model artifacts; docs/cpu-path.md)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_attention_peers.csv"))
    args = ap.parse_args()
    if args.quick:
        args.contexts, args.batches, args.rounds = "16384", "1", 1
    if args.cold_bytes < 0:
        args.cold_bytes = default_cold_bytes()

    grid = [f"--contexts={args.contexts}", f"--batches={args.batches}",
            f"--threads={args.threads}", f"--max-gib={args.max_gib}",
            f"--min-seconds={args.min_seconds}", f"--cold-bytes={args.cold_bytes}"]
    exe = Path(args.build_dir) / "bin" / "hybridgen_cpu_attention_bench"
    hg_extra = ([f"--target-cpu={args.target_cpu}"] if args.target_cpu else []) + (
        [f"--target-features={args.target_features}"] if args.target_features else []) + (
        ["--k-transposed"] if args.k_transposed else [])
    target = " ".join(x for x in (args.target_cpu, args.target_features) if x) or "host"
    if args.k_transposed:
        target += ", K transposed"
    peers = available_peers(avx2=args.avx2_peers)

    # results[name][case] = list of (gbps, roof of that case in that round)
    results = {"hybridgen": {}, **{p: {} for p in peers}}
    for rnd in range(args.rounds):
        for dtype in args.dtypes.split(","):
            roofs = {}
            for r in run_csv([exe, f"--dtypes={dtype}", *grid, *hg_extra]):
                roofs[key(r)] = float(r["roof_gbps"])
                results["hybridgen"].setdefault(key(r), []).append(
                    (float(r["gbps"]), roofs[key(r)]))
            for name, (cmd, env) in peers.items():
                for r in run_csv([*cmd, f"--dtypes={dtype}", *grid], env=env):
                    if key(r) in roofs:  # a case hybridgen ran in this round
                        results[name].setdefault(key(r), []).append(
                            (float(r["gbps"]), roofs[key(r)]))

    model, flags = cpu_identity()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = summarize(results, {"date": date, "cpu_model": model, "cpu_flags": flags,
                               "rounds": args.rounds,
                               "target": target,
                               "peers_isa": "avx2" if args.avx2_peers else "host"})

    fields = ["date", "cpu_model", "cpu_flags", "rounds", "target", "peers_isa", "dtype", "context",
              "batch", "threads", "roof_gbps", "hybridgen_gbps", "hybridgen_roof", "ggml_gbps",
              "ggml_roof", "torch_gbps", "torch_roof", "hybridgen_over_ggml",
              "hybridgen_over_torch"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else ("" if v is None else v))
                        for k, v in row.items()})

    print(f"\nCPU: {model}; ISA flags: {flags}; {date}; median of {args.rounds} round(s); "
          f"hybridgen target: {target}; peers: {'AVX2 code' if args.avx2_peers else 'host code'}")
    print("| KV | tokens | batch | threads | roof GB/s | hybridgen GB/s | hybridgen / roof | "
          "ggml flash-attn / roof | torch SDPA, q folded / roof | hybridgen / ggml | "
          "hybridgen / torch |")
    print("|" + "---|" * 11)
    for r in rows:
        print(f"| {r['dtype']} | {r['context'] // 1024}K | {r['batch']} | {r['threads']} | "
              f"{r['roof_gbps']:.2f} | {r['hybridgen_gbps']:.2f} | {fmt(r['hybridgen_roof'], 2)} | "
              f"{fmt(r['ggml_roof'], 2)} | {fmt(r['torch_roof'], 2)} | "
              f"{fmt(r['hybridgen_over_ggml'], 2)} | {fmt(r['hybridgen_over_torch'], 2)} |")
    over_best = [min(x for x in (r["hybridgen_over_ggml"], r["hybridgen_over_torch"]) if x)
                 for r in rows if r["context"] >= 16384
                 and (r["hybridgen_over_ggml"] or r["hybridgen_over_torch"])]
    if over_best:
        print(f"\nhybridgen / better peer at >= 16K tokens: min {min(over_best):.2f}, "
              f"median {statistics.median(over_best):.2f} (issue 18 target >= 2)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
