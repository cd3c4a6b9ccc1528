#!/usr/bin/env bash
# netns-federation.sh -- the demo's federation across hosts: the PMG, the
# active party, every passive party and the client each on a host of its
# own, made of Linux network namespaces (deploy/README.md, "Three hosts and
# more"). Needs root, iproute2 and nftables (the port forward, --firewall).
#
#   scripts/netns-federation.sh up [--firewall] [OPTIONS] [-- gen-federation options]
#   scripts/netns-federation.sh demo [--rounds N] [--K N] [--require-match] [OPTIONS] [-- federate options]
#   scripts/netns-federation.sh reach FROM TO [OPTIONS]
#   scripts/netns-federation.sh link HOST down|up [OPTIONS]
#   scripts/netns-federation.sh cli [OPTIONS] -- o3m-cli arguments
#   scripts/netns-federation.sh status [OPTIONS]
#   scripts/netns-federation.sh down [OPTIONS]
#
# up: removes what an earlier run left (down), then makes a namespace
# PREFIX-hub holding a bridge and one namespace PREFIX-NAME per party and
# for the client, each joined to the bridge by a veth pair and given its
# own address in SUBNET.0/24 (pmg .10, the active party .20, the client
# .30, the passive parties .41, .42, ...). Nothing is added to the
# caller's namespace: the bridge lives in the hub, so no traffic of the
# federation can leave it. It writes the demo's federation (o3m-eval
# gen-federation with the demo's options, or those after --) into DIR, with
# every party at address = HOST:7000, and a copy of the config per host
# that binds another socket, naming its own listen only
# (DIR/federation.NAME.conf; the fingerprint leaves listen out, so all
# copies agree):
#   pmg       no listen: it binds its address;
#   passive   listen = 0.0.0.0:7000 (every interface of its host);
#   active    listen = 0.0.0.0:7443 behind a port forward: its host
#             redirects port 7000 to 7443 (nftables nat), as a NAT router
#             in front of it would, so the address its peers dial is not
#             the socket it binds;
# makes a certificate per party and for the client (scripts/make-certs.sh)
# with its name as DNS SAN, which the peers check, and its host as IP SAN;
# with --firewall loads each host's nftables rules (the deploy guide's:
# each host accepts only the peers that must dial it); then starts every
# daemon inside its namespace and waits until each is ready.
# demo: streams the demo's rounds (default 300, K = 10) from the client's
# host through the active party, as scripts/demo.sh does, and prints the
# federated regret beside the central run's. Options after -- go to
# o3m-eval federate (for example --seconds S --trace FILE).
# reach FROM TO: exit 0 when host FROM opens a TCP connection to party TO's
# address within 1 s, 1 otherwise (FROM: a party or client).
# link HOST down|up: cuts host HOST off the bridge (its eth0 down, as a
# pulled cable: no reset reaches its peers, their packets are lost) or
# plugs it back in (deploy/README.md, "A host cut off").
# cli: o3m-cli from the client's host with the client's certificate (for
# example `cli -- stats`).
# status: the hosts, their daemons and the reachability matrix.
# down: stops every process in the namespaces (those up started) and
# removes the namespaces, with the bridge and veths in them, and DIR. It is
# idempotent and safe after a crash: it finds the namespaces by name.
#
# OPTIONS: --prefix P (namespace names; default o3m), --dir DIR (default
# /tmp/o3m-netns-P), --bin DIR (the binaries; default BUILD/bin with BUILD
# = $O3M_BUILD_DIR or build), --subnet A.B.C (default 10.99.0: private,
# and used only inside the namespaces this script makes).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/federation-lib.sh"
prog=netns-federation.sh
die() {
  echo "$prog: error: $*" >&2
  exit 1
}

cmd=${1:-}
[ $# -gt 0 ] && shift
prefix=${O3M_NETNS_PREFIX:-o3m} dir='' bin='' subnet=10.99.0 firewall=0 rounds=300 K=10
require='' gen=() args=()
while [ $# -gt 0 ]; do
  case "$1" in
  --prefix) prefix=$2; shift 2 ;;
  --dir) dir=$2; shift 2 ;;
  --bin) bin=$2; shift 2 ;;
  --subnet) subnet=$2; shift 2 ;;
  --firewall) firewall=1; shift ;;
  --rounds) rounds=$2; shift 2 ;;
  --K) K=$2; shift 2 ;;
  --require-match) require=--require-match; shift ;;
  --) shift; gen=("$@"); break ;;
  -*) die "unknown option $1" ;;
  *) args+=("$1"); shift ;;
  esac
done
[[ "$prefix" =~ ^[a-z0-9]{1,8}$ ]] || die "--prefix '$prefix' must be 1..8 characters from [a-z0-9]"
if ! [[ "$subnet" =~ ^(10|192\.168|172\.(1[6-9]|2[0-9]|3[01]))(\.[0-9]{1,3}){1,2}$ ]] ||
  [ "$(tr -cd . <<<"$subnet" | wc -c)" != 2 ]; then
  die "--subnet '$subnet' must be the first three octets of a private /24 (10.x.y, 172.16-31.y, 192.168.y)"
fi
dir=${dir:-${TMPDIR:-/tmp}/o3m-netns-$prefix}
if [ -z "$bin" ]; then
  build=${O3M_BUILD_DIR:-build}
  [[ "$build" = /* ]] || build="$root/$build"
  bin="$build/bin"
fi
PORT=7000 AP_LISTEN_PORT=7443

ns() { echo "$prefix-$1"; }
in_ns() {
  local n=$1
  shift
  ip netns exec "$(ns "$n")" "$@"
}

# The parties of the federation up wrote (those of gen-federation's
# options) into FED_PMG, FED_ACTIVE and FED_PASSIVE.
load() {
  [ -f "$dir/federation.conf" ] || die "no federation in $dir (run '$prog up' first)"
  fed_names "$dir/federation.conf"
}
# The hosts: every party, then the client (after load or fed_gen).
hosts() {
  # shellcheck disable=SC2086
  echo $FED_PMG $FED_ACTIVE $FED_PASSIVE client
}
# host_ip NAME: the address of NAME's host.
host_ip() {
  local i=0 p
  case "$1" in
  "$FED_PMG") echo "$subnet.10" ;;
  "$FED_ACTIVE") echo "$subnet.20" ;;
  client) echo "$subnet.30" ;;
  *)
    for p in $FED_PASSIVE; do
      i=$((i + 1))
      [ "$p" = "$1" ] && { echo "$subnet.$((40 + i))"; return 0; }
    done
    die "no host for '$1'"
    ;;
  esac
}

# The hooks of federation-lib.sh: each daemon and the driver run on their
# own host, each daemon reads its host's copy of the config, and each
# certificate names its host.
fed_wrap() { echo "ip netns exec $(ns "$1")"; }
fed_config_of() {
  if [ -f "$dir/federation.$1.conf" ]; then echo "$dir/federation.$1.conf"; else echo "$FED_CONF"; fi
}
fed_make_certs() {
  local n
  for n in $FED_PMG $FED_ACTIVE $FED_PASSIVE client; do
    "$FED_SCRIPTS/make-certs.sh" --ip "$(host_ip "$n")" "$1/certs" "$n"
  done
}

# The namespaces of this prefix that exist now.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-[A-Za-z0-9_.-]+$" || true
}

down() {
  local n p pids=() left
  # The daemons first: by the pid files of up, when the process is still in
  # one of our namespaces (a reused pid is someone else's), then anything
  # else still running inside our namespaces (a crash of up).
  if [ -d "$dir/pids" ]; then
    for f in "$dir"/pids/*; do
      [ -f "$f" ] || continue
      p=$(cat "$f")
      [[ "$(ip netns identify "$p" 2>/dev/null)" == "$prefix"-* ]] && pids+=("$p")
    done
  fi
  for n in $(our_namespaces); do
    for p in $(ip netns pids "$n" 2>/dev/null); do pids+=("$p"); done
  done
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 50); do
      left=()
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left+=("$p"); done
      [ ${#left[@]} -eq 0 ] && break
      sleep 0.1
    done
    if [ ${#left[@]} -gt 0 ]; then kill -9 "${left[@]}" 2>/dev/null || true; fi
  fi
  # Deleting a namespace deletes its interfaces: the veth pairs and, with
  # the hub, the bridge.
  for n in $(our_namespaces); do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$dir"
}

# The nftables rules of host NAME: accept on the service port only the
# hosts that must dial it (input only; replies to its own calls pass as
# established). The active party's rule names the port after its port
# forward (7443): input sees the translated port.
firewall_rules() {
  local name=$1 port=$PORT from=() p
  case "$name" in
  "$FED_PMG") for p in $FED_ACTIVE $FED_PASSIVE; do from+=("$(host_ip "$p")"); done ;;
  "$FED_ACTIVE") from=("$(host_ip client)"); port=$AP_LISTEN_PORT ;;
  client) ;;
  *) from=("$(host_ip "$FED_ACTIVE")") ;;
  esac
  cat <<EOF
# $name ($(host_ip "$name")): written by $prog
table inet o3m_filter {
  chain input {
    type filter hook input priority filter; policy drop;
    iif "lo" accept
    ct state established,related accept
EOF
  if [ ${#from[@]} -gt 0 ]; then
    local IFS=,
    echo "    ip saddr { ${from[*]} } tcp dport $port accept"
  fi
  echo "  }"
  echo "}"
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root (it makes network namespaces)"
  command -v ip >/dev/null || die "the ip tool (iproute2) is missing"
  ip netns list >/dev/null 2>&1 || die "'ip netns' does not work here"
  command -v nft >/dev/null ||
    die "the nft tool is missing (Debian package nftables; scripts/setup-deps.sh)"
  for x in o3m-pmg o3m-passive o3m-active o3m-eval; do
    [ -x "$bin/$x" ] || die "$bin/$x is missing (build first, or give --bin)"
  done
  down
  mkdir -p "$dir/pids"
  [ ${#gen[@]} -gt 0 ] || gen=("${FED_DEMO_GEN[@]}")
  # The demo's generation (tables, truth, keys, config) and certificates
  # (fed_make_certs above); then each party's address becomes its host's.
  fed_gen "$dir" "$bin" "${gen[@]}"
  # Then each party's address becomes its host's, and each host that binds
  # another socket gets its own copy naming its listen (the others' copies
  # do not, and the fingerprints still agree: listen is not covered).
  local conf=$dir/federation.conf n lis
  for n in $FED_PMG $FED_ACTIVE $FED_PASSIVE; do
    sed -i "/^\[party $n\]\$/,/^\[/ s|^address = .*|address = $(host_ip "$n"):$PORT|" "$conf"
  done
  for n in $FED_ACTIVE $FED_PASSIVE; do
    lis="0.0.0.0:$PORT"
    [ "$n" = "$FED_ACTIVE" ] && lis="0.0.0.0:$AP_LISTEN_PORT"
    sed "/^\[party $n\]\$/,/^\[/ s|^address = .*|&\nlisten = $lis|" "$conf" \
      >"$dir/federation.$n.conf"
  done
  # The network: a bridge in the hub and a veth pair per host.
  ip netns add "$(ns hub)"
  in_ns hub ip link set lo up
  in_ns hub ip link add br0 type bridge
  in_ns hub ip link set br0 up
  local i=0
  for n in $(hosts); do
    i=$((i + 1))
    ip netns add "$(ns "$n")"
    ip link add eth0 netns "$(ns "$n")" type veth peer name "v$i" netns "$(ns hub)"
    in_ns hub ip link set "v$i" master br0 up
    in_ns "$n" ip link set lo up
    in_ns "$n" ip addr add "$(host_ip "$n")/24" dev eth0
    in_ns "$n" ip link set eth0 up
    echo "$n $(host_ip "$n")" >>"$dir/hosts"
  done
  # The active party's port forward, as its NAT router would do it.
  in_ns "$FED_ACTIVE" nft -f - <<EOF
table ip o3m_nat {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    tcp dport $PORT redirect to :$AP_LISTEN_PORT
  }
}
EOF
  if [ "$firewall" = 1 ]; then
    mkdir -p "$dir/firewall"
    for n in $(hosts); do
      firewall_rules "$n" >"$dir/firewall/$n.nft"
      in_ns "$n" nft -f "$dir/firewall/$n.nft"
    done
  fi
  # The daemons, each on its host, through the demo's own start and wait.
  # On failure everything stays for a look at the logs; down removes it.
  local rc=0
  fed_start_all "$dir" "$bin" >/dev/null || rc=$?
  for i in "${!FED_NAMES[@]}"; do echo "${FED_PIDS[$i]}" >"$dir/pids/${FED_NAMES[$i]}"; done
  [ "$rc" = 0 ] || die "a daemon did not become ready (logs in $dir; '$prog down' removes it all)"
  echo "$prog: up in $dir: $(wc -l <"$dir/hosts") hosts on $subnet.0/24$([ "$firewall" = 1 ] && echo ", firewalled")"
}

# address_of NAME: party NAME's address in the config.
address_of() {
  awk -v s="[party $1]" '$0==s{f=1;next} /^\[/{f=0} f&&/^address = /{print $3}' \
    "$dir/federation.conf"
}

# probe FROM TO...: from FROM's host, a TCP connect to each TO's address at
# once (1 s each); prints + (connected) or . (refused or timed out) per TO.
probe() {
  local src=$1 to
  local addrs=()
  shift
  for to in "$@"; do
    addrs+=("$(address_of "$to")")
    [ -n "${addrs[-1]}" ] || die "'$to' is not a party of $dir/federation.conf"
  done
  in_ns "$src" python3 - "${addrs[@]}" <<'EOF'
import socket, sys, threading
res = ["."] * (len(sys.argv) - 1)
def one(i, a):
    host, port = a.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        res[i] = "+"
    except OSError:
        pass
ts = [threading.Thread(target=one, args=(i, a)) for i, a in enumerate(sys.argv[1:])]
for t in ts: t.start()
for t in ts: t.join()
print(" ".join(res))
EOF
}

status() {
  local n to p parties
  # shellcheck disable=SC2206
  parties=($FED_PMG $FED_ACTIVE $FED_PASSIVE)
  echo "hosts (namespace address [daemon pid]):"
  for n in $(hosts); do
    p=$(cat "$dir/pids/$n" 2>/dev/null || true)
    printf '  %-14s %-12s %s\n' "$(ns "$n")" "$(host_ip "$n")" \
      "${p:+$(kill -0 "$p" 2>/dev/null && echo "pid $p" || echo "pid $p (gone)")}"
  done
  echo "reachability (row dials column's address; + connects, . does not, - itself):"
  printf '  %-8s' from
  for to in "${parties[@]}"; do printf ' %-7s' "$to"; done
  echo
  for n in $(hosts); do probe "$n" "${parties[@]}" >"$dir/reach.$n" & done
  wait
  for n in $(hosts); do
    local cells
    read -ra cells <"$dir/reach.$n"
    rm -f "$dir/reach.$n"
    printf '  %-8s' "$n"
    for i in "${!parties[@]}"; do
      [ "${parties[$i]}" = "$n" ] && cells[i]=-
      printf ' %-7s' "${cells[$i]}"
    done
    echo
  done
}

case "$cmd" in
up) up ;;
down) down ;;
status) load && status ;;
reach)
  [ "${#args[@]}" = 2 ] || die "reach needs FROM and TO"
  load
  [ "$(probe "${args[0]}" "${args[1]}")" = + ]
  ;;
demo)
  load
  fed_federate "$dir" "$bin" "$rounds" "$K" $require "${gen[@]}"
  ;;
link)
  if [ "${#args[@]}" != 2 ] || ! [[ "${args[1]}" =~ ^(up|down)$ ]]; then
    die "link needs HOST and down or up"
  fi
  load
  host_ip "${args[0]}" >/dev/null
  in_ns "${args[0]}" ip link set eth0 "${args[1]}"
  ;;
cli)
  load
  in_ns client "$bin/o3m-cli" --config "$dir/federation.conf" --cert "$dir/certs/client.pem" \
    --key "$dir/certs/client.key" "${gen[@]}"
  ;;
*)
  echo "usage: $prog up|demo|reach FROM TO|link HOST down|up|cli|status|down [options] (see the script's header)" >&2
  exit 2
  ;;
esac
