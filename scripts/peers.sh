#!/usr/bin/env bash
# scripts/peers.sh: fetches and builds, OUTSIDE the repository, the peers the benchmarks compare
# hybridgen against; nothing of their code enters the tree. Idempotent: a second run only checks
# what is there (and rebuilds our own small peer program when its source changed).
#
#   bash scripts/peers.sh [ggml] [torch] [ggml-avx2]   (ggml and torch when no argument is given)
#
#   ggml:  llama.cpp (which vendors ggml), from the source distribution of PyPI's
#          llama-cpp-python (pinned below; LLAMA_CPP_SRC=<a llama.cpp checkout> uses that instead),
#          built with cmake (Release, GGML_NATIVE=ON, -j2): ggml's CPU backend and llama-bench.
#          Then bench/cpu_attention/peers/ggml_flash_attn.c, our own program over ggml's public
#          API, is compiled against it.
#   ggml-avx2: the same ggml built for AVX2 + FMA + F16C only (no AVX-512), with the program as
#          bin/ggml_flash_attn_avx2: the peer of hybridgen's AVX2 kernels on any x86 machine
#          (peers.py --avx2). No llama-bench.
#   torch: PyTorch in a separate venv (never the project's .venv: torch is no dependency of
#          the project or its tests), from PyPI with the CUDA wheels it requires (some GB).
#
# Where: $HYBRIDGEN_PEERS_DIR (default ~/.cache/hybridgen-peers). The benches look there and skip a
# peer that is missing with a one-line notice.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${HYBRIDGEN_PEERS_DIR:-$HOME/.cache/hybridgen-peers}"
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
TORCH_VERSION="${TORCH_VERSION:-}" # empty: the newest on the index
JOBS="${JOBS:-2}"
mkdir -p "$PEERS"

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(ggml torch)

build_ggml() {
  local variant="${1:-native}" # native: GGML_NATIVE (this CPU); avx2: AVX2/FMA/F16C, no AVX-512
  local src="${LLAMA_CPP_SRC:-}"
  if [ -z "$src" ]; then
    src="$PEERS/llama.cpp-src"
    if [ ! -f "$src/CMakeLists.txt" ]; then
      echo "peers: downloading the llama.cpp sources (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist)"
      local dl="$PEERS/download"
      mkdir -p "$dl"
      local py="$ROOT/.venv/bin/python" # the project's venv has pip; a bare python3 may not
      [ -x "$py" ] || py=python3
      "$py" -m pip download --quiet --no-deps --no-binary :all: -d "$dl" \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
      local tmp="$PEERS/extract.$$"
      rm -rf "$tmp" && mkdir -p "$tmp"
      tar xzf "$dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$tmp" \
        "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
      rm -rf "$src"
      mv "$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" "$src"
      rm -rf "$tmp"
    fi
  fi
  local build="$PEERS/llama.cpp-build" isa=(-DGGML_NATIVE=ON) targets=(ggml ggml-cpu llama-bench)
  local suffix=""
  if [ "$variant" = avx2 ]; then
    build="$PEERS/llama.cpp-build-avx2" suffix="_avx2" targets=(ggml ggml-cpu)
    isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF)
  fi
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa[@]}" \
      -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DGGML_CCACHE=OFF >/dev/null
  fi
  # Only what the benches run: ggml's CPU backend (for our flash-attention program) and
  # llama-bench (for bench/models/run.sh PEERS=1).
  ninja -C "$build" -j"$JOBS" "${targets[@]}"
  local bin="$PEERS/bin"
  mkdir -p "$bin"
  local inc="$src/ggml/include" lib="$build/bin"
  [ -f "$lib/libggml.so" ] || lib="$build/ggml/src"
  local out="$bin/ggml_flash_attn$suffix" prog="$ROOT/bench/cpu_attention/peers/ggml_flash_attn.c"
  # Rebuilt when the source or the ggml it links changed (a content stamp, not mtimes: a
  # checkout can make the source look older than the binary).
  local stamp
  stamp="$(cat "$prog" "$lib/libggml-cpu.so" | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$out" ] || [ "$(cat "$out.stamp" 2>/dev/null)" != "$stamp" ]; then
    cc -O2 -std=gnu11 -Wall -Wextra -I"$inc" "$prog" -o "$out" \
      -L"$lib" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$lib" -lm
    echo "$stamp" > "$out.stamp"
  fi
  if [ "$variant" = avx2 ]; then
    echo "peers: ggml (AVX2) ready ($out)"
  else
    ln -sf "$build/bin/llama-bench" "$bin/llama-bench"
    echo "peers: ggml ready ($out, $bin/llama-bench)"
  fi
}

install_torch() {
  local venv="$PEERS/torch-venv"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "peers: torch ready ($("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
    return
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  # PyPI has only the CUDA build of torch for Linux x86-64: without its nvidia-* / cuda-toolkit
  # wheels (some GB) `import torch` fails on a missing libcufile.so.0 even for CPU-only use, so it
  # goes in with its dependencies.
  "$venv/bin/pip" install --quiet "torch${TORCH_VERSION:+==$TORCH_VERSION}"
  "$venv/bin/python" -c "import torch; print('peers: torch ready (' + torch.__version__ + ')')"
}

for w in "${want[@]}"; do
  case "$w" in
    ggml) build_ggml native ;;
    ggml-avx2) build_ggml avx2 ;;
    torch) install_torch ;;
    *) echo "peers: unknown peer '$w' (ggml, ggml-avx2, torch)" >&2; exit 2 ;;
  esac
done
