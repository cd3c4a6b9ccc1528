#!/usr/bin/env bash
# quickstart.sh SOURCE_DIR BIN_DIR -- runs the README's three-department
# quickstart exactly as a user pastes it, so the front door cannot rot.
#
# The block between <!-- quickstart:begin --> and <!-- quickstart:end --> of
# README.md must be the one of docs/quickstart.md (the site shows the same
# text). It runs in a temporary folder, in bash without -e as an interactive
# shell would, with the build's daemons and o3m-cli on PATH under their
# installed names and scripts/make-certs.sh as o3m-make-certs (what
# `cmake --install` puts in PREFIX/bin). Only the loopback address changes:
# 127.0.0.1 becomes another address of 127.0.0.0/8 drawn per run, so the
# fixed ports of the block do not meet another test's daemons. The run is
# bounded (90 s) and every daemon it started is stopped at its end.
set -uo pipefail
src=$1 bin=$2

extract() { # FILE: the fenced block between the quickstart markers
  awk '/<!-- quickstart:begin -->/ { on = 1; next } /<!-- quickstart:end -->/ { on = 0 }
       on && !/^```/' "$1"
}
readme=$(extract "$src/README.md")
page=$(extract "$src/docs/quickstart.md")
[ -n "$readme" ] || { echo "quickstart: README.md has no block between the quickstart markers" >&2; exit 1; }
if [ "$readme" != "$page" ]; then
  echo "quickstart: README.md's quickstart differs from docs/quickstart.md's:" >&2
  diff <(printf '%s\n' "$readme") <(printf '%s\n' "$page") >&2
  exit 1
fi

work=$(mktemp -d /tmp/o3m-quickstart-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/path"
for p in o3m-pmg o3m-passive o3m-active o3m-cli; do ln -s "$bin/$p" "$work/path/$p"; done
ln -s "$src/scripts/make-certs.sh" "$work/path/o3m-make-certs"
host="127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1)).1"
printf '%s\n' "$readme" | sed "s/127\.0\.0\.1/$host/g" > "$work/quickstart.sh"

# The block's own kill stops its four daemons; this trap stops them when the
# block failed before it, or the time ran out.
( cd "$work" && PATH="$work/path:$PATH" timeout -k 5 90 bash -c \
    'trap "kill \$(jobs -p) 2>/dev/null; wait" EXIT; trap "exit 143" TERM; . ./quickstart.sh' ) \
  > "$work/out.txt" 2>&1
rc=$?
cat "$work/out.txt"
fail() {
  echo "quickstart: $*" >&2
  for f in "$work"/o3m-quickstart/*.log; do [ -e "$f" ] && { echo "---- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}
[ "$rc" -eq 0 ] || fail "the block exited with $rc"
grep -Eq '^decision=[0-9]+ item=i[123] candidate=[0-2] score=' "$work/out.txt" ||
  fail "no decision printed"
grep -q '^updates=1$' "$work/out.txt" || fail "the reward was not applied (no updates=1)"
grep -q '^rounds=1$' "$work/out.txt" || fail "the stats do not show the round (no rounds=1)"
echo "quickstart: ok"
