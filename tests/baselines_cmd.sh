#!/bin/sh
# baselines_cmd.sh BIN_DIR -- `o3m-eval baselines` end to end on a tiny
# sweep (d 10, K 2, N 2 and 3): every mechanism runs on the same round and
# lands in baselines.csv with its error against plaintext: O3M (both
# aggregation modes), MPC and HE within their fixed point, DP far off at
# epsilon 1; bytes and rounds are filled in; the d sweep's CSV has one row
# per d; `o3m-eval cost --only c3` no longer prints the paper's HE/MPC/DP
# figures as columns of its table. Registered with CTest as
# test_baselines_cmd.
set -u
bin=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

"$bin/o3m-eval" baselines --settings sweep --d 10,12 --K 2 --N 2,3 --min-time 0.01 \
  --he-budget 60 --dp-eps 1 --dp-T 10 --out-dir "$out" --no-plots >"$out/log" 2>&1 ||
  { cat "$out/log"; fail "o3m-eval baselines exits $?"; }
csv="$out/baselines.csv"
[ -f "$csv" ] || fail "no baselines.csv"
# setting,d,K,N,mechanism,online_s,offline_s,max_abs_err,bytes,rounds,paper_s,how
check_err() { # MECH MAX: every row of MECH has an error below MAX and bytes > 0
  n=$(awk -F, -v m="$1" -v lim="$2" '$5 == m && $8 != "" && $8 + 0 < lim + 0 && $9 + 0 > 0 \
      && $10 + 0 >= 1 { ok++ } END { print ok + 0 }' "$csv")
  rows=$(awk -F, -v m="$1" '$5 == m { n++ } END { print n + 0 }' "$csv")
  [ "$rows" -ge 4 ] && [ "$n" -eq "$rows" ] ||
    fail "$1: $n of $rows rows with error < $2 and bytes, rounds filled"
}
check_err o3m-pp 1e-12
check_err o3m-sec 1e-9
check_err mpc 1e-3
check_err he 1e-6
n=$(awk -F, '$5 == "dp" && $8 + 0 > 0.1 { n++ } END { print n + 0 }' "$csv")
[ "$n" -ge 4 ] || fail "dp at epsilon 1 over 10 rounds should be far from plaintext ($n rows)"
[ "$(wc -l <"$out/baselines_sweep_d.csv")" -eq 3 ] || fail "baselines_sweep_d.csv: not 2 rows"
n=$(awk -F, '$2 + 0 > 0 && $3 + 0 > 0 { n++ } END { print n + 0 }' "$out/baselines_he_ops.csv")
[ "$n" -eq 6 ] || fail "baselines_he_ops.csv: $n of 6 operations with a count and a time"
"$bin/o3m-eval" cost --only c3 --min-time 0.01 --out-dir "$out" >"$out/c3" 2>&1 ||
  fail "cost --only c3 exits $?"
grep -q "paper:.*HE.*MPC" "$out/c3" && fail "cost --only c3 still prints HE/MPC columns"
grep -q "o3m-eval baselines" "$out/c3" || fail "cost --only c3 does not point to baselines"
[ $failures -eq 0 ] || { cat "$out/log"; exit 1; }
echo "baselines_cmd: all checks passed"
