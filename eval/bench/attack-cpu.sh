#!/usr/bin/env bash
# attack-cpu.sh -- where memory before authorization (form a) still costs
# the honest client:
# the CPU the target daemon and the attacker (tests/h2flood) spend, beside
# the spread of the honest figures between two runs without any attack.
#
#   O3M_ATTACK_BINS="/work/cur-bin build/bin" eval/bench/attack-cpu.sh [FORM...]
#
# FORMs are attack-lib.sh's (default: a-ap a-pp: a passive party's
# certificate on the AP, 8 x 250 streams one byte short of the largest
# Recommend; the client's certificate on a passive party, 4 x 50 streams
# one byte short of the largest MaskBatch). For each binaries' folder, in
# one run, the federation of attack-memory.sh (M = 5 parties of 20 columns,
# mutual TLS on loopback) and, per form:
#   - the honest client (o3m-bench-load, K = 20, O3M_ATTACK_C = 8 in
#     flight, O3M_ATTACK_SECONDS = 5 s after 1 s of warm-up) alone twice in
#     a row: the p99 of the second against the first is what the machine
#     alone moves it by (an A/A run);
#   - the same under the flood (attack_run), with the target daemon's CPU
#     (utime + stime from /proc) during the run alone and under the flood,
#     h2flood's own CPU and bytes sent, and the last second in which
#     h2flood used CPU (the flood's streams are refused from their
#     headers: after that it only holds idle connections).
# Figures are CPU milliseconds (the kernel's ticks of 10 ms). Run it alone on
# the machine: the p99 moves with any other load.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/federation-lib.sh
. scripts/attack-lib.sh

bins=${O3M_ATTACK_BINS:-build/bin}
SECS=${O3M_ATTACK_SECONDS:-5}
HOLD=$((SECS + 3))
flood_bin=$(cd "${O3M_FLOOD_BIN:-build/bin}" && pwd)
forms=("$@")
[ ${#forms[@]} -gt 0 ] || forms=(a-ap a-pp)

work=$(mktemp -d /tmp/o3m-attack-cpu.XXXXXX)
trap 'fed_down; rm -rf "$work"' EXIT

# CPU of process $1 so far in ms (utime + stime), or empty once it is gone.
cpu_ms() { awk '{print ($14 + $15) * 10}' "/proc/$1/stat" 2>/dev/null || true; }

rows=()
for b in $bins; do
  bin=$(cd "$b" && pwd)
  rm -rf "${work:?}"/*
  echo "== binaries $bin"
  attack_bench_up "$work" "$bin"
  honest=("${ATTACK_HONEST[@]}")
  pp1=$(echo "$FED_PASSIVE" | awk '{print $1}')
  for form in "${forms[@]}"; do
    case "$form" in *-pp) target=$(pid_of "$pp1") ;; *) target=$(pid_of "$FED_ACTIVE") ;; esac
    "${honest[@]}" >"$work/alone1.out" 2>&1
    c0=$(cpu_ms "$target")
    "${honest[@]}" >"$work/alone2.out" 2>&1
    cpu_alone=$(($(cpu_ms "$target") - c0))
    read -r dps1 p991 _ <<<"$(attack_figures "$work/alone1.out")"
    read -r dps2 p992 _ <<<"$(attack_figures "$work/alone2.out")"
    c0=$(cpu_ms "$target")
    (
      attack_run "$form" "$HOLD" "$flood_bin" "${honest[@]}"
      echo "$ATTACK_OUT" >"$work/attack.last"
    ) &
    runner=$!
    fpid=""
    for _ in $(seq 1 20); do
      fpid=$(pgrep -f "h2flood.*$work/certs" | head -n 1 || true)
      [ -n "$fpid" ] && break
      sleep 0.05
    done
    # h2flood's CPU, sampled every 0.25 s until it exits; the last second
    # in which it rose.
    fcpu=0 last_busy=0 t=0
    while kill -0 "$runner" 2>/dev/null; do
      sleep 0.25
      t=$((t + 1))
      v=$([ -n "$fpid" ] && cpu_ms "$fpid")
      if [ -n "$v" ] && [ "$v" -gt "$fcpu" ]; then
        fcpu=$v
        last_busy=$t
      fi
    done
    wait "$runner" || true
    cpu_attack=$(($(cpu_ms "$target") - c0))
    read -r dps3 p993 _ <<<"$(attack_figures "$work/honest.out")"
    sent=$(sed -n 's/.*bytes_sent=\([0-9]*\).*/\1/p' "$work/attack.last")
    echo "$form: alone $dps1/s p99 $p991 ms, alone again $dps2/s p99 $p992 ms" \
      "($(attack_pct "$p992" "$p991")); under the flood $dps3/s p99 $p993 ms ($(attack_pct "$p993" "$p991"));" \
      "target CPU $cpu_alone ms alone, $cpu_attack ms under the flood (same length);" \
      "h2flood CPU $fcpu ms, last busy at $(awk -v t="$last_busy" 'BEGIN {printf "%.2f", t / 4}') s," \
      "$sent bytes sent; $(cat "$work/attack.last")"
    rows+=("$(printf '%-28s %-5s %8s %8s %7s %8s %7s %9s %9s %8s %7s %10s' "$bin" "$form" \
      "$p991" "$p992" "$(attack_pct "$p992" "$p991")" "$p993" "$(attack_pct "$p993" "$p991")" \
      "$cpu_alone" "$cpu_attack" "$fcpu" \
      "$(awk -v t="$last_busy" 'BEGIN {printf "%.2f", t / 4}')" "${sent:-?}")")
  done
  fed_down
done
echo
printf '%-28s %-5s %8s %8s %7s %8s %7s %9s %9s %8s %7s %10s\n' binaries form "p99 A" "p99 A'" \
  "A/A" "p99 atk" change "cpu alone" "cpu atk" "h2flood" "busy s" "sent B"
printf '%s\n' "${rows[@]}"
