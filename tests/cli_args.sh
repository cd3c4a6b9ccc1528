#!/bin/sh
# cli_args.sh BIN_DIR SOURCE_DIR [PEERS] -- the command line every o3m binary shares
# (common/o3m_cli.h): --version prints "PROG VERSION (protocol N)" with the
# release of the VERSION file and the protocol of proto/o3m_wire.h and exits
# 0; --help exits 0 and names every option that scripts and tests use; an
# unknown option exits 2 with a message naming it. PEERS is the build's
# O3M_BUILD_PEERS (ON by default): OFF, the peer systems' commands of
# o3m-eval must say they were not built. Registered with CTest as
# test_cli_args.
set -u
bin=$1
src=$2
peers=${3:-ON}
version=$(head -n 1 "$src/VERSION")
protocol=$(sed -n 's/^#define O3M_PROTOCOL_VERSION \([0-9][0-9]*\).*/\1/p' "$src/proto/o3m_wire.h")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  sed 's/^/  | /' "$out"
  failures=$((failures + 1))
}

# check PROG OPTION... : the three rules above for the binary PROG, or for
# "o3m-eval COMMAND" (whose --version names the command too).
check() {
  prog=$1
  shift
  "$bin"/$prog --version >"$out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "$prog --version exits $rc"
  [ "$(cat "$out")" = "$prog $version (protocol $protocol)" ] ||
    fail "$prog --version prints something else than '$prog $version (protocol $protocol)'"
  "$bin"/$prog --help >"$out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "$prog --help exits $rc"
  for opt in "$@" --help --version; do
    grep -q -e "^ *$opt\\b" "$out" || fail "$prog --help does not describe $opt"
  done
  grep -q "exit codes: 0 ok, 1 runtime failure, 2 usage error" "$out" ||
    fail "$prog --help does not list the exit codes"
  "$bin"/$prog --no-such-option >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "$prog --no-such-option exits $rc, expected 2"
  grep -q -e "--no-such-option" "$out" || fail "$prog --no-such-option: the message does not name it"
}

check o3m-pmg --config --party --insecure --ready-file --mask-seed-insecure --keep-mask
check o3m-passive --config --party --insecure --ready-file --pmg-timeout-s --test-reply-delay-ms
check o3m-active --config --party --insecure --ready-file --pmg-timeout-s --salvage \
  --discard-state --checkpoint-every --checkpoint-ms
check o3m-cli --config --as --cert --key --ca --target --server-name --deadline-ms --insecure \
  --user --items --arms --own-features --decision --reward
check o3m-bench-core --quick --sections --pool-mb
check o3m-bench-load --config --cert --key --insecure --K --concurrency --seconds --warmup \
  --users --items --with-reward

# o3m-eval: the top level has --version and --help (listing every command);
# each command has its own --help naming every option, its own --version,
# and refuses an unknown option with 2 (the checks below).
"$bin/o3m-eval" --version >"$out" 2>&1
[ "$(cat "$out")" = "o3m-eval $version (protocol $protocol)" ] || fail "o3m-eval --version"
"$bin/o3m-eval" --no-such-option >"$out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -e "--no-such-option" "$out" || fail "o3m-eval --no-such-option exits $rc"
"$bin/o3m-eval" --help >"$out" 2>&1 || fail "o3m-eval --help exits $?"
for cmd in simulate gen-synthetic gen-federation federate regret cost baselines replay ope audit \
  gen-criteo hannun p2b samba; do
  grep -q "^  $cmd " "$out" ||
    fail "o3m-eval --help does not list $cmd"
done
# BLAS threads are one option before the command (default 1),
# listed by --help, and a count out of 1..256 is a usage error naming it.
grep -q -e "--threads N lets BLAS use N threads" "$out" || fail "o3m-eval --help lacks --threads"
"$bin/o3m-eval" --threads 0 p2b >"$out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -e "--threads takes a number of threads in 1..256, got '0'" "$out" ||
  fail "o3m-eval --threads 0 exits $rc: $(cat "$out")"
check "o3m-eval simulate" --algo --model --alpha --lambda --v --seed --refactor-every \
  --parties --mask-seed-insecure --aggregation
check "o3m-eval gen-synthetic" --d --K --T --seed --noise-var --out
check "o3m-eval gen-federation" --out --parties --users --items --algo --model --alpha --v \
  --seed --data-seed --deadline-ms --max-candidates --insecure --whiten --aggregation
check "o3m-eval federate" --config --truth --rounds --K --seed --cert --key --insecure \
  --require-match --seconds --trace
check "o3m-eval regret" --d --K --T --seeds --first-seed --parties --partial-ratios --algo \
  --model --alpha --beta --v --lambda --noise-var --every --refactor-every --out-dir --no-plots \
  --whiten --aggregation --plot-format --dp-eps --dp-delta --dp-clip
check "o3m-eval cost" --T --K --d --M --algo --model --pool --min-time --only --out-dir \
  --no-plots --plot-format
check "o3m-eval replay" --format --input --item-context --obd-position --obd-user-buckets \
  --stats-in --stats-out --stats-rows --criteo-arms --int-transform --limit --parties \
  --partial-ratio --mask-seed --algo --model --alpha --lambda --v --seed --random-seeds --random-seed \
  --variants --threads --aggregation --whiten --out-dir --run-name --no-files --no-plots \
  --plot-format --dp-eps --dp-delta --dp-clip --dp-T
check "o3m-eval ope" --format --input --item-context --obd-position --obd-user-buckets --train \
  --limit --algo --model --alpha --lambda --v --seed --reward-lambda --state-in --state-out \
  --uniform-logging
check "o3m-eval audit" --dims --party --user-table --item-table --bank --dataset --data-dir \
  --table --users --dummies --known-max --modes --ica-iter --seed --out --no-plots \
  --plot-format --whiten --score-whitened --factored
# The audit is an operator's tool of its own, o3m-audit, with the same
# options; `o3m-eval audit` is its alias and its messages keep that name.
check o3m-audit --dims --party --user-table --item-table --bank --dataset --data-dir \
  --table --users --dummies --known-max --modes --ica-iter --seed --out --no-plots \
  --plot-format --whiten --score-whitened --factored
for prog in o3m-audit "o3m-eval audit"; do
  "$bin"/$prog --party x >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q "^$prog: bad value 'x' for --party" "$out" ||
    fail "$prog --party x exits $rc without its message"
done
check "o3m-eval gen-criteo" --rows --seed --out
if [ "$peers" = ON ]; then
  check "o3m-eval baselines" --settings --d --K --N --mechanisms --he-max-K --he-budget \
    --mpc-max-N --sec-max-N --dp-eps --dp-delta --dp-T --dp-clip --min-time --seed --out-dir \
    --no-plots --plot-format
  check "o3m-eval hannun" --full --T --T-data --epsilon --seed --data-dir --out --no-plots --only \
    --plot-format
  check "o3m-eval p2b" --setting --criteo --users --t --k --l --p --arms --d --alpha --kmeans-iters --seed
  check "o3m-eval samba" --algos --K --N --means --runs --seed --paillier-bits --out-dir --sweep-N --sweep-K --plot-format
else
  for cmd in baselines hannun p2b samba; do
    "$bin/o3m-eval" $cmd --help >"$out" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -q "o3m-eval: '$cmd' was not built" "$out" ||
      fail "o3m-eval $cmd exits $rc without saying it was not built"
  done
fi

# A missing value is a usage error too (2), and a bad value keeps the
# command's own message (2); a runtime failure is 1.
"$bin/o3m-eval" regret --T >"$out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "o3m-eval regret: --T needs a value" "$out" ||
  fail "o3m-eval regret --T exits $rc without 'needs a value'"
"$bin/o3m-eval" replay --limit x >"$out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "replay: bad value 'x' for --limit" "$out" ||
  fail "o3m-eval replay --limit x exits $rc without its message"
"$bin/o3m-eval" ope --train 0 >"$out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "o3m-eval ope: bad value '0' for --train" "$out" ||
  fail "o3m-eval ope --train 0 exits $rc without its message"
"$bin/o3m-eval" ope --format news --input x >"$out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "format news logs no propensity scores" "$out" ||
  fail "o3m-eval ope --format news exits $rc without its message"
# Integer lists (o3m_cli_parse_int_list, shared by cost, baselines and
# samba) name the option and the first bad entry.
for args in "cost --K 5,x,7:o3m-eval cost: --K: '5,x,7': entry 2 is not an integer in 1..100000" \
  "baselines --d 25,1:o3m-eval baselines: --d: '25,1': entry 2 is not an integer in 2..2000" \
  "samba --sweep-K 3,:o3m-eval samba: --sweep-K: '3,': entry 2 is not an integer in 2.."; do
  case "$peers:${args%% *}" in OFF:baselines | OFF:samba) continue ;; esac
  "$bin/o3m-eval" ${args%%:*} >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q -e "${args#*:}" "$out" ||
    fail "o3m-eval ${args%%:*} exits $rc without '${args#*:}'"
done
"$bin/o3m-eval" simulate /nonexistent/stream.csv >"$out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "o3m-eval simulate on a missing file exits $rc, expected 1"

[ $failures -eq 0 ] && echo "all command lines as documented"
exit $((failures > 0))
