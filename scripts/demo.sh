#!/usr/bin/env bash
# demo.sh: set everything up, then run the main job on its built-in default: a Llama-3-8B-shaped
# attention layer JIT-compiled with a runtime split point and run step by step as the sequence grows
# from 4K to 64K tokens, with the feedback scheduler choosing the split and every few steps a check
# against a float64 reference. Extra arguments go to hybridgen-run (try --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HYBRIDGEN_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/setup.sh"
mkdir -p "$BUILD/demo"
exec "$BUILD/bin/hybridgen-run" --trace="$BUILD/demo/trace.csv" "$@"
