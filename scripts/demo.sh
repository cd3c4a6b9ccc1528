#!/usr/bin/env bash
# The main job: a synthetic run of the paper's setup (d = 100, K = 10,
# T = 5000, five parties of 20 columns), once centrally and once masked
# through the parties' column blocks, printing both regrets and whether every
# decision was identical.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
build="${O3M_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target o3m-eval >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
eval_bin="$build/bin/o3m-eval"
"$eval_bin" gen-synthetic --d 100 --K 10 --T 5000 --seed 1 --out "$work/stream.csv"
"$eval_bin" simulate --algo linucb --alpha 0.5 "$work/stream.csv" >"$work/central.csv"
"$eval_bin" simulate --algo linucb --alpha 0.5 --parties 20,20,20,20,20 "$work/stream.csv" \
  >"$work/masked.csv"
if cmp -s "$work/central.csv" "$work/masked.csv"; then
  echo "identical decisions: yes ($(($(wc -l <"$work/central.csv") - 1)) rounds)"
else
  echo "identical decisions: NO"
  exit 1
fi
