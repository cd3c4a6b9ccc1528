#!/usr/bin/env bash
# probe_e2e.sh -- blinding the probes, end to end: the health probes of a
# serving active participant stay answered while its metrics port is
# flooded with TLS handshakes that never finish.
#
#   probe_e2e.sh BIN_DIR
#
# A local federation with mutual TLS (scripts/federation-lib.sh); the AP
# runs with --metrics-listen and --probe-socket WORK/ap.probe. Checks:
#  1. the probe socket is there with mode 660, and answers /healthz and
#     /readyz 200 (plain HTTP, curl --unix-socket);
#  2. tests/probe_flood.py: 4 partial TLS handshakes from each of 64 source
#     addresses (127.0.0.1 .. 127.0.0.64, the prober's own among them),
#     reconnected whenever the port cuts one, for FLOOD_S (20) seconds;
#     meanwhile a probe every 0.25 s on the probe socket, /healthz and
#     /readyz in turn: every one must be answered 200 within 1 s (at least
#     40 of them). The same probes on the flooded HTTPS port are printed,
#     not checked: anyone who reaches that port can fill it, which is why
#     the probe socket exists;
#  3. the daemon's own group floods the probe socket itself (its mode lets
#     every process of the group in): 8 processes (peers of their own, not
#     the prober) with 32 connections each, half silent, half dribbling a
#     request that never ends, each reopened as soon as it is closed;
#     meanwhile 28 probes, one every 0.25 s: every one must be answered
#     200 within 1 s. Before the per-peer limits and the accept-time read
#     (o3m_probesock.h, "Bounds") 12 to 16 of the 28 were;
#  4. after the floods the HTTPS port answers /healthz again, and the AP
#     still serves Info;
#  5. a stop removes the socket file.
# Against binaries without --probe-socket (0.4.0 and earlier) the AP does not
# start and check 1 fails.
set -euo pipefail
BIN=${1:?usage: probe_e2e.sh BIN_DIR}
BIN=$(cd "$BIN" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/federation-lib.sh
. "$HERE/../scripts/federation-lib.sh"
FLOOD_S=${FLOOD_S:-20}

command -v curl >/dev/null || { echo "probe_e2e: curl is missing" >&2; exit 1; }
WORK=$(mktemp -d /tmp/o3m-probe.XXXXXX)
cleanup() {
  fed_down
  [ -n "${O3M_KEEP_TEST_DIR:-}" ] && echo "probe_e2e: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "probe_e2e: FAIL: $*" >&2
  for f in "$WORK"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}

AP_METRICS=$(fed_free_port)
SOCK=$WORK/ap.probe
fed_extra_args() {
  [ "$1" = "$FED_ACTIVE" ] && echo "--metrics-listen 127.0.0.1:$AP_METRICS --probe-socket $SOCK"
  [ "$1" != "$FED_ACTIVE" ] && [ "$1" != "$FED_PMG" ] && echo "--pmg-timeout-s 60"
  return 0
}
fed_up "$WORK" "$BIN" --parties 4,4,4 --users 50 --items 20 || fail "the federation did not start"

# --- 1: the socket ------------------------------------------------------------------
probe() { curl -s -m 1 -o /dev/null -w "%{http_code}" --unix-socket "$SOCK" "http://localhost$1" || true; }
[ -S "$SOCK" ] || fail "no probe socket at $SOCK"
[ "$(stat -c %a "$SOCK")" = 660 ] || fail "the probe socket has mode $(stat -c %a "$SOCK"), not 660"
[ "$(probe /healthz)" = 200 ] || fail "/healthz on the probe socket is $(probe /healthz)"
[ "$(probe /readyz)" = 200 ] || fail "/readyz on the probe socket of the serving AP is $(probe /readyz)"
echo "probe_e2e: the probe socket (mode 660) answers /healthz and /readyz"

# --- 2: the flood -----------------------------------------------------------------
out=$(python3 "$HERE/probe_flood.py" "$AP_METRICS" --addrs 64 --per-addr 4 --seconds "$FLOOD_S" \
  --probe-https "$WORK/certs/ca.pem" --probe-unix "$SOCK") || fail "the flood tool failed"
echo "$out" | sed 's/^/probe_e2e: /'
line=$(echo "$out" | grep '^probes unix: ') || fail "no probe figures"
read -r ok total <<<"$(echo "$line" | sed -E 's/^probes unix: ([0-9]+) of ([0-9]+) .*/\1 \2/')"
[ "$total" -ge 40 ] || fail "only $total probes were made"
[ "$ok" = "$total" ] || fail "the probe socket answered $ok of $total probes within 1 s under the flood"

# --- 3: the own group's flood on the probe socket ----------------------------------
out=$(python3 "$HERE/probe_flood.py" 0 --unix-flood "$SOCK" --unix-procs 8 --unix-per-proc 32 \
  --probe-unix "$SOCK" --probes 28) || fail "the unix flood tool failed"
echo "$out" | sed 's/^/probe_e2e: /'
line=$(echo "$out" | grep '^probes unix: ') || fail "no probe figures for the unix flood"
read -r ok total <<<"$(echo "$line" | sed -E 's/^probes unix: ([0-9]+) of ([0-9]+) .*/\1 \2/')"
echo "$out" | grep -qE '^unix flood: 8 processes, [1-9][0-9]* connects' ||
  fail "the unix flood made no connections"
[ "$total" = 28 ] || fail "$total probes were made under the unix flood, not 28"
[ "$ok" = 28 ] || fail "the probe socket answered $ok of 28 probes within 1 s while 8 processes" \
  "of its own group flooded it"

# --- 4: afterwards ----------------------------------------------------------------
https_ok=
for i in $(seq 1 50); do
  code=$(curl -s -m 2 -o /dev/null -w "%{http_code}" --cacert "$WORK/certs/ca.pem" \
    "https://127.0.0.1:$AP_METRICS/healthz" || true)
  [ "$code" = 200 ] && https_ok=1 && break
  sleep 0.2
done
[ -n "$https_ok" ] || fail "the HTTPS port does not answer /healthz after the flood"
"$BIN/o3m-cli" --config "$FED_CONF" --as client --deadline-ms 2000 info >/dev/null ||
  fail "Info fails after the flood"
echo "probe_e2e: after the flood the HTTPS port answers again and the AP serves"

# --- 5: the stop removes the socket -------------------------------------------------
fed_down
[ ! -e "$SOCK" ] || fail "the probe socket is still there after the AP stopped"
echo "probe_e2e: the stop removed the probe socket"
