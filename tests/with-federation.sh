#!/usr/bin/env bash
# with-federation.sh BIN -- COMMAND [ARGS...]
#
# Starts a small local federation from the daemons in BIN (o3m-pmg, the
# active party "shop", one passive party "bank"; d = 4, users u0..u19,
# items i0..i9; mutual TLS; scripts/federation-lib.sh), runs COMMAND with
# O3M_FED_CONF (the federation config) and O3M_FED_CLIENT (the [client] the
# active participant answers, whose cert and key the config names) in its
# environment, stops the federation and exits with COMMAND's status. The
# end-to-end tests of the installed library and of the Python package run
# their programs under it. The work directory is removed unless
# O3M_KEEP_TEST_DIR is set.
set -euo pipefail
[ $# -ge 3 ] && [ "$2" = "--" ] || { echo "usage: with-federation.sh BIN -- COMMAND [ARGS...]" >&2; exit 2; }
bin=$(cd "$1" && pwd)
shift 2
. "$(dirname "$0")/../scripts/federation-lib.sh"
work=$(mktemp -d /tmp/o3m-fed.XXXXXX)
cleanup() {
  fed_down
  if [ -n "${O3M_KEEP_TEST_DIR:-}" ]; then echo "with-federation: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fed_up "$work" "$bin" --parties 2,2 --users 20 --items 10 >/dev/null
rc=0
O3M_FED_CONF="$FED_CONF" O3M_FED_CLIENT=client "$@" || rc=$?
exit "$rc"
