#!/usr/bin/env bash
# install_prefix.sh BUILD_DIR CC [CFLAGS...]
#
# A self-contained prefix: installs BUILD_DIR with
# `cmake --install --prefix` into a temporary folder (not /usr/local) and
# checks, with LD_LIBRARY_PATH unset everywhere, that
#  1. the installed programs run (bin/o3m-cli --help) and a program built
#     with `pkg-config --cflags --libs o3m` against the prefix loads the
#     prefix's libo3m.so and runs (the RUNPATH that o3m.pc's Libs carries);
#  2. bin/o3m-make-certs (scripts/make-certs.sh) makes a CA and a
#     certificate whose DNS SAN is the party name;
#  3. lib/systemd/system holds the three units with the prefix filled in:
#     ExecStart names the installed daemon, Documentation= an installed
#     file (share/doc/o3m/deploy/README.md), no @PLACEHOLDER@ is left, and
#     each passes `systemd-analyze verify` with no message at all (skipped,
#     saying so, when systemd-analyze is missing);
#  4. o3m.conf(5) is in share/man/man5 and renders without roff warnings,
#     and the configuration reference, the Grafana dashboard and the
#     Prometheus alert rules are in share/doc/o3m.
# CFLAGS go to the program's compile (a sanitizer build's -fsanitize, which
# a program linking the instrumented library needs).
set -euo pipefail
build=$(cd "${1:?usage: install_prefix.sh BUILD_DIR CC [CFLAGS...]}" && pwd)
cc=${2:?usage: install_prefix.sh BUILD_DIR CC [CFLAGS...]}
shift 2
extra=("$@")
unset LD_LIBRARY_PATH
tmp=$(mktemp -d /tmp/o3m-prefix.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

fail() { echo "install_prefix: FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null

# --- 1 -------------------------------------------------------------------------
"$prefix/bin/o3m-cli" --help >"$tmp/help" 2>&1 || fail "o3m-cli --help: $(cat "$tmp/help")"
grep -q 'o3m-cli' "$tmp/help" || fail "o3m-cli --help printed no usage"
cat >"$tmp/app.c" <<'EOF'
#include <o3m/o3m.h>
#include <stdio.h>

int main(void) {
  const char *const opts[] = {"algo=linucb", "d=2", NULL};
  o3m_err e;
  o3m_engine *g = NULL;
  if (o3m_engine_create(&g, opts, &e) != 0) {
    printf("engine: %s\n", o3m_err_message(&e));
    return 1;
  }
  o3m_engine_destroy(g);
  printf("o3m %s\n", o3m_version());
  return 0;
}
EOF
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
"$cc" "${extra[@]}" -o "$tmp/app" "$tmp/app.c" $(pkg-config --cflags --libs o3m)
out=$("$tmp/app" 2>&1) || fail "a program built with pkg-config --libs o3m does not run without LD_LIBRARY_PATH: $out"
[ "$out" = "o3m $(pkg-config --modversion o3m)" ] || fail "the program printed '$out'"
loaded=$(ldd "$tmp/app" | sed -n 's/.*libo3m\.so\.[0-9]* => \([^ ]*\).*/\1/p')
[ "$(readlink -f "$loaded")" = "$(readlink -f "$prefix/lib/libo3m.so")" ] ||
  fail "the program loads libo3m from '$loaded', not from the prefix"
echo "install_prefix: o3m-cli --help and a pkg-config program run without LD_LIBRARY_PATH ($out)"

# --- 2 -------------------------------------------------------------------------
[ -x "$prefix/bin/o3m-make-certs" ] || fail "bin/o3m-make-certs is not installed"
"$prefix/bin/o3m-make-certs" "$tmp/certs" bank >/dev/null 2>&1 || fail "o3m-make-certs failed"
openssl verify -CAfile "$tmp/certs/ca.pem" "$tmp/certs/bank.pem" >/dev/null ||
  fail "o3m-make-certs: bank.pem is not signed by ca.pem"
openssl x509 -in "$tmp/certs/bank.pem" -noout -ext subjectAltName | grep -q 'DNS:bank' ||
  fail "o3m-make-certs: bank.pem has no DNS:bank"
echo "install_prefix: o3m-make-certs made ca.pem and bank.pem (DNS:bank)"

# --- 3 -------------------------------------------------------------------------
units="$prefix/lib/systemd/system"
analyze=$(command -v systemd-analyze || true)
[ -n "$analyze" ] ||
  echo "install_prefix: SKIPPED systemd-analyze verify: systemd-analyze is missing (Debian package systemd)"
for daemon in o3m-pmg o3m-passive o3m-active; do
  unit="$units/$daemon@.service"
  [ -f "$unit" ] || fail "$daemon@.service is not installed in lib/systemd/system"
  if grep -n '@[A-Z_]*@' "$unit"; then fail "$daemon@.service: a placeholder is left (above)"; fi
  exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
  [ "$exec_path" = "$prefix/bin/$daemon" ] || fail "$daemon@.service: ExecStart is '$exec_path'"
  doc=$(sed -n 's|^Documentation=file://||p' "$unit")
  { [ "$doc" = "$prefix/share/doc/o3m/deploy/README.md" ] && [ -s "$doc" ]; } ||
    fail "$daemon@.service: Documentation= '$doc' is not the installed deploy guide"
  if [ -n "$analyze" ]; then
    # An instance, as systemd would load it (its alias beside the template).
    ln -s "$daemon@.service" "$units/$daemon@test.service"
    out=$("$analyze" verify --man=no "$units/$daemon@test.service" 2>&1) ||
      fail "$daemon@.service: systemd-analyze verify: $out"
    [ -z "$out" ] || fail "$daemon@.service: systemd-analyze verify says: $out"
  fi
done
echo "install_prefix: the 3 units name $prefix/bin and the installed guide${analyze:+; systemd-analyze verify clean}"

# --- 4 -------------------------------------------------------------------------
man5="$prefix/share/man/man5/o3m.conf.5"
[ -s "$man5" ] || fail "share/man/man5/o3m.conf.5 is not installed"
if command -v man >/dev/null; then
  out=$(MANWIDTH=100 man --warnings -l "$man5" 2>"$tmp/man.err") || fail "man -l o3m.conf.5: $(cat "$tmp/man.err")"
  [ ! -s "$tmp/man.err" ] || fail "o3m.conf(5) has roff warnings: $(cat "$tmp/man.err")"
  echo "$out" | grep -q 'rpc_connections_per_identity' || fail "o3m.conf(5) does not render its keys"
fi
for f in share/doc/o3m/configuration.md share/doc/o3m/deploy/grafana/o3m-dashboard.json \
  share/doc/o3m/deploy/prometheus/o3m-alerts.yml; do
  [ -s "$prefix/$f" ] || fail "$f is not installed"
done
echo "install_prefix: o3m.conf(5), the configuration reference, the dashboard and the alert rules are installed"
echo "install_prefix: ok"
