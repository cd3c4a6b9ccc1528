#!/bin/sh
# eval_papers.sh BIN_DIR -- the other papers' systems through o3m-eval:
# `p2b` on generated Criteo rows and on the synthetic setting,
# `samba` with its sweeps, CSV and plot script. Each must run, print the
# figures docs/evaluation/ quotes (epsilon 0.693, the three settings; the
# secure reward equal to the plain one for every algorithm), and refuse bad input
# with exit code 2. Registered with CTest as test_eval_papers.
set -u
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  [ -f "$dir/out" ] && sed 's/^/  | /' "$dir/out"
  failures=$((failures + 1))
}

"$bin/o3m-eval" gen-criteo --rows 20000 --seed 3 --out "$dir/c.tsv" || fail "gen-criteo exits $?"
"$bin/o3m-eval" p2b --setting both --criteo "$dir/c.tsv" --users 300 --t 5 --k 16 >"$dir/out" 2>&1 ||
  fail "p2b exits $?"
grep -q "epsilon = .* = 0.6931 at p = 0.50" "$dir/out" || fail "p2b: no epsilon 0.6931"
[ "$(grep -c 'warm, private (P2B shuffler)' "$dir/out")" = 2 ] || fail "p2b: not two settings"
grep -q "clicked rows among the 40 top labels" "$dir/out" || fail "p2b: criteo rows not read"
"$bin/o3m-eval" p2b --setting criteo >"$dir/out" 2>&1
[ $? -eq 2 ] && grep -q "needs --criteo FILE" "$dir/out" || fail "p2b without --criteo"
"$bin/o3m-eval" p2b --setting criteo --criteo "$dir/missing.tsv" >"$dir/out" 2>&1
[ $? -eq 1 ] && grep -q "missing.tsv" "$dir/out" || fail "p2b on a missing file"

"$bin/o3m-eval" samba --K 4 --N 300 --means 0.2,0.4,0.6,0.8 --paillier-bits 256 \
  --out-dir "$dir/s" --sweep-N 100,200 --sweep-K 3,5 >"$dir/out" 2>&1 || fail "samba exits $?"
[ "$(grep -c ' yes ' "$dir/out")" = 6 ] || fail "samba: not six algorithms with secure = plain"
for f in samba_vs_N.csv samba_vs_K.csv samba_plots.gp; do
  [ -s "$dir/s/$f" ] || fail "samba: no $f"
done
[ "$(wc -l <"$dir/s/samba_vs_N.csv")" = 3 ] || fail "samba: samba_vs_N.csv is not a header and 2 rows"
"$bin/o3m-eval" samba --K 4 --means 0.1,0.2 >"$dir/out" 2>&1
[ $? -eq 2 ] && grep -q "needs 4 comma values" "$dir/out" || fail "samba with 2 means for K = 4"
"$bin/o3m-eval" samba --algos ucb,greedy >"$dir/out" 2>&1
[ $? -eq 2 ] && grep -q "greedy" "$dir/out" || fail "samba with an unknown algorithm"

[ $failures -eq 0 ] && echo "p2b and samba run as documented"
exit $((failures != 0))
