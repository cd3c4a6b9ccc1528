#!/usr/bin/env bash
# h2flood_e2e.sh -- memory before authorization, end to
# end with the real daemons and mutual TLS.
#
#   h2flood_e2e.sh BIN_DIR
#
# Starts a federation (d = 60: the AP and two passive parties of 20
# columns, max_candidates 1000, so the largest Recommend is about 320 KB and
# the largest MaskBatch about 4.7 MB) with a second client, "attacker",
# then replays the three forms of the attack with BIN_DIR/h2flood
# (scripts/attack-lib.sh): a) a passive party's certificate on the AP's
# Recommend and the client's on a passive party's MaskBatch, streams one
# byte short of the largest request, never finished; b) headers-only
# streams on the AP; c) form a) on the AP from the attacker client, which
# the AP answers, held for 12 s, past the 10 s receive deadline. For each
# it checks that the target's RSS stays within LIMIT_MB (50) of its value
# before, and that the honest client ("client", o3m-bench-load at
# concurrency 4 for 3 s) gets answers meanwhile without a single error; for
# c) also that no stream was left open at the end (the receive deadline cut
# them). Code that authorizes only complete messages buffers every stream: the AP grows
# by about 650 MB in a). Exit 0 when every check passes.
set -euo pipefail
BIN=${1:?usage: h2flood_e2e.sh BIN_DIR}
BIN=$(cd "$BIN" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
# The flood tool is a test tool of this build, also when BIN_DIR is another
# build's daemons (the check that the test fails on the old code).
FLOOD_BIN=${FLOOD_BIN:-$BIN}
# shellcheck source=../scripts/federation-lib.sh
. "$HERE/../scripts/federation-lib.sh"
# shellcheck source=../scripts/attack-lib.sh
. "$HERE/../scripts/attack-lib.sh"
LIMIT_MB=${LIMIT_MB:-50}
# Under AddressSanitizer freed memory waits in its quarantine (up to 256 MB)
# instead of going back to the kernel, so RSS means nothing there
# (tests/fed_proc.h, FED_ASAN): the figures are printed, not checked.
asan=0
if grep -q __asan_init "$BIN/o3m-active"; then asan=1; fi

[ -x "$FLOOD_BIN/h2flood" ] || { echo "h2flood_e2e: $FLOOD_BIN/h2flood is not built" >&2; exit 1; }
WORK=$(mktemp -d /tmp/o3m-h2flood.XXXXXX)
cleanup() {
  fed_down
  if [ -n "${O3M_KEEP_TEST_DIR:-}" ]; then echo "h2flood_e2e: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

failed=0
fail() {
  echo "h2flood_e2e: FAIL: $*" >&2
  failed=1
}

attack_fed_up "$WORK" "$BIN" --parties 20,20,20 --users 200 --items 50

honest=("$BIN/o3m-bench-load" --config "$FED_CONF" --cert "$WORK/certs/client.pem"
  --key "$WORK/certs/client.key" --K 8 --concurrency 4 --seconds 3 --warmup 0)
# A first run warms the daemons up (arenas, channels), so the RSS before
# each attack is the steady state an honest client leaves.
"${honest[@]}" >/dev/null

# The honest run's decisions/s and errors, from its table's last line.
honest_check() {
  local line dps errs
  line=$(awk '$1 == 4' "$WORK/honest.out" | tail -n 1)
  dps=$(echo "$line" | awk '{print int($2)}')
  errs=$(echo "$line" | awk '{print $8}')
  echo "  honest client meanwhile: ${dps:-?} decisions/s, ${errs:-?} errors"
  # Under ASan every refusal costs the AP's one serving thread some 25
  # times more, so the honest calls queued behind a headers-only flood may
  # miss the federation's 200 ms deadline: there they only have to be
  # answered at all.
  if [ "$asan" = 1 ] && [ -n "$line" ] && [ "${dps:-0}" -gt 0 ]; then errs=0; fi
  if [ "$HONEST_RC" != 0 ] || [ -z "$line" ] || [ "${dps:-0}" -le 0 ] || [ "${errs:-1}" != 0 ]; then
    fail "$1: the honest client did not get its answers (rc $HONEST_RC):"
    cat "$WORK/honest.out" >&2
  fi
}

for form in a-ap a-pp b-ap c-ap; do
  hold=6
  [ "$form" = c-ap ] && hold=12
  attack_run "$form" "$hold" "$FLOOD_BIN" "${honest[@]}"
  echo "$form: RSS ${ATTACK_IDLE} -> peak ${ATTACK_PEAK} MB (after: ${ATTACK_AFTER} MB); $ATTACK_OUT"
  if [ "$asan" = 0 ] && [ "$ATTACK_PEAK" -gt $((ATTACK_IDLE + LIMIT_MB)) ]; then
    fail "$form: RSS grew from $ATTACK_IDLE to $ATTACK_PEAK MB, more than $LIMIT_MB MB"
  fi
  case "$ATTACK_OUT" in
  *"connections=0/"*) fail "$form: the flood made no connection: $ATTACK_OUT" ;;
  esac
  honest_check "$form"
  if [ "$form" = c-ap ] && ! echo "$ATTACK_OUT" | grep -q ' open_at_end=0 '; then
    fail "c-ap: streams were still open after 12 s (no receive deadline): $ATTACK_OUT"
  fi
done
if [ "$failed" != 0 ]; then
  for f in "$WORK"/*.log; do echo "--- $f" >&2; tail -n 5 "$f" >&2; done
  exit 1
fi
echo "h2flood_e2e: every form stayed within $LIMIT_MB MB and the honest client was answered"
