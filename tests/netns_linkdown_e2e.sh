#!/usr/bin/env bash
# netns_linkdown_e2e.sh -- a host of the federation cut off the network and
# plugged back in (degraded, then federated again), with every party on a host
# of its own (scripts/netns-federation.sh up --firewall: network
# namespaces on a bridge, the deploy guide's nftables rules).
#
#   netns_linkdown_e2e.sh BIN_DIR
#
# The client's host streams the demo's rounds through the active party
# (o3m-eval federate: a Recommend and its Reward per round, one after the
# other) for RUN_S (24) seconds. CUT_AT_S (4) seconds in, one passive
# party's host (telco) loses its link (`ip link set eth0 down`: no reset
# reaches anyone, its packets are lost) for CUT_S (10) seconds, and then
# gets it back. Checks:
#  - no Recommend or Reward fails (the driver stops at the first error);
#  - the rounds before the cut are federated; the cut's rounds, from the
#    first degraded one until the link is back, are all degraded and name
#    telco (and only telco), and the first is answered within
#    TO_DEGRADED_MAX_S (2: the federation's deadline of 0.5 s, plus slack)
#    of the cut;
#  - federated rounds resume within BACK_MAX_S (1.5) seconds of the link
#    coming back, and every later round is federated: the breaker's probe
#    asks at most every 500 ms, a probe waits at most the 0.5 s deadline,
#    and each probe that failed dials on a fresh channel (ap_peers.h), so
#    about 1 s plus a handshake; the requirement was 2 s;
#  - every federated decision, after the cut too, equals the centralized
#    policy's fed the federated rounds' rewards, and every degraded one the
#    AP's local model's fed every reward (the driver's --require-match);
#  - every acknowledged reward was applied once to the right model(s): the
#    AP's Stats count the driver's rounds, the federated model's updates
#    equal its federated rounds, the local model's updates all rounds, its
#    degraded rounds the degraded ones, and nothing is pending.
# It prints the time to degraded, the time back to federated and the rounds
# before, during and after the cut. Exit 0 when every check passes; 77
# (CTest SKIP) with the reason where no network namespace can be made.
# Everything is bounded by BUDGET_S (75) seconds, inside CTest's 90.
set -euo pipefail
BIN=${1:?usage: netns_linkdown_e2e.sh BIN_DIR}
BIN=$(cd "$BIN" && pwd)
RUN_S=${RUN_S:-24}
CUT_AT_S=${CUT_AT_S:-4}
CUT_S=${CUT_S:-10}
TO_DEGRADED_MAX_S=${TO_DEGRADED_MAX_S:-2}
BACK_MAX_S=${BACK_MAX_S:-1.5}
BUDGET_S=${BUDGET_S:-75}
VICTIM=telco
NAME=netns_linkdown_e2e
# shellcheck source=netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"

now_ms() { date +%s%3N; }

bounded "$NETNS" up --firewall "${opts[@]}" || fail "up --firewall failed"

# The load, from the client's host, in the background; the driver's trace
# says when each round was answered and whether it was degraded.
bounded "$NETNS" demo "${opts[@]}" --rounds 10000000 --require-match -- \
  --seconds "$RUN_S" --trace "$WORK/trace" >"$WORK/demo.out" 2>"$WORK/demo.err" &
driver=$!
t_start=$(now_ms)
sleep "$CUT_AT_S"
t_down=$(now_ms)
bounded "$NETNS" link "${opts[@]}" "$VICTIM" down || fail "cannot take $VICTIM's link down"
sleep "$CUT_S"
t_up=$(now_ms)
bounded "$NETNS" link "${opts[@]}" "$VICTIM" up || fail "cannot bring $VICTIM's link up"
rc=0
wait "$driver" || rc=$?
[ "$rc" = 0 ] || {
  cat "$WORK/demo.out" "$WORK/demo.err" >&2
  fail "the client's load failed (exit $rc): a round failed or a decision differs"
}
cat "$WORK/demo.out"

# The trace against the times of the cut: rounds before it, the first
# degraded one, the rounds up to the link's return, the first federated one
# after it, and anything out of place.
read -r before early first_deg cut cut_fed back after late_deg wrong total degs <<<"$(
  awk -v down="$t_down" -v up="$t_up" -v victim="$VICTIM" '
    { t = $1; d = $2; n++; degs += d
      if (d && $3 != victim) wrong++
      if (t < down) { before++; early += d; next }
      if (d && !first) first = t
      if (t <= up) { cut++; if (first && !d) cutfed++; next }
      if (!back) { if (d) { cut++; next } back = t }
      after++; late += d }
    END { printf "%d %d %.0f %d %d %.0f %d %d %d %d %d\n", before, early, first, cut, cutfed,
          back, after, late, wrong, n, degs }' "$WORK/trace")"
[ "$before" -gt 0 ] || fail "no round answered before the cut"
[ "$early" = 0 ] || fail "$early rounds degraded before the cut"
[ "$first_deg" -gt 0 ] || fail "no round was degraded while $VICTIM was cut off"
[ "$wrong" = 0 ] || fail "$wrong degraded rounds do not name $VICTIM alone as missing"
[ "$cut_fed" = 0 ] || fail "$cut_fed rounds federated while $VICTIM was cut off (after the first degraded one)"
[ "$back" -gt 0 ] || fail "no federated round within $((RUN_S - CUT_AT_S - CUT_S)) s of $VICTIM's link coming back"
[ "$late_deg" = 0 ] || fail "$late_deg rounds degraded again after the federated rounds resumed"
to_deg=$(awk -v a="$t_down" -v b="$first_deg" 'BEGIN {printf "%.3f", (b - a) / 1000}')
to_back=$(awk -v a="$t_up" -v b="$back" 'BEGIN {printf "%.3f", (b - a) / 1000}')
echo "$NAME: $VICTIM cut off $((t_down - t_start)) ms into the load for $((t_up - t_down)) ms"
echo "$NAME: rounds: $before federated before the cut, $cut during it ($degs degraded, naming $VICTIM), $after federated after it; $total in all"
echo "$NAME: time to degraded $to_deg s after the cut; federated again $to_back s after the link came back"

# The AP's books against the driver's: every acknowledged reward once, on
# the right model(s).
bounded "$NETNS" cli "${opts[@]}" -- stats >"$WORK/stats" || fail "o3m-cli stats failed"
v() { sed -n "s/^$1=//p" "$WORK/stats"; }
fed_rounds=$((total - degs))
want="rounds=$total updates=$fed_rounds degraded_rounds=$degs local_updates=$total pending=0"
got="rounds=$(v rounds) updates=$(v updates) degraded_rounds=$(v degraded_rounds) local_updates=$(v local_updates) pending=$(v pending)"
[ "$got" = "$want" ] || fail "the AP's counters are $got; the client's acknowledged rewards say $want"
echo "$NAME: AP counters: $got (each acknowledged reward once: federated $fed_rounds, local $total)"
awk -v x="$to_deg" -v m="$TO_DEGRADED_MAX_S" 'BEGIN {exit !(x <= m)}' ||
  fail "the first degraded round came $to_deg s after the cut (bound $TO_DEGRADED_MAX_S s)"
awk -v x="$to_back" -v m="$BACK_MAX_S" 'BEGIN {exit !(x <= m)}' ||
  fail "federated rounds resumed $to_back s after the link came back (bound $BACK_MAX_S s)"
grep -q "^degraded rounds               $degs (missing: $VICTIM)" "$WORK/demo.out" ||
  fail "the driver's count of degraded rounds differs from its trace"

echo "$NAME: OK"
