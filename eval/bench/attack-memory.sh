#!/usr/bin/env bash
# attack-memory.sh -- memory before authorization, before
# and after, in one run.
#
#   O3M_ATTACK_BINS="OLD/build/bin build/bin" eval/bench/attack-memory.sh
#
# For each binaries' folder of O3M_ATTACK_BINS (default: build/bin) it starts
# a local federation with mutual TLS on loopback (M = 5 parties of 20
# columns, d = 100, 1000 users, 200 items, max_candidates 1000: the largest
# Recommend is about 320 KB, the largest MaskBatch about 2.8 MB) and a
# second client "attacker" (scripts/attack-lib.sh), then:
# for each form of the attack (a-ap, a-pp, b-ap, c-ap; see
# scripts/attack-lib.sh):
#   1. the honest client ("client") alone: o3m-bench-load at concurrency
#      O3M_ATTACK_C (8), K = 20, for O3M_ATTACK_SECONDS (5) s: decisions/s
#      and p99;
#   2. right after, the attack with h2flood, held for the run plus 3 s, and
#      the same honest run meanwhile: the target daemon's RSS before (idle)
#      and at its peak (sampled every 0.25 s), what the server answered the
#      flood, and the honest decisions/s and p99 against step 1;
#   steps 1 and 2 O3M_ATTACK_REPEAT (5) times in turn; the figures of each
#   side are the medians of its runs (every run's p99 is printed too), the
#   RSS peak the highest of all.
# The table's errors column is "alone/under attack", summed over the runs.
# The target: RSS within +50 MB of idle, honest decisions/s and p99 within
# 20% of the run alone. h2flood comes from O3M_FLOOD_BIN (default build/bin,
# built there if missing), whichever daemons are measured. Run it alone on
# the machine: the flood, the daemons and the honest client share its
# cores, so the honest figures under attack also measure the CPU the
# attacker's TLS takes.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/federation-lib.sh
. scripts/attack-lib.sh

bins=${O3M_ATTACK_BINS:-build/bin}
SECS=${O3M_ATTACK_SECONDS:-5}
REPEAT=${O3M_ATTACK_REPEAT:-5}

# The median of its numeric arguments (the lower one of the middle two).
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
flood_bin=${O3M_FLOOD_BIN:-build/bin}
if [ ! -x "$flood_bin/h2flood" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j"$(nproc)" --target h2flood >/dev/null
fi
flood_bin=$(cd "$flood_bin" && pwd)

work=$(mktemp -d /tmp/o3m-attack.XXXXXX)
trap 'fed_down; rm -rf "$work"' EXIT


results=()
for b in $bins; do
  bin=$(cd "$b" && pwd)
  rm -rf "${work:?}"/*
  echo "== binaries $bin"
  attack_bench_up "$work" "$bin"
  honest=("${ATTACK_HONEST[@]}")
  for form in a-ap a-pp b-ap c-ap; do
    # REPEAT pairs, each run alone right before the one under attack: the
    # machine's own spread between two honest runs is as large as what
    # the attack was measured to cost, so each side is the median of its
    # REPEAT runs, and the pairs alternate so that a drift of the machine's
    # other load falls on both.
    a_dps=() a_p99=() x_dps=() x_p99=()
    err0=0 errs=0 peak=0 idle=0
    for ((i = 0; i < REPEAT; i++)); do
      "${honest[@]}" >"$work/alone.out" 2>&1
      read -r d p e <<<"$(attack_figures "$work/alone.out")"
      a_dps+=("$d") a_p99+=("$p") err0=$((err0 + e))
      attack_run "$form" $((SECS + 3)) "$flood_bin" "${honest[@]}"
      read -r d p e <<<"$(attack_figures "$work/honest.out")"
      x_dps+=("$d") x_p99+=("$p") errs=$((errs + e))
      [ "$i" -eq 0 ] && idle=$ATTACK_IDLE
      [ "$ATTACK_PEAK" -gt "$peak" ] && peak=$ATTACK_PEAK
    done
    dps0=$(median "${a_dps[@]}") p990=$(median "${a_p99[@]}")
    dps=$(median "${x_dps[@]}") p99=$(median "${x_p99[@]}")
    echo "$form: RSS $idle -> $peak MB (after $ATTACK_AFTER); honest alone (median of $REPEAT:" \
      "${a_p99[*]} ms) $dps0 decisions/s, p99 $p990 ms, $err0 errors; under attack" \
      "(${x_p99[*]} ms) $dps ($(attack_pct "$dps" "$dps0")), p99 $p99 ms" \
      "($(attack_pct "$p99" "$p990")), $errs errors; $ATTACK_OUT"
    results+=("$(printf '%-24s %-5s %7s %7s %6s %8s %8s %7s %7s %7s %7s %6s' "$bin" "$form" \
      "$idle" "$peak" "+$((peak - idle))" "$dps0" "$dps" \
      "$(attack_pct "$dps" "$dps0")" "$p990" "$p99" "$(attack_pct "$p99" "$p990")" "$err0/$errs")")
  done
  fed_down
done
echo
printf '%-24s %-5s %7s %7s %6s %8s %8s %7s %7s %7s %7s %6s\n' binaries form "idle MB" \
  "peak MB" delta "alone/s" "attack/s" change "p99 ms" "attack" change errors
printf '%s\n' "${results[@]}"
