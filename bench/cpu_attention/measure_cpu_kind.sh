#!/usr/bin/env bash
# bench/cpu_attention/measure_cpu_kind.sh: everything docs/cpu-path.md's "Measuring a CPU kind not
# yet in this table" lists, in one unattended run, for the CPU this runs on (issue 18: a session
# lent a CPU kind the table lacks, an AMD Zen 3/4/5 or a bare-metal Xeon, fills its row with it).
#
#   bash bench/cpu_attention/measure_cpu_kind.sh NAME [--quick] [--no-peers]
#
# NAME names the CPU in the files (zen3, zen5, spr, ...). Everything goes to
# bench/results/cpu_kind_NAME_DATE/:
#   lscpu.txt                the CPU's model name and flags
#   headline.csv, .txt       run.py's table: both K layouts (transposed, the models'; row-major,
#                            the hybrid GPU+CPU models'), every dtype, the medians of 2 sweeps
#   dot_throughput.txt       clock and multiply-adds per cycle (memory/dot_throughput.c)
#   fma_mix.txt              what shares the FMA pipes (memory/fma_mix.c)
#   cache_resident.csv       the kernels' compute rate, KV in cache (16K x 1, one thread), per
#                            variant, beside instructions.csv's predictions
#   instructions.csv         callgrind instructions per KV byte and llvm-mca's KV bytes per cycle
#                            of the x86-64-v3 kernels (machine independent; skipped without valgrind)
#   ab.csv, ab.txt           the host code's kernel choices from DRAM, interleaved: the default,
#                            plain pieces (--overlap-pieces=0), p.V two pieces behind
#                            (--overlap-pv-lag=2), splatted probabilities (--splat-probs)
#   ab_x86_64_v3.*           the same for the AVX2 code, on a CPU with AVX-512
#   peers.csv, peers_avx2.csv  hybridgen against torch SDPA and ggml's flash_attn_ext (peers.sh
#                            builds them outside the tree the first time, ~20 minutes)
# Roughly 60 minutes on two cores of an AVX2-only CPU and 110 with AVX-512 (which measures the
# AVX2 code too), plus ~20 for the peers' first build; --quick (16K tokens, batch 1, one round)
# took 7 minutes without the peers and 8.5 with them (built) on the Emerald Rapids guest, before
# the headline table (1.5 minutes quick, 11 in full there) joined it;
# --no-peers leaves them out.
# Every CSV row carries the CPU's model and flags.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: bash bench/cpu_attention/measure_cpu_kind.sh NAME [--quick] [--no-peers]" >&2
  exit 2
fi
name="$1"
shift
quick=0
peers=1
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    --no-peers) peers=0 ;;
    *) echo "measure_cpu_kind.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

PY="$ROOT/.venv/bin/python"
BENCH="$ROOT/build/bin/hybridgen_cpu_attention_bench"
OUT="$ROOT/bench/results/cpu_kind_${name}_$(date -u +%F)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"
if [ "$quick" = 1 ]; then
  contexts=16384 batches=1 reps=1
else
  contexts=131072,32768 batches=1,8 reps=3
fi
step() { echo "== $(date -u +%H:%M:%S) $*"; }
avx512=0
grep -qw avx512f /proc/cpuinfo && avx512=1

step "the CPU -> $OUT/lscpu.txt"
lscpu > "$OUT/lscpu.txt"
grep -E 'Model name|CPU family|^Model:|L3' "$OUT/lscpu.txt" || true

step "build"
[ -x "$PY" ] || bash scripts/setup.sh
cmake --build build -j2 --target hybridgen_cpu_attention_bench \
  hybridgen_cpu_attention_aot_bench_v3 > "$TMP/build.log" || { tail -20 "$TMP/build.log"; exit 1; }

step "the headline table, both K layouts -> headline.csv, headline.txt"
quick_flag=()
[ "$quick" = 1 ] && quick_flag=(--quick)
"$PY" bench/cpu_attention/run.py "${quick_flag[@]}" --out "$OUT/headline.csv" 2> "$TMP/run.err" \
  | tee "$OUT/headline.txt" | tail -8 || { tail -20 "$TMP/run.err"; exit 1; }

step "the cores: dot_throughput, fma_mix"
CC="$(command -v clang-22 || command -v clang || command -v cc)"
"$CC" -O2 bench/cpu_attention/memory/dot_throughput.c -o "$TMP/dot"
"$TMP/dot" | tee "$OUT/dot_throughput.txt"
"$CC" -O2 bench/cpu_attention/memory/fma_mix.c -o "$TMP/fma_mix"
"$TMP/fma_mix" > "$OUT/fma_mix.txt"

# The kernel choices docs/cpu-path.md wants measured per CPU, as NAME=bench flags.
variants=(default= plain=--overlap-pieces=0 lag2=--overlap-pv-lag=2 splat=--splat-probs)
variant_args=()
for v in "${variants[@]}"; do variant_args+=(--variant "$v"); done

step "cache-resident rates (16K x 1, one thread) -> cache_resident.csv"
echo "variant,code,context,batch,dtype,threads,kv_bytes,seconds,gbps,roof_gbps,ratio" \
  > "$OUT/cache_resident.csv"
codes=(host)
[ "$avx512" = 1 ] && codes+=(x86-64-v3)
for code in "${codes[@]}"; do
  target=()
  [ "$code" = host ] || target=(--target-cpu="$code")
  for d in f32 bf16 f16; do
    for v in "${variants[@]}"; do
      flags="${v#*=}"
      # shellcheck disable=SC2086 # flags is empty or one flag
      line="$("$BENCH" --k-transposed --contexts=16384 --batches=1 --dtypes="$d" --threads=1 \
        --reuse-blocks=8 "${target[@]}" $flags | tail -1)"
      echo "${v%%=*},$code,$line" | tee -a "$OUT/cache_resident.csv"
    done
  done
done

if command -v valgrind > /dev/null; then
  step "instructions per KV byte and llvm-mca's predictions -> instructions.csv"
  "$PY" bench/cpu_attention/instructions.py --k-transposed --targets x86-64-v3 \
    --mca znver3,znver4,znver5,emeraldrapids --csv "$OUT/instructions.csv"
else
  step "no valgrind: instructions.csv skipped (apt-get install valgrind)"
fi

step "kernel choices from DRAM, interleaved -> ab.csv, ab.txt"
"$PY" bench/cpu_attention/ab.py --slow 0 --reps "$reps" "${variant_args[@]}" --out "$OUT/ab.csv" -- \
  --k-transposed --dtypes=f32,bf16,f16 --contexts="$contexts" --batches="$batches" \
  --threads=1,2 | tee "$OUT/ab.txt"
if [ "$avx512" = 1 ]; then
  step "the AVX2 code, interleaved -> ab_x86_64_v3.csv, ab_x86_64_v3.txt"
  "$PY" bench/cpu_attention/ab.py --slow 0 --reps "$reps" "${variant_args[@]}" \
    --out "$OUT/ab_x86_64_v3.csv" -- --k-transposed --target-cpu=x86-64-v3 \
    --dtypes=f32,bf16,f16 --contexts="$contexts" --batches="$batches" --threads=1,2 \
    | tee "$OUT/ab_x86_64_v3.txt"
fi

if [ "$peers" = 1 ]; then
  step "peers (built outside the tree on first use) -> peers.csv"
  peer_builds=(ggml torch)
  [ "$avx512" = 1 ] && peer_builds+=(ggml-avx2)
  bash scripts/peers.sh "${peer_builds[@]}"
  "$PY" bench/cpu_attention/peers.py --k-transposed --rounds "$reps" "${quick_flag[@]}" \
    --out "$OUT/peers.csv"
  if [ "$avx512" = 1 ]; then
    "$PY" bench/cpu_attention/peers.py --k-transposed --target-cpu=x86-64-v3 --avx2-peers \
      --rounds "$reps" "${quick_flag[@]}" --out "$OUT/peers_avx2.csv"
  fi
fi

step "done: $OUT"
grep -h "mean of medians" "$OUT"/ab*.txt || true
