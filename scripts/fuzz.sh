#!/usr/bin/env bash
# fuzz.sh: builds and runs the project's libFuzzer targets for as long as asked, keeping a corpus
# between runs (docs/reliability.md).
#
#   scripts/fuzz.sh ir [--seconds N] [--junit FILE]
#
# ir: parse + verify + every hg pipeline variant + translation to LLVM IR (test/fuzz/ir_fuzz.cpp),
#     in its own build directory ($BUILD-ir-fuzz) where the project's code is compiled with
#     -fsanitize=fuzzer-no-link,address (libMLIR.so is Debian's, uninstrumented). Seeds are the
#     lit cases (scripts/extract_fuzz_seeds.py), the dictionary test/fuzz/hg.dict; new inputs go
#     to $BUILD-ir-fuzz/corpus, findings to $BUILD-ir-fuzz/findings. With --junit it writes a
#     one-case JUnit report for scripts/summarize_results.py (skipped where clang has no libFuzzer).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HYBRIDGEN_BUILD_DIR:-$ROOT/build}"
LLVM=/usr/lib/llvm-22

# junit FILE NAME STATUS(pass|fail|skip) MESSAGE
junit() {
  [ -n "$1" ] || return 0
  local body=""
  case "$3" in
  fail) body="<failure message=\"$4\"/>" ;;
  skip) body="<skipped message=\"$4\"/>" ;;
  esac
  mkdir -p "$(dirname "$1")"
  printf '<?xml version="1.0"?>\n<testsuite name="fuzz"><testcase classname="fuzz" name="%s">%s<system-out>%s</system-out></testcase></testsuite>\n' \
    "$2" "$body" "$4" >"$1"
}

cmd="${1:-}"
shift || true
seconds=60
report=""
while [ $# -gt 0 ]; do
  case "$1" in
  --seconds) seconds="$2"; shift 2 ;;
  --junit) report="$2"; shift 2 ;;
  *) echo "fuzz.sh: unknown argument '$1'"; exit 2 ;;
  esac
done

case "$cmd" in
ir)
  FUZZ_BUILD="$BUILD-ir-fuzz"
  if ! ls $LLVM/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    echo "fuzz.sh ir: clang-22 has no libFuzzer runtime; skipped"
    junit "$report" ir_fuzz skip "clang-22 without libFuzzer"
    exit 0
  fi
  if [ ! -f "$FUZZ_BUILD/build.ninja" ]; then
    cmake -S "$ROOT" -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
      -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DLLVM_USE_LINKER=lld -DMLIR_DIR=$LLVM/lib/cmake/mlir -DLLVM_EXTERNAL_LIT=$LLVM/bin/lit \
      -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address" \
      -DHYBRIDGEN_IR_FUZZ=ON >/dev/null || { junit "$report" ir_fuzz fail "configure failed"; exit 1; }
  fi
  if ! ninja -C "$FUZZ_BUILD" -j"${HYBRIDGEN_JOBS:-$(nproc)}" hybridgen_ir_fuzz >/dev/null; then
    echo "fuzz.sh ir: build failed"
    junit "$report" ir_fuzz fail "build failed"
    exit 1
  fi
  mkdir -p "$FUZZ_BUILD/corpus" "$FUZZ_BUILD/findings"
  python3 "$ROOT/scripts/extract_fuzz_seeds.py" "$ROOT/test" "$FUZZ_BUILD/seeds" || exit 1
  log="$FUZZ_BUILD/last-run.log"
  # Leaks off: LLVM's registries live until exit by design. Nothing compiled is executed, so the
  # runtime library is not needed.
  ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1" \
    "$FUZZ_BUILD/test/fuzz/hybridgen_ir_fuzz" "$FUZZ_BUILD/corpus" "$FUZZ_BUILD/seeds" \
    -dict="$ROOT/test/fuzz/hg.dict" -max_total_time="$seconds" -max_len=16384 -timeout=60 \
    -rss_limit_mb=6144 -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/findings/" \
    >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  echo "fuzz.sh ir: ${execs:-0} executions in ${seconds}s, exit $rc (log: $log)"
  if [ $rc -ne 0 ]; then
    grep -E "ERROR|==[0-9]+==|Test unit written|SUMMARY" "$log" | head -20
    junit "$report" ir_fuzz fail "finding after ${execs:-0} executions, see $log"
    exit 1
  fi
  junit "$report" ir_fuzz pass "${execs:-0} executions in ${seconds}s, no finding"
  ;;
*)
  echo "usage: scripts/fuzz.sh ir [--seconds N] [--junit FILE]"
  exit 2
  ;;
esac
