#!/usr/bin/env python3
"""Machine-independent figure of the CPU attention kernels: instructions retired per KV byte,
counted by valgrind's callgrind (not perf: no hardware counters in these VMs) over the calls of
the compiled kernel only (--toggle-collect on its entry point), 1 thread, batch 1, Llama-3-8B
shape. The count does not depend on the machine's load or clock, so a regression in the code a
target gets shows on any CPU that can run it.

Valgrind 3.19 executes no AVX-512, so only targets without it can be counted (x86-64-v3 = AVX2 +
FMA + F16C, the Zen 3 kernels); the AVX-512 and AMX rows say so instead of guessing.

    .venv/bin/python bench/cpu_attention/instructions.py [--build-dir build] [--context 4096]
        [--targets x86-64-v3] [--dtypes f32,bf16,f16] [--k-transposed] [--csv PATH]
        [--mca znver3,emeraldrapids] [--flags=--overlap-pieces=0]

--k-transposed counts the kernels for K stored transposed per block (the model artifacts'
layout); --compiler=PATH takes the kernels from another build's hybridgen_cpu_attention_bench
(an A/B of two commits' code, counted by the same AOT bench); --flags passes compile flags of
that bench (e.g. --overlap-pieces=0) when it writes the kernels.

--mca adds, per CPU named (LLVM's -mcpu names), llvm-mca's prediction of the cores' rate: KV
bytes per core cycle with every load an L1 hit, from its model of that CPU's ports over each
innermost loop of the kernel, weighted by callgrind's iteration counts (mca_loops.py). A compute
ceiling for a CPU not at hand (a Zen 3), to set beside its read roof per cycle; "loops" is the
share of the instructions inside innermost loops (the rest: straight runs, modelled alike).
"""
import argparse
import csv
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import mca_loops

ROOT = Path(__file__).resolve().parents[2]
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
ELT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def count(build: Path, compiler: Path, target: str, dtype: str, context: int, work: Path,
          k_transposed: bool, flags: list, mcpus: list) -> dict:
    kernels = work / target
    kernels.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(compiler), f"--save-aot={kernels}", f"--target-cpu={target}",
                    f"--dtypes={dtype}", *(["--k-transposed"] if k_transposed else []), *flags],
                   check=True, capture_output=True, text=True)
    out = work / f"callgrind.{target}.{dtype}"
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "--toggle-collect=_mlir_ciface_hg_attention", *(["--dump-instr=yes"] if mcpus else []),
         str(build / "bin/hybridgen_cpu_attention_aot_bench_v3"), f"--load={kernels}",
         f"--dtypes={dtype}", f"--contexts={context}", "--batches=1", "--threads=1",
         "--min-seconds=0"],
        capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"callgrind run failed for {target} {dtype}:\n{run.stderr[-2000:]}")
    instructions = int(re.search(r"Collected : (\d+)", run.stderr).group(1))
    # Callgrind compresses names: "fn=(id) name" or "cfn=(id) name" once, then "(id)" alone; a
    # call is "cfn=(id)" followed by "calls=N ...".
    calls, entry_id = 0, None
    lines = out.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"c?fn=\((\d+)\)\s*(.*)", line)
        if not m:
            continue
        if m.group(2) == "_mlir_ciface_hg_attention":
            entry_id = m.group(1)
        if (line.startswith("cfn=") and m.group(1) == entry_id
                and lines[i + 1].startswith("calls=")):
            calls += int(lines[i + 1].split()[0].split("=")[1])
    if calls == 0:
        raise RuntimeError("no call of _mlir_ciface_hg_attention was recorded")
    kv_bytes = 2 * context * KV_HEADS * HEAD_DIM * ELT_BYTES[dtype]
    row = {"target": target, "dtype": dtype, "k_transposed": k_transposed, "context": context,
           "flags": " ".join(flags), "calls": calls,
           "instructions_per_call": instructions // calls,
           "instructions_per_kv_byte": round(instructions / calls / kv_bytes, 4)}
    if mcpus:
        kernel = kernels / f"attention_{dtype}.so"  # the name --save-aot gives it
        cycles, share = mca_loops.predict(kernel, out, mcpus)
        for mcpu in mcpus:
            row[f"mca_{mcpu}_kv_bytes_per_cycle"] = round(calls * kv_bytes / cycles[mcpu], 3)
        row["mca_loops_share"] = round(share, 3)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--targets", default="x86-64-v3")
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--k-transposed", action="store_true")
    ap.add_argument("--compiler", default="", help="hybridgen_cpu_attention_bench to compile with")
    ap.add_argument("--flags", default="", help="compile flags for --save-aot, space separated")
    ap.add_argument("--mca", default="", help="CPUs (llvm-mca -mcpu names) to predict rates for")
    ap.add_argument("--csv", default="")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        print("valgrind is not installed", file=sys.stderr)
        return 2
    mcpus = [m for m in args.mca.split(",") if m]
    if mcpus and not (shutil.which(mca_loops.OBJDUMP) and Path(mca_loops.LLVM_MCA).exists()):
        print(f"--mca needs {mca_loops.OBJDUMP} (binutils) and {mca_loops.LLVM_MCA} (llvm-22)",
              file=sys.stderr)
        return 2
    build = Path(args.build_dir)
    compiler = Path(args.compiler or build / "bin/hybridgen_cpu_attention_bench")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.targets.split(","):
            for dtype in args.dtypes.split(","):
                rows.append(count(build, compiler, target, dtype, args.context, Path(tmp),
                                  args.k_transposed, args.flags.split(), mcpus))
    print("target      dtype  tokens  calls  instr/call   instr/KV byte" +
          "".join(f"  {m + ' B/cycle':>20}" for m in mcpus) + ("  loops" if mcpus else ""))
    for r in rows:
        print(f"{r['target']:<11} {r['dtype']:<6} {r['context']:>6} {r['calls']:>6} "
              f"{r['instructions_per_call']:>11} {r['instructions_per_kv_byte']:>14.3f}" +
              "".join(f"  {r[f'mca_{m}_kv_bytes_per_cycle']:>20.2f}" for m in mcpus) +
              (f"  {r['mca_loops_share']:>5.2f}" if mcpus else ""))
    print("AVX-512 / AMX paths: not countable here (valgrind executes no AVX-512)")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
