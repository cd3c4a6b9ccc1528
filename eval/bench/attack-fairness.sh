#!/usr/bin/env bash
# attack-fairness.sh -- one client failing others' rounds and evicting their
# decisions (what one authorized client can do to another), replayed against two builds side by side in
# one run.
#
#   eval/bench/attack-fairness.sh [BIN_DIR...]
#
# BIN_DIRs default to O3M_ATTACK_BINS, else build/bin (for example
# "OLD/build/bin build/bin": a build without per-client fairness, then this one). Each
# folder gets a fresh
# local federation with mutual TLS on loopback (M = 5 parties of 20
# columns, d = 100, 4 passive parties, secure aggregation, max_candidates
# 1000, a state_dir for the AP, on each of AP_THREADS serving threads,
# default "1 3"), with two clients, each with its own
# certificate: "client" (the honest one) and "flood". For each folder:
#
#  attack 3: the honest client alone (o3m-bench-load, K = 20, 8 calls in
#    flight, HONEST_S seconds), then the same beside the flood: K = 1000
#    candidates with 128-byte ids, 16 calls in flight. Figures: the honest
#    client's decisions/s, p50, p99, DEADLINE_EXCEEDED, and its p99 over
#    the p99 alone (the target is 0 DEADLINE_EXCEEDED and at most 2x).
#    FLOODS (default "cached fresh") names the flood's forms, each run
#    beside the honest client in turn: cached, its ids drawn from the 1000
#    items (the AP soon has them all in its item cache); fresh, ids new
#    every round (--fresh-ids: every passive party computes every item
#    part of every round, and the AP's cost model and each client's budget
#    of uncached ids, [policy] client_uncached_rate, are what hold it).
#  attack 4: the honest client opens HONEST_OPEN decisions and keeps them
#    open; the flood then makes PENDING_CAP + 10% small Recommends (K = 1),
#    more than the whole pending table (pending_capacity = PENDING_CAP, a
#    tenth of the default so that the run stays short: the same attack as
#    104,000 Recommends against 100,000 entries); then the honest client
#    rewards its decisions. Figure: how many are NOT_FOUND (evicted); the
#    target is 0.
# ATTACKS (default "3 4") names the attacks to run. The load
# (o3m-bench-load, which needs --id-bytes, --fresh-ids, --calls and
# --reward-delay) always comes from O3M_LOAD_TOOL (default build/bin), the
# daemons from each BIN_DIR. Run it alone on the machine: the figures are
# latencies.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/federation-lib.sh

HONEST_S=${HONEST_S:-10}
AP_THREADS_LIST=${AP_THREADS:-"1 3"}
PP_THREADS=${PP_THREADS:-1}
PENDING_CAP=${PENDING_CAP:-10000}
HONEST_OPEN=${HONEST_OPEN:-1000}
FLOODS=${FLOODS:-"cached fresh"}
ATTACKS=${ATTACKS:-"3 4"}
bins=("$@")
[ ${#bins[@]} -gt 0 ] || read -ra bins <<<"${O3M_ATTACK_BINS:-build/bin}"

tool=$(cd "${O3M_LOAD_TOOL:-build/bin}" && pwd)
work=$(mktemp -d /tmp/o3m-fair.XXXXXX)
trap 'fed_down; rm -rf "$work"' EXIT

# A federation from the binaries in $1 with the flood client added.
fair_up() {
  local bin=$1 p
  rm -rf "${work:?}"/*
  FED_AP_STATE=1 fed_gen "$work" "$bin" --parties 20,20,20,20,20 --users 1000 --items 1000 \
    --max-candidates 1000 --aggregation secure
  scripts/make-certs.sh "$work/certs" flood >/dev/null
  printf '\n[client flood]\ncert = certs/flood.pem\nkey = certs/flood.key\n' >>"$FED_CONF"
  sed -i "s/^pending_capacity = .*//; /^\[policy\]\$/a pending_capacity = $PENDING_CAP" "$FED_CONF"
  fed_start "$work" "$bin" "$FED_PMG" o3m-pmg
  for p in $FED_PASSIVE; do
    FED_PASSIVE_ARGS="--threads $PP_THREADS" fed_start "$work" "$bin" "$p" o3m-passive
  done
  FED_ACTIVE_ARGS="--threads $AP_THREADS" fed_start "$work" "$bin" "$FED_ACTIVE" o3m-active
  for p in "$FED_PMG" $FED_PASSIVE "$FED_ACTIVE"; do fed_wait "$work" "$p"; done
}

# o3m-bench-load as client $1 (client or flood), more options after.
load() {
  local who=$1
  shift
  "$tool/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/$who.pem" \
    --key "$work/certs/$who.key" --users 1000 "$@"
}

# The figures of o3m-bench-load's output in $1: decisions/s p50 p99 errors
# deadline.
figures() {
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 {d = $2; p50 = $3; p99 = $4; err = $8}
       /DEADLINE_EXCEEDED/ {dl = $4}
       END {printf "%s %s %s %s %s\n", d, p50, p99, err, dl + 0}' "$1"
}

for AP_THREADS in $AP_THREADS_LIST; do
for b in "${bins[@]}"; do
  bin=$(cd "$b" && pwd)
  echo "== binaries $bin, AP on $AP_THREADS thread(s)"
  if [[ " $ATTACKS " == *" 3 "* ]]; then
  fair_up "$bin"
  load client --K 20 --items 1000 --concurrency 8 --seconds "$HONEST_S" >"$work/alone.out"
  read -r d0 p50_0 p99_0 e0 dl0 <<<"$(figures "$work/alone.out")"
  echo "attack 3 (honest: K = 20, 8 in flight; flood: K = 1000, 128-byte ids, 16 in flight)"
  printf '  honest alone:             %8s decisions/s  p50 %8s ms  p99 %8s ms  errors %s (DEADLINE_EXCEEDED %s)\n' \
    "$d0" "$p50_0" "$p99_0" "$e0" "$dl0"
  for form in $FLOODS; do
    fresh=()
    [ "$form" = fresh ] && fresh=(--fresh-ids)
    load flood --K 1000 --id-bytes 128 "${fresh[@]}" --items 1000 --concurrency 16 --warmup 0 \
      --seconds $((HONEST_S + 4)) >"$work/flood3.out" 2>&1 &
    flood=$!
    sleep 2
    load client --K 20 --items 1000 --concurrency 8 --seconds "$HONEST_S" \
      >"$work/beside.out" 2>"$work/beside.err" || true
    wait "$flood" || true
    read -r d1 p50_1 p99_1 e1 dl1 <<<"$(figures "$work/beside.out")"
    read -r fd _ _ fe _ <<<"$(figures "$work/flood3.out")"
    printf '  honest with %-6s flood: %8s decisions/s  p50 %8s ms  p99 %8s ms  errors %s (DEADLINE_EXCEEDED %s)\n' \
      "$form" "$d1" "$p50_1" "$p99_1" "$e1" "$dl1"
    awk -v a="$p99_0" -v b="$p99_1" -v f="$form" \
      'BEGIN {printf "  honest p99 with %s flood / alone: %.2fx\n", f, (a > 0 ? b / a : 0)}'
    printf '  %s flood: %s decisions/s answered, %s errors\n' "$form" "$fd" "$fe"
    # One last error of each kind, if any.
    sed -n 's/^ *worker [0-9]*: last error /  honest client error: /p' "$work/beside.err" | sort -u | head -3
    sed -n 's/^ *worker [0-9]*: last error /  flood error: /p' "$work/flood3.out" | cut -c1-200 | sort -u | head -3
    # What the AP counted: item ids asked of the parties, rounds that waited for the budget.
    "$bin/o3m-cli" --config "$FED_CONF" --cert "$work/certs/client.pem" --key "$work/certs/client.key" \
      stats 2>/dev/null | grep -E '^(rounds|item_cache_misses|uncached_ids|over_budget_waits)=' | tr '\n' ' ' |
      sed 's/^/  AP stats: /; s/$/\n/' || true
  done
  fed_down
  fi

  if [[ " $ATTACKS " == *" 4 "* ]]; then
  fair_up "$bin"
  load client --K 20 --items 1000 --concurrency 4 --warmup 0 --seconds 2 --calls "$HONEST_OPEN" \
    --reward-delay 25 >"$work/open.out" 2>"$work/open.err" &
  honest=$!
  sleep 4
  load flood --K 1 --items 1000 --concurrency 16 --warmup 0 --seconds 20 \
    --calls $((PENDING_CAP + PENDING_CAP / 10)) >"$work/flood4.out" 2>&1 || true
  wait "$honest" || true
  read -r fd _ _ fe _ <<<"$(figures "$work/flood4.out")"
  echo "attack 4 (pending_capacity = $PENDING_CAP; the flood: $((PENDING_CAP + PENDING_CAP / 10)) Recommends of K = 1)"
  printf '  flood: %s decisions/s over 20 s, %s errors\n' "$fd" "$fe"
  sed -n 's/^ *rewards /  honest client rewards /p' "$work/open.out"
  fed_down
  fi
  echo
done
done
