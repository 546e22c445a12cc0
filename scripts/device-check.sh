#!/usr/bin/env bash
# The GPU device check (issue 15), run on the GPU machine from carried artifacts only (it has no
# LLVM/MLIR; it has python3 and PyTorch). Build the artifacts here first:
#
#   bash scripts/build-device-artifacts.sh     # -> build/device-artifacts (< 64 MiB; carry it)
#   bash scripts/device-check.sh [ARTIFACTS]   # there: prints one table, writes
#                                              # bench/results/gpu-<date>-<card>/*.csv
#
# Measures numerics (GPU-only / hybrid / CPU-only vs float64), a compiled model generating with
# part of its KV in device memory (tokens vs its float64 reference), GPU attention bandwidth vs a
# device-to-device copy with PyTorch SDPA as the peer, and the hybrid step vs GPU-only+transfer and
# CPU-only with the feedback scheduler's convergence. Without a usable GPU it prints the runtime's
# one-line notice, checks the numerics on the CPU fallback (nothing saved) and exits 0.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ART="${1:-${HYBRIDGEN_DEVICE_ARTIFACTS:-$ROOT/build/device-artifacts}}"
LIB="$ART/lib"
CHECK="$LIB/hybridgen_device_check"
if [ ! -x "$CHECK" ]; then
  echo "device check: no artifacts in $ART (run scripts/build-device-artifacts.sh)" >&2
  exit 2
fi
export LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_PROC_BIND="${OMP_PROC_BIND:-false}"

probe="$("$CHECK" probe)" # the runtime prints its notice on stderr when there is no GPU
if [ "${probe%% *}" != "gpu=1" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  if "$CHECK" numerics --lib-dir="$LIB" --csv="$tmp/numerics.csv" >/dev/null 2>&1; then
    n="passed"
  else
    n="FAILED"
  fi
  if "$CHECK" model --model-dir="$ART/model" --csv="$tmp/model.csv" >/dev/null 2>&1; then
    m="passed"
  else
    m="FAILED"
  fi
  python3 "$ART/summarize.py" "$tmp" | sed 's/^/  cpu fallback: /'
  echo "device check: no usable GPU; numerics on the CPU fallback $n, model $m; bandwidth and hybrid not measured"
  [ "$n" = passed ] && [ "$m" = passed ]
  exit $?
fi

card="$(echo "${probe#gpu=1 }" | sed 's/ (.*//')"
slug="$(echo "$card" | tr -c 'A-Za-z0-9\n' '-' | tr -s '-' | sed 's/^-//; s/-$//')"
OUT="${HYBRIDGEN_DEVICE_RESULTS:-$ROOT/bench/results/gpu-$(date -u +%Y%m%d)-$slug}"
mkdir -p "$OUT"
echo "device check on $card $(echo "${probe#gpu=1 }" | sed 's/^[^(]*//'), results in $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
  --format=csv,noheader >"$OUT/card.txt" 2>/dev/null || true

# HYBRIDGEN_DEVICE_CHECK_QUICK=1: tiny sizes, to exercise the whole flow (CI, on a fake driver).
bw=() hy=() peer=()
if [ -n "${HYBRIDGEN_DEVICE_CHECK_QUICK:-}" ]; then
  bw=(--contexts=1024,4096 --batches=1,2 --runs=3 --allow-cpu-fallback)
  hy=(--context=8192 --steps=6 --allow-cpu-fallback)
  peer=(--contexts=1024,4096 --batches=1,2 --runs=3)
fi
status=0
run() { # name timeout command...
  local name=$1 limit=$2
  shift 2
  if ! timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then
    echo "  $name: failed or timed out (see $OUT/$name.log)"
    status=1
  fi
}
# Time limits keep the whole check under 5 minutes of device time.
run numerics 45 "$CHECK" numerics --lib-dir="$LIB" --csv="$OUT/numerics.csv"
run bandwidth 100 "$CHECK" bandwidth --lib-dir="$LIB" --csv="$OUT/bandwidth.csv" ${bw[@]+"${bw[@]}"}
run sdpa 75 python3 "$ART/sdpa_peer.py" "$OUT/sdpa.csv" ${peer[@]+"${peer[@]}"}
run model 30 "$CHECK" model --model-dir="$ART/model" --csv="$OUT/model.csv"
run hybrid 75 "$CHECK" hybrid --lib-dir="$LIB" --csv="$OUT/hybrid.csv" ${hy[@]+"${hy[@]}"}
python3 "$ART/summarize.py" "$OUT" | tee "$OUT/summary.txt"
exit $status
