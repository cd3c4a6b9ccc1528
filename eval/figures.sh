#!/usr/bin/env bash
# eval/figures.sh -- regenerate every figure the documentation quotes.
#
# Each figure or table quoted in README.md, eval/bench/README.md and docs/ is
# one line of the table below: a group (what --only selects), a name, where it
# is quoted, and the command that makes it. Running the script runs the
# commands and writes each one's output to OUT/GROUP/NAME.txt (and the files a
# command writes itself under OUT/GROUP/NAME/), so a figure in the docs is
# checked by reading one file, and a claim that no longer matches its command
# shows up the next time the script runs. tests/test_figures.sh runs --list
# and checks that every command's program, subcommand and options still exist,
# so the table cannot rot silently; the runs themselves are too slow for CI
# (on two shared cores: hannun --full 80 s, the p2b group 80 s with the
# sweeps, the obd group 25 s; regret, cost, baselines, samba and the bench
# group take longer, the load and attack benchmarks several minutes each).
#
# usage: eval/figures.sh [--bin DIR] [--data DIR] [--out DIR] [--only G1,G2,..] [--list]
#   --bin DIR    the programs (build/bin)
#   --data DIR   the shared data sets (../shared/data, or $O3M_DATA_DIR)
#   --out DIR    where outputs go (eval-out/figures)
#   --only LIST  groups or GROUP/NAME entries to run (all)
#   --list       print the table (group/name, where quoted, command) and exit
#
# BLAS runs single-threaded (o3m-eval's default; OPENBLAS_NUM_THREADS=1 for
# the scripts) so that figures are comparable on a shared machine.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
BIN=$here/build/bin
D=${O3M_DATA_DIR:-$here/../shared/data}
OUT=eval-out/figures
ONLY=
LIST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --data) D=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --list) LIST=1; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "figures.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# The table: GROUP|NAME|WHERE QUOTED|COMMAND. In a command, $BIN is the
# programs' folder, $D the data folder, $O the entry's own output folder and
# $BENCH eval/bench. Commands are written as the docs quote them.
FIGURES=$(cat <<'EOF'
hannun|quick|docs/evaluation/hannun.md tables (Table 1, whole learner)|$BIN/o3m-eval hannun --data-dir $D --out $O
hannun|full|docs/evaluation/hannun.md, the --full bullet (same arm per data set)|$BIN/o3m-eval hannun --full --data-dir $D --out $O
p2b|synthetic|docs/evaluation/p2b.md table, row synthetic (shared / released / dropped, rewards)|$BIN/o3m-eval p2b
p2b|sweep|docs/evaluation/p2b.md table, row 100,000 participants and Fig. 4 top|$BIN/o3m-eval p2b --sweep
p2b|sweep-warm-shared|docs/evaluation/p2b.md, Fig. 4 top as the artifact runs it|$BIN/o3m-eval p2b --sweep --warm shared
p2b|softmax-grid|docs/evaluation/p2b.md ablation, the paper's text|$BIN/o3m-eval p2b --map softmax --contexts grid --sigma 0.1
p2b|linear-grid|docs/evaluation/p2b.md ablation, the artifact's map|$BIN/o3m-eval p2b --map linear --contexts grid --sigma 0.1
p2b|grid|docs/evaluation/p2b.md ablation, grid contexts|$BIN/o3m-eval p2b --contexts grid
p2b|warm-shared|docs/evaluation/p2b.md ablation, the artifact's warm agent|$BIN/o3m-eval p2b --warm shared
p2b|softmax|docs/evaluation/p2b.md ablation, softmax map alone|$BIN/o3m-eval p2b --map softmax
p2b|criteo-sample|docs/evaluation/p2b.md table, the 200-row Criteo sample|$BIN/o3m-eval p2b --setting criteo --criteo $D/criteo/criteo_sample.csv
p2b|criteo-gen|docs/evaluation/p2b.md table, generated Criteo rows at k = 32|$BIN/o3m-eval gen-criteo --rows 200000 --seed 1 --out $O/criteo.tsv && $BIN/o3m-eval p2b --setting criteo --criteo $O/criteo.tsv
p2b|criteo-gen-k128|docs/evaluation/p2b.md table, generated Criteo rows at k = 128|$BIN/o3m-eval gen-criteo --rows 200000 --seed 1 --out $O/criteo.tsv && $BIN/o3m-eval p2b --setting criteo --criteo $O/criteo.tsv --k 128
obd|replay-pos1|docs/evaluation/replay.md (OBD position 1 matched, clicks) and the whitening table|$BIN/o3m-eval replay --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --parties 64,28 --out-dir $O
obd|replay-pos1-whiten|docs/evaluation/whitening.md, OBD position 1 with --whiten all|$BIN/o3m-eval replay --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --parties 64,28 --whiten all --out-dir $O
obd|replay-all|docs/evaluation/whitening.md, OBD all positions|$BIN/o3m-eval replay --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --parties 64,28 --obd-position 0 --out-dir $O
obd|replay-all-whiten|docs/evaluation/whitening.md, OBD all positions with --whiten all|$BIN/o3m-eval replay --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --parties 64,28 --obd-position 0 --whiten all --out-dir $O
obd|ope|docs/evaluation/ope.md, the first run's table|$BIN/o3m-eval ope --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv
obd|ope-frozen|docs/evaluation/ope.md, the frozen disjoint policy (state out, then in)|$BIN/o3m-eval ope --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --obd-position 0 --train 5000 --model disjoint --state-out $O/frozen.state && $BIN/o3m-eval ope --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --obd-position 0 --train 5000 --model disjoint --state-in $O/frozen.state
obd|replay-pos1-disjoint|docs/evaluation/replay.md, OBD position 1 matched rows (LinUCB disjoint)|$BIN/o3m-eval replay --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --parties 64,28 --model disjoint --out-dir $O
obd|ope-pos0-shared|docs/evaluation/ope.md table, position 0, train 5000, LinUCB shared|$BIN/o3m-eval ope --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --obd-position 0 --train 5000
obd|ope-pos0-greedy-disjoint|docs/evaluation/ope.md table, position 0, train 5000, greedy disjoint|$BIN/o3m-eval ope --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --obd-position 0 --train 5000 --model disjoint --alpha 0
obd|ope-pos0-lints-shared|docs/evaluation/ope.md table, position 0, train 5000, LinTS shared|$BIN/o3m-eval ope --format obd --input $D/obd-random-men/men.csv --item-context $D/obd-random-men/item_context.csv --obd-position 0 --train 5000 --algo lints
obd|audit|docs/evaluation/audit.md table, rows obd|$BIN/o3m-eval audit --dataset obd --data-dir $D --dims 32,32,28 --party 1 --out $O
obd|audit-factored|eval/bench/README audit of factored batches (bank, OBD, news)|OPENBLAS_NUM_THREADS=1 $BENCH/audit-factored.sh $BIN $D
replay|news|docs/evaluation/replay.md table, news10k LinUCB shared|$BIN/o3m-eval replay --format news --input $D/news10k/dataset.txt --parties 5,5 --out-dir $O
replay|news-disjoint|docs/evaluation/replay.md table, news10k LinUCB disjoint|$BIN/o3m-eval replay --format news --input $D/news10k/dataset.txt --parties 5,5 --model disjoint --out-dir $O
replay|news-whiten|docs/evaluation/whitening.md, news10k|$BIN/o3m-eval replay --format news --input $D/news10k/dataset.txt --parties 5,5 --whiten all --out-dir $O
replay|criteo-sample|docs/evaluation/replay.md, the 200-row Criteo sample|$BIN/o3m-eval replay --format criteo-csv --input $D/criteo/criteo_sample.csv --out-dir $O
replay|ope-news|docs/evaluation/ope.md on news10k with uniform logging|$BIN/o3m-eval ope --format news --uniform-logging --input $D/news10k/dataset.txt
regret|paper|docs/evaluation/regret.md (Fig. 4, 6)|$BIN/o3m-eval regret --out-dir $O
regret|both|docs/evaluation/regret.md, the disjoint model too|$BIN/o3m-eval regret --model both --out-dir $O
regret|dp|docs/evaluation/regret.md, DP learners|$BIN/o3m-eval regret --dp-eps 100,1e6,1e8 --out-dir $O
regret|outage|docs/evaluation/regret.md, a passive party's outage|$BIN/o3m-eval regret --partial-ratios none --outage 2001,3001 --out-dir $O
regret|whiten|docs/evaluation/whitening.md, regret rows|$BIN/o3m-eval regret --algo linucb --seeds 20 --no-plots --whiten all
cost|paper|docs/evaluation/cost.md (Fig. 5, app. C.3)|$BIN/o3m-eval cost --out-dir $O
baselines|all|docs/evaluation/baselines.md tables|$BIN/o3m-eval baselines --out-dir $O
samba|default|docs/evaluation/samba.md table|$BIN/o3m-eval samba
audit|bank|docs/evaluation/audit.md table, rows bank|$BIN/o3m-eval audit --bank --dims 10,20,20 --party 1 --out $O
audit|news|docs/evaluation/audit.md table, rows news|$BIN/o3m-eval audit --dataset news --data-dir $D --dims 4,3,3 --party 1 --out $O
bench|p2b-threads|eval/bench/README, p2b wall time against CPU time|$BENCH/p2b-threads.sh --users 14285
bench|attacks|eval/bench/README, the attack figures|$BENCH/run-attacks.sh
bench|load|eval/bench/README.md and docs/benchmarks/index.md load tables|$BENCH/run-load.sh --seconds 4 --warmup 1
EOF
)

# True when entry GROUP/NAME is selected by --only.
selected() {
  [ -z "$ONLY" ] && return 0
  local w
  for w in ${ONLY//,/ }; do
    [ "$w" = "$1" ] || [ "$w" = "$1/$2" ] && return 0
  done
  return 1
}

# Every word of --only must name a group or an entry: a typo would otherwise
# run nothing and succeed.
if [ -n "$ONLY" ]; then
  for w in ${ONLY//,/ }; do
    if ! printf '%s\n' "$FIGURES" | awk -F'|' -v w="$w" \
        '$1 == w || $1 "/" $2 == w { f = 1 } END { exit !f }'; then
      echo "figures.sh: --only: '$w' is neither a group nor a GROUP/NAME entry (see --list)" >&2
      exit 2
    fi
  done
fi

BENCH=$here/eval/bench
fail=0
# What a figure depends on beyond its command: the commit, the machine, its
# load and the OpenBLAS kernel. The kernel matters: OpenBLAS picks its code
# for the CPU at load time, and P2B's k-means assignments (ties on a grid of
# contexts broken by the last bit of a BLAS distance) differ between kernels
# (4,131 released tuples with SkylakeX's, 4,113 with Haswell's or Zen's).
# OPENBLAS_CORETYPE=NAME reproduces another machine's figures.
if [ "$LIST" = 0 ]; then
  mkdir -p "$OUT"
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "commit: $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "programs: $BIN ($("$BIN/o3m-eval" --version 2>&1 | head -1))"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "openblas kernel: $(OPENBLAS_VERBOSE=2 "$BIN/o3m-eval" --version 2>&1 |
      sed -n 's/^Core: //p' | head -1)${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}"
  } >"$OUT/machine.txt"
  cat "$OUT/machine.txt"
fi
while IFS='|' read -r group name where cmd; do
  [ -n "$group" ] || continue
  selected "$group" "$name" || continue
  if [ "$LIST" = 1 ]; then
    printf '%s/%s\t%s\t%s\n' "$group" "$name" "$where" "$cmd"
    continue
  fi
  O=$OUT/$group/$name
  mkdir -p "$O"
  echo "== $group/$name ($where)"
  start=$(date +%s)
  if (export OPENBLAS_NUM_THREADS=1 BIN D O BENCH; eval "$cmd") >"$OUT/$group/$name.txt" 2>&1; then
    echo "   ok in $(( $(date +%s) - start )) s: $OUT/$group/$name.txt"
  else
    echo "   FAILED (rc $?) in $(( $(date +%s) - start )) s: see $OUT/$group/$name.txt" >&2
    fail=1
  fi
done <<<"$FIGURES"
exit $fail
