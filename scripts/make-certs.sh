#!/usr/bin/env bash
# make-certs.sh [--dns ALT] [--ip ADDR]... OUTDIR NAME [NAME...] -- a local CA and one
# certificate per party or client, for trials of an o3m federation on one
# machine. A client
# (a front end, an operator, the demo driver) needs a [client NAME] section in
# the federation config as well: a certificate of the CA alone only gets a
# caller through the TLS handshake, and the daemons decide by the name what
# it may call. The monitoring host that scrapes the daemons' /metrics needs
# one too, named monitor (`make-certs.sh OUTDIR monitor`): the name that
# [federation] metrics_clients allows by default (docs/operations.md,
# "Metrics and health"); it needs no [client NAME] section.
#
# OUTDIR/ca.pem and OUTDIR/ca.key are created when absent (an existing CA is
# reused, so parties can be added later). For each NAME the script writes
# OUTDIR/NAME.pem and OUTDIR/NAME.key: an ECDSA P-256 key (mode 0600) and a
# certificate signed by the CA with
#   subject          CN=NAME      the party or client identity every access
#                                 decision rests on (proto/o3m_access.h)
#   subjectAltName   DNS:localhost, DNS:NAME, IP:127.0.0.1
#                                 DNS:NAME is what every o3m client checks:
#                                 it pins the peer party by tls.server_name
#                                 = NAME (o3m-cli, libo3m and Python refuse
#                                 TLS without one). The loopback names are
#                                 for other tools (curl, grpcurl) only: every
#                                 certificate carries them, so a client that
#                                 checked the target's host would accept any
#                                 party as any other.
#   extendedKeyUsage serverAuth, clientAuth (every daemon is both)
# With --dns ALT every certificate of this run also carries DNS:ALT: the
# NATS nodes of AP replicas share the name "nats", which the replicas
# expect ([federation] nats_server_name) and the cluster routes map to
# (deploy/nats/o3m-nats.conf):
#   make-certs.sh --dns nats OUTDIR nats-n1 nats-n2 nats-n3
# The administrative identity that creates the replicas' stream and bucket
# (o3m-cli nats-setup; the NATS nodes' O3M_NATS_ADMIN=CN=o3m-admin) is one
# more name, kept away from every daemon's host:
#   make-certs.sh OUTDIR o3m-admin
#
# With --ip ADDR (IPv4 or IPv6, repeatable) every certificate of this run
# also carries IP:ADDR: the host addresses of a party on its own host, for
# the tools that check the host they dialled (curl on the metrics port).
# o3m's own clients still check DNS:NAME only, so one call per party gives
# each its own hosts (scripts/netns-federation.sh):
#   make-certs.sh --ip 10.99.0.41 OUTDIR bank
# An existing NAME.pem / NAME.key is replaced. Quiet on success; on failure
# it prints openssl's output and exits 1. Production deployments use their
# own PKI: this CA key sits next to the certificates it signs.
set -euo pipefail

prog=$(basename "$0")
die() {
  echo "$prog: error: $*" >&2
  exit 1
}

# 1 when $1 is an IPv4 literal (four octets 0..255) or an IPv6 one.
ip_ok() {
  local a=$1 o
  if [[ "$a" =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]]; then
    for o in "${BASH_REMATCH[@]:1}"; do [ "$((10#$o))" -le 255 ] || return 1; done
    return 0
  fi
  [[ "$a" =~ ^[0-9A-Fa-f:]{2,39}$ && "$a" == *:*:* ]]
}

alt= ips=()
while [ $# -gt 0 ]; do
  case "$1" in
  --dns)
    [ $# -ge 2 ] || die "--dns needs a name"
    alt=$2
    shift 2
    [[ "$alt" =~ ^[A-Za-z0-9.-]{1,64}$ ]] || die "--dns name '$alt' must be 1..64 characters from [A-Za-z0-9.-]"
    ;;
  --ip)
    [ $# -ge 2 ] || die "--ip needs an address"
    ip_ok "$2" || die "--ip '$2' is not an IPv4 or IPv6 address"
    ips+=("$2")
    shift 2
    ;;
  *) break ;;
  esac
done
[ $# -ge 2 ] || {
  echo "usage: $prog [--dns ALT] [--ip ADDR]... OUTDIR NAME [NAME...]" >&2
  exit 1
}
command -v openssl >/dev/null 2>&1 || die "the openssl tool is not installed"

out=$1
shift
for name in "$@"; do
  # The config parser's rule for party names; "ca" would overwrite the CA.
  [[ "$name" =~ ^[A-Za-z0-9_.-]{1,64}$ ]] ||
    die "party name '$name' must be 1..64 characters from [A-Za-z0-9_.-]"
  [ "$name" != ca ] || die "party name 'ca' is reserved for the CA files"
done

mkdir -p "$out" || die "cannot create directory $out"
log=$(mktemp)
work=$(mktemp -d)
trap 'rm -rf "$log" "$work"' EXIT

# Runs a command with its output captured; on failure shows it and exits.
run() {
  if ! "$@" >>"$log" 2>&1; then
    cat "$log" >&2
    die "failed: $*"
  fi
}

# A fresh P-256 private key, never readable by others, not even briefly.
new_key() {
  (umask 077 && run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
    -out "$1")
  chmod 600 "$1"
}

ca_pem="$out/ca.pem"
ca_key="$out/ca.key"
if [ -e "$ca_pem" ] || [ -e "$ca_key" ]; then
  [ -f "$ca_pem" ] && [ -f "$ca_key" ] ||
    die "$out has only one of ca.pem and ca.key; remove it or supply both"
else
  new_key "$work/ca.key"
  cat >"$work/ca.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = o3m local CA
[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
  run openssl req -new -x509 -key "$work/ca.key" -out "$work/ca.pem" -days 825 -sha256 \
    -config "$work/ca.cnf"
  # Move both into place only when both exist, so a failure leaves no half CA.
  mv "$work/ca.key" "$ca_key"
  mv "$work/ca.pem" "$ca_pem"
  chmod 644 "$ca_pem"
fi

extra_ip=
for a in "${ips[@]}"; do extra_ip+=", IP:$a"; done

for name in "$@"; do
  new_key "$work/$name.key"
  cat >"$work/$name.ext" <<EOF
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, DNS:$name${alt:+, DNS:$alt}, IP:127.0.0.1$extra_ip
authorityKeyIdentifier = keyid
EOF
  run openssl req -new -key "$work/$name.key" -out "$work/$name.csr" -subj "/CN=$name" \
    -config /dev/null
  run openssl x509 -req -in "$work/$name.csr" -CA "$ca_pem" -CAkey "$ca_key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 825 -sha256 \
    -extfile "$work/$name.ext" -out "$work/$name.pem"
  run openssl verify -CAfile "$ca_pem" -purpose sslclient "$work/$name.pem"
  run openssl verify -CAfile "$ca_pem" -purpose sslserver "$work/$name.pem"
  mv "$work/$name.key" "$out/$name.key"
  mv "$work/$name.pem" "$out/$name.pem"
  chmod 644 "$out/$name.pem"
done
