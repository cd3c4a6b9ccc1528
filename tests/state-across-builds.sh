#!/usr/bin/env bash
# state-across-builds.sh OLD_BIN NEW_BIN -- the state files one build writes
# load in another.
#
# Starts a small federation (tests/with-federation.sh's: o3m-pmg, the active
# party "shop" and one passive party, mutual TLS) from the daemons in
# OLD_BIN, every party with a state_dir and the active party checkpointing
# every 50 rewards, streams 120 rounds through it and kills the active party
# with SIGKILL, so that its state_dir holds the stored block, checkpoints
# and journal records after the last one. Then it starts the same parties
# from NEW_BIN on the same state_dirs (a fresh mask generator: every party
# must load its stored block, none may fetch one) and streams 20 more
# rounds. It passes when every party loaded its block from state_dir, the
# active party recovered all 120 rewards from the checkpoint and the journal
# and the 20 rounds went through (their "decisions equal to central" is not
# looked at: the driver's central model starts empty, the recovered one
# has 120 rewards). A change of a file format that the
# reader of NEW_BIN does not accept fails here; run it before and after a
# change of the writers (for example OLD_BIN a release's bin/, NEW_BIN
# build/bin). Not a CTest: it needs a second build.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: state-across-builds.sh OLD_BIN NEW_BIN" >&2; exit 2; }
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
. "$(dirname "$0")/../scripts/federation-lib.sh"
work=$(mktemp -d /tmp/o3m-formats.XXXXXX)
cleanup() {
  fed_down
  if [ -n "${O3M_KEEP_TEST_DIR:-}" ]; then echo "state-across-builds: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "state-across-builds: FAIL: $*" >&2; exit 1; }

FED_AP_STATE=1 fed_gen "$work" "$new" --parties 2,2 --users 20 --items 10
for p in $FED_PASSIVE; do sed -i "/^\[party $p\]\$/a state_dir = $p-state" "$FED_CONF"; done
FED_ACTIVE_ARGS="--checkpoint-every 50"
export FED_ACTIVE_ARGS
fed_start_all "$work" "$old"
fed_federate "$work" "$old" 120 5 >"$work/federate-old.txt" 2>&1 || fail "120 rounds on $old: $(tail -3 "$work/federate-old.txt")"
# The active party is the last one started: killed, not stopped, so that
# no final checkpoint covers the last rewards.
kill -KILL "${FED_PIDS[-1]}"
wait "${FED_PIDS[-1]}" 2>/dev/null || true
unset 'FED_PIDS[-1]'
fed_down
ls "$work/ap-state" >"$work/ap-state.txt"
grep -q '\.ckpt$' "$work/ap-state.txt" || fail "$old wrote no checkpoint: $(cat "$work/ap-state.txt")"
grep -q '\.wal$' "$work/ap-state.txt" || fail "$old wrote no journal: $(cat "$work/ap-state.txt")"
for f in "$work"/*.log; do mv "$f" "${f%.log}.old.log"; done

fed_start_all "$work" "$new"
fed_federate "$work" "$new" 20 5 >"$work/federate-new.txt" 2>&1 || fail "20 rounds on $new after $old's state: $(tail -3 "$work/federate-new.txt")"
for p in $FED_ACTIVE $FED_PASSIVE; do
  grep -q "loaded the block of mask" "$work/$p.log" || fail "$p did not load its stored block: $(grep -i 'block\|error' "$work/$p.log" | head -5)"
done
line=$(grep -o "recovered [0-9]* updates: checkpoint seq [0-9]*[^)]*" "$work/$FED_ACTIVE.log" | head -1)
[ -n "$line" ] || fail "$FED_ACTIVE recovered nothing: $(grep -i 'state\|error' "$work/$FED_ACTIVE.log" | head -5)"
case "$line" in "recovered 120 updates"*) ;; *) fail "$FED_ACTIVE: $line (120 rewards were acknowledged)";; esac
echo "state-across-builds: $old's block stores, checkpoint and journal load in $new ($line); 20 more rounds went through"
