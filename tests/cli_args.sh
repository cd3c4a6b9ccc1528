#!/bin/sh
# cli_args.sh BIN_DIR SOURCE_DIR -- the command line every o3m binary shares
# (common/o3m_cli.h): --version prints "PROG VERSION (protocol N)" with the
# release of the VERSION file and the protocol of proto/o3m_wire.h and exits
# 0; --help exits 0 and names every option that scripts and tests use; an
# unknown option exits 2 with a message naming it. Registered with CTest as
# test_cli_args.
set -u
bin=$1
src=$2
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

# check PROG OPTION... : the three rules above for the binary PROG.
check() {
  prog=$1
  shift
  "$bin/$prog" --version >"$out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "$prog --version exits $rc"
  [ "$(cat "$out")" = "$prog $version (protocol $protocol)" ] ||
    fail "$prog --version prints something else than '$prog $version (protocol $protocol)'"
  "$bin/$prog" --help >"$out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "$prog --help exits $rc"
  for opt in "$@" --help --version; do
    grep -q -e "^ *$opt\\b" "$out" || fail "$prog --help does not describe $opt"
  done
  grep -q "exit codes: 0 ok, 1 runtime failure, 2 usage error" "$out" ||
    fail "$prog --help does not list the exit codes"
  "$bin/$prog" --no-such-option >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "$prog --no-such-option exits $rc, expected 2"
  grep -q -e "--no-such-option" "$out" || fail "$prog --no-such-option: the message does not name it"
}

check o3m-pmg --config --party --insecure --ready-file --mask-seed-insecure --keep-mask
check o3m-passive --config --party --insecure --ready-file --pmg-timeout-s
check o3m-active --config --party --insecure --ready-file --pmg-timeout-s --salvage \
  --discard-state --checkpoint-every --checkpoint-ms
check o3m-cli --config --as --cert --key --ca --target --server-name --deadline-ms --insecure \
  --user --items --arms --own-features --decision --reward
check o3m-bench-core --quick --sections --pool-mb
check o3m-bench-load --config --cert --key --insecure --K --concurrency --seconds --warmup \
  --users --items --with-reward

# o3m-eval: the top level has --version and --help (listing every command);
# each command has its own --help and refuses an unknown option with 2.
"$bin/o3m-eval" --version >"$out" 2>&1
[ "$(cat "$out")" = "o3m-eval $version (protocol $protocol)" ] || fail "o3m-eval --version"
"$bin/o3m-eval" --no-such-option >"$out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -e "--no-such-option" "$out" || fail "o3m-eval --no-such-option exits $rc"
"$bin/o3m-eval" --help >"$out" 2>&1 || fail "o3m-eval --help exits $?"
for cmd in simulate gen-synthetic gen-federation federate regret cost replay gen-criteo; do
  grep -q "^  $cmd " "$out" ||
    fail "o3m-eval --help does not list $cmd"
done
for cmd in simulate gen-synthetic gen-federation federate regret cost replay gen-criteo; do
  "$bin/o3m-eval" $cmd --help >"$out" 2>&1 || fail "o3m-eval $cmd --help exits $?"
  "$bin/o3m-eval" $cmd --no-such-option >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "o3m-eval $cmd --no-such-option exits $rc, expected 2"
  grep -q -e "no-such-option" "$out" || fail "o3m-eval $cmd --no-such-option: not named"
done

[ $failures -eq 0 ] && echo "all command lines as documented"
exit $((failures > 0))
