#!/usr/bin/env python3
"""The device check's peer: the same decode-attention shapes through PyTorch's
scaled_dot_product_attention on the GPU (contiguous KV, 32 q heads over 8 kv heads, head dim 128),
plus a device-to-device copy in the same run. CUDA-event times, median of RUNS after warm-up.

    python3 sdpa_peer.py OUT.csv [--contexts=8192,...] [--batches=1,8] [--dtypes=bf16,f16] [--runs=20]

Without PyTorch or a GPU it says so on one line and exits 0 (nothing to compare against)."""
import sys


def parse(argv):
    opts = {"contexts": "8192,32768,131072,524288", "batches": "1,8", "dtypes": "bf16,f16", "runs": "20"}
    out = None
    for a in argv:
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            if k not in opts:
                raise SystemExit(f"unknown option {a}")
            opts[k] = v
        elif out is None:
            out = a
        else:
            raise SystemExit(f"unexpected argument {a}")
    if out is None:
        raise SystemExit(__doc__)
    return out, opts


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def timed(torch, fn, runs):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return median(times)


def main():
    out, opts = parse(sys.argv[1:])
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("sdpa peer: skipped (no PyTorch)")
        return 0
    if not torch.cuda.is_available():
        print("sdpa peer: skipped (no usable GPU)")
        return 0
    runs = int(opts["runs"])
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16}
    rows = ["dtype,context,batch,kv_bytes,sdpa_s,sdpa_gbps,copy_gbps,ratio"]
    free, _ = torch.cuda.mem_get_info()
    for name in opts["dtypes"].split(","):
        dt = dtypes[name]
        for ctx in map(int, opts["contexts"].split(",")):
            for batch in map(int, opts["batches"].split(",")):
                kv_bytes = 2 * batch * 8 * ctx * 128 * 2
                if 3 * kv_bytes + (1 << 30) > free:
                    rows.append(f"{name},{ctx},{batch},{kv_bytes},,,,skipped: does not fit")
                    continue
                q = torch.randn(batch, 32, 1, 128, device="cuda", dtype=dt)
                k = torch.randn(batch, 8, ctx, 128, device="cuda", dtype=dt)
                v = torch.randn_like(k)
                try:
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                    fn()
                except TypeError:  # PyTorch < 2.5: no enable_gqa, expand the kv heads (a copy)
                    ke = k.repeat_interleave(4, dim=1)
                    ve = v.repeat_interleave(4, dim=1)
                    fn = lambda: F.scaled_dot_product_attention(q, ke, ve)
                t = timed(torch, fn, runs)
                src = k.reshape(-1)
                dst = torch.empty_like(src)
                c = timed(torch, lambda: dst.copy_(src), runs)
                copy_gbps = 2 * src.numel() * src.element_size() / c / 1e9  # read + write
                gbps = kv_bytes / t / 1e9
                rows.append(f"{name},{ctx},{batch},{kv_bytes},{t:.6g},{gbps:.1f},{copy_gbps:.1f},{gbps / copy_gbps:.3f}")
                print(rows[-1], flush=True)
                del q, k, v, src, dst
                torch.cuda.empty_cache()
    with open(out, "w") as f:
        f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
