#!/usr/bin/env python3
"""Peer benchmark: PyTorch's scaled_dot_product_attention on the CPU, on the decode shapes of
hybridgen_cpu_attention_bench (32 q heads over 8 kv heads, head dim 128, one query token), with
the query heads of a GQA group folded into the query length: q [batch, kv_heads, group, d] against
K/V [batch, kv_heads, T, d], so each K/V head is read once for its whole group (the fastest plain
SDPA formulation; no repeat_interleave of K/V).

Runs with the python of the separate torch venv that scripts/peers.sh installs (torch is no
dependency of the project):

    python torch_sdpa.py [--contexts=16384,65536] [--batches=1,8] [--dtypes=f32,f16,bf16]
                         [--threads=1,2] [--max-gib=4] [--min-seconds=0.4] [--cold-bytes=0]

Prints one CSV row per case: context,batch,dtype,threads,kv_bytes,seconds,gbps (seconds: the best
call after a warm-up, repeated for at least --min-seconds, or the warm-up call alone when it took
longer). With --cold-bytes=N the calls read enough copies of the case's K and V in turn that N
bytes pass between two reads of one copy (as hybridgen_cpu_attention_bench does). A dtype this
torch cannot run on the CPU is reported on stderr and skipped."""
import itertools
import math
import sys
import time

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def parse(argv):
    opts = {"contexts": "16384,65536", "batches": "1,8", "dtypes": "f32,f16,bf16",
            "threads": "1,2", "max-gib": "4", "min-seconds": "0.4", "cold-bytes": "0"}
    for a in argv:
        key, sep, value = a[2:].partition("=")
        if not a.startswith("--") or not sep or key not in opts:
            raise SystemExit(f"torch_sdpa: unknown argument {a}\n{__doc__}")
        opts[key] = value
    return opts


def cold_copies(kv_bytes, cold_bytes, max_bytes):
    """Copies of the KV so that |cold_bytes| pass between two reads of one, within |max_bytes|."""
    if cold_bytes <= 0:
        return 1
    # Between two reads of one byte of a copy, every copy is read once: copies x kv_bytes.
    return max(1, min(math.ceil(cold_bytes / kv_bytes), int(max_bytes // kv_bytes)))


def best_seconds(fn, min_seconds):
    t0 = time.perf_counter()
    fn()
    warm_up = time.perf_counter() - t0
    if warm_up >= min_seconds:  # gigabytes of KV: a second call would be no warmer
        return warm_up
    best, start = math.inf, time.perf_counter()
    while best == math.inf or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def check_folded(torch, F, dtype, name):
    """Before anything is timed: the folded SDPA equals a float64 attention written out with the
    kv heads repeated per query head (an independent formulation) on a small case."""
    gen = torch.Generator().manual_seed(1)
    group, ctx, batch = Q_HEADS // KV_HEADS, 300, 2
    q = ((torch.rand((batch, KV_HEADS, group, HEAD_DIM), generator=gen) - 0.5) * 4).to(dtype)
    k = ((torch.rand((batch, KV_HEADS, ctx, HEAD_DIM), generator=gen) - 0.5) * 2).to(dtype)
    v = ((torch.rand((batch, KV_HEADS, ctx, HEAD_DIM), generator=gen) - 0.5) * 2).to(dtype)
    got = F.scaled_dot_product_attention(q, k, v).reshape(batch, Q_HEADS, HEAD_DIM).double()
    q64 = q.double().reshape(batch, Q_HEADS, 1, HEAD_DIM)
    k64 = k.double().repeat_interleave(group, dim=1)
    v64 = v.double().repeat_interleave(group, dim=1)
    p = torch.softmax(q64 @ k64.transpose(-1, -2) / math.sqrt(HEAD_DIM), dim=-1)
    want = (p @ v64).reshape(batch, Q_HEADS, HEAD_DIM)
    err = (got - want).abs().max().item()
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    if not err <= tolerance:
        raise SystemExit(f"torch_sdpa: {name} result differs from the reference by {err:g}")


def main():
    opts = parse(sys.argv[1:])
    import torch
    import torch.nn.functional as F

    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    try:
        contexts = [int(x) for x in opts["contexts"].split(",")]
        batches = [int(x) for x in opts["batches"].split(",")]
        threads = [int(x) for x in opts["threads"].split(",")]
        max_gib, min_seconds = float(opts["max-gib"]), float(opts["min-seconds"])
        cold_bytes = float(opts["cold-bytes"])
    except ValueError as e:
        raise SystemExit(f"torch_sdpa: bad number in the arguments ({e})")
    if min(contexts + batches + threads) <= 0:
        raise SystemExit("torch_sdpa: contexts, batches and threads must be positive")
    group = Q_HEADS // KV_HEADS
    print("context,batch,dtype,threads,kv_bytes,seconds,gbps", flush=True)
    gen = torch.Generator().manual_seed(0)
    for name in opts["dtypes"].split(","):
        if name not in dtypes:
            raise SystemExit(f"torch_sdpa: unsupported KV dtype {name} (f32, f16, bf16)")
        dtype = dtypes[name]
        try:
            check_folded(torch, F, dtype, name)
        except RuntimeError as e:  # e.g. a dtype without a CPU kernel
            print(f"torch_sdpa: {name} not run on this CPU: {str(e).splitlines()[0]}",
                  file=sys.stderr)
            continue
        elt = torch.tensor([], dtype=dtype).element_size()
        for ctx in contexts:
            for batch in batches:
                kv_bytes = 2 * batch * ctx * KV_HEADS * HEAD_DIM * elt
                if kv_bytes / 2**30 > max_gib:
                    print(f"torch_sdpa: skipped {name} context {ctx} batch {batch} "
                          f"({kv_bytes / 2**30:.1f} GiB > {max_gib})", file=sys.stderr)
                    continue
                # A random tile repeated over K/V: values do not change the speed.
                shape = (batch, KV_HEADS, ctx, HEAD_DIM)
                tile = (torch.rand((1, KV_HEADS, min(ctx, 1024), HEAD_DIM), generator=gen) - 0.5)
                k = tile.to(dtype).repeat(batch, 1, (ctx + 1023) // 1024, 1)[:, :, :ctx].contiguous()
                v = (k * 0.5).contiguous()
                assert k.shape == shape
                copies = cold_copies(kv_bytes, cold_bytes, max_gib * 2**30)
                kvs = [(k, v)] + [(k.clone(), v.clone()) for _ in range(copies - 1)]
                if copies > 1:
                    print(f"torch_sdpa: {ctx} x {batch} x {name}: the calls read {copies} copies "
                          "of the KV in turn", file=sys.stderr)
                turn = itertools.cycle(kvs)
                q = (torch.rand((batch, KV_HEADS, group, HEAD_DIM), generator=gen) - 0.5).to(dtype)
                for t in threads:
                    torch.set_num_threads(t)
                    try:
                        for kc, vc in kvs[1:]:  # every copy but the first, untimed
                            F.scaled_dot_product_attention(q, kc, vc)
                        out = F.scaled_dot_product_attention(q, k, v)
                        seconds = best_seconds(
                            lambda: F.scaled_dot_product_attention(q, *next(turn)), min_seconds)
                    except RuntimeError as e:  # e.g. a dtype without a CPU kernel
                        print(f"torch_sdpa: {name} not run on this CPU: {str(e).splitlines()[0]}",
                              file=sys.stderr)
                        break
                    if not torch.isfinite(out).all():
                        print(f"torch_sdpa: non-finite output for {name} context {ctx}",
                              file=sys.stderr)
                        break
                    print(f"{ctx},{batch},{name},{t},{kv_bytes},{seconds:.6g},"
                          f"{kv_bytes / seconds / 1e9:.4g}", flush=True)
                del k, v, kvs, turn


if __name__ == "__main__":
    main()
