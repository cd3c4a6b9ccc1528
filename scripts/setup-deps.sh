#!/usr/bin/env bash
# Installs every Debian package the project needs to build, test, run its demo
# and draw its plots. It installs only what is missing, so it is cheap to call
# before every build; it needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libopenblas-dev liblapacke-dev
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libsodium-dev
  libcsv-dev
  libcriterion-dev
  # libgmp-dev: only the Paillier peer (eval/peers/paillier); a build with
  # -DO3M_BUILD_PEERS=OFF does without it.
  libssl-dev libgmp-dev
  # tests/h2flood: raw HTTP/2 streams for the memory-before-authorization test.
  libnghttp2-dev
  libnats-dev nats-server
  openssl gnuplot-nox
  # The multi-host federation on network namespaces (scripts/netns-federation.sh):
  # the port forward and the firewall of deploy/README.md, "Three hosts and more".
  iproute2 nftables
  clang libclang-rt-14-dev
  help2man
  python3-cffi python3-numpy python3-pytest
  # `pip install ./python` offline into a venv with --system-site-packages
  # (docs/install.md, "Python: pip install"; python/tests/test_install.py).
  python3-venv python3-pip python3-setuptools python3-wheel
  # Operations (docs/operations.md): the metrics and health port, sd_notify,
  # and what the ops tests run: promtool, systemd-analyze verify, curl.
  libmicrohttpd-dev libgnutls28-dev libsystemd-dev
  prometheus systemd curl python3
  # The documentation site (mkdocs.yml): mkdocs build --strict in CI and the
  # test docs_site; pymdownx.snippets includes SECURITY.md and the other
  # root files into their pages.
  mkdocs python3-pymdownx
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2
$SUDO apt-get install -y -q "${missing[@]}" >&2
