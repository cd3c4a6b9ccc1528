#!/usr/bin/env bash
# fairness_e2e.sh -- one client's flood against another, end to end: its valid
# Recommends of the largest allowed size (K = 1000, 128-byte ids, 16 in
# flight) must not make another client's rounds miss their deadline.
#
#   fairness_e2e.sh BIN_DIR
#
# A local federation with mutual TLS on loopback (d = 100, 4 passive
# parties, secure aggregation, max_candidates 1000, the AP on AP_THREADS
# threads, default 3) with two clients, each with its own certificate:
# "flood" floods as above while "client" (K = 20, 4 in flight) makes
# Recommends with a deadline of HONEST_DEADLINE_MS (default 5000) for
# HONEST_S (10) seconds. Fails if any of the honest client's calls failed
# (DEADLINE_EXCEEDED above all) or none was answered. Before per-client
# fairness, the flood's rounds shared batches with the honest ones: batches
# of up to 20 rounds of 1000 candidates (16 MB per passive party) missed the
# fan-out deadline (the federation's deadline_ms, 500) and the AP failed the
# honest rounds in them with DEADLINE_EXCEEDED (22 of the honest client's
# calls on the release before, with this deadline). The honest client's own
# deadline is ten times the fan-out's so that what fails the test is what
# the AP does to its rounds, not how slow a loaded machine (or a sanitizer
# build) makes them; the latencies are attack-fairness.sh's to measure.
set -euo pipefail
BIN=${1:?usage: fairness_e2e.sh BIN_DIR}
BIN=$(cd "$BIN" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/federation-lib.sh
. "$HERE/../scripts/federation-lib.sh"
HONEST_S=${HONEST_S:-10}
HONEST_DEADLINE_MS=${HONEST_DEADLINE_MS:-5000}
# The load generator (its --id-bytes and --deadline-ms are new with this
# test): LOAD_BIN, else BIN_DIR; for a run against older daemons.
LOAD_BIN=$(cd "${LOAD_BIN:-$BIN}" && pwd)
AP_THREADS=${AP_THREADS:-3}

WORK=$(mktemp -d /tmp/o3m-fairness.XXXXXX)
FLOOD_PID=
cleanup() {
  [ -n "$FLOOD_PID" ] && kill "$FLOOD_PID" 2>/dev/null || true
  fed_down
  [ -n "${O3M_KEEP_TEST_DIR:-}" ] && echo "fairness_e2e: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "fairness_e2e: FAIL: $*" >&2
  exit 1
}

fed_gen "$WORK" "$BIN" --parties 20,20,20,20,20 --users 1000 --items 1000 \
  --max-candidates 1000 --aggregation secure
"$HERE/../scripts/make-certs.sh" "$WORK/certs" flood >/dev/null
printf '\n[client flood]\ncert = certs/flood.pem\nkey = certs/flood.key\n' >>"$FED_CONF"
fed_start "$WORK" "$BIN" "$FED_PMG" o3m-pmg
for p in $FED_PASSIVE; do fed_start "$WORK" "$BIN" "$p" o3m-passive; done
FED_ACTIVE_ARGS="--threads $AP_THREADS" fed_start "$WORK" "$BIN" "$FED_ACTIVE" o3m-active
for p in "$FED_PMG" $FED_PASSIVE "$FED_ACTIVE"; do fed_wait "$WORK" "$p" || fail "$p did not start"; done

load() {
  local who=$1
  shift
  "$LOAD_BIN/o3m-bench-load" --config "$FED_CONF" --cert "$WORK/certs/$who.pem" \
    --key "$WORK/certs/$who.key" --users 1000 --items 1000 "$@"
}
load flood --K 1000 --id-bytes 128 --concurrency 16 --warmup 0 --seconds $((HONEST_S + 4)) \
  >"$WORK/flood.out" 2>&1 &
FLOOD_PID=$!
sleep 2
load client --K 20 --concurrency 4 --warmup 0 --seconds "$HONEST_S" \
  --deadline-ms "$HONEST_DEADLINE_MS" >"$WORK/honest.out" 2>"$WORK/honest.err" ||
  fail "o3m-bench-load (honest client) failed: $(cat "$WORK/honest.err")"
wait "$FLOOD_PID" || true
FLOOD_PID=
cat "$WORK/honest.out"
read -r answered errors <<<"$(awk '$1 ~ /^[0-9]+$/ && NF >= 9 {print $2, $8}' "$WORK/honest.out")"
read -r flood flood_errors <<<"$(awk '$1 ~ /^[0-9]+$/ && NF >= 9 {print $2, $8}' "$WORK/flood.out")"
echo "fairness_e2e: honest client: $answered decisions/s, $errors failed calls; flood: $flood decisions/s, ${flood_errors:-?} failed calls"
[ "${errors:-x}" = 0 ] ||
  fail "the honest client had $errors failed calls under the flood: $(sort -u "$WORK/honest.err" | head -3)"
awk -v a="$answered" 'BEGIN {exit !(a > 0)}' || fail "the honest client got no answer"
# The flood's own rounds may miss the fan-out deadline (each goes alone, and
# a sanitizer build is slow): what matters is that it was sent.
awk -v f="${flood:-0}" -v e="${flood_errors:-0}" 'BEGIN {exit !(f > 0 || e > 0)}' ||
  fail "the flood made no call (no flood)"
echo "fairness_e2e: PASS"
