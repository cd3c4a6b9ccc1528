#!/usr/bin/env bash
# attack-probes.sh -- blinding the probes, measured: how many health probes
# of a serving active participant are answered within 1 s while its
# metrics port is flooded with TLS handshakes that never finish, for two
# builds side by side in one run.
#
#   eval/bench/attack-probes.sh [SECONDS]
# Environment: O3M_ATTACK_BINS="DIR1 DIR2" (default build/bin; for example
# "OLD/build/bin build/bin"): the binaries' folders to compare, each
# already built.
#
# For each folder: a local federation with mutual TLS on loopback (d = 12,
# 3 passive parties), the AP with --metrics-listen and, when the build has
# it, --probe-socket; then tests/probe_flood.py for SECONDS (default 20):
# 4 partial handshakes from each of 127.0.0.1 .. 127.0.0.64 (the prober's
# own address among them), reconnected whenever cut, and a probe every
# 0.25 s per probe path, /healthz and /readyz in turn. Prints one line per
# build and probe path:
#   BINARIES  PATH  answered A of N within 1 s (healthz a/n, readyz b/m)
# The HTTPS port is the path an orchestrator had before; the unix socket
# the one it has now.
#
# The second form, when the build has the probe socket: the daemon's own
# group floods the socket itself (its mode lets the group in):
# tests/probe_flood.py --unix-flood, 8 processes with 32 connections each,
# half silent, half dribbling a request that never ends, reopened as soon
# as closed, and 28 probes, one every 0.25 s. One line per build:
#   BINARIES  own group  answered A of 28 within 1 s (...)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-20}
bins=${O3M_ATTACK_BINS:-build/bin}
. scripts/federation-lib.sh
work=$(mktemp -d /tmp/o3m-attack-probes.XXXXXX)
trap 'fed_down; rm -rf "$work"' EXIT

printf '%-28s %-13s %s\n' binaries "probe path" "answered within 1 s under the flood"
for b in $bins; do
  bin=$(cd "$b" && pwd)
  rm -rf "${work:?}"/*
  port=$(fed_free_port)
  sock=
  "$bin/o3m-active" --help 2>&1 | grep -q -- --probe-socket && sock=$work/ap.probe
  fed_extra_args() {
    [ "$1" = "$FED_ACTIVE" ] && echo "--metrics-listen 127.0.0.1:$port${sock:+ --probe-socket $sock}"
    return 0
  }
  fed_up "$work" "$bin" --parties 3,3,3,3 --users 50 --items 20 >/dev/null
  args=(--probe-https "$work/certs/ca.pem")
  [ -n "$sock" ] && args+=(--probe-unix "$sock")
  out=$(python3 tests/probe_flood.py "$port" --addrs 64 --per-addr 4 --seconds "$seconds" \
    "${args[@]}")
  while read -r what path rest; do
    [ "$what" = probes ] || continue
    case "$path" in
    https:) path="HTTPS port" ;;
    unix:) path="unix socket" ;;
    esac
    printf '%-28s %-13s %s\n' "$b" "$path" "$rest"
  done <<<"$out"
  [ -n "$sock" ] || printf '%-28s %-13s %s\n' "$b" "unix socket" "(this build has no --probe-socket)"
  if [ -n "$sock" ]; then
    out=$(python3 tests/probe_flood.py 0 --unix-flood "$sock" --unix-procs 8 --unix-per-proc 32 \
      --probe-unix "$sock" --probes 28)
    rest=$(echo "$out" | sed -n 's/^probes unix: //p')
    printf '%-28s %-13s %s\n' "$b" "own group" "$rest"
  fi
  fed_down
done
