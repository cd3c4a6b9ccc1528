#!/usr/bin/env bash
# figures_list.sh BIN SRC -- eval/figures.sh cannot rot silently: for every
# entry of its --list, each o3m-eval subcommand the command runs must exist
# (SUB --help exits 0) and know every --option the command passes it; each
# eval/bench script must exist, be executable and mention each option it is
# given. The figures themselves are not run (too slow for a test).
set -u
BIN=$1
SRC=$2
list=$("$SRC/eval/figures.sh" --list --bin "$BIN") || { echo "figures.sh --list failed"; exit 1; }
n=$(printf '%s\n' "$list" | grep -c .)
[ "$n" -ge 30 ] || { echo "figures.sh --list gave only $n entries"; exit 1; }
bad=0
# A typo in --only is refused rather than running nothing.
if "$SRC/eval/figures.sh" --list --only hannun,nosuchgroup >/dev/null 2>&1; then
  echo "figures.sh --only accepted an unknown group"; bad=1
fi
[ "$("$SRC/eval/figures.sh" --list --only p2b/synthetic | wc -l)" = 1 ] ||
  { echo "figures.sh --only p2b/synthetic did not select one entry"; bad=1; }
while IFS="$(printf '\t')" read -r entry where cmd; do
  # Split the command at && into the programs it runs.
  printf '%s\n' "$cmd" | sed 's/ && /\n/g' | while read -r part; do
    set -f
    # shellcheck disable=SC2086
    set -- $part
    set +f
    while [ $# -gt 0 ] && case "$1" in *=*) true ;; *) false ;; esac; do shift; done
    prog=$1
    shift
    case "$prog" in
      '$BIN/o3m-eval')
        sub=$1
        shift
        help=$("$BIN/o3m-eval" "$sub" --help 2>&1) ||
          { echo "$entry: o3m-eval $sub --help failed: no such subcommand"; exit 1; }
        for w in "$@"; do
          case "$w" in --*) ;; *) continue ;; esac
          printf '%s\n' "$help" | grep -Eq -- "$w([^a-z0-9-]|$)" ||
            { echo "$entry: o3m-eval $sub does not know $w"; exit 1; }
        done ;;
      '$BENCH/'*)
        script=$SRC/eval/bench/${prog#\$BENCH/}
        [ -x "$script" ] || { echo "$entry: $script is missing or not executable"; exit 1; }
        # An option is the script's own or one it passes on to a program
        # it runs (run-load.sh hands its arguments to o3m-bench-load).
        helps=$(for p in $(grep -o 'o3m-[a-z-]*' "$script" | sort -u); do
          [ -x "$BIN/$p" ] && "$BIN/$p" --help 2>&1; done)
        for w in "$@"; do
          case "$w" in --*) ;; *) continue ;; esac
          { grep -Eq -- "$w([^a-z0-9-]|$)" "$script" "$SRC/eval/bench/bench-lib.sh" ||
            printf '%s\n' "$helps" | grep -Eq -- "$w([^a-z0-9-]|$)"; } ||
            { echo "$entry: $script does not take $w"; exit 1; }
        done ;;
      *) echo "$entry: unknown program $prog"; exit 1 ;;
    esac
  done || bad=1
done <<EOT
$list
EOT
[ "$bad" = 0 ] && echo "figures.sh: $n entries, every subcommand and option known"
exit $bad
