#!/usr/bin/env bash
# Runs the test suite (or a part of it) N times beside a CPU burner, to find
# the tests that fail only when the machine is busy: a test that orders
# events by sleeping, asserts elapsed time or gives up on a first failed
# connect passes on an idle machine and fails here.
#
#   scripts/burn-suite.sh [-n RUNS] [-c BURNERS] [-L LABEL] [-R REGEX]
#                         [-B BUILD_DIR] [-- CTEST_ARGS...]
#
#   -n RUNS     how many times to run the tests (default 10)
#   -c BURNERS  busy loops at nice 0 beside them (default: one per core,
#               nproc; 0 runs without a burner)
#   -L LABEL    only the CTest tests with this label (e2e: the tests that
#               start the real daemons; see tests/CMakeLists.txt)
#   -R REGEX    only the CTest tests whose name matches
#   -B DIR      the build directory (default $O3M_BUILD_DIR or build), which
#               must be built already (scripts/test.sh, cmake --build)
#
# Prints one line per run, then how many runs each failing CTest test and
# each failing Criterion test (suite::name) failed, then "N passed, M
# failed" (runs). Exits 1 if a run failed. The output of the failed runs is
# kept in a folder it names; the burners are killed on exit, however the
# script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10
burners=$(nproc)
build="${O3M_BUILD_DIR:-build}"
sel=()
usage() { sed -n '5,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    -n) runs=${2:?}; shift 2 ;;
    -c) burners=${2:?}; shift 2 ;;
    -L) sel+=(-L "${2:?}"); shift 2 ;;
    -R) sel+=(-R "${2:?}"); shift 2 ;;
    -B) build=${2:?}; shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "burn-suite: unknown argument '$1'" >&2; usage ;;
  esac
done
case $runs$burners in *[!0-9]*) echo "burn-suite: -n and -c take numbers" >&2; exit 2 ;; esac
if [ ! -f "$build/CTestTestfile.cmake" ]; then
  echo "burn-suite: $build is not a configured build (run scripts/test.sh first)" >&2
  exit 2
fi

logs=$(mktemp -d /tmp/o3m-burn.XXXXXX)
pids=()
stop_burners() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_burners EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < burners; i++)); do
  # The parent's death kills a burner too (a SIGKILL leaves no trap to run).
  setpriv --pdeathsig KILL nice -n 0 bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "burn-suite: $runs run(s) of ctest ${sel[*]:-(every test)} beside $burners busy loop(s);" \
     "logs in $logs"

declare -A ctest_fail=() crit_fail=()
passed=0 failed=0
for ((r = 1; r <= runs; r++)); do
  log="$logs/run-$r.log"
  t0=$SECONDS
  if ctest --test-dir "$build" --output-on-failure --no-tests=error "${sel[@]}" "$@" \
       >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "run $r/$runs: passed ($((SECONDS - t0)) s)"
    rm -f "$log"
    continue
  fi
  failed=$((failed + 1))
  # ctest's summary: "	 12 - test_fairness (Failed)"; Criterion's: "[FAIL] suite::name: ...".
  names=$(sed -n '/The following tests FAILED:/,$s/^[[:space:]]*[0-9]\{1,\} - \([^ ]*\) .*/\1/p' "$log" |
          sort -u)
  for n in $names; do ctest_fail[$n]=$((${ctest_fail[$n]:-0} + 1)); done
  while read -r n; do
    [ -n "$n" ] && crit_fail[$n]=$((${crit_fail[$n]:-0} + 1))
  done < <(grep -o '\[FAIL\] [A-Za-z0-9_]*::[A-Za-z0-9_]*' "$log" | cut -d' ' -f2 | sort -u)
  shown=${names//$'\n'/ }
  echo "run $r/$runs: FAILED ($((SECONDS - t0)) s): ${shown:-"(see $log)"}"
  # Under CI the log is gone with the machine: its failures are shown here.
  if [ -n "${CI:-}" ]; then
    grep -B2 -A12 -E '\*\*\*(Failed|Timeout|Exception)|Assertion Failed|\[FAIL\]' "$log" |
      tail -n 300 || true
  fi
done

if [ "$failed" -gt 0 ]; then
  echo "failures per CTest test (runs out of $runs):"
  for n in "${!ctest_fail[@]}"; do echo "  $n: ${ctest_fail[$n]}"; done | sort
  if [ "${#crit_fail[@]}" -gt 0 ]; then
    echo "failures per Criterion test (runs out of $runs):"
    for n in "${!crit_fail[@]}"; do echo "  $n: ${crit_fail[$n]}"; done | sort
  fi
  echo "the failed runs' output: $logs"
else
  rmdir "$logs" 2>/dev/null || true
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
