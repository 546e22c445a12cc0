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
echo "venv ready: $venv ($("$venv/bin/python" --version))"
