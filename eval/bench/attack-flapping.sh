#!/usr/bin/env bash
# attack-flapping.sh -- a passive party whose replies name a new item epoch
# every time (a buggy or hostile member), replayed against one or more
# builds side by side in one run.
#
#   eval/bench/attack-flapping.sh [BIN_DIR...]
#
# BIN_DIRs default to O3M_ATTACK_BINS, else build/bin (for example
# "OLD/build/bin build/bin": a build without the epoch watch, then this
# one). Each folder gets a fresh local federation with mutual TLS on
# loopback (M = 5 parties of 20 columns, d = 100, 4 passive parties,
# secure aggregation, max_candidates 1000), twice:
#  alone:    every party honest;
#  flapping: the first passive party's address is taken by flap_party
#            (tests/flap_party.c), which forwards every call to the real
#            party listening elsewhere and names a new item epoch in each
#            MaskBatch reply.
# In each, the honest client runs o3m-bench-load (K = 20 of 1000 items,
# 8 calls in flight, HONEST_S seconds), then a K = 1000 client (1 call in
# flight, BIG_S seconds). Figures: the honest client's decisions/s, p50
# and p99 and errors, its p50 beside the flapping party over its p50 alone
# (the target is at most 2x), the K = 1000 client's answers, and what
# flap_party was asked: MaskBatch calls, item ids received and the most
# times one item id was (each candidate list at most once per epoch it
# named). The AP's degraded rounds (o3m-cli stats) say whether the party
# was held out. The load and flap_party come from O3M_LOAD_TOOL (default
# build/bin), the daemons from each BIN_DIR. Run it alone on the machine:
# the figures are latencies.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/federation-lib.sh

HONEST_S=${HONEST_S:-10}
BIG_S=${BIG_S:-10}
bins=("$@")
[ ${#bins[@]} -gt 0 ] || read -ra bins <<<"${O3M_ATTACK_BINS:-build/bin}"

tool=$(cd "${O3M_LOAD_TOOL:-build/bin}" && pwd)
[ -x "$tool/flap_party" ] || { echo "attack-flapping: $tool/flap_party is not built" >&2; exit 1; }
work=$(mktemp -d /tmp/o3m-flap.XXXXXX)
trap 'fed_down; rm -rf "$work"' EXIT

# A federation from the binaries in $1; with $2 = flap, flap_party at the
# first passive party's address.
flap_up() {
  local bin=$1 mode=$2 p first real addr
  rm -rf "${work:?}"/*
  fed_gen "$work" "$bin" --parties 20,20,20,20,20 --users 1000 --items 1000 \
    --max-candidates 1000 --aggregation secure
  fed_start "$work" "$bin" "$FED_PMG" o3m-pmg
  first=${FED_PASSIVE%%[[:space:]]*}
  for p in $FED_PASSIVE; do
    if [ "$mode" = flap ] && [ "$p" = "$first" ]; then
      real=127.0.0.1:$(fed_free_port)
      FED_PASSIVE_ARGS="--listen $real" fed_start "$work" "$bin" "$p" o3m-passive
    else
      fed_start "$work" "$bin" "$p" o3m-passive
    fi
  done
  if [ "$mode" = flap ]; then
    addr=$(awk -v s="[party $first]" '$0 == s {f = 1; next} /^\[/ {f = 0}
                                      f && $1 == "address" {print $3}' "$FED_CONF")
    "$tool/flap_party" --config "$FED_CONF" --party "$first" --listen "$addr" \
      --upstream "$real" --counts "$work/flap.counts" --ready-file "$work/flap.ready" \
      2>>"$work/flap.log" &
    FED_PIDS+=($!)
    FED_NAMES+=(flap)
    fed_wait "$work" flap
  fi
  fed_start "$work" "$bin" "$FED_ACTIVE" o3m-active
  for p in "$FED_PMG" $FED_PASSIVE "$FED_ACTIVE"; do fed_wait "$work" "$p"; done
}

load() {
  "$tool/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" --users 1000 --items 1000 "$@"
}

# decisions/s p50 p99 errors of o3m-bench-load's output in $1.
figures() {
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 {d = $2; p50 = $3; p99 = $4; err = $8}
       END {printf "%s %s %s %s\n", d, p50, p99, err}' "$1"
}

for b in "${bins[@]}"; do
  bin=$(cd "$b" && pwd)
  echo "== binaries $bin"
  for mode in alone flap; do
    flap_up "$bin" "$mode"
    load --K 20 --concurrency 8 --seconds "$HONEST_S" >"$work/$mode.out" 2>&1 || true
    load --K 1000 --concurrency 1 --warmup 0 --seconds "$BIG_S" >"$work/$mode-big.out" 2>&1 || true
    degraded=$("$bin/o3m-cli" --config "$FED_CONF" --as client stats 2>/dev/null |
      sed -n 's/^degraded_rounds=//p' || true)
    fed_down
    read -r d p50 p99 err <<<"$(figures "$work/$mode.out")"
    read -r bd _ _ berr <<<"$(figures "$work/$mode-big.out")"
    eval "p50_$mode=\$p50"
    printf '  %-8s honest K = 20: %8s decisions/s  p50 %8s ms  p99 %8s ms  errors %s;' \
      "$mode" "$d" "$p50" "$p99" "$err"
    printf ' K = 1000: %s decisions/s, errors %s; AP degraded rounds %s\n' "$bd" "$berr" \
      "${degraded:-?}"
    if [ "$mode" = flap ]; then
      if [ -s "$work/flap.counts" ]; then
        printf '  flap_party: %s\n' "$(tr '\n' ' ' <"$work/flap.counts")"
      else
        echo "  flap_party: no counts (see $work/flap.log)"
      fi
    fi
  done
  awk -v a="$p50_alone" -v b="$p50_flap" \
    'BEGIN {printf "  honest p50 beside the flapping party / alone: %.2fx\n", (a > 0 ? b / a : 0)}'
  echo
done
