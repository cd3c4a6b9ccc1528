#!/usr/bin/env bash
# install_lib.sh BUILD_DIR SOURCE_DIR CC [CFLAGS...]
#
# The installed library from a user's side: installs
# BUILD_DIR into a temporary prefix with `cmake --install`, checks what
# landed there (the five programs and their --version, libo3m.so with its
# soname, libo3m.a, the headers, o3m.pc, the man pages), then builds
# tests/install_consumer.c with CC against the prefix through
# `pkg-config --cflags --libs o3m`, once linked to libo3m.so and once to
# libo3m.a, and runs both against a federation started from the INSTALLED
# daemons (tests/with-federation.sh). CFLAGS are added to both compiles (the
# sanitizer build passes its -fsanitize options, which a program linking an
# instrumented library needs).
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cc=$3
shift 3
extra=("$@")
tmp=$(mktemp -d /tmp/o3m-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

fail() { echo "install_lib: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
version=$(cat "$src/VERSION")
major=${version%%.*}

for p in o3m-pmg o3m-passive o3m-active o3m-cli o3m-eval o3m-audit; do
  [ -x "$prefix/bin/$p" ] || fail "$p is not installed in bin/"
  out=$("$prefix/bin/$p" --version)
  case "$out" in "$p $version "*) ;; *) fail "$p --version printed '$out', not '$p $version ...'" ;; esac
  if command -v help2man >/dev/null; then
    [ -s "$prefix/share/man/man1/$p.1" ] || fail "no man page share/man/man1/$p.1"
  fi
done
for f in include/o3m/o3m.h include/o3m/o3m_error.h lib/libo3m.a "lib/libo3m.so.$version" \
         lib/pkgconfig/o3m.pc; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
[ "$(readlink "$prefix/lib/libo3m.so")" = "libo3m.so.$major" ] || fail "libo3m.so does not point at libo3m.so.$major"
soname=$(readelf -d "$prefix/lib/libo3m.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libo3m.so.$major" ] || fail "soname is '$soname', not libo3m.so.$major"
# Only the public API is exported: no internal module's names.
if nm -D --defined-only "$prefix/lib/libo3m.so" | awk '{print $3}' | grep -v '^O3M_' |
   grep -v -E '^(o3m_engine_|o3m_ap_client_|o3m_version|o3m_protocol_version|o3m_strerror|o3m_errname|o3m_err_)'; then
  fail "libo3m.so exports names that are not in o3m.h (above)"
fi
# No internal header is installed.
[ "$(ls "$prefix/include/o3m")" = "$(printf 'o3m.h\no3m_error.h')" ] || fail "unexpected headers: $(ls "$prefix/include/o3m")"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion o3m)" = "$version" ] || fail "pkg-config --modversion o3m is not $version"
# The dynamic build, exactly as docs/install.md says.
# shellcheck disable=SC2046
"$cc" "${extra[@]}" -o "$tmp/consumer-dynamic" "$src/tests/install_consumer.c" \
  $(pkg-config --cflags --libs o3m) -lm
# The static build: libo3m.a, then what it needs (Requires.private, Libs.private).
# shellcheck disable=SC2046
"$cc" "${extra[@]}" -o "$tmp/consumer-static" "$src/tests/install_consumer.c" \
  $(pkg-config --cflags o3m) -Wl,--as-needed -Wl,-Bstatic -lo3m -Wl,-Bdynamic \
  $(pkg-config --static --libs o3m) -lm
readelf -d "$tmp/consumer-dynamic" | grep -q "NEEDED.*\[libo3m.so.$major\]" ||
  fail "the dynamic consumer does not load libo3m.so.$major"
if readelf -d "$tmp/consumer-static" | grep -q "NEEDED.*libo3m"; then
  fail "the static consumer loads libo3m.so"
fi

# The Python package installed beside the library finds it and its headers
# without O3M_LIB (when Debian's python3 has cffi and numpy; not in a
# sanitizer build, whose library needs its runtime preloaded).
if [ ${#extra[@]} -eq 0 ] && /usr/bin/python3 -c "import cffi, numpy" 2>/dev/null; then
  out=$(env -u O3M_LIB PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 -c \
    "import o3m; g = o3m.Engine(2, alpha=0); g.update([0, 1], 1.0); print(o3m.__version__, o3m.library_path, g.choose([[1, 0], [0, 1]])[0])")
  [ "$out" = "$version $prefix/lib/libo3m.so.$major 1" ] || fail "installed Python package: '$out'"
fi

# Both against a federation of the installed daemons.
run() {
  echo "== $1"
  "$2" "$O3M_FED_CONF" "$O3M_FED_CLIENT"
}
export -f run
# No LD_LIBRARY_PATH: the dynamic consumer finds the prefix's libo3m.so by
# the RUNPATH that o3m.pc's Libs gave it.
unset LD_LIBRARY_PATH
"$src/tests/with-federation.sh" "$prefix/bin" -- bash -c \
  "run 'linked to libo3m.so' '$tmp/consumer-dynamic' && run 'linked to libo3m.a' '$tmp/consumer-static'"
echo "install_lib: ok (prefix layout, pkg-config, dynamic and static consumers)"
