#!/usr/bin/env bash
# Starts a local federation with mutual TLS on loopback (M = 5 parties of 20
# columns, d = 100) and drives its active participant with o3m-bench-load at
# concurrency 1, 8 and 32 with K = 20 candidates. Extra arguments go to
# o3m-bench-load (for example --seconds 10 --with-reward).
#
# O3M_AGGREGATION=secure|per-party|both (default both) picks the
# federation's [federation] aggregation; with both, the two modes run one
# after the other in this one run (secure first), each on a fresh
# federation, for the side-by-side figures of issue 11.
#
# O3M_METRICS=off|on|both (default off): whether every daemon serves its
# metrics port (--metrics-listen 127.0.0.1:0, README "Metrics and health");
# with both, each aggregation mode runs without and then with it, on fresh
# federations, for the metrics' overhead side by side (issue 13).
set -euo pipefail
cd "$(dirname "$0")/../.."
. eval/bench/bench-lib.sh
# utime + stime (clock ticks) of every running passive daemon, summed.
pp_cpu_ticks() {
  local i sum=0 f pp
  pp=" $(echo $FED_PASSIVE) " # one line, names separated by spaces
  for i in "${!FED_NAMES[@]}"; do
    case "$pp" in *" ${FED_NAMES[$i]} "*) ;; *) continue ;; esac
    f=$(sed 's/.*) //' "/proc/${FED_PIDS[$i]}/stat")
    sum=$((sum + $(echo "$f" | awk '{print $12 + $13}')))
  done
  echo "$sum"
}

modes="${O3M_AGGREGATION:-both}"
[ "$modes" = both ] && modes="secure per-party"
metrics="${O3M_METRICS:-off}"
[ "$metrics" = both ] && metrics="off on"
for mode in $modes; do
 for met in $metrics; do
  # federation-lib.sh asks fed_extra_args for each daemon's extra options.
  if [ "$met" = on ]; then fed_extra_args() { echo "--metrics-listen 127.0.0.1:0"; }
  else unset -f fed_extra_args; fi
  echo "aggregation $mode, metrics $met"
  bench_fed_up load --aggregation "$mode"
  pp_before=$(pp_cpu_ticks)
  "$bin/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" --K 20 --concurrency 1,8,32 --users 1000 --items 200 "$@"
  pp_after=$(pp_cpu_ticks)
  rounds=$("$bin/o3m-cli" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" stats | sed -n 's/^rounds=//p')
  # The passive daemons' CPU time (user + system, /proc/PID/stat) over every
  # level, warm-ups included, per decision the AP issued: the PPs' whole cost
  # of a round (lookup, masking, gRPC, TLS), summed over the 4 of them.
  awk -v t=$((pp_after - pp_before)) -v hz="$(getconf CLK_TCK)" -v n="$rounds" -v m="$mode" \
    'BEGIN { printf "passive daemons, %s: %.1f CPU s for %d decisions = %.1f us per decision (4 PPs)\n", m, t / hz, n, 1e6 * t / hz / n }'
  fed_down
  echo
 done
done
