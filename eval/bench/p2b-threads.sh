#!/usr/bin/env bash
# p2b-threads.sh -- `o3m-eval p2b` once took about 10 times its CPU
# time in wall time, its small BLAS calls handed to a multi-threaded
# OpenBLAS whose idle threads spun in sched_yield. Since then o3m-eval runs
# BLAS single-threaded in every command unless --threads N says otherwise.
# This runs the same p2b command under /usr/bin/time -v with each
# binaries' folder, one after the other in this one run, and prints wall
# time, CPU time (user + system), their ratio, and the voluntary and
# involuntary context switches. The gap shows under load: OpenBLAS's
# spinning threads yield to every other process, so on an idle machine the
# two builds' wall times are close and only the context switches differ.
#
#   eval/bench/p2b-threads.sh [P2B OPTIONS...]
#
# O3M_P2B_BINS="DIR1 DIR2" are the folders compared (default:
# "/work/cur-bin build/bin", before and after). The default options,
# --users 2000, keep the run short (the p2b figure itself is not the
# point). The target: wall within 1.5 times CPU. A measurement, not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=${O3M_P2B_BINS:-/work/cur-bin build/bin}
[ $# -gt 0 ] || set -- --users 2000
command -v /usr/bin/time >/dev/null || { echo "p2b-threads.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
out=$(mktemp -d /tmp/o3m-p2b-threads.XXXXXX)
trap 'rm -rf "$out"' EXIT
echo "o3m-eval p2b $*; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %9s %9s %8s %12s %12s\n' binaries "wall s" "cpu s" wall/cpu "vol. ctxsw" "invol. ctxsw"
for b in $bins; do
  /usr/bin/time -v "$b/o3m-eval" p2b "$@" >"$out/p2b.out" 2>"$out/time" ||
    { echo "$b: o3m-eval p2b failed:"; tail -20 "$out/time"; exit 1; }
  awk -v name="$b" -F': ' '
    /User time/ { u = $2 } /System time/ { s = $2 }
    /Elapsed \(wall clock\)/ { n = split($2, p, ":"); w = 0; for (i = 1; i <= n; i++) w = w * 60 + p[i] }
    /Voluntary context switches/ { v = $2 } /Involuntary context switches/ { iv = $2 }
    END { c = u + s; printf "%-28s %9.2f %9.2f %8.2f %12d %12d\n", name, w, c, (c > 0 ? w / c : 0), v, iv }
  ' "$out/time"
done
