#!/usr/bin/env bash
# linkdown.sh -- a host cut off the network for 10 s and plugged back in,
# under the client's load, across network namespaces, replayed against
# two builds side by side in one run.
#
#   eval/bench/linkdown.sh [BIN_DIR...]
#
# BIN_DIRs default to O3M_LINKDOWN_BINS, else "/work/cur-bin build/bin"
# (the build before the probe's fresh channels, then this worktree's).
# Each folder's daemons (o3m-pmg, o3m-passive, o3m-active) run the
# e2e_netns_linkdown test (tests/netns_linkdown_e2e.sh: the demo's
# federation with the deploy guide's firewall, one host per party, the
# demo's rounds streamed from the client's host for 24 s, telco's link
# down from 4 s to 14 s), with the driver and o3m-cli always from
# O3M_LOAD_TOOL (default build/bin: its o3m-eval federate has --seconds
# and --trace). Figures per folder: the rounds before, during and after the
# cut, the time from the cut to the first degraded round, the time from the
# link's return to the first federated round, the AP's counters against
# the client's acknowledged rewards, and the test's verdict (its bounds: 2 s
# to degraded, BACK_MAX_S, default 1.5 s, back to federated). Needs root
# and namespaces (it says so and stops otherwise). Run it alone on the
# machine: the figures are times.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bins=("$@")
[ ${#bins[@]} -gt 0 ] || read -ra bins <<<"${O3M_LINKDOWN_BINS:-/work/cur-bin build/bin}"
tool=$(cd "${O3M_LOAD_TOOL:-build/bin}" && pwd)
mix=$(mktemp -d /tmp/o3m-linkdown.XXXXXX)
trap 'rm -rf "$mix"' EXIT

for b in "${bins[@]}"; do
  bin=$(cd "$b" && pwd)
  echo "== daemons from $bin (driver and o3m-cli from $tool)"
  rm -f "$mix"/*
  for x in o3m-pmg o3m-passive o3m-active; do ln -s "$bin/$x" "$mix/$x"; done
  for x in o3m-eval o3m-cli; do ln -s "$tool/$x" "$mix/$x"; done
  BACK_MAX_S=${BACK_MAX_S:-1.5} bash tests/netns_linkdown_e2e.sh "$mix" >"$mix.out" 2>&1
  rc=$?
  [ "$rc" = 77 ] && { grep SKIP "$mix.out"; exit 77; }
  grep -E '^netns_linkdown_e2e: (telco|rounds|time|AP|OK|FAIL)|^decisions equal|^degraded|o3m-eval federate:' \
    "$mix.out" | sed 's/^netns_linkdown_e2e: /  /'
  rm -f "$mix.out"
  echo
done
