# bench-lib.sh -- what the federation load benchmarks share; sourced, from the
# repository's root, by eval/bench/run-load.sh and eval/bench/soak.sh.
#
# bench_fed_up TAG
#   builds the daemons and o3m-bench-load (RelWithDebInfo, in $O3M_BUILD_DIR,
#   default build/), starts a local federation with mutual TLS on loopback
#   (M = 5 parties of 20 columns, d = 100, 1000 users, 200 items) in a fresh
#   /tmp/o3m-TAG.XXXXXX, and arranges for the federation to be stopped and
#   the folder removed when the script exits. Sets bin (the binaries'
#   folder) and work (the federation's folder, with FED_CONF and certs/).
. scripts/federation-lib.sh

bench_fed_up() {
  local build="${O3M_BUILD_DIR:-build}"
  bin="$build/bin"
  [[ "$build" = /* ]] || bin="$(pwd)/$build/bin"
  scripts/setup-deps.sh
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j"$(nproc)" --target o3m-pmg o3m-passive o3m-active o3m-eval \
    o3m-bench-load >/dev/null
  work=$(mktemp -d "/tmp/o3m-$1.XXXXXX")
  trap 'fed_down; rm -rf "$work"' EXIT
  fed_up "$work" "$bin" --parties 20,20,20,20,20 --users 1000 --items 200 --max-candidates 64
}
