#!/usr/bin/env bash
# The main job: a local federation on loopback with mutual TLS.
#
# Starts a privacy mask generator, an active participant ("shop") and four
# passive participants ("bank", "telco", "insurer", "mall"), each a real
# daemon with its own certificate, on synthetic feature tables (d = 100,
# 20 columns per party). Then streams a synthetic population through the
# active participant with a simulated click model, and prints the federated
# regret beside an in-process centralized run and an AP-only run, and whether
# every federated decision matched the centralized one. Stops every process
# on exit.
#
#   scripts/demo.sh [--rounds N] [--K N] [--algo linucb|lints]
#                   [--model shared|disjoint] [--keep DIR] [--require-match] [--no-build]
#                   [--whiten]
# --whiten: every passive party whitens its own columns (whiten = true); the
# in-process central run then sees the whitened columns too.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/federation-lib.sh

rounds=3000 K=10 algo=linucb model=shared keep="" require="" build_it=1 whiten=
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --K) K=$2; shift 2 ;;
    --algo) algo=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --require-match) require=--require-match; shift ;;
    --whiten) whiten=--whiten; shift ;;
    --no-build) build_it=0; shift ;;
    *) echo "demo.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

build="${O3M_BUILD_DIR:-build}"
if [ "$build_it" = 1 ]; then
  scripts/setup-deps.sh
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j"$(nproc)" --target o3m-pmg o3m-passive o3m-active o3m-eval >/dev/null
fi
bin="$build/bin"
[[ "$build" = /* ]] || bin="$root/$build/bin"

if [ -n "$keep" ]; then
  work="$keep"; rm -rf "$work"; mkdir -p "$work"
else
  work=$(mktemp -d /tmp/o3m-demo.XXXXXX)
fi
cleanup() { fed_down; [ -n "$keep" ] || rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting a federation in $work: pmg, shop (active), bank, telco, insurer, mall"
echo "   d = 100, 20 columns each, mutual TLS on loopback; logs in $work/*.log"
echo "   secure aggregation: the AP gets only the sum of the passive parts (keys in $work/keys)"
fed_up "$work" "$bin" "${FED_DEMO_GEN[@]}" --algo "$algo" --model "$model" $whiten
echo "== streaming $rounds rounds of K = $K candidates through the active participant"
fed_federate "$work" "$bin" "$rounds" "$K" $require
