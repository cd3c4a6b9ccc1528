#!/usr/bin/env bash
# reload-under-load.sh [--fifo] [BIN] -- o3m-bench-load (c = 8, K = 10)
# against a small local federation (tests/with-federation.sh: the AP "shop"
# with tables of its own, the passive party "bank") while its tables are
# reloaded. BIN defaults to build/bin. Not a timed test; a check an
# operator can repeat.
#
#   (default)  `o3m-cli reload` swaps the tables of both parties every
#              0.2 s for 6 s. Prints how many reloads were answered and
#              the load's table: its errors column must be 0.
#   --fifo     the attack form (run-attacks.sh reload): bank's table path
#              becomes a FIFO with no writer, then bank is told to reload
#              (`o3m-cli reload` with a 10 s limit, and SIGHUP) while the
#              load runs for 8 s. Prints the Reload's answer, the AP's
#              degraded rounds during the load (its Stats, before and
#              after), the load's table, bank's VmRSS, and how long bank
#              took to end on SIGTERM (given up after 10 s: "ignored").
#              A defended build refuses the FIFO at once ("is a FIFO"),
#              degrades no round and ends within a second.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" != "--inside" ]; then
  mode=swap
  if [ "${1:-}" = "--fifo" ]; then
    mode=fifo
    shift
  fi
  bin=$(cd "${1:-build/bin}" && pwd)
  exec tests/with-federation.sh "$bin" -- "$0" --inside "$bin" "$mode"
fi
bin=$2
mode=$3
conf=$O3M_FED_CONF
certs=$(dirname "$conf")/certs
cli=("$bin/o3m-cli" --config "$conf")
out=$(mktemp)
seconds=6
[ "$mode" = fifo ] && seconds=8
"$bin/o3m-bench-load" --config "$conf" --cert "$certs/$O3M_FED_CLIENT.pem" \
  --key "$certs/$O3M_FED_CLIENT.key" --K 10 --items 10 --users 20 --concurrency 8 \
  --seconds "$seconds" --warmup 1 >"$out" 2>&1 &
load=$!
sleep 1.5

if [ "$mode" = swap ]; then
  ok=0 failed=0
  while kill -0 "$load" 2>/dev/null; do
    for party in bank shop; do
      if "${cli[@]}" --as "$party" reload >/dev/null; then
        ok=$((ok + 1))
      else
        failed=$((failed + 1))
      fi
    done
    sleep 0.2
  done
  rc=0
  wait "$load" || rc=$?
  echo "reloads during the load: $ok answered, $failed failed"
  cat "$out"
  rm -f "$out"
  exit "$rc"
fi

# --fifo: bank's first table path, as the config names it (relative to the
# config's folder).
degraded() { "${cli[@]}" --as "$O3M_FED_CLIENT" stats | awk -F= '$1 == "degraded_rounds" {print $2}'; }
table=$(awk '/^\[party bank\]/{p = 1; next} /^\[/{p = 0} p && $1 ~ /^(user|item)_table$/ {print $3; exit}' "$conf")
case "$table" in /*) ;; *) table=$(dirname "$conf")/$table ;; esac
bank=$(pgrep -f -- "--config $conf --party bank " | head -1)
before=$(degraded)
mv "$table" "$table.orig"
mkfifo "$table"
t0=$(date +%s.%N)
answer=$(timeout 10 "${cli[@]}" --as bank reload 2>&1) || answer="(exit $?) $answer"
t1=$(date +%s.%N)
kill -HUP "$bank"
rc=0
wait "$load" || rc=$?
after=$(degraded 2>/dev/null || echo "?")
rss=$(awk '$1 == "VmRSS:" {print $2 " " $3}' "/proc/$bank/status" 2>/dev/null || echo "?")
echo "FIFO reload: answered in $(echo "$t1 - $t0" | bc) s: ${answer//$'\n'/ }"
if [[ "$after" =~ ^[0-9]+$ ]]; then moved=$((after - before)); else moved="?"; fi
echo "degraded rounds during the load: $moved (AP Stats, $before before, $after after)"
echo "bank's VmRSS after: $rss"
cat "$out"
rm -f "$out"
t0=$(date +%s.%N)
kill -TERM "$bank"
ended=ignored
for _ in $(seq 1 100); do
  if ! kill -0 "$bank" 2>/dev/null; then
    ended="ended in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"
    break
  fi
  sleep 0.1
done
echo "bank on SIGTERM: $ended"
if [ "$ended" = ignored ]; then kill -KILL "$bank" 2>/dev/null || true; fi
rm -f "$table"
mv "$table.orig" "$table"
exit "$rc"
