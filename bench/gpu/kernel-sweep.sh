#!/usr/bin/env bash
# Sweep of the GPU partial kernel's tuning (docs/gpu-path.md "Kernel tuning") in one device run:
# device time is short, so every variant is built here and measured there together.
#
#   bash bench/gpu/kernel-sweep.sh build   # here: build/gpu-sweep/<variant>/lib (carry build/gpu-sweep)
#   bash bench/gpu/kernel-sweep.sh run     # on the GPU machine: numerics + bandwidth per variant,
#                                          # one line each; CSVs in $OUT (or build/gpu-sweep/results)
#
# A variant is a name and hybridgen-compile flags. Its numerics run where every checked shape
# compiles (a cp.async ring may not fit 48 KiB of shared memory for every shape); the bandwidth
# needs only the Llama-3-8B shapes (bf16 and f16, group 4, head_dim 128).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SWEEP="${HYBRIDGEN_GPU_SWEEP:-$ROOT/build/gpu-sweep}"
VARIANTS=(
  "default|"
  "pieces2|--gpu-pieces-per-lane=2"
  "pieces2-u1|--gpu-pieces-per-lane=2 --gpu-unroll=1"
  "ring3|--gpu-async-stages=3 --gpu-unroll=2 --gpu-resident-blocks=4"
  "ring4|--gpu-async-stages=4 --gpu-unroll=2 --gpu-resident-blocks=4"
  "pieces2-ring4|--gpu-pieces-per-lane=2 --gpu-unroll=1 --gpu-async-stages=4 --gpu-resident-blocks=3"
)

build() {
  rm -rf "$SWEEP" && mkdir -p "$SWEEP"
  for v in "${VARIANTS[@]}"; do
    name=${v%%|*} flags=${v#*|}
    dir="$SWEEP/$name"
    if HYBRIDGEN_COMPILE_FLAGS="--gpu $flags" HYBRIDGEN_DEVICE_ARTIFACTS="$dir" \
      bash "$ROOT/scripts/build-device-artifacts.sh" >"$SWEEP/$name.build.log" 2>&1; then
      echo "$name: every shape ($flags)"
    else # only the bandwidth shapes; no numerics for this variant
      rm -rf "$dir" && mkdir -p "$dir/lib" "$dir/src"
      cp "$ROOT"/build/device-artifacts/src/attn_{bf16,f16}_d128_kv8_g4.mlir "$dir/src/" 2>/dev/null ||
        { echo "run scripts/build-device-artifacts.sh first" >&2; exit 1; }
      for dt in bf16 f16; do
        # shellcheck disable=SC2086
        "$ROOT/build/bin/hybridgen-compile" --target-cpu=x86-64-v3 --gpu $flags \
          "$dir/src/attn_${dt}_d128_kv8_g4.mlir" -o "$dir/lib/attn_${dt}_d128_kv8_g4.so"
      done
      touch "$dir/bandwidth-only"
      echo "$name: bandwidth shapes only ($flags)"
    fi
  done
  cp -r "$ROOT/build/device-artifacts/lib" "$SWEEP/runtime" # driver, runtime, libomp, libnuma
  rm -f "$SWEEP"/runtime/attn_*
  du -sh "$SWEEP"
}

run() {
  local out="${OUT:-$SWEEP/results}" check="$SWEEP/runtime/hybridgen_device_check"
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$SWEEP/runtime" OMP_PROC_BIND=false
  for v in "${VARIANTS[@]}"; do
    name=${v%%|*}
    lib="$SWEEP/$name/lib"
    if [ -e "$SWEEP/$name/bandwidth-only" ]; then
      num="numerics: not built"
    elif timeout 60 "$check" numerics --lib-dir="$lib" --csv="$out/numerics_$name.csv" >/dev/null 2>"$out/numerics_$name.err"; then
      num="numerics: passed"
    else
      num="numerics: FAILED (see numerics_$name.csv)"
    fi
    timeout 90 "$check" bandwidth --lib-dir="$lib" --csv="$out/bandwidth_$name.csv" \
      --contexts=32768,131072,524288 --batches=1,8 --runs=10 >/dev/null 2>"$out/bandwidth_$name.err" || true
    echo "$name | $num | $(tail -n +2 "$out/bandwidth_$name.csv" 2>/dev/null |
      awk -F, '{printf "%s/%dK/b%s=%s ", $1, $2 / 1024, $3, $8}')"
  done
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
