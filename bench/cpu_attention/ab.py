#!/usr/bin/env python3
"""Interleaved A/B runs of the CPU attention bench, the way the kernel choices in
docs/cpu-path.md are measured.

A variant is a name, extra bench flags and optionally its own bench binary (a build of another
commit). Every repeat runs each variant once, in turn, so a neighbour's burst on this shared
machine lands on all of them alike. Per case it prints each variant's median ratio to the roof with
its range, leaving out runs under --slow (the VM's AMX slow mode, see docs/cpu-path.md) unless all
of a variant's runs are, and at the end the mean of each variant's medians.

    .venv/bin/python bench/cpu_attention/ab.py --reps 5 \\
        --variant c1024=--chunk-tokens=1024 --variant c4096=--chunk-tokens=4096 \\
        -- --dtypes=bf16 --contexts=65536,131072 --batches=1,8 --threads=1,2
    # two builds: --variant old= --binary old=/tmp/old/build/bin/hybridgen_cpu_attention_bench
"""
import argparse
import csv
import datetime
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import cpu_identity  # noqa: E402 (this folder's module, also when loaded by path)

ROOT = Path(__file__).resolve().parents[2]


def summarize(rows, variants, slow):
    """rows: dicts with variant, context, batch, dtype, threads, ratio. Returns (per-case lines,
    {variant: mean of medians}); a case's cell is (median, min, max, runs left out as slow)."""
    runs = {}
    for r in rows:
        case = (int(r["context"]), int(r["batch"]), r["dtype"], int(r["threads"]))
        runs.setdefault(case, {}).setdefault(r["variant"], []).append(float(r["ratio"]))
    table, medians = [], {v: [] for v in variants}
    for case in sorted(runs):
        cells = {}
        for v in variants:
            xs = runs[case].get(v)
            if not xs:
                continue
            fast = [x for x in xs if x >= slow] or xs
            cells[v] = (statistics.median(fast), min(fast), max(fast), len(xs) - len(fast))
            medians[v].append(cells[v][0])
        table.append((case, cells))
    return table, {v: statistics.mean(m) for v, m in medians.items() if m}


def parse_pairs(specs, what):
    pairs = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            sys.exit(f"ab.py: {what} '{spec}' is not NAME=VALUE")
        pairs[name] = value
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                    help="a variant and its extra bench flags (space-separated, may be empty)")
    ap.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                    help="the bench binary of a variant (default: this build's)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--slow", type=float, default=0.6,
                    help="ratios under this are left out of the medians (AMX slow mode)")
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--out", help="also write every run as CSV here")
    ap.add_argument("bench_args", nargs="*", help="flags for every run (after --)")
    args = ap.parse_args()

    variants = parse_pairs(args.variant, "--variant")
    binaries = parse_pairs(args.binary, "--binary")
    if len(variants) < 2:
        sys.exit("ab.py: give at least two --variant")
    if unknown := set(binaries) - set(variants):
        sys.exit(f"ab.py: --binary for unknown variant(s) {sorted(unknown)}")
    default_exe = str(Path(args.build_dir) / "bin" / "hybridgen_cpu_attention_bench")

    rows = []
    for rep in range(args.reps):
        for name, flags in variants.items():
            cmd = [binaries.get(name, default_exe), *flags.split(), *args.bench_args]
            print(f"[{rep + 1}/{args.reps}] {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
            rows += [dict(r, variant=name) for r in csv.DictReader(proc.stdout.splitlines())]

    if args.out:
        # Every row names the CPU it ran on (a ratio holds for that CPU only).
        model, flags = cpu_identity()
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        rows_out = [dict(r, date=date, cpu_model=model, cpu_flags=flags) for r in rows]
        head = ["date", "cpu_model", "cpu_flags", "variant"]
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=[*head, *[k for k in rows[0] if k not in head]])
            w.writeheader()
            w.writerows(rows_out)
    table, means = summarize(rows, list(variants), args.slow)
    print("| context | batch | dtype | threads | " + " | ".join(variants) + " |")
    print("|" + "---|" * (4 + len(variants)))
    for (ctx, batch, dtype, threads), cells in table:
        text = []
        for v in variants:
            if v not in cells:
                text.append("-")
                continue
            m, lo, hi, n = cells[v]
            text.append(f"{m:.3f} ({lo:.2f}-{hi:.2f}{f', {n} slow' if n else ''})")
        print(f"| {ctx} | {batch} | {dtype} | {threads} | " + " | ".join(text) + " |")
    print("\nmean of medians: " + ", ".join(f"{v} {m:.3f}" for v, m in means.items()))


if __name__ == "__main__":
    main()
