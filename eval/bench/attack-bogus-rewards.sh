#!/usr/bin/env bash
# attack-bogus-rewards.sh -- Rewards for unknown decisions, before and after in
# one run: how long does an AP replica take to refuse a Reward naming a
# decision no live replica holds? Each such Reward held the replica's
# serving thread (under the handler lock) for as long as it took.
#
#   O3M_ATTACK_BINS="BEFORE/bin:BEFORE/o3m-nats.conf build/bin" \
#     eval/bench/attack-bogus-rewards.sh [N]
#
# For each folder of O3M_ATTACK_BINS (DIR or DIR:CONF, CONF the NATS config
# to run, default this tree's deploy/nats/o3m-nats.conf; default folder
# build/bin), one after the other: a 3-node JetStream cluster with mutual
# TLS (bench-lib.sh nats_up), the bench federation with AP replicas r1, r2
# and r3; a decision is made on r3 and r3 is killed (kill -9). Then N
# (default 10) Rewards with random ids and N with ids of r3's decision
# with other random bits (its tag, for builds that have tags) are sent to
# r2 with o3m-cli, one process each, and the wall time of each is
# measured; "a cli round" is an ordinary Recommend through the cli, for
# the cli's own start-up and TLS cost. Prints the median and maximum ms.
set -euo pipefail
cd "$(dirname "$0")/../.."
. eval/bench/bench-lib.sh
command -v nats-server >/dev/null || { echo "attack-bogus: apt-get install nats-server" >&2; exit 1; }
N=${1:-10}

cli() {
  "$bin/o3m-cli" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" "$@"
}

# stats: median and maximum of the ms values on stdin.
stats() { sort -n | awk '{v[NR]=$1} END {printf "median %d ms, max %d ms (%d)", v[int((NR+1)/2)], v[NR], NR}'; }

# timed_reward TARGET ID: the ms one Reward takes (its outcome goes to
# bogus.out).
timed_reward() {
  local t0 t1 out
  t0=$(date +%s%N)
  out=$(cli --target "$1" reward --decision "$2" --reward 0.5 2>&1 | tail -1) || true
  t1=$(date +%s%N)
  echo "$(((t1 - t0) / 1000000))"
  echo "$out" >>"$work/bogus.out"
}

nats_dir=""
for entry in ${O3M_ATTACK_BINS:-build/bin}; do
  replicas_fed_up "$entry" attack-bogus
  p2=$(fed_free_port)
  p3=$(fed_free_port)
  replica_start r2 "$p2" || { echo "  r2 did not start:"; tail -3 "$work/$FED_ACTIVE.log"; }
  replica_start r3 "$p3" || { echo "  r3 did not start:"; tail -3 "$work/$FED_ACTIVE.log"; }
  r3_pid=${FED_PIDS[-1]}
  t0=$(date +%s%N)
  d=$(cli --target "127.0.0.1:$p3" recommend --user u7 --items i1,i2,i3 2>/dev/null |
    sed -n 's/^decision=\([0-9]*\).*/\1/p')
  t1=$(date +%s%N)
  echo "  a cli round (Recommend on r3): $(((t1 - t0) / 1000000)) ms, decision $d"
  { kill -9 "$r3_pid" && wait "$r3_pid"; } 2>/dev/null || true
  sleep 0.5
  : >"$work/bogus.out"
  for i in $(seq 1 "$N"); do
    timed_reward "127.0.0.1:$p2" "$(od -An -tu8 -N8 /dev/urandom | tr -d ' ')"
  done | stats | sed 's/^/  random ids on r2: /'
  echo
  for i in $(seq 1 "$N"); do
    # The dead replica's tag (the low 16 bits of its decision; bash wraps
    # the 64-bit id, keeping them) under 45 other random bits.
    r=$(((RANDOM << 30) | (RANDOM << 15) | RANDOM))
    timed_reward "127.0.0.1:$p2" "$(((r << 16) | (d & 0xffff)))"
  done | stats | sed 's/^/  dead replica r3'"'"'s ids on r2: /'
  echo
  echo "  outcomes: $(sed 's/.*\(NOTFOUND\|NOT_FOUND\|UNAVAILABLE\|not found\).*/\1/' "$work/bogus.out" | sort | uniq -c | tr '\n' ' ' | cut -c1-200)"
  fed_down
  nats_down
  echo
done
