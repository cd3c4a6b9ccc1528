#!/usr/bin/env bash
# netns_e2e.sh -- the federation across hosts (scripts/netns-federation.sh):
# the PMG, the active party, four passive parties and the client each in a
# network namespace of its own on a bridge, with separate listen and dial
# addresses (the active party behind a port forward, the passive parties on
# 0.0.0.0) and certificates naming their hosts.
#
#   netns_e2e.sh BIN_DIR
#
# Checks, in this order:
#  1. without a firewall: the daemons bind their listen addresses, each
#     named only in its own host's copy of the config, and all six log one
#     fingerprint (listen is not covered, so the copies agree), every
#     certificate names its party (DNS) and its host (IP), ROUNDS (300) of
#     the demo's rounds from the client's host equal the central run's, and
#     a passive party reaches another's port (so check 2 can fail);
#  2. with the deploy guide's firewall (up --firewall): the reachability
#     matrix is exactly the guide's (the PMG accepts the AP and the passive
#     parties, each passive party the AP only, the AP the client only), so a
#     passive party cannot reach another's port, and ROUNDS rounds still
#     equal the central run's.
# Exit 0 when every check passes; 77 (CTest SKIP) with the reason when no
# network namespace can be made here (not root, no ip netns, no nft).
# Always tears down (trap), and every step is bounded in time: all of them
# together by BUDGET_S (75) seconds, so that the teardown still runs within
# CTest's 90 s (a CTest timeout would kill the script before its trap).
set -euo pipefail
BIN=${1:?usage: netns_e2e.sh BIN_DIR}
BIN=$(cd "$BIN" && pwd)
ROUNDS=${ROUNDS:-300}
BUDGET_S=${BUDGET_S:-75}
NAME=netns_e2e
# shellcheck source=netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"

# demo: the demo's rounds from the client's host; every decision must equal
# the central run's.
demo() {
  bounded "$NETNS" demo "${opts[@]}" --rounds "$ROUNDS" --require-match >"$WORK/demo.out" \
    2>"$WORK/demo.err" || { cat "$WORK/demo.out" "$WORK/demo.err" >&2; fail "$1: federate failed"; }
  grep -q "^decisions equal to central    $ROUNDS/$ROUNDS (100.00%)" "$WORK/demo.out" ||
    { cat "$WORK/demo.out" >&2; fail "$1: not every decision equals the central one"; }
  echo "netns_e2e: $1: $(grep '^decisions equal' "$WORK/demo.out")"
}

# 1. No firewall.
bounded "$NETNS" up "${opts[@]}" || fail "up failed"
grep -q "listening on 0.0.0.0:7443 " "$DIR/shop.log" || fail "the AP does not listen on its listen key"
grep -q "serving 0.0.0.0:7000 " "$DIR/bank.log" || fail "bank does not listen on its listen key"
grep -q "serving 10.99.0.10:7000 " "$DIR/pmg.log" || fail "the PMG does not listen on its address"
grep -q "^listen = " "$DIR/federation.conf" && fail "the shared config names a listen"
[ "$(grep -c "^listen = " "$DIR/federation.shop.conf")" = 1 ] ||
  fail "the AP's copy of the config does not name its listen alone"
fps=$(grep -h "federation fingerprint:" "$DIR"/*.log | sed 's/.*full: //' | sort -u)
[ "$(grep -c . <<<"$fps")" = 1 ] || fail "the parties' copies give different fingerprints: $fps"
for p in pmg:10.99.0.10 shop:10.99.0.20 bank:10.99.0.41 mall:10.99.0.44 client:10.99.0.30; do
  san=$(openssl x509 -in "$DIR/certs/${p%%:*}.pem" -noout -ext subjectAltName)
  [[ "$san" == *"DNS:${p%%:*},"* && "$san" == *"IP Address:${p#*:}"* ]] ||
    fail "the certificate of ${p%%:*} lacks DNS:${p%%:*} or IP:${p#*:}: $san"
done
demo "no firewall"
bounded "$NETNS" reach "${opts[@]}" bank telco ||
  fail "without the firewall bank cannot reach telco's port: the firewall check would prove nothing"

# 2. The deploy guide's firewall, applied before the daemons start.
bounded "$NETNS" up --firewall "${opts[@]}" || fail "up --firewall failed"
bounded "$NETNS" status "${opts[@]}" >"$WORK/status" || fail "status failed"
cat >"$WORK/want" <<'EOF'
  from     pmg     shop    bank    telco   insurer mall
  pmg      -       .       .       .       .       .
  shop     +       -       +       +       +       +
  bank     +       .       -       .       .       .
  telco    +       .       .       -       .       .
  insurer  +       .       .       .       -       .
  mall     +       .       .       .       .       -
  client   .       +       .       .       .       .
EOF
sed -n '/^reachability/,$p' "$WORK/status" | tail -n +2 | sed 's/ *$//' >"$WORK/got"
diff "$WORK/want" "$WORK/got" >&2 || fail "the reachability matrix under the firewall differs (above)"
echo "netns_e2e: firewall matrix (row dials column; + connects, . dropped):"
cat "$WORK/got"
if bounded "$NETNS" reach "${opts[@]}" bank telco; then
  fail "under the firewall bank still reaches telco's port"
fi
demo "firewall"
echo "netns_e2e: OK"
