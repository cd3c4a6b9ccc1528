#!/usr/bin/env bash
# docs_site.sh SOURCE_DIR -- builds the documentation site as CI does
# (mkdocs build --strict) and fails on what --strict lets through: a page of
# docs/ that the nav leaves out (mkdocs 1.4 only logs it) and a link of
# README.md, which lives outside docs/, to a file that does not exist; and
# the C header's functions must be those of docs/library.md's table.
# Exit 77 (skipped) when mkdocs is not installed; scripts/setup-deps.sh
# installs it (both are Debian packages of /usr/bin/python3, which mkdocs runs on).
set -uo pipefail
src=$1
command -v mkdocs >/dev/null 2>&1 || { echo "docs_site: mkdocs is not installed (scripts/setup-deps.sh)"; exit 77; }
/usr/bin/python3 -c 'import pymdownx' 2>/dev/null ||
  { echo "docs_site: python3-pymdownx is not installed (scripts/setup-deps.sh)"; exit 77; }
site=$(mktemp -d /tmp/o3m-docs-site.XXXXXX)
trap 'rm -rf "$site"' EXIT
rc=0
(cd "$src" && mkdocs build --strict --site-dir "$site/site") > "$site/log" 2>&1 || rc=$?
cat "$site/log"
[ "$rc" -eq 0 ] || { echo "docs_site: mkdocs build --strict failed" >&2; exit 1; }
if grep -q 'not included in the "nav"' "$site/log"; then
  echo "docs_site: a page of docs/ is missing from mkdocs.yml's nav (above)" >&2
  exit 1
fi
bad=0
while IFS= read -r link; do
  target=${link%%#*}
  [ -e "$src/$target" ] || { echo "docs_site: README.md links to $target, which does not exist" >&2; bad=1; }
done < <(grep -o '](\([^)]*\))' "$src/README.md" | sed 's/^](//; s/)$//' | grep -v '^[a-z]*://' | grep -v '^#')
# The hand-kept function table of docs/library.md names exactly the
# functions the installed header declares.
header_fns=$(grep -vE '^ *(/?\*|//)' "$src/lib/include/o3m/o3m.h" |
             grep -oE '\bo3m_[a-z0-9_]+\(' | tr -d '(' | sort -u)
page_fns=$(grep '^| `o3m_' "$src/docs/library.md" | cut -d'|' -f2 | grep -oE 'o3m_[a-z0-9_]+' | sort -u)
if [ "$header_fns" != "$page_fns" ]; then
  echo "docs_site: docs/library.md's function table and lib/include/o3m/o3m.h differ (< header, > page):" >&2
  diff <(printf '%s\n' "$header_fns") <(printf '%s\n' "$page_fns") >&2
  bad=1
fi
[ "$bad" -eq 0 ] || exit 1
echo "docs_site: ok ($(find "$site/site" -name index.html | wc -l) pages)"
