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
#      flood, and the honest decisions/s and p99 against step 1.
# The table's errors column is "alone/under attack".
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
    # The run alone right before the one under attack: the machine's other
    # load drifts, and each form is compared with its own neighbour.
    "${honest[@]}" >"$work/alone.out" 2>&1
    read -r dps0 p990 err0 <<<"$(attack_figures "$work/alone.out")"
    attack_run "$form" $((SECS + 3)) "$flood_bin" "${honest[@]}"
    read -r dps p99 errs <<<"$(attack_figures "$work/honest.out")"
    echo "$form: RSS $ATTACK_IDLE -> $ATTACK_PEAK MB (after $ATTACK_AFTER); honest alone $dps0" \
      "decisions/s, p99 $p990 ms, $err0 errors; under attack $dps ($(attack_pct "$dps" "$dps0")), p99" \
      "$p99 ms ($(attack_pct "$p99" "$p990")), $errs errors; $ATTACK_OUT"
    results+=("$(printf '%-24s %-5s %7s %7s %6s %8s %8s %7s %7s %7s %7s %6s' "$bin" "$form" \
      "$ATTACK_IDLE" "$ATTACK_PEAK" "+$((ATTACK_PEAK - ATTACK_IDLE))" "$dps0" "$dps" \
      "$(attack_pct "$dps" "$dps0")" "$p990" "$p99" "$(attack_pct "$p99" "$p990")" "$err0/$errs")")
  done
  fed_down
done
echo
printf '%-24s %-5s %7s %7s %6s %8s %8s %7s %7s %7s %7s %6s\n' binaries form "idle MB" \
  "peak MB" delta "alone/s" "attack/s" change "p99 ms" "attack" change errors
printf '%s\n' "${results[@]}"
