#!/usr/bin/env bash
# The CPU attention benchmark on another machine without LLVM (the GPU host that the device tool
# lends): the same cases and roof as bench/cpu_attention/run.py, over ahead-of-time kernels.
#
#   bash bench/cpu_attention/device.sh bundle   # here: build, compile the kernels, gather
#                                               # build/cpu-bench-bundle (carry it)
#   bash bench/cpu_attention/device.sh run OUTDIR [bench flags]   # there: print the CPU, run
#
# The bundle holds the AOT bench, the kernels (bf16 with and without AMX, f32), the runtime,
# libomp and libnuma, so nothing from LLVM is needed where it runs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$ROOT/build/cpu-bench-bundle"

case "${1:-}" in
bundle)
  ninja -C "$ROOT/build" hybridgen_cpu_attention_bench hybridgen_cpu_attention_aot_bench \
    hybridgen_runtime >/dev/null
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"
  "$ROOT/build/bin/hybridgen_cpu_attention_bench" --save-aot="$BUNDLE" --dtypes=bf16,f32
  "$ROOT/build/bin/hybridgen_cpu_attention_bench" --save-aot="$BUNDLE" --dtypes=bf16 --no-amx
  cp "$ROOT/build/bin/hybridgen_cpu_attention_aot_bench" \
    "$ROOT/build/runtime/libhybridgen_runtime.so" /usr/lib/llvm-22/lib/libomp.so.5 \
    /lib/x86_64-linux-gnu/libnuma.so.1 "$BUNDLE/"
  du -sh "$BUNDLE"
  ;;
run)
  out="${2:?usage: device.sh run OUTDIR [bench flags]}"
  shift 2
  export LD_LIBRARY_PATH="$BUNDLE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  grep -m1 'model name' /proc/cpuinfo || true
  amx="$(grep -o -m1 'amx_bf16\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "cores: $(nproc); AMX flags: ${amx:-none}"
  bench="$BUNDLE/hybridgen_cpu_attention_aot_bench"
  flags=(--contexts=16384,65536,131072 --batches=1,8 --threads=1,2 "$@")
  { "$bench" --load="$BUNDLE" --dtypes=bf16,f32 "${flags[@]}"
    "$bench" --load="$BUNDLE" --dtypes=bf16 --no-amx "${flags[@]}" | tail -n +2 |
      sed 's/,bf16,/,bf16-vector,/'; } | tee "$out/cpu_attention_device.csv"
  ;;
*)
  sed -n '2,10p' "$0"
  exit 2
  ;;
esac
