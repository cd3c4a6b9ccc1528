#!/usr/bin/env bash
# fdflood_e2e.sh -- a flood of idle TCP connections against the active
# participant's gRPC port, end to end with the real
# daemons and mutual TLS.
#
#   fdflood_e2e.sh BIN_DIR
#
# Checks, in this order:
#  1. every daemon raised its soft open-file limit to the hard limit (this
#     script lowers its own soft limit to 256 first, so the daemons inherit
#     a soft limit below the hard one) and logged it;
#  2. FLOOD (300) idle connections that never start TLS, more than the soft
#     limit of 256 allows, do not keep the AP from serving Info and
#     Recommend, /readyz stays 200, and the AP closes every one of them
#     within HANDSHAKE_S (8) seconds (its 5 s handshake timeout; gRPC's
#     default is 120 s);
#  3. with the AP's limit cut to its open descriptors plus a few (prlimit
#     --pid: the way a limit is reached, only cheaper) the same flood makes
#     accept() fail with EMFILE: Info fails and /readyz says 503 meanwhile.
#     After the attacker closed the connections, /readyz must agree with
#     the port. gRPC 1.51 stops accepting on a listener for good after an
#     accept() error other than EAGAIN (src/core/lib/iomgr/
#     tcp_server_posix.cc, on_read), so the AP does not serve again without
#     a restart: the script reports whether Info and Recommend came back
#     within RECOVER_S (20) seconds, and fails if they did while /readyz
#     says 503, or did not while /readyz says 200 or the AP still sends
#     WATCHDOG=1 (it runs with a 3 s systemd watchdog on a NOTIFY_SOCKET
#     this script listens on, so systemd would restart it).
# Exit 0 when every check passes (77: the hard limit is too low to test);
# otherwise the failing check's message.
set -euo pipefail
BIN=${1:?usage: fdflood_e2e.sh BIN_DIR}
BIN=$(cd "$BIN" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/federation-lib.sh
. "$HERE/../scripts/federation-lib.sh"
FLOOD=${FLOOD:-300}
HANDSHAKE_S=${HANDSHAKE_S:-8}
RECOVER_S=${RECOVER_S:-20}

command -v prlimit >/dev/null || { echo "fdflood_e2e: prlimit is missing (util-linux)" >&2; exit 1; }
command -v curl >/dev/null || { echo "fdflood_e2e: curl is missing" >&2; exit 1; }

WORK=$(mktemp -d /tmp/o3m-fdflood.XXXXXX)
FLOOD_PID=
NOTIFY_PID=
cleanup() {
  [ -n "$FLOOD_PID" ] && kill "$FLOOD_PID" 2>/dev/null || true
  [ -n "$NOTIFY_PID" ] && kill "$NOTIFY_PID" 2>/dev/null || true
  fed_down
  [ -n "${O3M_KEEP_TEST_DIR:-}" ] && echo "fdflood_e2e: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "fdflood_e2e: FAIL: $*" >&2
  for f in "$WORK"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}

HARD=$(ulimit -Hn)
[ "$HARD" = unlimited ] || [ "$HARD" -gt $((FLOOD + 100)) ] ||
  { echo "fdflood_e2e: the hard open-file limit is $HARD; too low for this test" >&2; exit 77; }
ulimit -Sn 256

AP_METRICS=$(fed_free_port)
fed_extra_args() {
  [ "$1" = "$FED_ACTIVE" ] && echo "--metrics-listen 127.0.0.1:$AP_METRICS"
  [ "$1" != "$FED_ACTIVE" ] && [ "$1" != "$FED_PMG" ] && echo "--pmg-timeout-s 60"
  return 0
}
# The AP alone runs under a systemd watchdog of 3 s: a listener on its
# NOTIFY_SOCKET writes the time of every WATCHDOG=1 to watchdog.txt.
python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "w") as out:
    while True:
        msg = s.recv(4096).decode()
        if "WATCHDOG=1" in msg.split("\n"):
            print("%.3f" % time.time(), file=out, flush=True)
' "$WORK/notify.sock" "$WORK/watchdog.txt" &
NOTIFY_PID=$!
fed_gen "$WORK" "$BIN" --parties 4,4,4 --users 50 --items 20 || fail "the federation did not generate"
fed_start "$WORK" "$BIN" "$FED_PMG" o3m-pmg
for p in $FED_PASSIVE; do fed_start "$WORK" "$BIN" "$p" o3m-passive; done
for i in $(seq 1 50); do [ -S "$WORK/notify.sock" ] && break; sleep 0.1; done
NOTIFY_SOCKET=$WORK/notify.sock WATCHDOG_USEC=3000000 fed_start "$WORK" "$BIN" "$FED_ACTIVE" o3m-active
for p in "$FED_PMG" $FED_PASSIVE "$FED_ACTIVE"; do fed_wait "$WORK" "$p" || fail "$p did not start"; done
ulimit -Sn "$HARD" # the attacker's, back to the hard limit
AP_PID=
for i in "${!FED_NAMES[@]}"; do
  [ "${FED_NAMES[$i]}" = "$FED_ACTIVE" ] && AP_PID=${FED_PIDS[$i]}
done
AP_PORT=$(cat "$WORK/$FED_ACTIVE.ready")

# --- 1: the soft limit is the hard one ------------------------------------------
for i in "${!FED_NAMES[@]}"; do
  pid=${FED_PIDS[$i]} name=${FED_NAMES[$i]}
  soft=$(awk '/^Max open files/{print $4}' "/proc/$pid/limits")
  [ "$soft" = "$HARD" ] || fail "$name's soft open-file limit is $soft, not the hard $HARD"
  grep -q "open-file limit: $HARD\|open-file limit: unlimited" "$WORK/$name.log" ||
    fail "$name did not log its open-file limit"
done
echo "fdflood_e2e: every daemon raised its soft open-file limit from 256 to $HARD"

# wait_for_file PATH, wait_for_grep TEXT FILE: up to 30 s.
wait_for_file() { local i; for i in $(seq 1 300); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }
wait_for_grep() { local i; for i in $(seq 1 300); do grep -q "$1" "$2" && return 0; sleep 0.1; done; return 1; }
readyz() { curl -s -m 5 -o /dev/null -w "%{http_code}" --cacert "$WORK/certs/ca.pem" "https://127.0.0.1:$AP_METRICS/readyz" || true; }
CLI=("$BIN/o3m-cli" --config "$FED_CONF" --as client --deadline-ms 2000)
info_ok() { "${CLI[@]}" info >/dev/null 2>&1; }
recommend_ok() { "${CLI[@]}" recommend --user u3 --items i0,i1,i2 >/dev/null 2>&1; }
[ "$(readyz)" = 200 ] || fail "/readyz of the serving AP is $(readyz), not 200"
info_ok || fail "Info fails before the flood"

# --- 2: a flood within the raised limit -------------------------------------------
# The attacker: FLOOD connections that send nothing (it creates
# flood2.open once they are all open); after HANDSHAKE_S seconds it prints
# how many of them the server has closed.
python3 -c '
import socket, sys, time
port, n, wait = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
socks = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(n)]
open(sys.argv[4], "w").close()
time.sleep(wait)
closed = 0
for s in socks:
    s.setblocking(False)
    try:
        closed += s.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(closed)
' "$AP_PORT" "$FLOOD" "$HANDSHAKE_S" "$WORK/flood2.open" >"$WORK/flood2.txt" &
FLOOD_PID=$!
wait_for_file "$WORK/flood2.open" || fail "the attacker of check 2 did not open its connections"
info_ok || fail "Info fails while $FLOOD idle connections are open (the soft limit was 256)"
recommend_ok || fail "Recommend fails while $FLOOD idle connections are open"
[ "$(readyz)" = 200 ] || fail "/readyz is $(readyz) during a flood the AP survives"
wait "$FLOOD_PID" || fail "the attacker of check 2 failed"
FLOOD_PID=
closed=$(cat "$WORK/flood2.txt")
echo "fdflood_e2e: $FLOOD idle connections: Info, Recommend and /readyz fine; the AP closed $closed of them within $HANDSHAKE_S s"
[ "$closed" = "$FLOOD" ] || fail "the AP closed only $closed of $FLOOD idle connections in $HANDSHAKE_S s"

# watchdogs_since T: how many WATCHDOG=1 the AP sent after time T.
watchdogs_since() { awk -v t="$1" '$1 > t' "$WORK/watchdog.txt" | wc -l; }
[ "$(watchdogs_since 0)" -ge 2 ] || fail "the AP sent $(watchdogs_since 0) WATCHDOG=1 while serving, expected >= 2"

# --- 3: a flood past the limit ------------------------------------------------------
open_fds=$(find "/proc/$AP_PID/fd" -mindepth 1 | wc -l)
LIMIT=$((open_fds + 12))
prlimit --pid "$AP_PID" --nofile="$LIMIT:$LIMIT" || fail "prlimit --pid $AP_PID"
# The attacker: FLOOD connections that send nothing (flood3.open once it has
# opened what it could), held until its stdin closes, then closed at once.
exec 7> >(python3 -c '
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = []
for _ in range(n):
    try:
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError:
        break
open(sys.argv[3], "w").close()
sys.stdin.read()
for s in socks:
    s.close()
' "$AP_PORT" "$FLOOD" "$WORK/flood3.open")
FLOOD_PID=$!
wait_for_file "$WORK/flood3.open" || fail "the attacker of check 3 did not open its connections"
during_info=ok
info_ok || during_info=failed
during_ready=$(readyz)
echo "fdflood_e2e: flood past the limit ($LIMIT, $open_fds open before): Info $during_info, /readyz $during_ready"
wait_for_grep "Too many open files" "$WORK/$FED_ACTIVE.log" ||
  fail "the AP never ran out of descriptors: the flood did not reach the limit"
if [ "$during_info" = failed ] && [ "$during_ready" = 200 ]; then
  fail "/readyz said 200 while Info failed during the flood"
fi
exec 7>&-
wait "$FLOOD_PID" 2>/dev/null || true
FLOOD_PID=
t0=$(date +%s.%N)
ok=0
end=$((SECONDS + RECOVER_S))
while [ "$SECONDS" -lt "$end" ]; do
  if info_ok && recommend_ok; then ok=1; break; fi
  sleep 0.5
done
secs=$(python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' \
  "$t0" "$(date +%s.%N)")
sleep 2 # past the probe's cache
after_ready=$(readyz)
t_wd=$(date +%s.%N)
sleep 3 # one watchdog interval
wd_after=$(watchdogs_since "$t_wd")
kill -0 "$AP_PID" 2>/dev/null || fail "the AP exited"
if [ "$ok" = 1 ]; then
  echo "fdflood_e2e: Info and Recommend work again $secs s after the flood ended; /readyz $after_ready, $wd_after WATCHDOG=1 in 3 s"
  [ "$after_ready" = 200 ] || fail "/readyz is $after_ready although the AP serves again"
else
  echo "fdflood_e2e: Info and Recommend still fail $secs s after the flood ended (gRPC's listener stopped); /readyz $after_ready, $wd_after WATCHDOG=1 in the last 3 s (systemd would restart it)"
  [ "$after_ready" = 503 ] || fail "/readyz is $after_ready although the AP accepts no connection"
  [ "$wd_after" = 0 ] || fail "the AP sent WATCHDOG=1 although it accepts no connection"
fi
echo "fdflood_e2e: ok"
