# shellcheck shell=bash
# netns_lib.sh -- what the tests of scripts/netns-federation.sh share;
# sourced by netns_e2e.sh and netns_linkdown_e2e.sh after they set NAME
# (their name in messages), BIN (the binaries) and BUDGET_S.
#
# It skips the test (exit 77, CTest's SKIP, with the reason) where no
# network namespace can be made (not root, no ip netns, no nft); sets
# PREFIX (this run's namespaces), WORK (a scratch folder), DIR (the
# federation's folder), NETNS (the script) and opts (its options for this
# run); and always tears everything down on exit (trap). bounded CMD...
# runs CMD under what is left of the budget of BUDGET_S seconds, which
# keeps the teardown within CTest's timeout (a CTest timeout would kill
# the script before its trap); fail MSG prints MSG and the daemons' logs'
# tails and exits 1.
NETNS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/netns-federation.sh"

skip() {
  echo "$NAME: SKIP: $*" >&2
  exit 77
}
[ "$(id -u)" = 0 ] || skip "not root: network namespaces need CAP_SYS_ADMIN"
command -v ip >/dev/null || skip "no ip tool (Debian package iproute2)"
command -v nft >/dev/null || skip "no nft tool (Debian package nftables; scripts/setup-deps.sh)"
PREFIX="t$(($$ % 1000000))"
ip netns add "$PREFIX-probe" 2>/dev/null || skip "'ip netns add' fails here (no namespaces)"
ip netns del "$PREFIX-probe"

WORK=$(mktemp -d /tmp/o3m-netns-e2e.XXXXXX)
DIR="$WORK/fed"
opts=(--prefix "$PREFIX" --dir "$DIR" --bin "$BIN")
cleanup() {
  timeout 12 "$NETNS" down "${opts[@]}" || echo "$NAME: down failed" >&2
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

bounded() {
  local left=$((BUDGET_S - SECONDS))
  [ "$left" -gt 0 ] || fail "out of time (${BUDGET_S} s) before: $*"
  timeout "$left" "$@"
}

fail() {
  echo "$NAME: FAIL: $*" >&2
  for f in "$DIR"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}
