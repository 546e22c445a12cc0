#!/usr/bin/env python3
"""The CPU attention benchmark's headline table: the JIT-compiled dense decode kernels against the
read roof measured in the same run on the same threads, for both K layouts the project compiles
(K transposed per block, what compiled models use; row-major K, what `compile_attention` and the
hybrid GPU+CPU models use, bf16 on AMX where the CPU has it), every KV dtype, 1 and 2 threads,
batch 1 and 8; and, in the same run, a straightforward numpy attention on the same shapes.

    .venv/bin/python bench/cpu_attention/run.py [--quick] [--sweeps N] [--peers]

Each case runs in --sweeps whole sweeps (the machine is shared, and a neighbour can slow one
sweep down); the table gives the median ratio over the sweeps and every sweep's ratio, each
against the roof of its own sweep. Every CSV row carries the date, the CPU's model and its ISA
flags. The KV is read cold (the bench's --cold-bytes default: twice the L3 passes between two
reads of one copy), as a long context is. --peers then runs bench/cpu_attention/peers.py (ggml
flash-attn and torch SDPA against hybridgen, interleaved) on the models' layout, writing
<out>_peers.csv beside --out.
"""
import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import cpu_identity  # noqa: E402 (this folder's module)

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


def numpy_worker(cases, reps):
    """Times numpy attention for each case (run in a subprocess whose BLAS/OpenMP thread count is
    fixed by the environment). Prints one JSON line per case."""
    import numpy as np

    rng = np.random.default_rng(0)
    for case in cases:
        ctx, batch, dtype = case["context"], case["batch"], case["dtype"]
        blocks = (ctx + BLOCK - 1) // BLOCK
        shape = (batch * blocks, KV_HEADS, BLOCK, HEAD_DIM)
        # Random blocks tiled over the pool: generating gigabytes of random numbers would take
        # longer than the measurement, and values do not change the speed.
        tile_shape = (64,) + shape[1:]
        if dtype == "f32":
            tile_k = rng.standard_normal(tile_shape, dtype=np.float32) * 0.1
            tile_v = rng.standard_normal(tile_shape, dtype=np.float32) * 0.1
            to_f32 = lambda x: x  # noqa: E731
        elif dtype == "f16":
            tile_k = (rng.standard_normal(tile_shape, dtype=np.float32) * 0.1).astype(np.float16)
            tile_v = (rng.standard_normal(tile_shape, dtype=np.float32) * 0.1).astype(np.float16)
            to_f32 = lambda x: x.astype(np.float32)  # noqa: E731
        else:  # bf16 stored as uint16, widened by a shift: numpy has no bf16
            tile_k = rng.integers(0x3C00, 0x3D00, size=tile_shape, dtype=np.uint16)
            tile_v = rng.integers(0x3C00, 0x3D00, size=tile_shape, dtype=np.uint16)
            to_f32 = lambda x: (x.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
        k = np.empty(shape, dtype=tile_k.dtype)
        v = np.empty(shape, dtype=tile_v.dtype)
        for start in range(0, shape[0], 64):
            n = min(64, shape[0] - start)
            k[start:start + n] = tile_k[:n]
            v[start:start + n] = tile_v[:n]
        table = (np.arange(blocks)[None, :] * batch + np.arange(batch)[:, None]).astype(np.int32)
        lens = np.full(batch, ctx, dtype=np.int32)
        q = rng.standard_normal((batch, Q_HEADS, HEAD_DIM), dtype=np.float32)
        scale = np.float32(1.0 / np.sqrt(HEAD_DIM))
        group = Q_HEADS // KV_HEADS

        def attention():
            out = np.empty_like(q)
            for b in range(batch):
                n = int(lens[b])
                ids = table[b, : (n + BLOCK - 1) // BLOCK]
                kk = to_f32(k[ids]).transpose(1, 0, 2, 3).reshape(KV_HEADS, -1, HEAD_DIM)[:, :n]
                vv = to_f32(v[ids]).transpose(1, 0, 2, 3).reshape(KV_HEADS, -1, HEAD_DIM)[:, :n]
                qb = q[b].reshape(KV_HEADS, group, HEAD_DIM)
                s = (qb @ kk.transpose(0, 2, 1)) * scale
                s -= s.max(axis=-1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=-1, keepdims=True)
                out[b] = (p @ vv).reshape(Q_HEADS, HEAD_DIM)
            return out

        big = ctx * batch >= 8 * 65536  # seconds per call: one timed call is enough
        if not big:
            attention()  # warm-up
        times = []
        for _ in range(1 if big else reps):
            t0 = time.perf_counter()
            attention()
            times.append(time.perf_counter() - t0)
        times.sort()
        elt = 4 if dtype == "f32" else 2
        kv_bytes = batch * ctx * KV_HEADS * HEAD_DIM * elt * 2
        print(json.dumps({**case, "numpy_gbps": kv_bytes / times[len(times) // 2] / 1e9}),
              flush=True)
        del k, v



LAYOUTS = {"k-transposed": ["--k-transposed"], "row-major": []}
TARGET = 0.8  # of the read roof (issue 18)


def median_rows(runs, vector):
    """One row per case from its sweeps: median GB/s, roof and ratio, and every sweep's ratio.
    |runs|: {(layout, context, batch, dtype, threads): [bench CSV rows]}; |vector|: the same keys
    to the ratios of the bf16 kernel without AMX."""
    rows = []
    for k, rs in runs.items():
        ratios = [float(r["ratio"]) for r in rs]
        rows.append({
            "layout": k[0], "context": k[1], "batch": k[2], "dtype": k[3], "threads": k[4],
            "gbps": f"{statistics.median(float(r['gbps']) for r in rs):.2f}",
            "roof_gbps": f"{statistics.median(float(r['roof_gbps']) for r in rs):.2f}",
            "ratio": f"{statistics.median(ratios):.3f}",
            "ratio_all": " ".join(f"{x:.3f}" for x in ratios),
            "vector_ratio": f"{statistics.median(vector[k]):.3f}" if k in vector else "",
            "kv_bytes": rs[0]["kv_bytes"]})
    return rows


def target_summary(rows):
    """Per layout and dtype (in the rows' order): the range and median of the ratios and how
    many cells meet the target."""
    groups = {}
    for r in rows:
        groups.setdefault((r["layout"], r["dtype"]), []).append(float(r["ratio"]))
    return [f"{layout} {dtype}: {min(x):.3f}-{max(x):.3f} of the roof, median "
            f"{statistics.median(x):.3f}, {sum(v >= TARGET for v in x)} of {len(x)} cells >= "
            f"{TARGET} (target)" for (layout, dtype), x in groups.items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--quick", action="store_true", help="16K tokens only, one sweep")
    ap.add_argument("--layouts", default="k-transposed,row-major",
                    help="K layouts to measure: k-transposed (the models'), row-major")
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--max-gib", default="4")
    ap.add_argument("--numpy-reps", type=int, default=2)
    ap.add_argument("--no-numpy", action="store_true", help="skip the numpy attention")
    ap.add_argument("--sweeps", type=int, default=2,
                    help="whole sweeps; the table gives the median")
    ap.add_argument("--no-vector-bf16", action="store_true",
                    help="skip the row-major bf16 sweep with the AMX path off")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_attention.csv"))
    ap.add_argument("--peers", action="store_true",
                    help="then run the peers (bench/cpu_attention/peers.py) in the same run")
    ap.add_argument("--numpy-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.numpy_worker:
        numpy_worker(json.loads(args.numpy_worker), args.numpy_reps)
        return
    layouts = args.layouts.split(",")
    for layout in layouts:
        if layout not in LAYOUTS:
            ap.error(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    sweeps = 1 if args.quick else args.sweeps
    if sweeps < 1:
        ap.error("--sweeps must be at least 1")

    contexts = "16384" if args.quick else "16384,65536,131072"
    exe = Path(args.build_dir) / "bin" / "hybridgen_cpu_attention_bench"
    base = [str(exe), f"--contexts={contexts}", "--batches=1,8", "--threads=1,2",
            f"--max-gib={args.max_gib}"]

    def sweep(extra):
        cmd = base + extra
        print("$", " ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
        sys.stderr.write(proc.stderr)
        return list(csv.DictReader(line for line in proc.stdout.splitlines() if "," in line))

    def key(layout, r):
        return (layout, int(r["context"]), int(r["batch"]), r["dtype"], int(r["threads"]))

    # Whole sweeps in turn, so a slow stretch of the shared machine lands on one sweep of every
    # case rather than on every sweep of a few; each ratio is against its own sweep's roof.
    runs, vector = {}, {}
    for _ in range(sweeps):
        for layout in layouts:
            for r in sweep([f"--dtypes={args.dtypes}", *LAYOUTS[layout]]):
                runs.setdefault(key(layout, r), []).append(r)
        if "row-major" in layouts and "bf16" in args.dtypes.split(",") and not args.no_vector_bf16:
            for r in sweep(["--dtypes=bf16", "--no-amx"]):
                vector.setdefault(key("row-major", r), []).append(float(r["ratio"]))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    model, flags = cpu_identity()
    rows = [dict(r, date=date, cpu_model=model, cpu_flags=flags) for r in median_rows(runs, vector)]

    # numpy on the same (context, batch, dtype), one subprocess per thread count; it reads the
    # blocks as they lie, so one figure serves both layouts.
    numpy = {}
    for threads in sorted({r["threads"] for r in rows}) if not args.no_numpy else []:
        cases = sorted({(r["context"], r["batch"], r["dtype"]) for r in rows
                        if r["threads"] == threads})
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   MKL_NUM_THREADS=str(threads))
        out = subprocess.run(
            [sys.executable, __file__, "--numpy-worker",
             json.dumps([{"context": c, "batch": b, "dtype": d} for c, b, d in cases]),
             "--numpy-reps", str(args.numpy_reps)],
            check=True, capture_output=True, text=True, env=env)
        for line in out.stdout.splitlines():
            res = json.loads(line)
            numpy[(res["context"], res["batch"], res["dtype"], threads)] = res["numpy_gbps"]
    for r in rows:
        gbps = numpy.get((r["context"], r["batch"], r["dtype"], r["threads"]))
        if gbps is not None:
            r["numpy_gbps"] = f"{gbps:.2f}"
            r["numpy_ratio"] = f"{gbps / float(r['roof_gbps']):.3f}"

    fields = ["date", "cpu_model", "cpu_flags", "layout", "context", "batch", "dtype", "threads",
              "gbps", "roof_gbps", "ratio", "ratio_all", "vector_ratio", "numpy_gbps",
              "numpy_ratio", "kv_bytes"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print(f"{date}; {model}; flags: {flags}")
    print("| layout | KV | tokens | batch | threads | GB/s | roof GB/s | ratio (median) | "
          "per sweep | bf16 without AMX | numpy / roof |")
    print("|" + "---|" * 11)
    for r in rows:
        print(f"| {r['layout']} | {r['dtype']} | {r['context']} | {r['batch']} | {r['threads']} | "
              f"{r['gbps']} | {r['roof_gbps']} | {r['ratio']} | {r['ratio_all']} | "
              f"{r['vector_ratio'] or '-'} | {r.get('numpy_ratio', '-')} |")
    print()
    for line in target_summary(rows):
        print(line)
    print(f"wrote {args.out}")
    if args.peers:
        # Beside this run's CSV (so a --quick or --out run leaves the recorded peer table alone
        # unless it writes there too), on the layout compiled models use.
        peers_out = Path(args.out).with_name(Path(args.out).stem + "_peers.csv")
        subprocess.run([sys.executable, str(Path(__file__).with_name("peers.py")),
                        f"--build-dir={args.build_dir}", f"--out={peers_out}", "--k-transposed",
                        *(["--quick"] if args.quick else [])], check=True)


if __name__ == "__main__":
    main()
