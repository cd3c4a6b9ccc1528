# attack-lib.sh -- the attack "memory before authorization"
# against a local federation started with scripts/federation-lib.sh;
# sourced by tests/h2flood_e2e.sh and eval/bench/attack-memory.sh after
# federation-lib.sh.
#
# attack_fed_up WORK BIN [gen-federation options...]
#   fed_up with a second client, "attacker" (its certificate and a [client
#   attacker] section), so form c (an identity the AP does answer) is not
#   the honest client's own.
# attack_run FORM HOLD_S BIN [HONEST_CMD...]
#   runs BIN/h2flood in form FORM for HOLD_S seconds against the party it
#   names, samples that daemon's VmRSS every 0.25 s meanwhile, and runs
#   HONEST_CMD (if given) at the same time, its stdout and stderr in
#   WORK/honest.out. Sets ATTACK_IDLE (RSS in MB just before), ATTACK_PEAK
#   (the highest sample), ATTACK_AFTER (RSS 1 s after the flood ended),
#   ATTACK_OUT (h2flood's report line) and HONEST_RC. FORM is one of
#     a-ap  a passive party's certificate on the AP's Recommend, 8
#           connections x 250 streams, each one byte short of the largest
#           Recommend (the AP does not authorize it);
#     a-pp  the client's certificate on the first passive party's MaskBatch,
#           4 x 50 streams one byte short of the largest MaskBatch;
#     b-ap  headers only, a passive party's certificate on the AP, 8 x 2000;
#     c-ap  as a-ap, but with the attacker client's certificate, which the
#           AP answers.
# attack_bench_up WORK BIN
#   attack_fed_up with the attack benchmarks' federation (M = 5 parties of
#   20 columns, 1000 users, 200 items), then one run of the honest client
#   to warm it up (arenas, channels, the pending table). Sets
#   ATTACK_HONEST, the honest client's command: o3m-bench-load as
#   "client", K = 20, O3M_ATTACK_C (8) calls in flight for
#   O3M_ATTACK_SECONDS (5) s after 1 s of warm-up.
# attack_figures FILE: the decisions/s, p99 ms and errors of
#   ATTACK_HONEST's output in FILE.
# attack_pct A B: A against B in percent ("-" when B is 0).
# rss_mb PID, pid_of NAME, addr_of NAME: helpers.
# ATTACK_MAX_CANDIDATES (1000, the config's default max_candidates, which
# gen-federation writes) and the AP's dims (the first party's) size the
# bodies; the caller's federation must match.

rss_mb() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$1/status"; }

pid_of() {
  local i
  for i in "${!FED_NAMES[@]}"; do
    if [ "${FED_NAMES[$i]}" = "$1" ]; then echo "${FED_PIDS[$i]}"; fi
  done
  return 0
}

addr_of() {
  awk -v sec="[party $1]" '$0 == sec {f = 1; next} /^\[/ {f = 0} f && $1 == "address" {print $3}' \
    "$FED_CONF"
}

dims_of() {
  awk -v sec="[party $1]" '$0 == sec {f = 1; next} /^\[/ {f = 0} f && $1 == "dims" {print $3}' \
    "$FED_CONF"
}

attack_fed_up() {
  local work=$1 bin=$2 p
  shift 2
  fed_gen "$work" "$bin" "$@"
  "$FED_SCRIPTS/make-certs.sh" "$work/certs" attacker
  printf '\n[client attacker]\ncert = certs/attacker.pem\nkey = certs/attacker.key\n' >>"$FED_CONF"
  fed_start "$work" "$bin" "$FED_PMG" o3m-pmg
  for p in $FED_PASSIVE; do fed_start "$work" "$bin" "$p" o3m-passive; done
  fed_start "$work" "$bin" "$FED_ACTIVE" o3m-active
  for p in "$FED_PMG" $FED_PASSIVE "$FED_ACTIVE"; do fed_wait "$work" "$p" || return 1; done
}

attack_bench_up() {
  local work=$1 bin=$2
  attack_fed_up "$work" "$bin" --parties 20,20,20,20,20 --users 1000 --items 200 >/dev/null ||
    return 1
  ATTACK_HONEST=("$bin/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem"
    --key "$work/certs/client.key" --K 20 --concurrency "${O3M_ATTACK_C:-8}"
    --seconds "${O3M_ATTACK_SECONDS:-5}" --warmup 1)
  "${ATTACK_HONEST[@]}" >/dev/null 2>&1 || true
}

attack_figures() {
  awk -v c="${O3M_ATTACK_C:-8}" '$1 == c {printf "%d %.2f %d\n", $2, $4, $8}' "$1" | tail -n 1
}

attack_pct() {
  awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%+.0f%%", 100 * (a - b) / b; else print "-"}'
}

attack_run() {
  local form=$1 hold=$2 abin=$3
  shift 3
  local work certs pp1 d0 d k=${ATTACK_MAX_CANDIDATES:-1000} who args pid
  work=$(dirname "$FED_CONF")
  certs="$work/certs"
  pp1=$(echo $FED_PASSIVE | awk '{print $1}')
  d0=$(dims_of "$FED_ACTIVE")
  d=$(awk '$1 == "d" {print $3; exit}' "$FED_CONF")
  case "$form" in
  a-ap) who=$pp1 pid=$(pid_of "$FED_ACTIVE")
    args=(--target "$(addr_of "$FED_ACTIVE")" --path /o3m.v1.Active/Recommend --connections 8
      --streams 250 --body-recommend "$k,$d0") ;;
  a-pp) who=client pid=$(pid_of "$pp1")
    args=(--target "$(addr_of "$pp1")" --path /o3m.v1.Passive/MaskBatch --connections 4
      --streams 50 --body-mask-batch "$k,$d") ;;
  b-ap) who=$pp1 pid=$(pid_of "$FED_ACTIVE")
    args=(--target "$(addr_of "$FED_ACTIVE")" --path /o3m.v1.Active/Recommend --connections 8
      --streams 2000 --body 0) ;;
  c-ap) who=attacker pid=$(pid_of "$FED_ACTIVE")
    args=(--target "$(addr_of "$FED_ACTIVE")" --path /o3m.v1.Active/Recommend --connections 8
      --streams 250 --body-recommend "$k,$d0") ;;
  *) echo "attack_run: unknown form $form" >&2; return 2 ;;
  esac
  ATTACK_IDLE=$(rss_mb "$pid")
  "$abin/h2flood" --ca "$certs/ca.pem" --cert "$certs/$who.pem" --key "$certs/$who.key" \
    --hold-s "$hold" "${args[@]}" >"$work/flood.out" 2>&1 &
  local fpid=$! hpid="" r i
  if [ $# -gt 0 ]; then
    sleep 0.5
    "$@" >"$work/honest.out" 2>&1 &
    hpid=$!
  fi
  ATTACK_PEAK=$ATTACK_IDLE
  for i in $(seq 1 $((hold * 4))); do
    sleep 0.25
    r=$(rss_mb "$pid")
    if [ "$r" -gt "$ATTACK_PEAK" ]; then ATTACK_PEAK=$r; fi
  done
  HONEST_RC=0
  if [ -n "$hpid" ]; then wait "$hpid" || HONEST_RC=$?; fi
  wait "$fpid" || true
  ATTACK_OUT=$(tail -n 1 "$work/flood.out")
  sleep 1
  ATTACK_AFTER=$(rss_mb "$pid")
}
