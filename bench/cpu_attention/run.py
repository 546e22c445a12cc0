#!/usr/bin/env python3
"""Runs the CPU attention benchmark (JIT-compiled hg attention vs a read roof) and, in the same run,
a straightforward numpy attention on the same shapes; prints a table and writes
bench/results/cpu_attention.csv.

    .venv/bin/python bench/cpu_attention/run.py [--build-dir build] [--quick] [--peers]

--peers: afterwards bench/cpu_attention/peers.py (ggml flash-attn and torch SDPA against hybridgen,
interleaved in one run), writing <out>_peers.csv beside --out (bench/results/cpu_attention_peers.csv
by default).
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--quick", action="store_true", help="4K and 16K contexts only")
    ap.add_argument("--max-gib", default="4")
    ap.add_argument("--numpy-reps", type=int, default=2)
    ap.add_argument("--sweeps", type=int, default=2, help="whole sweeps; each case keeps its best")
    ap.add_argument("--no-vector-bf16", action="store_true",
                    help="skip the bf16 sweep with the AMX path off")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_attention.csv"))
    ap.add_argument("--peers", action="store_true",
                    help="then run the peers (bench/cpu_attention/peers.py) in the same run")
    ap.add_argument("--numpy-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.numpy_worker:
        numpy_worker(json.loads(args.numpy_worker), args.numpy_reps)
        return

    contexts = "4096,16384" if args.quick else "4096,16384,65536,131072"
    exe = Path(args.build_dir) / "bin" / "hybridgen_cpu_attention_bench"
    base = [str(exe), f"--contexts={contexts}", "--batches=1,8", "--threads=1,2",
            f"--max-gib={args.max_gib}"]

    def sweep(extra):
        cmd = base + extra
        print("$", " ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
        sys.stderr.write(proc.stderr)
        return list(csv.DictReader(proc.stdout.splitlines()))

    def key(r):
        return (r["context"], r["batch"], r["dtype"], r["threads"])

    # The machine is shared: a neighbour's burst can slow a whole case (all its rounds) down. So
    # the sweep runs --sweeps times and each case keeps its best sweep; every ratio is still
    # against the roof measured in the rounds of that same sweep, and the spread is reported.
    rows, ratios = {}, {}
    for _ in range(args.sweeps):
        for r in sweep(["--dtypes=bf16,f32"]):
            ratios.setdefault(key(r), []).append(float(r["ratio"]))
            if key(r) not in rows or float(r["ratio"]) > float(rows[key(r)]["ratio"]):
                rows[key(r)] = r
    for k, r in rows.items():
        r["ratio_all"] = " ".join(f"{x:.3f}" for x in ratios[k])
    # bf16 without the AMX path (the vector kernel), in the same run, for comparison.
    if not args.no_vector_bf16:
        for r in sweep(["--dtypes=bf16", "--no-amx"]):
            if key(r) in rows:
                rows[key(r)]["vector_ratio"] = r["ratio"]
    rows = list(rows.values())

    # numpy on the same (context, batch, dtype), one subprocess per thread count.
    for threads in sorted({r["threads"] for r in rows}):
        cases = [{"context": int(r["context"]), "batch": int(r["batch"]), "dtype": r["dtype"]}
                 for r in rows if r["threads"] == threads]
        env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
                   MKL_NUM_THREADS=threads)
        out = subprocess.run([sys.executable, __file__, "--numpy-worker", json.dumps(cases),
                              "--numpy-reps", str(args.numpy_reps)],
                             check=True, capture_output=True, text=True, env=env)
        for line in out.stdout.splitlines():
            res = json.loads(line)
            for r in rows:
                if (r["threads"] == threads and int(r["context"]) == res["context"]
                        and int(r["batch"]) == res["batch"] and r["dtype"] == res["dtype"]):
                    r["numpy_gbps"] = f"{res['numpy_gbps']:.2f}"
                    r["numpy_ratio"] = f"{res['numpy_gbps'] / float(r['roof_gbps']):.3f}"

    fields = ["context", "batch", "dtype", "threads", "gbps", "roof_gbps", "ratio", "ratio_all",
              "vector_ratio", "numpy_gbps", "numpy_ratio", "kv_bytes", "seconds"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    header = ("| context | batch | dtype | threads | GB/s | roof GB/s | ratio | ratio per sweep | "
              "bf16 vector-kernel ratio | numpy GB/s | numpy ratio |")
    print(header)
    print("|" + "---|" * 11)
    for r in rows:
        print(f"| {r['context']} | {r['batch']} | {r['dtype']} | {r['threads']} | {r['gbps']} | "
              f"{r['roof_gbps']} | {r['ratio']} | {r['ratio_all']} | {r.get('vector_ratio', '-')} | "
              f"{r.get('numpy_gbps', '-')} | {r.get('numpy_ratio', '-')} |")
    for dtype in ("bf16", "f32"):
        long = [float(r["ratio"]) for r in rows if int(r["context"]) >= 16384 and r["dtype"] == dtype]
        if long:
            print(f"\n{dtype} ratio at >= 16K tokens: min {min(long):.3f}, "
                  f"mean {sum(long) / len(long):.3f} (target >= 0.8)")
    print(f"wrote {args.out}")
    if args.peers:
        # Beside this run's CSV (so a --quick or --out run leaves the recorded peer table alone
        # unless it writes there too).
        peers_out = Path(args.out).with_name(Path(args.out).stem + "_peers.csv")
        subprocess.run([sys.executable, str(Path(__file__).with_name("peers.py")),
                        f"--build-dir={args.build_dir}", f"--out={peers_out}",
                        *(["--quick"] if args.quick else [])], check=True)


if __name__ == "__main__":
    main()
