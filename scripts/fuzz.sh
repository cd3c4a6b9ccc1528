#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz into build-fuzz/ (clang, ASan +
# UBSan, coverage-instrumented libraries) and runs each one for RUNS
# executions, starting from its seed and regression corpus in
# tests/fuzz/corpus/<target>/. Prints one line per target (executions, time,
# result) and exits 1 if any target failed to build, crashed, leaked, hit a
# sanitizer report, a timeout or the memory limit; the input that did it is
# kept in build-fuzz/fuzz-artifacts/<target>/, the log in build-fuzz/fuzz-logs/.
#
#   scripts/fuzz.sh [RUNS [TARGET...]]
#     RUNS     executions per target: 100000 by default (a quick run),
#              1000000 as the benchmark, 0 to only replay the corpus.
#     TARGET   fuzz_config, fuzz_wire_block, ... (default: every directory
#              in tests/fuzz/corpus/).
#   Environment: O3M_FUZZ_BUILD_DIR (build-fuzz), O3M_FUZZ_JOBS (targets run
#   at once; default the number of cores), O3M_FUZZ_SEED (libFuzzer's -seed;
#   random when unset and printed, so that a run can be repeated).
#
# New inputs that libFuzzer finds go to build-fuzz/fuzz-corpus/<target>/,
# never into the source tree; copy one into tests/fuzz/corpus/<target>/ by
# hand to keep it (always do so for an input that crashed, once it is fixed).
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-100000}"
[ $# -gt 0 ] && shift
if ! [[ "$runs" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh [RUNS [TARGET...]]" >&2
  exit 2
fi
build="${O3M_FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${O3M_FUZZ_JOBS:-$(nproc)}"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for d in tests/fuzz/corpus/fuzz_*/; do targets+=("$(basename "$d")"); done
fi

scripts/setup-deps.sh
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DO3M_FUZZ=ON -DO3M_BUILD_TESTS=OFF -DO3M_ASAN=ON -DO3M_UBSAN=ON \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
logs="$build/fuzz-logs"
mkdir -p "$logs"
rm -f "$logs"/*

# Each target is built on its own, so that a file that does not compile
# fails only the targets that link it: those count as failed, the others
# still run.
runnable=()
for t in "${targets[@]}"; do
  if cmake --build "$build" -j"$(nproc)" --target "$t" >"$logs/$t.build.log" 2>&1; then
    runnable+=("$t")
  else
    why=$(grep -m1 -E 'error:|Error|No rule' "$logs/$t.build.log" || true)
    echo "0 0 BUILD FAILED: ${why:-see $logs/$t.build.log}" >"$logs/$t.result"
  fi
done

# Runs one target and writes "executions seconds result" to
# $logs/<target>.result.
run_one() {
  local t="$1" corpus="$build/fuzz-corpus/$1" art="$build/fuzz-artifacts/$1"
  local log="$logs/$t.log" seed_opt=() rc=0 t0 t1 execs result input why
  mkdir -p "$corpus" "$art" "tests/fuzz/corpus/$t"
  [ -n "${O3M_FUZZ_SEED:-}" ] && seed_opt=(-seed="$O3M_FUZZ_SEED")
  t0=$(date +%s.%N)
  "$build/bin/$t" -runs="$runs" -detect_leaks=1 -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$art/" "${seed_opt[@]}" \
    "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
  if [ "$rc" -eq 0 ] &&
     ! grep -qE 'runtime error:|ERROR: [A-Za-z]*Sanitizer|property violated|ERROR: libFuzzer' "$log"; then
    result=ok
  else
    result="FAILED (exit $rc)"
    why=$(grep -m1 -oE 'ERROR: [A-Za-z]*Sanitizer: [a-z-]+|runtime error: .*|property violated: .*|ERROR: libFuzzer: [a-z-]+' "$log" || true)
    [ -n "$why" ] && result="$result $why"
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    [ -n "$input" ] && result="$result; input $input"
  fi
  printf '%s %s %s\n' "${execs:-0}" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
    "$result" >"$logs/$t.result"
}

echo "fuzz.sh: ${#runnable[@]} of ${#targets[@]} targets built; $runs runs each," \
     "$jobs at a time; logs in $logs/"
running=0
for t in "${runnable[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait || true

failed=0
total=0
printf '%-28s %11s %8s  %s\n' target executions seconds result
for t in "${targets[@]}"; do
  execs=0 secs=0 result="FAILED (the runner stopped; see $logs/$t.log)"
  if [ -s "$logs/$t.result" ]; then read -r execs secs result <"$logs/$t.result"; fi
  seed=$(sed -n 's/.*Seed: \([0-9]*\).*/\1/p' "$logs/$t.log" 2>/dev/null | head -n 1)
  [ "$result" = ok ] && result="ok (seed ${seed:-?})"
  printf '%-28s %11s %8.1f  %s\n' "$t" "$execs" "$secs" "$result"
  total=$((total + execs))
  [[ "$result" == ok* ]] || failed=$((failed + 1))
done
echo "fuzz.sh: $total executions; $failed of ${#targets[@]} targets failed"
[ "$failed" -eq 0 ]
