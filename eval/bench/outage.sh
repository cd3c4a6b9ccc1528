#!/usr/bin/env bash
# outage.sh -- a department's outage under load,
# replayed against two builds side by side in one run.
#
#   eval/bench/outage.sh [BIN_DIR...]
#
# BIN_DIRs default to O3M_OUTAGE_BINS, else "/work/base-bin build/bin" (the
# build before the change, then this worktree's). Each folder gets a fresh
# local federation with mutual TLS on loopback (M = 5 parties of 20
# columns, d = 100, 4 passive parties, secure aggregation, the PMG with
# --keep-mask so that a restarted party gets its block again). Then, with
# o3m-bench-load at LOAD_C calls in flight (default 8), K = 20, a Reward
# after every Recommend:
#   before:  BEFORE_S seconds (default 3) with every party up;
#   outage:  one passive party killed with SIGKILL, OUTAGE_S seconds (10)
#            of load while it is down;
#   after:   the party restarted while the load goes on (AFTER_S, 6 s); an
#            o3m-cli recommend every 50 ms from its ready file on says when
#            the answers are federated again (not degraded).
# Figures per folder: errors to the clients and p99 in each window; how
# long after the restarted party's ready file the first federated answer
# came; and the rewards' bookkeeping from the AP's Stats (every Recommend
# of the run, the probes' included, is rewarded): updates of the federated
# model + degraded rounds = rewards of the local model = rounds, pending 0.
# The targets: 0 errors, p99 during the outage at most 5 ms, federated
# again within 2 s of the ready file.
# O3M_OUTAGE_KILL_AP=1: the AP gets a state_dir (durable rewards), and at
# the end it is killed with SIGKILL and restarted from it; the figures
# then say whether both models kept every acknowledged reward (the
# federated model's and the local model's update counts before the kill
# and after the restart; a build whose local model lives in memory starts
# it at 0). Compare with O3M_OUTAGE_BINS="/work/cur-bin build/bin".
# The load (o3m-bench-load) and o3m-cli always come from O3M_LOAD_TOOL
# (default build/bin), the daemons from each BIN_DIR. Run it alone on the
# machine: the figures are latencies.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/federation-lib.sh

BEFORE_S=${BEFORE_S:-3}
OUTAGE_S=${OUTAGE_S:-10}
AFTER_S=${AFTER_S:-6}
LOAD_C=${LOAD_C:-8}
bins=("$@")
[ ${#bins[@]} -gt 0 ] || read -ra bins <<<"${O3M_OUTAGE_BINS:-/work/base-bin build/bin}"

tool=$(cd "${O3M_LOAD_TOOL:-build/bin}" && pwd)
KILL_AP=${O3M_OUTAGE_KILL_AP:-0}
[ "$KILL_AP" = 1 ] && export FED_AP_STATE=1
work=$(mktemp -d /tmp/o3m-outage.XXXXXX)
trap 'fed_down; rm -rf "$work"' EXIT

# The PMG keeps Q, so that the restarted party is served its block again.
fed_extra_args() { [ "$1" = "$FED_PMG" ] && echo --keep-mask || true; }

load() {
  "$tool/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" --users 1000 --K 20 --concurrency "$LOAD_C" \
    --with-reward --warmup 0 "$@"
}

cli() {
  "$tool/o3m-cli" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" "$@"
}

# "p99 errors" of o3m-bench-load's output in $1.
figures() {
  awk '$1 ~ /^[0-9]+$/ && NF >= 6 {p99 = $4; err = (NF >= 9 ? $8 : $6)}
       END {printf "%s %s\n", p99, err}' "$1"
}

# The index of party $1 in FED_NAMES/FED_PIDS.
index_of() {
  local i
  for i in "${!FED_NAMES[@]}"; do [ "${FED_NAMES[$i]}" != "$1" ] || echo "$i"; done | tail -1
}

# A probe: one Recommend, rewarded; prints "degraded" or "federated" (or
# "error").
probe() {
  local out id
  if ! out=$(cli recommend --user u1 --items i1,i2,i3 2>&1); then
    echo error
    return
  fi
  id=$(echo "$out" | sed -n 's/^decision=\([0-9]*\).*/\1/p')
  cli reward --decision "$id" --reward 1 >/dev/null 2>&1 || true
  case "$out" in *degraded=*) echo degraded ;; *) echo federated ;; esac
}

for b in "${bins[@]}"; do
  bin=$(cd "$b" && pwd)
  echo "== binaries $bin"
  rm -rf "${work:?}"/*
  FED_PIDS=()
  FED_NAMES=()
  fed_up "$work" "$bin" --parties 20,20,20,20,20 --users 1000 --items 200 --aggregation secure
  victim=$(echo $FED_PASSIVE | awk '{print $NF}')
  load --seconds "$BEFORE_S" >"$work/before.out" 2>"$work/before.err" || true

  i=$(index_of "$victim")
  kill -9 "${FED_PIDS[$i]}"
  wait "${FED_PIDS[$i]}" 2>/dev/null || true
  load --seconds "$OUTAGE_S" >"$work/outage.out" 2>"$work/outage.err" || true

  load --seconds "$AFTER_S" >"$work/after.out" 2>"$work/after.err" &
  after=$!
  sleep 0.5
  fed_start "$work" "$bin" "$victim" o3m-passive
  fed_wait "$work" "$victim"
  t0=$(date +%s.%N)
  back=never
  while awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {exit !(b - a < 10)}'; do
    if [ "$(probe)" = federated ]; then
      back=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.3f", b - a}')
      break
    fi
    sleep 0.05
  done
  wait "$after" || true

  read -r p99_0 e0 <<<"$(figures "$work/before.out")"
  read -r p99_1 e1 <<<"$(figures "$work/outage.out")"
  read -r p99_2 e2 <<<"$(figures "$work/after.out")"
  echo "one passive party ($victim) killed with SIGKILL for ${OUTAGE_S} s under $LOAD_C clients (K = 20, with rewards)"
  printf '  before: p99 %8s ms  errors %s\n' "$p99_0" "$e0"
  printf '  outage: p99 %8s ms  errors %s\n' "$p99_1" "$e1"
  printf '  after:  p99 %8s ms  errors %s\n' "$p99_2" "$e2"
  echo "  federated answers again $back s after $victim's ready file"
  sed -n 's/^ *worker [0-9]*: last error /  client error: /p' "$work"/*.err | cut -c1-160 | sort -u | head -3
  st=$(cli stats)
  v() { echo "$st" | sed -n "s/^$1=//p"; }
  rounds=$(v rounds) updates=$(v updates) pending=$(v pending) deg=$(v degraded_rounds)
  local_u=$(v local_updates)
  # A build without the local model counts no local updates at all.
  if [ -n "$deg" ] && [ "$local_u" != 0 ]; then
    echo "  rewards: rounds $rounds, federated updates $updates + degraded rounds $deg = $((updates + deg)); local model updates $local_u; pending $pending"
    if [ $((updates + deg)) -eq "$rounds" ] && [ "$local_u" -eq "$rounds" ] && [ "$pending" -eq 0 ]; then
      echo "  every acknowledged reward applied once to the right model(s): yes"
    else
      echo "  every acknowledged reward applied once to the right model(s): NO"
    fi
  else
    echo "  rewards: rounds $rounds, federated updates $updates, pending $pending (no local model)"
  fi
  if [ "$KILL_AP" = 1 ]; then
    i=$(index_of "$FED_ACTIVE")
    kill -9 "${FED_PIDS[$i]}"
    wait "${FED_PIDS[$i]}" 2>/dev/null || true
    fed_start "$work" "$bin" "$FED_ACTIVE" o3m-active
    fed_wait "$work" "$FED_ACTIVE"
    st=$(cli stats)
    updates2=$(v updates) local2=$(v local_updates)
    echo "  AP killed with SIGKILL and restarted: federated updates $updates -> $updates2, local model updates ${local_u:-none} -> ${local2:-none}"
    if [ "$updates2" = "$updates" ] && [ -n "$local_u" ] && [ "$local2" = "$local_u" ]; then
      echo "  both models kept every acknowledged reward across the kill -9: yes"
    else
      echo "  both models kept every acknowledged reward across the kill -9: NO"
    fi
  fi
  fed_down
  echo
done
