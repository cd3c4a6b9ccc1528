#!/bin/sh
# no_history.sh SOURCE_DIR [BUILD_DIR] -- the source tree says what the code
# does and why, not which tracker entry or audit-finding number asked for
# it: the history lives in CHANGELOG.md and git log. Searches every text
# file under SOURCE_DIR except CHANGELOG.md, .git and build folders (any
# folder named build*, and BUILD_DIR wherever it is) for the word issue
# followed by a number, the words audit and finding in a row, or a test
# name carrying either number (regression_<audit|issue><N>_...), and fails
# naming each file:line. Registered with CTest as test_no_history.
set -u
src=${1:?usage: no_history.sh SOURCE_DIR [BUILD_DIR]}
bld=${2:-}
# The bracket keeps this line from matching itself.
pattern='i[s]sues? #?[0-9]|a[u]dit findings?|(a[u]dit|i[s]sue)[0-9]+_'
[ -d "$src" ] || { echo "no_history.sh: no such folder: $src" >&2; exit 2; }
src=$(cd "$src" && pwd)
[ -n "$bld" ] && [ -d "$bld" ] && bld=$(cd "$bld" && pwd)
hits=$(find "$src" \( -name .git -o -name 'build*' -type d -o -path "${bld:-/nonexistent}" \) -prune \
         -o -type f ! -name CHANGELOG.md -print |
       LC_ALL=C sort | tr '\n' '\0' | xargs -0 grep -InHiE "$pattern" 2>/dev/null)
if [ -n "$hits" ]; then
  printf '%s\n' "$hits" | sed "s|^$src/||" | while IFS= read -r line; do
    echo "FAIL: history in the source tree (move it to CHANGELOG.md, say what and why instead): $line"
  done
  exit 1
fi
echo "ok: no issue or audit-finding numbers outside CHANGELOG.md"
