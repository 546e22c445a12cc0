#!/usr/bin/env bash
# Builds (if needed) and runs the runtime scheduler benchmark; prints the table and writes
# bench/results/scheduler.csv (per-step rows of every policy). Extra arguments go to the bench,
# e.g. `bench/runtime/run.sh --steps 80`. Takes well under a minute on the 2-core dev machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${HYBRIDGEN_RT_BUILD:-$root/build-rt}"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root/runtime" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
ninja -C "$build" -j2 hybridgen_scheduler_bench
mkdir -p "$root/bench/results"
cd "$root"
echo "command: $build/hybridgen_scheduler_bench --csv bench/results/scheduler.csv $*"
"$build/hybridgen_scheduler_bench" --csv bench/results/scheduler.csv "$@"
