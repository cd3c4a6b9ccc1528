#!/usr/bin/env bash
# The AP crash benchmark: a real federation on loopback (o3m-pmg,
# two o3m-passive, o3m-active, each with a state_dir; mutual TLS), four
# client threads driving recommend + reward, and o3m-active killed with
# SIGKILL at KILLS random moments (default 25) and restarted each time. After
# every restart the test checks that every acknowledged reward is in the
# model exactly once: Stats updates equal the acknowledged rewards plus those
# whose reply was lost in the crash but which reached the journal (read from
# a copy of state_dir), every reply's ordinal (RewardReply.updates) is
# unique and covered, and ||theta|| equals an in-process replay of those
# rewards in the AP's order. It is tests/test_recovery.c's crash test with
# more kill points; it prints
#   kill points: N, lost: 0, duplicated: 0
# and exits nonzero if any check fails.
#
#   eval/bench/crash-bench.sh [KILLS [MIN_REWARDS]]
# Environment: O3M_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
kills="${1:-25}"
min_rewards="${2:-3000}"
build="${O3M_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target test_recovery o3m-pmg o3m-passive o3m-active \
  >/dev/null
log=$(mktemp /tmp/o3m-crash-bench.XXXXXX)
trap 'rm -f "$log"' EXIT
rc=0
O3M_RECOVERY_KILLS="$kills" O3M_RECOVERY_MIN_REWARDS="$min_rewards" \
  "$build/bin/test_recovery" --jobs 1 \
  --filter 'recovery/crash_several_clients_every_acknowledged_reward_exactly_once' \
  >"$log" 2>&1 || rc=$?
grep -E '^(crash test|kill points):' "$log" || true
if [ "$rc" -ne 0 ] || ! grep -q '^kill points: [0-9]*, lost: 0, duplicated: 0$' "$log"; then
  echo "crash benchmark FAILED (exit $rc):" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
