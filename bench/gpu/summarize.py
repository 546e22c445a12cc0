#!/usr/bin/env python3
"""Prints the device check's one table from the CSVs in DIR (numerics.csv, bandwidth.csv,
sdpa.csv, hybrid.csv, model.csv), with the issue's targets next to the measurements.

    python3 summarize.py DIR"""
import csv
import os
import sys


def rows(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in csv.DictReader(f)]


def num(r, k):
    try:
        return float(r[k])
    except (KeyError, TypeError, ValueError):
        return None


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    d = sys.argv[1]
    lines = []
    nrows = rows(os.path.join(d, "numerics.csv"))
    if nrows:
        bad = [r for r in nrows if r["pass"] != "1"]
        worst = max(num(r, "max_abs_err") or 0 for r in nrows)
        launched = sum(1 for r in nrows if r["gpu_launches"] not in ("", "0"))
        lines.append(f"numerics   {len(nrows) - len(bad)}/{len(nrows)} cases within tolerance, worst |err| "
                     f"{worst:.3g}; {launched} cases launched GPU kernels")
        gpu_rows = [r for r in nrows if r["path"] != "cpu-only"]
        if gpu_rows and all(r["gpu_launches"] in ("", "0") for r in gpu_rows) and bad:
            lines.append("  the libraries launched no GPU kernels: compiled without the GPU path, their GPU "
                         "partial read host memory that the device HBM tier does not use")
        for r in bad:
            lines.append(f"  FAIL {r['dtype']} d{r['head_dim']} g{r['group']} {r['path']}: {r['max_abs_err']}")
    bw = rows(os.path.join(d, "bandwidth.csv"))
    peer = {(r["dtype"], r["context"], r["batch"]): r for r in rows(os.path.join(d, "sdpa.csv"))}
    if bw:
        lines.append("bandwidth  dtype context batch  kernel GB/s  copy GB/s  ratio  (>=0.85 at >=32K)  "
                     "sdpa GB/s  faster than sdpa")
        for r in bw:
            ratio = num(r, "ratio")
            if ratio is None:
                lines.append(f"           {r['dtype']:5} {r['context']:>7} {r['batch']:>5}  {r.get('gpu_launches', '')}")
                continue
            p = peer.get((r["dtype"], r["context"], r["batch"]))
            sd = num(p, "sdpa_gbps") if p else None
            target = "ok" if int(r["context"]) < 32768 or ratio >= 0.85 else "MISSED"
            faster = "-" if sd is None else ("yes" if num(r, "kernel_gbps") > sd else "NO")
            sds = f"{sd:9.1f}" if sd is not None else "        -"
            lines.append(f"           {r['dtype']:5} {r['context']:>7} {r['batch']:>5}  {num(r, 'kernel_gbps'):11.1f}  "
                         f"{num(r, 'copy_gbps'):9.1f}  {ratio:5.3f}  {target:18}  {sds}  {faster}")
    hy = rows(os.path.join(d, "hybrid.csv"))
    if hy:
        static = [r for r in hy if r["kind"] == "static"]
        fb = [r for r in hy if r["kind"] == "feedback"]
        best = min(static, key=lambda r: num(r, "step_s")) if static else None
        gpu_t = next((r for r in hy if r["kind"] == "gpu-only+transfer"), None)
        cpu_t = next((r for r in hy if r["kind"] == "cpu-only"), None)
        if best and fb:
            last = fb[-1]
            step = num(last, "step_s")
            side = max(num(last, "cpu_s"), num(last, "gpu_s"))
            conv = next((int(r["step"]) for r in fb if num(r, "step_s") <= 1.05 * num(best, "step_s")), None)
            lines.append(f"hybrid     feedback split {last['split']} step {step:.3g} s = {step / side:.2f} x "
                         f"max(cpu {num(last, 'cpu_s'):.3g}, gpu {num(last, 'gpu_s'):.3g}) (target <= 1.1)")
            lines.append(f"           best static split {best['split']} {num(best, 'step_s'):.3g} s; within 5% "
                         f"from step {conv} (target <= 5)")
            if gpu_t:
                g = num(gpu_t, "step_s")
                lines.append(f"           gpu-only+transfer {g:.3g} s ({'slower' if g > step else 'FASTER'} than "
                             f"hybrid; target: hybrid faster)")
            if cpu_t:
                lines.append(f"           cpu-only {num(cpu_t, 'step_s'):.3g} s")
    for r in rows(os.path.join(d, "model.csv")):
        ok = r["tokens_match"] == "1" and (num(r, "logits_rel_err_vs_cpu") or 0) <= 1e-4
        lines.append(f"model      {r['policy']:9} {'ok  ' if ok else 'FAIL'} tokens "
                     f"{'= float64 reference' if r['tokens_match'] == '1' else 'DIFFER'}, logits vs cpu-only "
                     f"{r['logits_rel_err_vs_cpu']}, {r['hbm_blocks']} blocks in HBM, gpu side {r['gpu_side']}")
    print("\n".join(lines) if lines else "no results in " + d)


if __name__ == "__main__":
    main()
