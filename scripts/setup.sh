#!/usr/bin/env bash
# setup.sh: install what is missing (Debian packages, the Python venv) and build hybridgen.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
BUILD="${HYBRIDGEN_BUILD_DIR:-$ROOT/build}"
LLVM=/usr/lib/llvm-22

APT_PACKAGES=(mlir-22-tools libmlir-22-dev llvm-22-dev llvm-22-tools clang-22 lld-22 libomp-22-dev
              libnuma-dev ninja-build cmake ccache numactl python3-dev python3-venv libgtest-dev
              nlohmann-json3-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The project venv (numpy, nanobind, pytest, ...).
bash "$ROOT/scripts/python-env.sh"
PY="$ROOT/.venv/bin/python"

if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DLLVM_USE_LINKER=lld \
    -DMLIR_DIR=$LLVM/lib/cmake/mlir -DLLVM_EXTERNAL_LIT=$LLVM/bin/lit \
    -DHYBRIDGEN_ENABLE_PYTHON=ON -DPython_EXECUTABLE="$PY" >/dev/null
fi
ninja -C "$BUILD" -j"$(nproc)"
