#!/usr/bin/env bash
# The CPU attention benchmark on another machine without LLVM (the GPU host that the device tool
# lends): run.py's roof and cases over ahead-of-time kernels, both K layouts (row-major, and
# transposed as compiled models read it, from the kt/ folder), f32/bf16/f16, row-major bf16
# with and without AMX.
#
#   bash bench/cpu_attention/device.sh bundle   # here: build, compile the kernels, gather
#                                               # build/cpu-bench-bundle (carry it)
#   bash bench/cpu_attention/device.sh run OUTDIR [bench flags]   # there: print the CPU, run
#
# The bundle holds the AOT bench, the kernels (compiled here for the host CPU, or for
# TARGET_CPU=... when set), the runtime, libomp and libnuma, so nothing from LLVM is needed where
# it runs. Every CSV row starts with its layout; the CPU's model and flags head the run's output.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$ROOT/build/cpu-bench-bundle"

case "${1:-}" in
bundle)
  ninja -C "$ROOT/build" hybridgen_cpu_attention_bench hybridgen_cpu_attention_aot_bench \
    hybridgen_runtime >/dev/null
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"
  compile=("$ROOT/build/bin/hybridgen_cpu_attention_bench")
  [ -n "${TARGET_CPU:-}" ] && compile+=(--target-cpu="$TARGET_CPU")
  "${compile[@]}" --save-aot="$BUNDLE" --dtypes=bf16,f32,f16
  "${compile[@]}" --save-aot="$BUNDLE" --dtypes=bf16 --no-amx
  mkdir -p "$BUNDLE/kt"
  "${compile[@]}" --save-aot="$BUNDLE/kt" --dtypes=f32,bf16,f16 --k-transposed
  cp "$ROOT/build/bin/hybridgen_cpu_attention_aot_bench" \
    "$ROOT/build/runtime/libhybridgen_runtime.so" /usr/lib/llvm-22/lib/libomp.so.5 \
    /lib/x86_64-linux-gnu/libnuma.so.1 "$BUNDLE/"
  du -sh "$BUNDLE"
  ;;
run)
  out="${2:?usage: device.sh run OUTDIR [bench flags]}"
  shift 2
  export LD_LIBRARY_PATH="$BUNDLE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The CPU as the Python benches name it (peers.py's cpu_identity: model, family and model
  # numbers, the ISA flags that pick kernels); stdlib only, so the GPU host's python3 runs it.
  python3 -c "import sys; sys.path.insert(0, '$ROOT/bench/cpu_attention'); import peers
print('; '.join(peers.cpu_identity()))" || true
  echo "cores: $(nproc)"
  bench="$BUNDLE/hybridgen_cpu_attention_aot_bench"
  # shellcheck disable=SC2054 # the commas are the bench's list syntax
  flags=(--contexts=16384,65536,131072 --batches=1,8 --threads=1,2 "$@")
  { "$bench" --load="$BUNDLE" --dtypes=f32,bf16,f16 "${flags[@]}" |
      sed '1s/^/layout,/; 2,$s/^/row-major,/'
    "$bench" --load="$BUNDLE" --dtypes=bf16 --no-amx "${flags[@]}" | tail -n +2 |
      sed 's/,bf16,/,bf16-vector,/; s/^/row-major,/'
    "$bench" --load="$BUNDLE/kt" --dtypes=f32,bf16,f16 "${flags[@]}" | tail -n +2 |
      sed 's/^/k-transposed,/'; } | tee "$out/cpu_attention_device.csv"
  ;;
*)
  sed -n '2,10p' "$0"
  exit 2
  ;;
esac
