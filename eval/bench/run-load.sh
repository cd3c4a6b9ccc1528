#!/usr/bin/env bash
# Starts a local federation with mutual TLS on loopback (M = 5 parties of 20
# columns, d = 100) and drives its active participant with o3m-bench-load at
# concurrency 1, 8 and 32 with K = 20 candidates. Extra arguments go to
# o3m-bench-load (for example --seconds 10 --with-reward).
set -euo pipefail
cd "$(dirname "$0")/../.."
. eval/bench/bench-lib.sh
bench_fed_up load
"$bin/o3m-bench-load" --config "$FED_CONF" --cert "$work/certs/client.pem" \
  --key "$work/certs/client.key" --K 20 --concurrency 1,8,32 --users 1000 --items 200 "$@"
