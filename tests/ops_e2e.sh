#!/usr/bin/env bash
# ops_e2e.sh -- the daemons' operations surface, end to end
# (docs/operations.md): the real o3m-pmg, o3m-passive and o3m-active with mutual
# TLS, each with --metrics-listen, scraped over HTTPS the way Prometheus
# (with the "monitor" client certificate) and an orchestrator's probes
# (without one) do.
#
#   ops_e2e.sh BIN_DIR
#
# Checks, in this order:
#  1. a passive party started before the mask generator answers /healthz
#     200 and /readyz 503 while it waits for its block, then 200;
#  2. every daemon's /metrics passes `promtool check metrics` and has
#     o3m_build_info (release, commit, protocol, role, party) and the
#     process_* series with plausible values; /metrics
#     is refused (403) without a client certificate, with one of another
#     name than metrics_clients allows, and with a "monitor" certificate
#     of another CA;
#  3. after recommend/reward calls through o3m-cli the AP's decisions,
#     rewards, Recommend and Reward latency counts, calls to each passive
#     party and the passive parties' Mask call counts have moved;
#  4. an unknown path is 404, a POST 405;
#  5. the AP's --log-format json log is one JSON object per line, gRPC
#     core's own lines among them (routed through o3m_log), and a passive
#     party with --log-level warn wrote no INFO line;
#  6. the metrics reveal no decision id, user or item of the calls made;
#  8. slowloris: 16 connections from 127.0.0.2 that
#     trickle a request header line every 3 s do not keep /healthz from
#     answering 127.0.0.1 within 2 s, and the port drops every one of them
#     (12 at once, over the 4 allowed per address; 4 once their request has
#     taken 10 s);
#  9. with a passive party stopped, the AP counts degraded rounds for it,
#     and every metric deploy/'s Grafana dashboard and Prometheus alert
#     rules use is in the daemons' scrapes (monitoring_names.py);
#  7. bad options are refused with a message naming them: a metrics port
#     that is taken (exit 1), a malformed address, an unknown log level or
#     format (exit 2).
# Exit 0 when every check passes; otherwise the failing check's message.
set -euo pipefail
BIN=${1:?usage: ops_e2e.sh BIN_DIR}
BIN=$(cd "$BIN" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/federation-lib.sh
. "$HERE/../scripts/federation-lib.sh"

command -v promtool >/dev/null || { echo "ops_e2e: promtool is missing (Debian package prometheus; scripts/setup-deps.sh)" >&2; exit 1; }
command -v curl >/dev/null || { echo "ops_e2e: curl is missing" >&2; exit 1; }

WORK=$(mktemp -d /tmp/o3m-ops.XXXXXX)
cleanup() {
  fed_down
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "ops_e2e: FAIL: $*" >&2
  for f in "$WORK"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}

# Extra options per daemon (federation-lib.sh calls this): every daemon a
# metrics port picked by the kernel; the AP logs JSON at debug level (so
# gRPC's own lines pass the filter), the first passive party only warnings.
# The passive party at warn level does not log its port: it gets one
# picked here.
FIRST_PP=
PP_PORT=$(fed_free_port)
fed_extra_args() {
  local opts="--metrics-listen 127.0.0.1:0"
  [ "$1" = "$FED_ACTIVE" ] && opts="$opts --log-format json --log-level debug"
  [ "$1" = "$FIRST_PP" ] && opts="--metrics-listen 127.0.0.1:$PP_PORT --log-level warn"
  [ "$1" != "$FED_ACTIVE" ] && [ "$1" != "$FED_PMG" ] && opts="$opts --pmg-timeout-s 60"
  echo "$opts"
}

# metrics_port NAME: the port NAME's metrics server reported in its log.
metrics_port() {
  local i p
  for i in $(seq 1 100); do
    p=$(grep -o 'metrics and health on https://[^ ]* (port [0-9]*)' "$WORK/$1.log" 2>/dev/null |
        sed 's/.*(port \([0-9]*\))/\1/' | head -n 1 || true)
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  fail "$1 never logged its metrics port"
}

# status PORT PATH [curl options]: the HTTP status code over HTTPS, the
# server verified with the federation CA.
status() {
  local port=$1 path=$2
  shift 2
  curl -s -o /dev/null -w '%{http_code}' --cacert "$WORK/certs/ca.pem" "$@" \
    "https://127.0.0.1:$port$path"
}
# scrape PORT: /metrics with the monitor's certificate.
scrape() {
  curl -sf --cacert "$WORK/certs/ca.pem" --cert "$WORK/certs/monitor.pem" \
    --key "$WORK/certs/monitor.key" "https://127.0.0.1:$1/metrics"
}

# metric PORT SERIES: the value of the first sample line starting with SERIES.
metric() {
  scrape "$1" | grep -F -- "$2" | grep -v '^#' | head -n 1 |
    awk '{print $NF}'
}

# The AP keeps its model in a state_dir: rewards go through the journal.
FED_AP_STATE=1 fed_gen "$WORK" "$BIN" --parties 4,4,4 --users 50 --items 20
# The monitoring host's certificate (metrics_clients defaults to monitor),
# and one of the same name from another CA.
"$HERE/../scripts/make-certs.sh" "$WORK/certs" monitor
"$HERE/../scripts/make-certs.sh" "$WORK/rogue" monitor
read -r FIRST_PP _ <<<"$(echo $FED_PASSIVE)"

# --- 1: readiness follows the block ----------------------------------------
fed_start "$WORK" "$BIN" "$FIRST_PP" o3m-passive
for i in $(seq 1 50); do [ "$(status "$PP_PORT" /healthz)" = 200 ] && break; sleep 0.1; done
[ "$(status "$PP_PORT" /healthz)" = 200 ] || fail "/healthz of a waiting passive party is not 200"
[ "$(status "$PP_PORT" /readyz)" = 503 ] ||
  fail "/readyz of a passive party without its block is $(status "$PP_PORT" /readyz), not 503"
fed_start "$WORK" "$BIN" "$FED_PMG" o3m-pmg
for p in $FED_PASSIVE; do [ "$p" = "$FIRST_PP" ] || fed_start "$WORK" "$BIN" "$p" o3m-passive; done
# gRPC core logs at debug level in the AP only, so its lines reach o3m_log.
GRPC_VERBOSITY=debug fed_start "$WORK" "$BIN" "$FED_ACTIVE" o3m-active
for p in "$FED_PMG" $FED_PASSIVE "$FED_ACTIVE"; do fed_wait "$WORK" "$p" || fail "$p did not start"; done
AP_PORT=$(metrics_port "$FED_ACTIVE")
PMG_PORT=$(metrics_port "$FED_PMG")
for port in "$PP_PORT" "$AP_PORT" "$PMG_PORT"; do
  [ "$(status "$port" /readyz)" = 200 ] || fail "/readyz on port $port is not 200 once serving"
  [ "$(status "$port" /healthz)" = 200 ] || fail "/healthz on port $port is not 200"
done
echo "ops_e2e: /healthz and /readyz: 503 while waiting for the block, 200 when serving"

# --- 3: values move ----------------------------------------------------------
dec0=$(metric "$AP_PORT" 'o3m_ap_decisions_total')
[ "$dec0" = 0 ] || fail "o3m_ap_decisions_total starts at '$dec0', not 0"
CLI=("$BIN/o3m-cli" --config "$FED_CONF" --as client)
# o3m-eval gen-federation names users u0.. and items i0..
USER_ID=u17
ITEMS=i0,i1,i2
DECISIONS=()
for i in 1 2 3; do
  out=$("${CLI[@]}" recommend --user "$USER_ID" --items "$ITEMS") || fail "recommend failed: $out"
  DECISIONS+=("$(echo "$out" | sed -n 's/.*decision=\([0-9]*\).*/\1/p')")
done
for d in "${DECISIONS[@]:0:2}"; do
  "${CLI[@]}" reward --decision "$d" --reward 1 >/dev/null || fail "reward of $d failed"
done
# The AP publishes its totals after every drain of its serving thread, which
# may come after the client has its reply: scrape until the totals of the
# calls above are all there (up to 10 s on a loaded machine), then check
# every value.
val() { echo "$SCRAPE" | grep -F -- "$1" | grep -v '^#' | head -n 1 | awk '{print $NF}'; }
for i in $(seq 1 100); do
  SCRAPE=$(scrape "$AP_PORT") || fail "cannot scrape the AP"
  [ "$(val 'o3m_ap_decisions_total ')" = 3 ] && [ "$(val 'o3m_ap_rewards_total ')" = 2 ] &&
    [ "$(val 'o3m_ap_journal_sync_seconds_count ')" = 2 ] &&
    [ "$(val 'o3m_rpc_duration_seconds_count{method="/o3m.v1.Active/Reward"}')" = 2 ] && break
  sleep 0.1
done
[ "$(val 'o3m_ap_decisions_total ')" = 3 ] || fail "o3m_ap_decisions_total is '$(val 'o3m_ap_decisions_total ')' after 3 recommends"
[ "$(val 'o3m_ap_rewards_total ')" = 2 ] || fail "o3m_ap_rewards_total is '$(val 'o3m_ap_rewards_total ')' after 2 rewards"
[ "$(val 'o3m_ap_pending_decisions ')" = 1 ] || fail "o3m_ap_pending_decisions is not 1"
[ "$(val 'o3m_rpc_duration_seconds_count{method="/o3m.v1.Active/Recommend"}')" = 3 ] ||
  fail "the Recommend latency histogram did not count 3 calls"
[ "$(val 'o3m_rpc_duration_seconds_count{method="/o3m.v1.Active/Reward"}')" = 2 ] ||
  fail "the Reward latency histogram did not count 2 calls"
[ "$(val 'o3m_rpc_calls_total{method="/o3m.v1.Active/Reward",code="OK"}')" = 2 ] ||
  fail "o3m_rpc_calls_total for Reward OK is not 2"
for p in $FED_PASSIVE; do
  n=$(val "o3m_ap_pp_calls_total{party=\"$p\",code=\"OK\"}")
  [ -n "$n" ] && [ "${n%%.*}" -ge 3 ] || fail "o3m_ap_pp_calls_total for party $p is '$n', expected >= 3"
done
[ "$(val 'o3m_ap_journal_sync_seconds_count ')" = 2 ] ||
  fail "the journal's fdatasync histogram did not count the 2 rewards"
age=$(val 'o3m_ap_checkpoint_age_seconds ')
[ -n "$age" ] && python3 -c "import sys; a = float(sys.argv[1]); assert 0 <= a < 120" "$age" ||
  fail "o3m_ap_checkpoint_age_seconds is '$age'"
echo "$SCRAPE" | grep -q '^o3m_mask_info{mask_id="[0-9a-f]\{16\}"} 1$' || fail "no o3m_mask_info on the AP"
n=$(metric "$PP_PORT" 'o3m_rpc_calls_total{method="/o3m.v1.Passive/MaskBatch",code="OK"}')
[ -n "$n" ] && [ "${n%%.*}" -ge 1 ] || fail "the passive party counted no MaskBatch call ('$n')"
n=$(metric "$PMG_PORT" 'o3m_rpc_calls_total{method="/o3m.v1.MaskGenerator/GetBlock",code="OK"}')
[ -n "$n" ] && [ "${n%%.*}" -ge 3 ] || fail "the mask generator counted '$n' GetBlock calls, expected >= 3"
[ "$(metric "$PMG_PORT" 'o3m_pmg_parties_confirmed ')" = 3 ] &&
  [ "$(metric "$PMG_PORT" 'o3m_pmg_mask_forgotten ')" = 1 ] ||
  fail "the mask generator does not show 3 confirmed parties and Q forgotten"
[ "$(metric "$PMG_PORT" 'o3m_mask_info{')" = 1 ] || fail "no o3m_mask_info on the PMG"
echo "ops_e2e: metrics moved: 3 decisions, 2 rewards, 1 pending, PP and PMG calls counted"

# --- 2: promtool -------------------------------------------------------------
for port in "$AP_PORT" "$PP_PORT" "$PMG_PORT"; do
  scrape "$port" >"$WORK/scrape-$port.txt" || fail "scrape of port $port"
  promtool check metrics <"$WORK/scrape-$port.txt" >"$WORK/promtool-$port.txt" 2>&1 ||
    fail "promtool check metrics on port $port: $(cat "$WORK/promtool-$port.txt")"
done
[ -n "${O3M_OPS_SAVE:-}" ] && cp "$WORK/scrape-$AP_PORT.txt" "$O3M_OPS_SAVE"
echo "ops_e2e: promtool check metrics passes for the AP, a PP and the PMG"

# --- 2b: build_info and process metrics -------------------------------------
# Every daemon names its release, commit, protocol, role and party, and
# shows its process under the names of Prometheus' process collector.
read -r _ VERSION _ <<<"$("$BIN/o3m-pmg" --version)"
PROTOCOL=$("$BIN/o3m-pmg" --version | sed -n 's/.*(protocol \([0-9]*\)).*/\1/p')
# check_self PORT ROLE PARTY
check_self() {
  local f="$WORK/scrape-$1.txt"
  grep -qE "^o3m_build_info\{version=\"$VERSION\",commit=\"([0-9a-f]+|unknown)\",protocol=\"$PROTOCOL\",role=\"$2\",party=\"$3\"\} 1\$" "$f" ||
    fail "no o3m_build_info of $VERSION, protocol $PROTOCOL, role $2, party $3 on port $1: $(grep build_info "$f" || true)"
  python3 - "$f" <<'PY' || fail "the process metrics of $3 (port $1)"
import sys, time
v = {}
for line in open(sys.argv[1], encoding="utf-8"):
    if line.startswith("process_"):
        name, value = line.split()
        v[name] = float(value)
want = ["process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
        "process_start_time_seconds"]
missing = [n for n in want if n not in v]
assert not missing, f"missing {missing}"
assert 0 <= v["process_cpu_seconds_total"] < 3600, v
assert 1 << 20 < v["process_resident_memory_bytes"] <= v["process_virtual_memory_bytes"], v
assert 3 <= v["process_open_fds"] <= v["process_max_fds"], v
assert time.time() - 600 < v["process_start_time_seconds"] <= time.time() + 1, v
PY
}
check_self "$AP_PORT" active "$FED_ACTIVE"
check_self "$PP_PORT" passive "$FIRST_PP"
check_self "$PMG_PORT" pmg "$FED_PMG"
echo "ops_e2e: o3m_build_info ($VERSION, protocol $PROTOCOL, role, party) and process_* on every daemon"
for port in "$AP_PORT" "$PP_PORT" "$PMG_PORT"; do
  [ "$(status "$port" /metrics)" = 403 ] || fail "/metrics on port $port without a client certificate is $(status "$port" /metrics), not 403"
  [ "$(status "$port" /metrics --cert "$WORK/certs/client.pem" --key "$WORK/certs/client.key")" = 403 ] ||
    fail "/metrics on port $port is not 403 to the certificate 'client', which metrics_clients does not name"
  [ "$(status "$port" /metrics --cert "$WORK/rogue/monitor.pem" --key "$WORK/rogue/monitor.key")" = 403 ] ||
    fail "/metrics on port $port is not 403 to a 'monitor' certificate of another CA"
  [ "$(status "$port" /metrics --cert "$WORK/certs/monitor.pem" --key "$WORK/certs/monitor.key")" = 200 ] ||
    fail "/metrics on port $port is not 200 to the monitor"
done
curl -s -o /dev/null "http://127.0.0.1:$AP_PORT/metrics" && fail "the AP's metrics port answers plain HTTP"
echo "ops_e2e: /metrics is 403 without a certificate, to 'client' and to another CA's 'monitor'; 200 to the monitor; no plain HTTP"

# --- 4: other paths and methods ----------------------------------------------
[ "$(status "$AP_PORT" /nope)" = 404 ] || fail "an unknown path is not 404"
[ "$(status "$AP_PORT" /metrics -X POST)" = 405 ] || fail "a POST is not 405"

# --- 6: nothing private ---------------------------------------------------------
for d in "${DECISIONS[@]}"; do
  grep -q "$d" "$WORK/scrape-$AP_PORT.txt" && fail "the AP's metrics contain decision id $d"
done
grep -qF "$USER_ID" "$WORK/scrape-$AP_PORT.txt" && fail "the AP's metrics contain the user id"

# --- 7: bad options ----------------------------------------------------------------
# expect_refusal CODE TEXT OPTIONS...: o3m-pmg with OPTIONS exits CODE and
# says TEXT on stderr, before it binds its gRPC port.
expect_refusal() {
  local want=$1 text=$2 rc=0
  shift 2
  "$BIN/o3m-pmg" --config "$FED_CONF" --party "$FED_PMG" "$@" 2>"$WORK/refusal.txt" || rc=$?
  [ "$rc" = "$want" ] || fail "o3m-pmg $* exited $rc, expected $want: $(cat "$WORK/refusal.txt")"
  grep -qF -- "$text" "$WORK/refusal.txt" ||
    fail "o3m-pmg $* did not say '$text': $(cat "$WORK/refusal.txt")"
}
expect_refusal 1 "metrics listen 127.0.0.1:$AP_PORT: Address already in use" \
  --metrics-listen "127.0.0.1:$AP_PORT"
expect_refusal 1 "metrics listen 'localhost' is not HOST:PORT" --metrics-listen localhost
expect_refusal 1 "metrics listen '127.0.0.1:70000' is not HOST:PORT" --metrics-listen 127.0.0.1:70000
expect_refusal 2 "--log-level: 'loud' is not debug, info, warn or error" --log-level loud
expect_refusal 2 "--log-format: 'xml' is not text or json" --log-format xml
echo "ops_e2e: a taken metrics port, a bad address, level or format are refused by name"

# --- 8: slowloris ---------------------------------------------------------------------
python3 - "$PMG_PORT" "$WORK/certs/ca.pem" "$WORK/slowloris.open" >"$WORK/slowloris.txt" 2>&1 <<'PY' &
import socket, ssl, sys, time
port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
ctx.check_hostname = False
socks, dropped = [], 0
for _ in range(16):
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=3,
                                       source_address=("127.0.0.2", 0))
        s = ctx.wrap_socket(raw)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    except OSError:
        dropped += 1
at_once = dropped
open(sys.argv[3], "w").close()
t0 = time.time()
while time.time() - t0 < 14 and socks:
    time.sleep(3)
    for s in list(socks):
        try:
            s.sendall(b"X-a: b\r\n")
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    raise OSError("closed")
            except (ssl.SSLWantReadError, BlockingIOError):
                pass
            s.setblocking(True)
        except OSError:
            socks.remove(s)
            dropped += 1
print(at_once, dropped)
PY
SLOW_PID=$!
# The health checks start once the 16 connections are open.
for _ in $(seq 1 300); do [ -e "$WORK/slowloris.open" ] && break; sleep 0.1; done
[ -e "$WORK/slowloris.open" ] || fail "the slowloris client did not open its connections in 30 s"
slow_fail=0 slow_n=0
while kill -0 "$SLOW_PID" 2>/dev/null; do
  slow_n=$((slow_n + 1))
  [ "$(status "$PMG_PORT" /healthz -m 2)" = 200 ] || slow_fail=$((slow_fail + 1))
  sleep 0.5
done
wait "$SLOW_PID" || fail "the slowloris client failed: $(cat "$WORK/slowloris.txt")"
read -r slow_at_once slow_dropped <"$WORK/slowloris.txt"
echo "ops_e2e: slowloris: /healthz failed $slow_fail of $slow_n times; the port dropped $slow_at_once of 16 trickling connections at once, $slow_dropped within 14 s"
[ "$slow_fail" = 0 ] || fail "/healthz did not answer $slow_fail of $slow_n times during the slowloris"
[ "$slow_dropped" = 16 ] || fail "the port still held $((16 - slow_dropped)) trickling connections after 14 s"

# --- 9: the dashboard and alerts of deploy/ use only exported metrics ---------------
# A passive party stops, so that the AP's degraded rounds and failed calls
# to it, which the alerts watch, exist too; then every metric name of
# deploy/prometheus/o3m-alerts.yml and deploy/grafana/o3m-dashboard.json
# must be in a scrape of the AP, a PP or the PMG (tests/monitoring_names.py).
LAST_PP=
for p in $FED_PASSIVE; do [ "$p" = "$FIRST_PP" ] || LAST_PP=$p; done
for i in "${!FED_NAMES[@]}"; do
  if [ "${FED_NAMES[$i]}" = "$LAST_PP" ]; then
    kill "${FED_PIDS[$i]}"
    wait "${FED_PIDS[$i]}" 2>/dev/null || true
    FED_PIDS[i]=
  fi
done
"${CLI[@]}" recommend --user "$USER_ID" --items "$ITEMS" >/dev/null || fail "a recommend without $LAST_PP failed"
for i in $(seq 1 100); do
  scrape "$AP_PORT" >"$WORK/scrape-degraded.txt" || fail "cannot scrape the AP"
  grep -q "^o3m_ap_degraded_rounds_total{party=\"$LAST_PP\"" "$WORK/scrape-degraded.txt" && break
  sleep 0.1
done
grep -q "^o3m_ap_degraded_rounds_total{party=\"$LAST_PP\"" "$WORK/scrape-degraded.txt" ||
  fail "no degraded round counted for $LAST_PP after it stopped"
python3 "$HERE/monitoring_names.py" "$HERE/.." "$WORK/scrape-degraded.txt" \
  "$WORK/scrape-$AP_PORT.txt" "$WORK/scrape-$PP_PORT.txt" "$WORK/scrape-$PMG_PORT.txt" ||
  fail "deploy/'s dashboard or alerts name a metric the daemons do not export"

# --- 5: logs --------------------------------------------------------------------
fed_down
python3 - "$WORK/$FED_ACTIVE.log" <<'EOF' || fail "the AP's JSON log"
import json, sys
n = grpc = 0
levels = set()
with open(sys.argv[1], encoding="utf-8") as f:
    for i, line in enumerate(f, 1):
        rec = json.loads(line)  # every line must be one JSON object
        assert set(rec) == {"time", "level", "prog", "msg"}, f"line {i}: keys {sorted(rec)}"
        levels.add(rec["level"])
        grpc += rec["msg"].startswith("grpc ")
        n += 1
assert n >= 3, f"only {n} lines"
assert "info" in levels, f"levels {levels}"
assert grpc > 0, "no gRPC core line went through o3m_log"
print(f"ops_e2e: the AP's log: {n} JSON lines, {grpc} of them gRPC core's, levels {sorted(levels)}")
EOF
grep -q ' INFO ' "$WORK/$FIRST_PP.log" && fail "--log-level warn let INFO lines through"
grep -q ' INFO ' "$WORK/$FED_PMG.log" || fail "the PMG at the default level wrote no INFO line"
echo "ops_e2e: --log-level warn filtered the passive party's INFO lines"
echo "ops_e2e: ok"
