#!/usr/bin/env bash
# config_doc.sh -- the configuration reference cannot drift from the parser
# config_keys lists every (section, key) the parser accepts from
# its own tables (o3m_config_key_at); this checks that
#  1. docs/configuration.md has a table row for each of them under its
#     section's heading, and no row for a key the parser does not accept;
#  2. the party table's "roles" column names exactly the roles the parser
#     lets set each key;
#  3. the man page o3m.conf(5) built from the page (scripts/conf-man.py)
#     lists the same keys, so the installed page says what the parser does.
#
#   config_doc.sh CONFIG_KEYS_BIN SOURCE_DIR MAN_PAGE
#
# Exit 0 when all hold; otherwise every difference, one per line.
set -euo pipefail
KEYS_BIN=${1:?usage: config_doc.sh CONFIG_KEYS_BIN SOURCE_DIR MAN_PAGE}
SRC=${2:?usage}
MAN=${3:?usage}
DOC=$SRC/docs/configuration.md
WORK=$(mktemp -d /tmp/o3m-confdoc.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

"$KEYS_BIN" >"$WORK/parser.txt"
awk '{print $1, $2}' "$WORK/parser.txt" | sort >"$WORK/parser-keys.txt"
awk '$1 == "party" {print $2, $3}' "$WORK/parser.txt" | sort >"$WORK/parser-roles.txt"

# The page's rows: a "## ... `[SECTION ...]` ..." heading sets the section,
# a table row "| `key` | ..." under it is one key. The party table's fifth
# column is its roles.
awk '
  /^## / { sec = ""; if (match($0, /`\[[a-z]+/)) sec = substr($0, RSTART + 2, RLENGTH - 2); next }
  /^\| `[a-z0-9_]+` \|/ && sec != "" {
    n = split($0, c, "|"); key = c[2]; gsub(/[ `]/, "", key)
    print sec, key > "/dev/stdout"
    if (sec == "party") { r = c[6]; gsub(/ /, "", r); print key, r > ROLES }
  }' ROLES="$WORK/doc-roles-raw.txt" "$DOC" | sort >"$WORK/doc-keys.txt"
sort "$WORK/doc-roles-raw.txt" >"$WORK/doc-roles.txt"

# The man page: each key is a tagged paragraph ".TP" whose next line is the
# key in bold; the sections are the .SH lines naming [SECTION.
awk '
  /^\.SH / { sec = ""; if (match($0, /\[[A-Z]+/)) sec = tolower(substr($0, RSTART + 1, RLENGTH - 1)); next }
  /^\.TP/ { tp = 1; next }
  tp { tp = 0; k = $0; gsub(/\\f[BRI]/, "", k); gsub(/\\-/, "-", k); if (sec != "") print sec, k }
' "$MAN" | sort >"$WORK/man-keys.txt"

bad=0
report() { # report WHAT FILE_A FILE_B: lines of A missing from B
  local line
  while IFS= read -r line; do
    echo "config_doc: FAIL: $1: $line"
    bad=1
  done < <(comm -23 "$2" "$3")
}
report "a key the parser accepts is not documented in docs/configuration.md" \
  "$WORK/parser-keys.txt" "$WORK/doc-keys.txt"
report "docs/configuration.md documents a key the parser does not accept" \
  "$WORK/doc-keys.txt" "$WORK/parser-keys.txt"
report "the parser lets these roles set a party key, docs/configuration.md says otherwise" \
  "$WORK/parser-roles.txt" "$WORK/doc-roles.txt"
report "a key the parser accepts is missing from o3m.conf(5)" \
  "$WORK/parser-keys.txt" "$WORK/man-keys.txt"
report "o3m.conf(5) lists a key the parser does not accept" \
  "$WORK/man-keys.txt" "$WORK/parser-keys.txt"
[ "$bad" = 0 ] || exit 1
echo "config_doc: $(wc -l <"$WORK/parser-keys.txt") keys: docs/configuration.md and o3m.conf(5) list exactly the parser's"
