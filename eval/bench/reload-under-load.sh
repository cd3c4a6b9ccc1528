#!/usr/bin/env bash
# reload-under-load.sh [BIN] -- o3m-bench-load (c = 8, K = 10, 6 s) against
# a small local federation (tests/with-federation.sh: the AP "shop" with
# tables of its own, the passive party "bank") while `o3m-cli reload` swaps
# the tables of both every 0.2 s. Prints how many reloads were
# answered and the load's table: its errors column must be 0. BIN defaults
# to build/bin. Not a timed test; a check an operator can repeat.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" != "--inside" ]; then
  bin=$(cd "${1:-build/bin}" && pwd)
  exec tests/with-federation.sh "$bin" -- "$0" --inside "$bin"
fi
bin=$2
certs=$(dirname "$O3M_FED_CONF")/certs
out=$(mktemp)
"$bin/o3m-bench-load" --config "$O3M_FED_CONF" --cert "$certs/$O3M_FED_CLIENT.pem" \
  --key "$certs/$O3M_FED_CLIENT.key" --K 10 --items 10 --users 20 --concurrency 8 \
  --seconds 6 --warmup 1 >"$out" 2>&1 &
load=$!
sleep 1.5
ok=0 failed=0
while kill -0 "$load" 2>/dev/null; do
  for party in bank shop; do
    if "$bin/o3m-cli" --config "$O3M_FED_CONF" --as "$party" reload >/dev/null; then
      ok=$((ok + 1))
    else
      failed=$((failed + 1))
    fi
  done
  sleep 0.2
done
rc=0
wait "$load" || rc=$?
echo "reloads during the load: $ok answered, $failed failed"
cat "$out"
rm -f "$out"
exit "$rc"
