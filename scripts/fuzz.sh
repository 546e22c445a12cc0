#!/usr/bin/env bash
# fuzz.sh: build and run a libFuzzer target for as long as asked, keeping its corpus.
#
#   scripts/fuzz.sh runtime [--time|--seconds SECONDS] [--corpus DIR] [--jobs N] [--junit FILE]
#                           [-- ARGS...]
#   scripts/fuzz.sh safetensors [same options as runtime]
#   scripts/fuzz.sh ir [--seconds SECONDS] [--jobs N] [--junit FILE]
#
# runtime: the runtime target (runtime/fuzz/runtime_fuzz.cpp: pool, scheduler, placement, thread
#          plan and C ABI against a shadow model), built with clang-22
#          -fsanitize=fuzzer,address,undefined in $HYBRIDGEN_FUZZ_DIR/runtime (default build-fuzz/).
# --time   seconds to run (default 60); --corpus the corpus directory, created if missing and kept
#          between runs (default build-fuzz/corpus-runtime; never committed); --jobs parallel
#          workers (default 1); --junit writes a one-case JUnit XML for scripts/summarize_results.py;
#          ARGS after -- go to libFuzzer unchanged. Findings (crash-*, leak-*, timeout-*) land in
#          build-fuzz/findings-runtime/. Prints `runtime fuzzer: N executions in S s, F findings`
#          and exits non-zero when something was found.
# safetensors: the weights reader (runtime/fuzz/safetensors_fuzz.cpp: Checkpoint::open on a
#          whole file, a framed header or a shard index; every accepted tensor read and converted),
#          built beside the runtime target; seeds runtime/fuzz/seeds/safetensors, dictionary
#          runtime/fuzz/safetensors.dict, corpus build-fuzz/corpus-safetensors, findings
#          build-fuzz/findings-safetensors/.
# ir:      parse + verify + every hg pipeline variant + translation to LLVM IR
#          (test/fuzz/ir_fuzz.cpp), in its own build directory ($BUILD-ir-fuzz) where the project's
#          code is compiled with -fsanitize=fuzzer-no-link,address (libMLIR.so is Debian's,
#          uninstrumented). Seeds are the lit cases (scripts/extract_fuzz_seeds.py), the dictionary
#          test/fuzz/hg.dict; new inputs go to $BUILD-ir-fuzz/corpus, findings to
#          $BUILD-ir-fuzz/findings. Skipped (JUnit skipped) where clang-22 has no libFuzzer.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ_DIR="${HYBRIDGEN_FUZZ_DIR:-$ROOT/build-fuzz}"

usage() { sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 2; }

target="${1:-}"
[ -n "$target" ] || usage
shift
time_s=60 corpus="" jobs=1 junit="" extra=() seeds=""
while [ $# -gt 0 ]; do
  case "$1" in
    --time|--seconds) time_s="$2"; shift 2 ;;
    --corpus) corpus="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --junit) junit="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) usage ;;
  esac
done

# Writes a JUnit report with one test case named after the target (failed when $2 is non-empty,
# skipped when $4 is "skip").
write_junit() {
  [ -n "$junit" ] || return 0
  local name="$1" failure="$2" secs="$3" kind="${4:-}"
  mkdir -p "$(dirname "$junit")"
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuite name=\"fuzz\" tests=\"1\" failures=\"$([ -n "$failure" ] && echo 1 || echo 0)\">"
    echo "  <testcase classname=\"fuzz\" name=\"$name\" time=\"$secs\">"
    local msg
    msg="$(echo "$failure" | sed 's/&/\&amp;/g; s/</\&lt;/g; s/"/\&quot;/g')"
    if [ "$kind" = skip ]; then
      echo "    <skipped message=\"$msg\"/>"
    elif [ -n "$failure" ]; then
      echo "    <failure message=\"$msg\"/>"
    fi
    echo "  </testcase>"
    echo "</testsuite>"
  } >"$junit"
}

# Runs |binary| on |corpus| for time_s seconds; summarizes executions and findings.
run_target() {
  local name="$1" binary="$2" findings="$3"
  mkdir -p "$corpus" "$findings"
  local log="$findings/last-run.log"
  local start=$SECONDS
  # Long inputs from the start (-len_control=0): one input is a whole operation sequence, and the
  # pool setup alone takes about 20 bytes, so libFuzzer's slow default length growth would spend the
  # first minutes on sequences of one or two operations.
  local args=(-max_total_time="$time_s" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
              -max_len=1024 -len_control=0 -artifact_prefix="$findings/")
  rm -f "$findings"/fuzz-*.log
  if [ "$jobs" -gt 1 ]; then
    # Workers share the corpus; each writes fuzz-N.log in the current directory.
    (cd "$findings" && "$binary" "${args[@]}" -jobs="$jobs" -workers="$jobs" "${extra[@]}" "$corpus" \
       ${seeds:+"$seeds"}) \
      >"$log" 2>&1
  else
    "$binary" "${args[@]}" "${extra[@]}" "$corpus" ${seeds:+"$seeds"} >"$log" 2>&1
  fi
  local rc=$?
  local secs=$((SECONDS - start))
  local runs
  if [ "$jobs" -gt 1 ]; then
    runs=$(cat "$findings"/fuzz-*.log 2>/dev/null | sed -n 's/^stat::number_of_executed_units: *//p' |
           awk '{s += $1} END {print s + 0}')
  else
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  fi
  local found
  found=$(find "$findings" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
            -o -name 'oom-*' \) -newer "$log.start" 2>/dev/null | wc -l)
  echo "$name fuzzer: ${runs:-0} executions in $secs s, $found findings (corpus $corpus: $(ls "$corpus" | wc -l) inputs)"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    tail -n 30 "$log"
    write_junit "$name" "libFuzzer exited $rc with $found findings; see $log" "$secs"
    return 1
  fi
  write_junit "$name" "" "$secs"
}

case "$target" in
  runtime|safetensors)
    if ! ls /usr/lib/llvm-22/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
      echo "fuzz.sh $target: clang-22 has no libFuzzer runtime; skipped"
      write_junit "$target" "clang-22 without libFuzzer" 0 skip
      exit 0
    fi
    build="$FUZZ_DIR/runtime"
    corpus="${corpus:-$FUZZ_DIR/corpus-$target}"
    if [ ! -f "$build/build.ninja" ]; then
      cmake -S "$ROOT/runtime" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
        -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DHYBRIDGEN_RT_FUZZ=ON \
        -DHYBRIDGEN_RT_TESTS=OFF -DHYBRIDGEN_RT_BENCH=OFF >/dev/null ||
        { write_junit "$target" "cmake failed" 0; echo "fuzz.sh: cmake failed"; exit 1; }
    fi
    ninja -C "$build" -j"${HYBRIDGEN_JOBS:-2}" "hybridgen_${target}_fuzz" >/dev/null ||
      { write_junit "$target" "build failed" 0; echo "fuzz.sh: build failed"; exit 1; }
    if [ "$target" = safetensors ]; then
      # One input is one file (up to a few KB of JSON header), not an operation sequence.
      seeds="$ROOT/runtime/fuzz/seeds/safetensors"
      extra=(-dict="$ROOT/runtime/fuzz/safetensors.dict" -max_len=8192 "${extra[@]}")
    fi
    findings="$FUZZ_DIR/findings-$target"
    mkdir -p "$findings" && touch "$findings/last-run.log.start"
    run_target "$target" "$build/fuzz/hybridgen_${target}_fuzz" "$findings"
    ;;
  ir)
    FUZZ_BUILD="${HYBRIDGEN_BUILD_DIR:-$ROOT/build}-ir-fuzz"
    if ! ls /usr/lib/llvm-22/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
      echo "fuzz.sh ir: clang-22 has no libFuzzer runtime; skipped"
      write_junit ir_fuzz "clang-22 without libFuzzer" 0 skip
      exit 0
    fi
    if [ ! -f "$FUZZ_BUILD/build.ninja" ]; then
      cmake -S "$ROOT" -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
        -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
        -DLLVM_USE_LINKER=lld -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
        -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer" \
        -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address" \
        -DHYBRIDGEN_IR_FUZZ=ON >/dev/null || { write_junit ir_fuzz "configure failed" 0; exit 1; }
    fi
    if ! ninja -C "$FUZZ_BUILD" -j"${HYBRIDGEN_JOBS:-$(nproc)}" hybridgen_ir_fuzz >/dev/null; then
      echo "fuzz.sh ir: build failed"
      write_junit ir_fuzz "build failed" 0
      exit 1
    fi
    mkdir -p "$FUZZ_BUILD/corpus" "$FUZZ_BUILD/findings"
    python3 "$ROOT/scripts/extract_fuzz_seeds.py" "$ROOT/test" "$FUZZ_BUILD/seeds" || exit 1
    log="$FUZZ_BUILD/last-run.log"
    # Leaks off: LLVM's registries live until exit by design. Nothing compiled is executed, so the
    # runtime library is not needed. User poisoning off: LLVM's BumpPtrAllocator poisons each new
    # slab and unpoisons what it hands out, but only where its inline code is instrumented: a slab
    # started by the project's (instrumented) attribute storage and then filled by libMLIR's
    # (uninstrumented) location storage stays poisoned, and libMLIR's memmove into it is reported
    # as use-after-poison (a false positive; its input is kept in test/fuzz/regressions/, which
    # every run replays). ASan's own heap checks are unaffected. With --jobs N, N workers share the corpus (fuzz-K.log each,
    # in $FUZZ_BUILD/findings) and the executions are their sum.
    fuzz_args=("$FUZZ_BUILD/corpus" "$FUZZ_BUILD/seeds" "$ROOT/test/fuzz/regressions" -dict="$ROOT/test/fuzz/hg.dict"
               -max_total_time="$time_s" -max_len=16384 -timeout=60 -rss_limit_mb=6144
               -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/findings/")
    rm -f "$FUZZ_BUILD"/findings/fuzz-*.log
    touch "$log.start"
    if [ "$jobs" -gt 1 ]; then
      (cd "$FUZZ_BUILD/findings" && ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:allow_user_poisoning=0" \
        "$FUZZ_BUILD/test/fuzz/hybridgen_ir_fuzz" "${fuzz_args[@]}" -jobs="$jobs" -workers="$jobs") \
        >"$log" 2>&1
    else
      ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:allow_user_poisoning=0" \
        "$FUZZ_BUILD/test/fuzz/hybridgen_ir_fuzz" "${fuzz_args[@]}" >"$log" 2>&1
    fi
    rc=$?
    if [ "$jobs" -gt 1 ]; then
      execs=$(cat "$FUZZ_BUILD"/findings/fuzz-*.log 2>/dev/null |
              sed -n 's/^stat::number_of_executed_units: *//p' | awk '{s += $1} END {print s + 0}')
      # A finding is a crash-/timeout-/oom-/leak- file of this run (slow units are only noted).
      [ -n "$(find "$FUZZ_BUILD/findings" -maxdepth 1 \( -name 'crash-*' -o -name 'timeout-*' \
              -o -name 'oom-*' -o -name 'leak-*' \) -newer "$log.start" 2>/dev/null)" ] && rc=1
    else
      execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    fi
    echo "fuzz.sh ir: ${execs:-0} executions in ${time_s}s ($jobs worker(s)), exit $rc (log: $log)"
    if [ $rc -ne 0 ]; then
      grep -h -E "ERROR|==[0-9]+==|Test unit written|SUMMARY" "$log" "$FUZZ_BUILD"/findings/fuzz-*.log \
        2>/dev/null | head -20
      write_junit ir_fuzz "finding after ${execs:-0} executions, see $log" "$time_s"
      exit 1
    fi
    write_junit ir_fuzz "" "$time_s"
    ;;
  *)
    echo "fuzz.sh: unknown target '$target' (known: runtime, ir)"
    exit 2
    ;;
esac
