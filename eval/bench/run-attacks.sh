#!/usr/bin/env bash
# run-attacks.sh -- eight attacks on a federation's daemons (the table below),
# replayed against one or more builds side by side in one run, each by the script that measures it:
#
#   attack 1  attack-memory.sh    memory held for streams no one authorized
#             attack-cpu.sh       what its refused streams still cost (CPU)
#   attack 2  attack-nats.sh      the AP's NATS key against the reward stream
#   attacks 3, 4  attack-fairness.sh  one client's load against another's
#             (attack 3 with two floods: ids the AP caches, and ids new
#             every round, FLOODS="cached fresh")
#   attack 5  attack-probes.sh    health probes under a connection flood
#   attack 6  is a start-up refusal, not a load: test_recovery
#             (regression_block_without_model_refuses_start_until_discarded)
#   attack 7  reload-under-load.sh --fifo  a passive party's table path
#             turned into a FIFO, reloaded under load
#   attack 8  attack-flapping.sh  a passive party whose item epoch
#             is new in every reply (flap_party, from O3M_LOAD_TOOL)
#
#   O3M_ATTACK_BINS="OLD/build/bin:OLD/deploy/nats/o3m-nats.conf build/bin" \
#     eval/bench/run-attacks.sh [memory] [cpu] [nats] [fairness] [probes] [reload] [flapping]
#
# Each entry of O3M_ATTACK_BINS is a binaries' folder, optionally followed
# by ":" and the NATS config that build ran with (attack-nats.sh; the
# default is this tree's deploy/nats/o3m-nats.conf). The other scripts get
# the folders alone. OLD is a build of a commit without these defences, for
# example:
#   git worktree add /tmp/o3m-old 0682d32
#   cmake -S /tmp/o3m-old -B /tmp/o3m-old/build -DCMAKE_BUILD_TYPE=RelWithDebInfo
#   cmake --build /tmp/o3m-old/build -j2
# Without arguments every script runs; name some to run only those. Run it
# alone on the machine: the figures include latencies and throughput.
set -euo pipefail
cd "$(dirname "$0")/../.."
entries=${O3M_ATTACK_BINS:-build/bin}
dirs=""
for e in $entries; do dirs="$dirs ${e%%:*}"; done
dirs=${dirs# }
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(memory nats fairness probes flapping)
for w in "${which[@]}"; do
  echo "==== attack-$w.sh ($(date -u +%H:%M:%S))"
  case "$w" in
  memory | cpu | probes) O3M_ATTACK_BINS="$dirs" "eval/bench/attack-$w.sh" ;;
  nats) O3M_ATTACK_BINS="$entries" eval/bench/attack-nats.sh ;;
  fairness) O3M_ATTACK_BINS="$dirs" eval/bench/attack-fairness.sh ;;
  reload)
    for d in $dirs; do
      echo "== $d"
      eval/bench/reload-under-load.sh --fifo "$d" || echo "(exit $?)"
    done
    ;;
  flapping) O3M_ATTACK_BINS="$dirs" eval/bench/attack-flapping.sh ;;
  *) echo "run-attacks: unknown attack '$w' (memory, cpu, nats, fairness, probes, reload, flapping)" >&2; exit 2 ;;
  esac
done
