#!/usr/bin/env bash
# test.sh: set everything up, then run every suite (lit, runtime and driver unit tests, the runtime
# under AddressSanitizer and UndefinedBehaviorSanitizer, pytest, bounded runtime, safetensors and IR fuzzer
# runs) and end with one line: `N passed, M failed`.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
BUILD="${HYBRIDGEN_BUILD_DIR:-$ROOT/build}"
RESULTS="$BUILD/test-results"
LLVM=/usr/lib/llvm-22

bash "$ROOT/scripts/setup.sh" || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
rm -rf "$RESULTS" && mkdir -p "$RESULTS"

echo "== lit"
$LLVM/bin/lit -sv --xunit-xml-output "$RESULTS/lit.xml" "$BUILD/test"

echo "== runtime unit tests"
"$BUILD/runtime/hybridgen_runtime_tests" --gtest_output="xml:$RESULTS/runtime.xml" \
  --gtest_brief=1

echo "== runtime unit tests under AddressSanitizer"
ASAN_BUILD="$BUILD-rt-asan"
if [ ! -f "$ASAN_BUILD/build.ninja" ]; then
  cmake -S "$ROOT/runtime" -B "$ASAN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DHYBRIDGEN_RT_ASAN=ON >/dev/null
fi
ninja -C "$ASAN_BUILD" -j"$(nproc)" hybridgen_runtime_tests >/dev/null &&
  ASAN_OPTIONS=detect_leaks=1 "$ASAN_BUILD/hybridgen_runtime_tests" \
    --gtest_output="xml:$RESULTS/runtime-asan.xml" --gtest_brief=1

echo "== driver tests"
"$BUILD/test/Driver/hybridgen_driver_tests" --gtest_output="xml:$RESULTS/driver.xml" \
  --gtest_brief=1

echo "== pytest"
(cd "$ROOT" && "$ROOT/.venv/bin/python" -m pytest -q "$ROOT/python/tests" \
  --junitxml="$RESULTS/pytest.xml")

echo "== runtime unit tests under UndefinedBehaviorSanitizer"
UBSAN_BUILD="$BUILD-rt-ubsan"
if [ ! -f "$UBSAN_BUILD/build.ninja" ]; then
  cmake -S "$ROOT/runtime" -B "$UBSAN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DHYBRIDGEN_RT_UBSAN=ON -DHYBRIDGEN_RT_BENCH=OFF >/dev/null
fi
ninja -C "$UBSAN_BUILD" -j"$(nproc)" hybridgen_runtime_tests >/dev/null &&
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$UBSAN_BUILD/hybridgen_runtime_tests" \
    --gtest_output="xml:$RESULTS/runtime-ubsan.xml" --gtest_brief=1

echo "== runtime fuzzer (bounded)"
HYBRIDGEN_FUZZ_DIR="$BUILD-fuzz" HYBRIDGEN_JOBS="$(nproc)" bash "$ROOT/scripts/fuzz.sh" runtime --time 25 \
  --junit "$RESULTS/fuzz-runtime.xml"

echo "== safetensors fuzzer (bounded)"
HYBRIDGEN_FUZZ_DIR="$BUILD-fuzz" bash "$ROOT/scripts/fuzz.sh" safetensors --time 10 \
  --junit "$RESULTS/fuzz-safetensors.xml"

echo "== IR fuzzer (bounded; scripts/fuzz.sh ir runs it for longer)"
bash "$ROOT/scripts/fuzz.sh" ir --seconds "${HYBRIDGEN_FUZZ_SECONDS:-30}" \
  --junit "$RESULTS/fuzz-ir.xml"

"$ROOT/.venv/bin/python" "$ROOT/scripts/summarize_results.py" \
  "$RESULTS/lit.xml" "$RESULTS/runtime.xml" "$RESULTS/runtime-asan.xml" \
  "$RESULTS/driver.xml" "$RESULTS/pytest.xml" \
  "$RESULTS/runtime-ubsan.xml" "$RESULTS/fuzz-runtime.xml" "$RESULTS/fuzz-safetensors.xml" \
  "$RESULTS/fuzz-ir.xml"
