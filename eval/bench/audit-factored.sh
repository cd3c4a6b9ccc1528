#!/usr/bin/env bash
# audit-factored.sh -- the privacy audit of factored batches: the
# AP's attacks (known plaintext, PCA, FastICA, on real traffic and on dummy
# rows, norms and Gram) on the audit's data sets, with whole rows (what the
# AP saw before protocol 6), the halves it could already compute by
# differencing candidates, and factored (U(u) and I(i) apart), side by side
# from one run of `o3m-eval audit --factored` per table.
#
#   eval/bench/audit-factored.sh [BINS [DATA]]
#
# BINS is the binaries' folder (build/bin), DATA the shared data directory
# (../shared/data, see its README). It prints, per table, mode and attack,
# "whole | differenced | factored" as mean (min-max) over the audited
# party's columns of |corr| true vs recovered: known plaintext at n = 1,
# n = d_j (the audited party's columns) and n = d - d_0 (every PP's), the
# other attacks at their largest N, and the norms / Gram correlations of
# each half. A few tens of seconds; a measurement, not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=${1:-build/bin}
data=${2:-../shared/data}
out=$(mktemp -d /tmp/o3m-audit-factored.XXXXXX)
trap 'rm -rf "$out"' EXIT

# name|options of o3m-eval audit
cases=(
  "bank p1|--bank --dims 10,20,20 --party 1"
  "obd p1 (user side)|--dataset obd --data-dir $data --dims 32,32,28 --party 1"
  "obd p2 (item side)|--dataset obd --data-dir $data --dims 32,32,28 --party 2"
  "news p1|--dataset news --data-dir $data --dims 4,3,3 --party 1"
)
printf '%-20s %-10s %-12s  %-20s  %-20s  %-20s\n' table mode attack "whole rows" differenced factored
for c in "${cases[@]}"; do
  name=${c%%|*}
  # shellcheck disable=SC2086
  "$bins/o3m-eval" audit ${c#*|} --factored --no-plots --out "$out/run" >"$out/log" 2>&1 ||
    { echo "$name: o3m-eval audit failed:"; cat "$out/log"; exit 1; }
  awk -v name="$name" '
    /^audit of party/ { dj = $5; D = $NF }
    /^== factored/ { f = 1; print "  " name ": " $0; next }
    !f { next }
    /^your columns/ { print "  " name ": " $0 }
    /^-- mode/ { mode = $3; next }
    /^norms \/ Gram: whole rows/ { w = $0; sub(/^norms \/ Gram: whole rows /, "", w); next }
    /^  (differenced|factored), / {
      v = $1; h = $2; x = $0
      sub(/,$/, "", v); sub(/^ *[a-z]+, [a-z]+ half: /, "", x)
      g[v, h] = x; halves[h] = 1
      next
    }
    /^attack / {
      for (h in halves)
        printf "%-20s %-10s %-12s  %-20s  %-20s  %-20s\n", name, mode, "norms/Gram " h, w,
               g["differenced", h], g["factored", h]
      delete halves
      next
    }
    $1 == "kp" && ($2 == 1 || $2 == dj || $2 == D) {
      printf "%-20s %-10s %-12s  %-20s  %-20s  %-20s\n", name, mode, "kp n=" $2, $3 " " $4,
             $5 " " $6, $7 " " $8
    }
    $1 ~ /^(pca|ica|dummy-pca|dummy-ica)$/ { last[mode, $1] = $0; order[mode] = 1 }
    /^$/ && mode != "" && !done[mode] {
      split("pca ica dummy-pca dummy-ica", s, " ")
      for (i = 1; i <= 4; i++) if ((mode, s[i]) in last) {
        split(last[mode, s[i]], t, " ")
        printf "%-20s %-10s %-12s  %-20s  %-20s  %-20s\n", name, mode, s[i] " N=" t[2],
               t[3] " " t[4], t[5] " " t[6], t[7] " " t[8]
      }
      done[mode] = 1
    }
  ' "$out/log"
done
