#!/usr/bin/env bash
# Builds everything the GPU device check needs into build/device-artifacts (carry that folder to
# the GPU machine, which has no LLVM/MLIR): the AOT hg_attention libraries for every checked shape
# (hybridgen-compile; GPU kernels embedded when the compiler builds them), a small compiled model
# with its float64 reference tokens (bench/gpu/make_model_check.py), the runtime, libomp,
# libnuma, the C++ driver and the PyTorch peer. Fails when the folder exceeds 64 MiB.
#
#   bash scripts/build-device-artifacts.sh          # then: bash scripts/device-check.sh
#   HYBRIDGEN_COMPILE_FLAGS="..." bash scripts/build-device-artifacts.sh   # compiler flags
#                                     # (default --gpu: the kernels, sm_90, fatbin when ptxas exists)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HYBRIDGEN_BUILD_DIR:-$ROOT/build}"
OUT="${HYBRIDGEN_DEVICE_ARTIFACTS:-$BUILD/device-artifacts}"
LIMIT=$((64 << 20))
# The GPU host's CPU is not this one: baseline AVX2 code runs on any x86-64 server of that age.
FLAGS=(--target-cpu=x86-64-v3 ${HYBRIDGEN_COMPILE_FLAGS---gpu})

ninja -C "$BUILD" -j2 hybridgen_runtime hybridgen_device_check hybridgen-compile >/dev/null
export PYTHONPATH="$BUILD/python_packages${PYTHONPATH:+:$PYTHONPATH}"
rm -rf "$OUT" && mkdir -p "$OUT/lib" "$OUT/src"

# One module per shape: dynamic batch and pool, the split read from the runtime (segment 1).
module() { # dtype head_dim kv_heads group
  local dt=$1 d=$2 kv=$3 g=$4 qh=$(($3 * $4)) bs=16
  local q="memref<?x${qh}x${d}xf32>" p="memref<?x${kv}x${bs}x${d}x${dt}>"
  local scale
  scale=$(awk -v d="$d" 'BEGIN { printf "%.8f", 1 / sqrt(d) }')
  cat <<MLIR
func.func @hg_attention(%q: $q, %k: $p, %v: $p, %bt: memref<?x?xi32>, %n: memref<?xi32>, %o: $q) {
  hg.segment 1 {
    hg.attention q(%q : $q) kv(%k, %v : $p, $p) table(%bt : memref<?x?xi32>) lens(%n : memref<?xi32>)
        out(%o : $q) {scale = $scale : f32, split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>}
  }
  return
}
MLIR
}

shapes=()
for dt in f32 f16 bf16; do for d in 64 128; do for g in 1 4 8; do shapes+=("$dt $d 2 $g"); done; done; done
shapes+=("bf16 128 8 4" "f16 128 8 4") # Llama-3-8B: bandwidth and hybrid
running=0
for s in "${shapes[@]}"; do
  read -r dt d kv g <<<"$s"
  name="attn_${dt}_d${d}_kv${kv}_g${g}"
  module "$dt" "$d" "$kv" "$g" >"$OUT/src/$name.mlir"
  "$BUILD/bin/hybridgen-compile" "${FLAGS[@]}" "$OUT/src/$name.mlir" -o "$OUT/lib/$name.so" &
  if ((++running >= 2)); then # the machine has 2 cores
    wait -n
    running=$((running - 1))
  fi
done
wait
for s in "${shapes[@]}"; do
  read -r dt d kv g <<<"$s"
  [ -f "$OUT/lib/attn_${dt}_d${d}_kv${kv}_g${g}.so" ] || { echo "error: attn_${dt}_d${d}_kv${kv}_g${g} did not compile" >&2; exit 1; }
done

# The model case: a two-layer model with SmolLM2's attention shape, its float64 greedy tokens, and
# the artifact with the GPU kernels (run by `hybridgen_device_check model`, runtime only).
"$ROOT/.venv/bin/python" "$ROOT/bench/gpu/make_model_check.py" "$OUT/model"
"$BUILD/bin/hybridgen-compile" "$OUT/model/checkpoint" -o "$OUT/model/artifact" "${FLAGS[@]}" \
  --kv-dtypes=f32 --weight-dtype=f32 >/dev/null

cp "$BUILD/bin/hybridgen_device_check" "$BUILD/runtime/libhybridgen_runtime.so" "$OUT/lib/"
cp -L /usr/lib/llvm-22/lib/libomp.so.5 /lib/x86_64-linux-gnu/libnuma.so.1 "$OUT/lib/"
cp "$ROOT/bench/gpu/sdpa_peer.py" "$ROOT/bench/gpu/summarize.py" "$OUT/"
bytes=$(du -sb "$OUT" | cut -f1)
echo "device artifacts: $OUT, $((bytes >> 10)) KiB (limit $((LIMIT >> 20)) MiB)"
if [ "$bytes" -gt "$LIMIT" ]; then
  echo "error: the device artifacts exceed 64 MiB" >&2
  exit 1
fi
