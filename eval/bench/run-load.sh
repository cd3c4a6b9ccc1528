#!/usr/bin/env bash
# Starts a local federation with mutual TLS on loopback (M = 5 parties of 20
# columns, d = 100) and drives its active participant with o3m-bench-load at
# concurrency 1, 8 and 32 with K = 20 candidates. Extra arguments go to
# o3m-bench-load (for example --seconds 10 --with-reward).
#
# O3M_AGGREGATION=secure|per-party|both (default both) picks the
# federation's [federation] aggregation; with both, the two modes run one
# after the other in this one run (secure first), each on a fresh
# federation, for secure aggregation's cost side by side.
#
# O3M_METRICS=off|on|both (default off): whether every daemon serves its
# metrics port (--metrics-listen 127.0.0.1:0; docs/operations.md, "Metrics
# and health"); with both, each aggregation mode runs without and then with it, on fresh
# federations, for the metrics' overhead side by side.
# O3M_LOAD_MODES (below, at side_by_side) instead compares AP serving modes
# (threads, group commit, AP replicas on NATS JetStream) with durable
# rewards.
set -euo pipefail
cd "$(dirname "$0")/../.."
. eval/bench/bench-lib.sh
# Each PID's /proc/PID/stat from the field after the command name on
# (which may hold spaces), one line per PID: utime and stime (clock ticks)
# are then fields 12 and 13.
proc_stat() {
  local p
  for p; do sed 's/.*) //' "/proc/$p/stat"; done
}

# utime + stime (clock ticks) of every running passive daemon, summed.
pp_cpu_ticks() {
  local i sum=0 f pp
  pp=" $(echo $FED_PASSIVE) " # one line, names separated by spaces
  for i in "${!FED_NAMES[@]}"; do
    case "$pp" in *" ${FED_NAMES[$i]} "*) ;; *) continue ;; esac
    f=$(proc_stat "${FED_PIDS[$i]}")
    sum=$((sum + $(echo "$f" | awk '{print $12 + $13}')))
  done
  echo "$sum"
}

# CPU seconds (user + system) of the daemons called NAME so far (summed:
# AP replicas share the active party's name).
proc_cpu_s() {
  local i
  for i in "${!FED_NAMES[@]}"; do
    [ "${FED_NAMES[$i]}" = "$1" ] || continue
    proc_stat "${FED_PIDS[$i]}"
  done | awk -v hz="$(getconf CLK_TCK)" '{t += $12 + $13} END {printf "%.3f\n", t / hz}'
}

# CPU seconds (user + system) of the NATS servers of a replica mode so far
# (0 without one), so that their cost per decision is counted per level.
nats_cpu_s() {
  [ "${#NATS_PIDS[@]}" -gt 0 ] || { echo 0; return; }
  proc_stat "${NATS_PIDS[@]}" | awk -v hz="$(getconf CLK_TCK)" '{t += $12 + $13} END {printf "%.3f\n", t / hz}'
}

# The AP's rounds so far, summed over the replicas in targets (if any).
ap_rounds() {
  local t sum=0 r
  for t in "${targets[@]:-}"; do
    r=$("$bin/o3m-cli" --config "$FED_CONF" --cert "$work/certs/client.pem" \
      --key "$work/certs/client.key" ${t:+--target "$t"} stats | sed -n 's/^rounds=//p')
    sum=$((sum + r))
  done
  echo "$sum"
}

# The model's updates so far on the first replica in targets (every
# replica applies every reward record), or on the one AP.
ap_updates() {
  local t=${targets[0]:-}
  "$bin/o3m-cli" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" ${t:+--target "$t"} stats | sed -n 's/^updates=//p'
}

# O3M_LOAD_MODES="THREADS:COMMIT ...": the AP with a state_dir
# (durable rewards), one fresh federation per mode, side by side in this one
# run, for example "1:each 2:group" (today's single thread with one
# fdatasync per reward, then two serving threads in the AP and every PP with
# group commit). Per mode and concurrency level: decisions/s and latency
# (Recommend only), and the CPU seconds per decision of the AP, the 4 PPs
# together, the PMG and the load generator over the level (warm-up
# included), in replica modes also the NATS servers' and AP + NATS; then
# rewards/s with --rewards-only at concurrency 32.
# COMMIT may also be natsN: N AP replicas ([federation] replication = nats,
# a fresh 3-node JetStream cluster with mutual TLS and authorization,
# stream and bucket with 3 copies), each on THREADS threads; the load's
# clients are spread over the replicas (--targets) and the CPU column "AP"
# sums the replicas. natsNplain is the same in plain text without
# credentials (nats_tls = off), the insecure way, for the cost of TLS.
side_by_side() {
  local mode threads commit c pre post t0 t1 n ap_us reps targets r port plain bins b
  # The NATS stores' folder is made by the first replica mode only, so that
  # a run without one (or one whose first federation fails to start) leaves
  # no empty folder behind.
  nats_dir=""
  # O3M_LOAD_BINS="DIR1 DIR2": every mode runs once per binaries' folder,
  # one after the other, for two builds side by side in one run (each
  # folder already built: nothing is built).
  bins=${O3M_LOAD_BINS:-}
  [ -n "$bins" ] || bins=default
  for mode in $O3M_LOAD_MODES; do
   for b in $bins; do
    if [ "$b" != default ]; then
      bin=$(cd "$b" && pwd)
      echo "== binaries $bin"
    fi
    threads=${mode%%:*}
    commit=${mode#*:}
    reps=0
    targets=()
    plain=
    case "$commit" in nats*) reps=${commit#nats} ;; esac
    case "$reps" in *plain) reps=${reps%plain} plain=plain ;; esac
    if [ "$reps" -gt 0 ]; then
      [ -n "$nats_dir" ] || nats_dir=$(mktemp -d /tmp/o3m-nats.XXXXXX)
      rm -rf "${nats_dir:?}"/*
      # o3m-eval gen-federation names the active party "shop".
      nats_up shop $plain
      FED_CA_DIR="$nats_dir/certs" FED_FEDERATION_EXTRA="replication = nats
nats_servers = $NATS_URLS
nats_replicas = 3
nats_tls = $([ -n "$plain" ] && echo off || echo on)" FED_AP_STATE=1 FED_ACTIVE_ARGS="--threads $threads --replica r1" FED_BEFORE_ACTIVE=nats_setup \
        NATS_SETUP_BINS="${O3M_LOAD_BINS:-} ${O3M_BUILD_DIR:-build}/bin" \
        FED_PASSIVE_ARGS="--threads $threads" bench_fed_up load --aggregation secure
      targets=("$(awk -v a="$FED_ACTIVE" '/^\[party /{n=$2; sub(/\]/,"",n)} n==a && /^address/{print $3}' "$FED_CONF")")
      for r in $(seq 2 "$reps"); do
        port=$(fed_free_port)
        FED_ACTIVE_ARGS="--threads $threads --replica r$r --listen 127.0.0.1:$port" \
          fed_start "$work" "$bin" "$FED_ACTIVE" o3m-active
        fed_wait "$work" "$FED_ACTIVE"
        targets+=("127.0.0.1:$port")
      done
    else
      FED_AP_STATE=1 FED_ACTIVE_ARGS="--threads $threads --commit $commit" \
        FED_PASSIVE_ARGS="--threads $threads" bench_fed_up load --aggregation secure
      targets=()
    fi
    # bench_fed_up sets its own trap the first time: this one also stops NATS.
    trap 'nats_down; fed_down; rm -rf "${work:-/nonexistent}" ${nats_dir:+"$nats_dir"}' EXIT
    local tlist tflag=()
    tlist=$(IFS=,; echo "${targets[*]:-}")
    [ -n "$tlist" ] && tflag=(--targets "$tlist")
    local names="$FED_ACTIVE $FED_PMG $FED_PASSIVE"
    echo "== AP and PPs on $threads thread(s), commit $commit"
    for c in 1 8 32; do
      pre=""
      for p in $names; do pre="$pre $(proc_cpu_s "$p")"; done
      local npre npost
      npre=$(nats_cpu_s)
      n=$(ap_rounds)
      TIMEFORMAT='%U %S'
      { time "$bin/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem" \
        --key "$work/certs/client.key" --K 20 --concurrency "$c" --users 1000 --items 200 "${tflag[@]}" "$@" \
        >"$work/level.out"; } 2>"$work/level.time"
      n=$(($(ap_rounds) - n))
      post=""
      for p in $names; do post="$post $(proc_cpu_s "$p")"; done
      npost=$(nats_cpu_s)
      tail -n 1 "$work/level.out"
      echo "$pre" "|" "$post" "|" "$(cat "$work/level.time")" | awk -v n="$n" -v c="$c" -v nats="$npre $npost" '
        { split($0, parts, "|"); split(parts[1], a, " "); split(parts[2], b, " ");
          split(parts[3], g, " "); k = length(a); pp = 0
          for (i = 3; i <= k; i++) pp += b[i] - a[i]
          printf "  CPU per decision at concurrency %d (%d decisions): AP %.0f us, PPs %.0f us, PMG %.1f us, load generator %.0f us\n",
            c, n, 1e6 * (b[1] - a[1]) / n, 1e6 * pp / n, 1e6 * (b[2] - a[2]) / n, 1e6 * (g[1] + g[2]) / n
          # The NATS servers over the same level (replica modes): the AP side
          # of a decision is the AP (all replicas) plus them.
          split(nats, ns, " ")
          if (ns[2] > ns[1])
            printf "  NATS servers (3) at concurrency %d: %.0f us per decision; AP + NATS %.0f us\n",
              c, 1e6 * (ns[2] - ns[1]) / n, 1e6 * (b[1] - a[1] + ns[2] - ns[1]) / n }'
    done
    npre=$(nats_cpu_s)
    n=$(ap_updates)
    "$bin/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem" \
      --key "$work/certs/client.key" --K 20 --concurrency 32 --users 1000 --items 200 \
      --rewards-only "${tflag[@]}" "$@" | tail -n 1 | sed 's/^/  rewards only: /'
    n=$(($(ap_updates) - n))
    npost=$(nats_cpu_s)
    # The NATS servers per reward applied (warm-up included): the stream's
    # cost, which every Reward pays once whichever replica takes it.
    [ "$reps" -gt 0 ] && awk -v a="$npre" -v b="$npost" -v n="$n" \
      'BEGIN {printf "  NATS servers (3) over the rewards: %.0f us per reward (%d rewards)\n", 1e6 * (b - a) / n, n}'
    if [ "$reps" -gt 0 ]; then
      # The three NATS servers' CPU over the whole mode (every level and
      # the rewards-only run), per decision the replicas issued.
      proc_stat "${NATS_PIDS[@]}" |
        awk -v hz="$(getconf CLK_TCK)" -v n="$(ap_rounds)" \
          '{t += $12 + $13} END {printf "  NATS servers (3): %.1f CPU s for the mode, %.0f us per decision issued (%d)\n", t / hz, 1e6 * t / hz / n, n}'
    fi
    fed_down
    nats_down
    echo
   done
  done
}

# O3M_LOAD_KS="20 100 500": a K sweep, every binaries' folder
# of O3M_LOAD_BINS (default: this build) side by side in this one run, on a
# fresh secure federation each (M = 5, d = 100, 1000 users,
# O3M_LOAD_ITEMS items, default 1000, max_candidates the largest K). Per K,
# build and concurrency 1, 8, 32: o3m-bench-load's line (decisions/s,
# latency percentiles, errors), then per decision the AP's and the 4 PPs'
# CPU (/proc, over the level with its warm-up), the wire bytes between the
# AP and the PPs (both directions, TLS records included: the kernel's
# bytes_sent + bytes_received of the AP's sockets to the PPs' ports, ss -ti)
# and, for a build that has it, the AP's item cache (o3m-cli stats). First,
# the engine alone at each K: o3m-bench-core --sections d of the last
# folder.
k_sweep() {
  local K b c n pre post bytes0 bytes1 ports items=${O3M_LOAD_ITEMS:-1000} kmax=0 bins
  for K in $O3M_LOAD_KS; do [ "$K" -gt "$kmax" ] && kmax=$K; done
  bins=${O3M_LOAD_BINS:-}
  [ -n "$bins" ] || bins="${O3M_BUILD_DIR:-build}/bin"
  for b in $bins; do bin=$(cd "$b" && pwd); done
  # Its d = 100 row scores K = 1000 candidates (shared LinUCB); a batch of K
  # costs K / 1000 of it, so the engine alone decides 1e6 / (that) per s.
  echo "== engine alone ($bin/o3m-bench-core --sections d, d = 100, one thread)"
  "$bin/o3m-bench-core" --sections d | awk -v ks="$O3M_LOAD_KS" '
    $1 == 100 && $2 == 1000 { n = split(ks, k, " ")
      for (i = 1; i <= n; i++)
        printf "  K = %d: scoring %.0f us, %.0f decisions/s (1/3 of it: %.0f)\n", k[i],
          $3 * k[i] / 1000, 1e6 / ($3 * k[i] / 1000), 1e6 / ($3 * k[i] / 1000) / 3 }'

  for K in $O3M_LOAD_KS; do
    for b in $bins; do
      bin=$(cd "$b" && pwd)
      echo "== K = $K, $items items, binaries $bin"
      BENCH_ITEMS=$items BENCH_MAX_CANDIDATES=$kmax bench_fed_up load --aggregation secure
      ports=$(awk -v pp=" $(echo $FED_PASSIVE) " '/^\[party /{n=$2; sub(/\]/,"",n)}
        /^address/ && index(pp, " " n " ") {split($3, a, ":"); print a[2]}' "$FED_CONF")
      for c in 1 8 32; do
        pre="$(proc_cpu_s "$FED_ACTIVE")"
        for p in $FED_PASSIVE; do pre="$pre $(proc_cpu_s "$p")"; done
        bytes0=$(wire_bytes $ports)
        n=$(targets=(""); ap_rounds)
        "$bin/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem" \
          --key "$work/certs/client.key" --K "$K" --concurrency "$c" --users 1000 \
          --items "$items" "$@" >"$work/level.out" || true
        n=$(($(targets=(""); ap_rounds) - n))
        bytes1=$(wire_bytes $ports)
        post="$(proc_cpu_s "$FED_ACTIVE")"
        for p in $FED_PASSIVE; do post="$post $(proc_cpu_s "$p")"; done
        [ "$c" = 1 ] && grep -m1 '^ *concurrency' "$work/level.out"
        tail -n 1 "$work/level.out"
        echo "$pre | $post" | awk -v n="$n" -v c="$c" -v wb=$((bytes1 - bytes0)) '
          { split($0, parts, "|"); k = split(parts[1], a, " "); split(parts[2], b, " "); pp = 0
            for (i = 2; i <= k; i++) pp += b[i] - a[i]
            if (n < 1) n = 1
            printf "  c = %d (%d decisions): AP CPU %.0f us, 4 PPs CPU %.0f us, wire %.0f bytes per decision\n",
              c, n, 1e6 * (b[1] - a[1]) / n, 1e6 * pp / n, wb / n }'
      done
      "$bin/o3m-cli" --config "$FED_CONF" --as "$FED_ACTIVE" \
        stats | awk -F= '/^item_cache_/ {s = s " " $1 "=" $2}
          END { if (s != "") print "  AP" s }'
      fed_down
      echo
    done
  done
}

# Bytes sent and received so far on the established TCP sockets whose
# peer port is one of the arguments (the AP's connections to the PPs).
wire_bytes() {
  local f="" p
  for p; do f="$f${f:+ or }dport = :$p"; done
  ss -tinH state established "( $f )" | awk '
    { for (i = 1; i <= NF; i++) if ($i ~ /^bytes_(sent|received):/) { split($i, v, ":"); t += v[2] } }
    END { printf "%d\n", t }'
}

if [ -n "${O3M_LOAD_KS:-}" ]; then
  k_sweep "$@"
  exit 0
fi

if [ -n "${O3M_LOAD_MODES:-}" ]; then
  side_by_side "$@"
  exit 0
fi

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
