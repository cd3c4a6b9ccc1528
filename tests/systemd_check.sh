#!/usr/bin/env bash
# systemd_check.sh -- the systemd units of deploy/systemd, checked the way
# systemd would load them, and the daemons' sd_notify without systemd.
#
#   systemd_check.sh BIN_DIR SOURCE_DIR
#
#  1. every unit passes `systemd-analyze verify` with no message at all
#     (an unknown or misspelled key is only a warning there: it fails here),
#     filled in from its template deploy/systemd/*.service.in as
#     `cmake --install` does, with BIN_DIR for the prefix's bin folder;
#  2. every unit is Type=notify and keeps its hardening: NoNewPrivileges,
#     ProtectSystem=strict, an empty CapabilityBoundingSet, and
#     `systemd-analyze security --offline` rates its exposure at most 2.0;
#  3. each daemon, started with its unit's own ExecStart command line (the
#     paths and the instance name filled in), tells a NOTIFY_SOCKET that
#     this test listens on READY=1 once it serves (its /readyz is then 200,
#     on the metrics port and on the unit's --probe-socket alike),
#     with WATCHDOG_USEC=1500000 a WATCHDOG=1 within 1.5 s after that, and
#     STOPPING=1 after a SIGTERM, then exits 0.
# Exit 77 (CTest: skipped) with a message if systemd-analyze is missing.
set -euo pipefail
BIN=$(cd "${1:?usage: systemd_check.sh BIN_DIR SOURCE_DIR}" && pwd)
SRC=$(cd "${2:?usage: systemd_check.sh BIN_DIR SOURCE_DIR}" && pwd)
UNITS="$SRC/deploy/systemd"

if ! command -v systemd-analyze >/dev/null; then
  echo "systemd_check: SKIPPED: systemd-analyze is missing (Debian package systemd; run scripts/setup-deps.sh)"
  exit 77
fi

WORK=$(mktemp -d /tmp/o3m-systemd.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() {
  echo "systemd_check: FAIL: $*" >&2
  exit 1
}

# --- 1 and 2 -----------------------------------------------------------------
n=0
for unit in "$UNITS"/o3m-*@.service.in; do
  name=$(basename "$unit" .in)
  inst="${name%@.service}@test.service"
  sed -e "s|@O3M_BINDIR@|$BIN|" -e "s|@O3M_DOCDIR@|$SRC|" "$unit" >"$WORK/$name"
  ln -s "$name" "$WORK/$inst"
  out=$(systemd-analyze verify --man=no "$WORK/$inst" 2>&1) || fail "$name: systemd-analyze verify: $out"
  [ -z "$out" ] || fail "$name: systemd-analyze verify says: $out"
  for key in '^Type=notify$' '^NoNewPrivileges=yes$' '^ProtectSystem=strict$' \
             '^CapabilityBoundingSet=$' '^ProtectHome=yes$' '^PrivateTmp=yes$'; do
    grep -q "$key" "$unit" || fail "$name has no line matching $key"
  done
  level=$(systemd-analyze security --offline=yes --no-pager "$WORK/$inst" 2>/dev/null |
          sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  [ -n "$level" ] || fail "$name: systemd-analyze security gave no exposure level"
  awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }' || fail "$name: exposure level $level > 2.0"
  echo "systemd_check: $name: verify clean, exposure $level"
  n=$((n + 1))
done
[ "$n" = 3 ] || fail "expected 3 units in $UNITS, found $n"

# --- 3: sd_notify --------------------------------------------------------------
"$BIN/o3m-eval" gen-federation --out "$WORK/fed" --parties 4,4 --users 20 --items 10 \
  --insecure >/dev/null
python3 - "$BIN" "$UNITS" "$WORK" <<'EOF' || fail "sd_notify"
import os, re, shlex, signal, socket, subprocess, sys, time, urllib.request

bin_dir, units, work = sys.argv[1:4]
conf = os.path.join(work, "fed", "federation.conf")
run_dir = os.path.join(work, "run")
parties = {}  # role -> name, from the generated config
name = None
for line in open(conf):
    m = re.match(r"\[party (\S+)\]", line)
    if m:
        name = m.group(1)
    m = re.match(r"role = (\w+)", line)
    if m and name:
        parties[m.group(1)] = name

def command(unit, party):
    """The unit's ExecStart, with this build's paths and the instance name."""
    text = open(os.path.join(units, unit + ".in")).read()
    line = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
    line = (line.replace("@O3M_BINDIR@/", bin_dir + "/")
                .replace("/etc/o3m/federation.conf", conf)
                .replace("/run/o3m/", run_dir + "/")
                .replace("%i", party).replace("${O3M_METRICS_PORT}", "0"))
    # RuntimeDirectory=o3m/%i: made by systemd before ExecStart.
    os.makedirs(os.path.join(run_dir, party), mode=0o750, exist_ok=True)
    return shlex.split(line) + ["--insecure"]

def probe_socket_status(unit, party, path):
    """The status of path on the unit's --probe-socket, or 0."""
    m = re.search(r"--probe-socket (\S+)", " ".join(command(unit, party)))
    assert m, f"{unit}: no --probe-socket in its ExecStart"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(m.group(1))
    s.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    first = s.recv(4096).split(b"\r\n", 1)[0].split()
    s.close()
    return int(first[1]) if len(first) >= 2 else 0

procs = []
try:
    for role, unit in (("pmg", "o3m-pmg@.service"), ("passive", "o3m-passive@.service"),
                       ("active", "o3m-active@.service")):
        sock_path = os.path.join(work, f"notify-{role}.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(sock_path)
        sock.settimeout(60)
        # A 1.5 s watchdog: WATCHDOG=1 must come every 0.5 s.
        env = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="1500000")
        log = open(os.path.join(work, f"{role}.log"), "w+")
        p = subprocess.Popen(command(unit, parties[role]), env=env, stderr=log)
        procs.append((role, p, sock, log))
        msg = sock.recv(4096).decode()
        assert "READY=1" in msg.split("\n"), f"{role}: first notification {msg!r}"
        log.flush()
        port = None
        for line in open(log.name):
            m = re.search(r'metrics and health on http://\S+ \(port (\d+)\)', line)
            if m:
                port = int(m.group(1))
        assert port, f"{role}: no metrics port in its log"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            assert r.status == 200, f"{role}: /readyz {r.status} after READY=1"
        st = probe_socket_status(unit, parties[role], "/readyz")
        assert st == 200, f"{role}: /readyz on the probe socket {st} after READY=1"
        t0 = time.time()
        msg2 = sock.recv(4096).decode()
        assert "WATCHDOG=1" in msg2.split("\n"), f"{role}: after READY=1 {msg2!r}"
        wd_s = time.time() - t0
        assert wd_s < 1.5, f"{role}: WATCHDOG=1 only after {wd_s:.2f} s"
        print(f"systemd_check: {role}: READY=1 ({msg.strip().replace(chr(10), ', ')}), /readyz 200 on the port and the probe socket, WATCHDOG=1 after {wd_s:.2f} s")
    for role, p, sock, log in reversed(procs):
        p.send_signal(signal.SIGTERM)
        msg = sock.recv(4096).decode()
        while msg.split("\n") == ["WATCHDOG=1"]:  # sent before the stop
            msg = sock.recv(4096).decode()
        assert "STOPPING=1" in msg.split("\n"), f"{role}: after SIGTERM {msg!r}"
        rc = p.wait(timeout=60)
        assert rc == 0, f"{role}: exit {rc} after SIGTERM"
        print(f"systemd_check: {role}: STOPPING=1, exit 0")
finally:
    for role, p, sock, log in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
            log.seek(0)
            sys.stderr.write(f"--- {role}.log\n{log.read()}")
EOF
echo "systemd_check: ok"
