#!/usr/bin/env bash
# Soak test: a steady load through the full federation for a fixed time,
# reporting throughput and errors per interval and the resident memory of
# every daemon over time.
#
#   eval/bench/soak.sh [--minutes 10] [--interval 30] [--concurrency 4]
#
# It starts a federation with mutual TLS (M = 5, d = 100) and runs
# o3m-bench-load in back-to-back intervals (Recommend + Reward, K = 20),
# sampling VmRSS of each daemon after every interval. RSS growth is measured
# from the end of the warm-up (the first two intervals) to the end; the
# target is <= 5% for every daemon, and 0 errors.
set -euo pipefail
cd "$(dirname "$0")/../.."
. eval/bench/bench-lib.sh
minutes=10 interval=30 conc=4
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --concurrency) conc=$2; shift 2 ;;
    *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
bench_fed_up soak

rss() { awk '/^VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
n=$(( minutes * 60 / interval ))
[ "$n" -ge 3 ] || n=3
echo "soak: $n intervals of $interval s at concurrency $conc (Recommend+Reward, K = 20)"
printf '%8s %12s %8s' "t (s)" "decisions/s" "errors"
for name in "${FED_NAMES[@]}"; do printf ' %10s' "$name"; done
printf '   (VmRSS kB)\n'
declare -A first last
total_err=0
for i in $(seq 1 "$n"); do
  line=$("$bin/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" --K 20 --concurrency "$conc" --seconds "$interval" \
    --warmup 0 --users 1000 --items 200 --with-reward 2>>"$work/soak-client.log" |
    awk -v c="$conc" '$1 == c' || true)
  rate=$(echo "$line" | awk '{print $2}')
  err=$(echo "$line" | awk '{print $8}')
  total_err=$(( total_err + ${err:-1} ))
  printf '%8d %12s %8s' $(( i * interval )) "${rate:-?}" "${err:-?}"
  for k in "${!FED_PIDS[@]}"; do
    r=$(rss "${FED_PIDS[$k]}")
    printf ' %10s' "$r"
    [ "$i" -eq 2 ] && first[$k]=$r
    last[$k]=$r
  done
  printf '\n'
done
echo
status=0
for k in "${!FED_PIDS[@]}"; do
  f=${first[$k]:-0} l=${last[$k]:-0}
  growth=$(awk -v f="$f" -v l="$l" 'BEGIN{ if (f > 0) printf "%.1f", 100*(l-f)/f; else print "nan" }')
  ok=$(awk -v g="$growth" 'BEGIN{ print (g != "nan" && g <= 5.0) ? "ok" : "OVER" }')
  printf 'RSS growth after warm-up  %-8s %8s kB -> %8s kB  %6s%%  %s\n' "${FED_NAMES[$k]}" "$f" "$l" "$growth" "$ok"
  [ "$ok" = ok ] || status=1
done
echo "errors: $total_err"
[ "$total_err" -eq 0 ] || status=1
exit $status
