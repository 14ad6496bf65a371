#!/usr/bin/env bash
# tests/package/install.sh BUILD LINKPROG.C SOVERSION - the installed tree
# (docs/install.md): `meson install --destdir` of BUILD into a temporary
# directory, then
#   1. the files: libsefer.so.N with its two links, the static library, the
#      header, sefer.pc, bin/sefer, libexec/sefer/sefer-soak, the sample
#      configs, the man pages; and nothing else;
#   2. pkg-config: --cflags --libs name only sefer's directories and
#      -lsefer (no libmicrohttpd, no cJSON), --static adds -pthread -ldl;
#      a program built with exactly those flags runs, shared and -static;
#   3. `sefer run` and `sefer soak` from the installed tree, with no SEFER_*
#      variable: they find the installed library, sefer-soak and soak.toml.
# PKG_CONFIG_SYSROOT_DIR points pkg-config at the tree, as for any staged
# install.
set -u
build=$1 prog_c=$2 soversion=$3
cc=${CC:-cc}
for tool in meson pkg-config "$cc"; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
# shellcheck source=checks.sh
. "$(dirname "$0")/checks.sh"

if ! meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$tmp/log" 2>&1; then
    cat "$tmp/log"
    echo "FAIL: meson install --destdir"
    exit 1
fi
# The layout, from the build's own options.
opt() { meson introspect "$build" --buildoptions | python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1"; }
prefix=$(opt prefix) libdir=$(opt libdir) bindir=$(opt bindir) includedir=$(opt includedir)
libexecdir=$(opt libexecdir) datadir=$(opt datadir) mandir=$(opt mandir)
root=$dest$prefix
version=$(meson introspect "$build" --projectinfo | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')

# 1. the files
{
    echo "$bindir/sefer"
    echo "$includedir/sefer.h"
    for f in libsefer.a libsefer.so "libsefer.so.$soversion" "libsefer.so.$version" pkgconfig/sefer.pc; do
        echo "$libdir/$f"
    done
    echo "$libexecdir/sefer/sefer-soak"
    for f in debug lowmem prod soak; do echo "$datadir/sefer/$f.toml"; done
    echo "$mandir/man1/sefer.1"
    echo "$mandir/man5/sefer.conf.5"
} | sort >"$tmp/want"
(cd "$root" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort) >"$tmp/have"
diff -u "$tmp/want" "$tmp/have" >"$tmp/diff" && ok "installed: $(wc -l <"$tmp/want") files, as listed" ||
    { fail "installed files differ (- expected only, + installed only):"; cat "$tmp/diff"; }
[ "$(readlink "$root/$libdir/libsefer.so")" = "libsefer.so.$soversion" ] &&
    [ "$(readlink "$root/$libdir/libsefer.so.$soversion")" = "libsefer.so.$version" ] &&
    ok "libsefer.so -> libsefer.so.$soversion -> libsefer.so.$version" ||
    fail "library links: $(cd "$root/$libdir" && stat -c %N libsefer.so*)"

# 2. pkg-config, and a program built with exactly its flags
export PKG_CONFIG_PATH=$root/$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_LIBDIR=
check_pkg_config "$prog_c" "$soversion" "$root/$libdir"

# 3. the sefer command from the installed tree, no SEFER_* variable
check_sefer_run "$root/$bindir/sefer" "$root/$libdir/libsefer.so.$soversion"
check_sefer_soak "$root/$bindir/sefer" "$root/$libexecdir/sefer/sefer-soak" "$root/$libdir/libsefer.so.$soversion" \
    "$root/$datadir/sefer/soak.toml"
exit $((fails > 0))
