# bench-lib.sh -- what the federation load benchmarks share; sourced, from the
# repository's root, by eval/bench/run-load.sh and eval/bench/soak.sh.
#
# bench_fed_up TAG [FED_UP_ARGS...]
#   builds the daemons, o3m-bench-load and o3m-cli (RelWithDebInfo, in
#   $O3M_BUILD_DIR, default build/) the first time, makes a fresh
#   /tmp/o3m-TAG.XXXXXX the first time (emptied on later calls), starts a
#   local federation with mutual TLS on loopback there (M = 5 parties of 20
#   columns, d = 100, 1000 users, 200 items, then FED_UP_ARGS, for example
#   --aggregation per-party) and arranges for the federation to be stopped
#   and the folder removed when the script exits. Stop it with fed_down
#   before calling again. Sets bin (the binaries' folder) and work (the
#   federation's folder, with FED_CONF and certs/).
. scripts/federation-lib.sh

bench_fed_up() {
  local tag="$1"
  shift
  if [ -z "${bin:-}" ]; then
    local build="${O3M_BUILD_DIR:-build}"
    bin="$build/bin"
    [[ "$build" = /* ]] || bin="$(pwd)/$build/bin"
    scripts/setup-deps.sh
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j"$(nproc)" --target o3m-pmg o3m-passive o3m-active o3m-eval \
      o3m-bench-load o3m-cli >/dev/null
  fi
  if [ -z "${work:-}" ]; then
    work=$(mktemp -d "/tmp/o3m-$tag.XXXXXX")
    trap 'fed_down; rm -rf "$work"' EXIT
  else
    rm -rf "${work:?}"/*
  fi
  fed_up "$work" "$bin" --parties 20,20,20,20,20 --users 1000 --items 200 --max-candidates 64 "$@"
}
