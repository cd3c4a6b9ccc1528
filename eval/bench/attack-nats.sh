#!/usr/bin/env bash
# attack-nats.sh -- a stolen AP key against NATS, before and after in one run: can the
# active party's key erase the AP replicas' reward stream, and do the
# replicas then diverge?
#
#   O3M_ATTACK_BINS="OLD/build/bin:OLD/deploy/nats/o3m-nats.conf build/bin" \
#     eval/bench/attack-nats.sh
#
# For each folder of O3M_ATTACK_BINS (DIR or DIR:CONF, CONF the NATS config
# to run, default this tree's deploy/nats/o3m-nats.conf; default folder
# build/bin), one after the other: a 3-node JetStream cluster with mutual
# TLS (bench-lib.sh nats_up), the bench federation (M = 5, d = 100) with two
# AP replicas r1 and r2 (the setup step first, when the folder's o3m-cli
# has nats-setup; an older build's replicas create the stream themselves),
# 40 rounds each rewarded. Then o3m-bench-nats-attack (this tree's build)
# connects with the active party's certificate and asks JetStream to purge
# the stream and then to delete it, printing the stream's state after each.
# A new replica r3 is then started (with 30 s to become ready), 5 more
# rounds are rewarded through it, and the updates every replica reports
# are printed: equal updates mean the replicas agree. Last, with the
# administrative identity, o3m-bench-nats-attack --max-msgs 2 sets a limit
# with which JetStream erases all but the last two records, and the script
# waits up to 30 s for r1 and r2 to log it ("may drop records"), printing
# how long that took, or that they said nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
. eval/bench/bench-lib.sh

tool="${O3M_BUILD_DIR:-build}/bin/o3m-bench-nats-attack"
[ -x "$tool" ] || { echo "attack-nats: build $tool first" >&2; exit 1; }
command -v nats-server >/dev/null || { echo "attack-nats: apt-get install nats-server" >&2; exit 1; }

# cli ARGS...: o3m-cli as the bench's client.
cli() {
  "$bin/o3m-cli" --config "$FED_CONF" --cert "$work/certs/client.pem" \
    --key "$work/certs/client.key" "$@"
}

# rounds N TARGET: N rounds on TARGET, each rewarded there; prints how
# many rewards were acknowledged.
rounds() {
  local i d ok=0
  for i in $(seq 1 "$1"); do
    d=$(cli --target "$2" recommend --user "u$((i * 7 % 1000))" --items "i$((i % 190)),i$((i % 190 + 1)),i$((i % 190 + 2))" 2>/dev/null |
      sed -n 's/^decision=\([0-9]*\).*/\1/p') || true
    [ -n "$d" ] || continue
    cli --target "$2" reward --decision "$d" --reward 0.$((i % 10)) >/dev/null 2>&1 && ok=$((ok + 1))
  done
  echo "$ok"
}

# updates TARGET: the updates a replica reports, or "down".
updates() {
  cli --target "$1" stats 2>/dev/null | sed -n 's/^updates=//p' | grep . || echo down
}

nats_dir=""
for entry in ${O3M_ATTACK_BINS:-build/bin}; do
  replicas_fed_up "$entry" attack-nats
  [ -s "$work/nats-setup.out" ] && echo "  setup: $(tr '\n' ' ' <"$work/nats-setup.out")" ||
    echo "  setup: none (this build's replicas create the stream)"
  r1=$(awk -v a="$FED_ACTIVE" '/^\[party /{n=$2; sub(/\]/,"",n)} n==a && /^address/{print $3}' "$FED_CONF")
  p2=$(fed_free_port)
  p3=$(fed_free_port)
  replica_start r2 "$p2" || { echo "  r2 did not start:"; tail -3 "$work/$FED_ACTIVE.log"; }
  echo "  rewards acknowledged before the attack: $(rounds 40 "$r1")"
  sleep 1
  echo "  updates before: r1 $(updates "$r1"), r2 $(updates "127.0.0.1:$p2")"
  "$tool" --config "$FED_CONF" --cert "$work/certs/$FED_ACTIVE.pem" \
    --key "$work/certs/$FED_ACTIVE.key" | sed 's/^/  with the AP key: /'
  if replica_start r3 "$p3"; then
    echo "  new replica r3 started, updates $(updates "127.0.0.1:$p3")"
    echo "  rewards acknowledged through r3: $(rounds 5 "127.0.0.1:$p3")"
  else
    echo "  new replica r3 refused to start: $(grep -h 'ERROR\|start-up failed' "$work/$FED_ACTIVE.log" | tail -1 | cut -c1-240)"
  fi
  sleep 2
  echo "  updates after: r1 $(updates "$r1"), r2 $(updates "127.0.0.1:$p2"), r3 $(updates "127.0.0.1:$p3")"
  "$tool" --config "$FED_CONF" --cert "$nats_dir/certs/o3m-admin.pem" \
    --key "$nats_dir/certs/o3m-admin.key" --max-msgs 2 | sed 's/^/  with the admin key: /'
  t0=$(date +%s%N)
  seen=""
  for _ in $(seq 1 300); do
    seen=$({ grep -o "replica 'r[12]': the reward stream may drop records" \
      "$work/$FED_ACTIVE.log" || true; } | sort -u | wc -l)
    [ "$seen" -ge 2 ] && break
    sleep 0.1
  done
  if [ "$seen" -ge 2 ]; then
    echo "  r1 and r2 logged the limit $(( ($(date +%s%N) - t0) / 1000000 )) ms after max_msgs = 2"
  else
    echo "  after max_msgs = 2, $seen of r1 and r2 logged it within 30 s"
  fi
  fed_down
  nats_down
  echo
done
