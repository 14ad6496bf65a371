#!/usr/bin/env bash
# tests/package/deb.sh SRC BUILD LINKPROG.C SOVERSION - the release tarball
# and the Debian packages, end to end (docs/install.md):
#   1. `meson dist` of SRC (its git HEAD) from BUILD: the tarball holds
#      debian/ and the files of uPlot, d3 and d3-flame-graph
#      (scripts/dist.sh), nothing of git, of a build or of npm beyond them;
#   2. the tarball, unpacked, builds the packages with
#      `dpkg-buildpackage -us -uc -b`, offline, and its own `meson test`
#      passes (dh_auto_test runs it; the suites the release build runs on
#      the same sources left out, below): the tarball builds and passes its
#      tests on its own;
#   3. lintian (pedantic, info tags too) prints no tag that debian/ does not
#      override with a reason;
#   4. the packages install (apt-get, which waits for dpkg's lock), and then:
#      LD_PRELOAD=<installed library> python3, `sefer run`, `sefer soak`,
#      pkg-config and a program linked with its flags (shared and -static),
#      the installed man pages;
#   5. they are purged again, and their files are gone.
# Installing needs root: otherwise, or outside a git checkout (a release
# tarball, where this test runs inside dh_auto_test), or without the
# Debian tools, it skips (77).  It refuses to touch sefer packages it did
# not install itself, and fails when there are any (below, "already
# installed").  Two runs on one machine take turns (flock).
set -u
src=$1 build=$2 prog_c=$3 soversion=$4
skip() { echo "SKIP: $*"; exit 77; }
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || skip "$src is not a git checkout (meson dist packs git's HEAD)"
[ "$(id -u)" = 0 ] || skip "not root: this test installs and removes the Debian packages"
for tool in git meson dpkg-buildpackage dpkg-checkbuilddeps dh lintian apt-get xz pkg-config man; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh installs it)"
done
(cd "$src" && dpkg-checkbuilddeps) 2>&1 || skip "the build dependencies of debian/control are not all installed"

# shellcheck source=checks.sh
. "$(dirname "$0")/checks.sh"
packages=(libsefer0 libsefer-dev sefer-tools)
installed=0
# What this test installed ("package version" lines), written before it
# installs and removed once it has purged: a run killed in between (no EXIT
# trap) leaves it, so the next run can tell its own leftover from someone
# else's install.
marker=/var/lib/sefer-deb-test/installed
tmp=$(mktemp -d /tmp/sefer-deb-test.XXXXXX)
purge() {
    apt-get -o DPkg::Lock::Timeout=900 purge -y -q "$@" >"$tmp/apt.log" 2>&1 && rm -f "$marker"
}
cleanup() {
    [ $installed = 1 ] && purge "${packages[@]}"
    rm -rf "$tmp"
}
trap cleanup EXIT
exec 9>/run/lock/sefer-deb-test.lock
flock 9

# Already installed.  This test installs its own build of the packages and
# purges them at the end, so it would replace someone else's sefer and then
# remove it.  It does not do that, nor "remove and restore": a locally built
# package is in no archive to reinstall it from, and whoever installed it
# may be using it meanwhile (a program preloading the library, another
# checkout's test).  It does not skip either: a skip reads as "nothing to
# test here", and one leftover install would turn this test off for good
# while every summary still passed.  So it fails, naming each package and
# version, and says how to clear the way.  Only a leftover of this test's
# own run (every installed package and version listed in $marker) is
# purged, and the test goes on.
mapfile -t present < <(dpkg-query -W -f='${Package} ${Version} ${Status}\n' 'libsefer*' 'sefer*' 2>/dev/null |
    awk '$NF == "installed" { print $1 " " $2 }')
if [ ${#present[@]} -gt 0 ]; then
    ours=1
    for pv in "${present[@]}"; do
        grep -qxF "$pv" "$marker" 2>/dev/null || ours=0
    done
    names=$(printf '%s\n' "${present[@]}" | cut -d' ' -f1 | paste -sd' ')
    listed=$(printf '%s\n' "${present[@]}" | paste -sd',' | sed 's/,/, /g')
    if [ $ours = 1 ]; then
        echo "note: purging what an earlier run of this test installed and did not remove: $listed"
        # shellcheck disable=SC2086  # package names are words
        purge $names || { cat "$tmp/apt.log"; fail "could not purge this test's leftover packages"; exit 1; }
    else
        fail "sefer packages are installed, not by this test: $listed." \
            "This test would replace them and then purge them; remove them first (apt-get purge $names)" \
            "and run it again."
        exit 1
    fi
fi
start=$SECONDS
step() { echo "--- $* ($((SECONDS - start)) s)"; }

# 1. the tarball
step "meson dist"
version=$(meson introspect "$build" --projectinfo | "$py" -c 'import json,sys; print(json.load(sys.stdin)["version"])')
dirty=()
if [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
    echo "note: $src has uncommitted changes; the tarball is made from HEAD without them"
    dirty=(--allow-dirty)
fi
tarball=$build/meson-dist/sefer-$version.tar.xz
rm -f "$tarball"
if ! meson dist -C "$build" --no-tests --formats xztar "${dirty[@]}" >"$tmp/dist.log" 2>&1; then
    cat "$tmp/dist.log"
    fail "meson dist"
    exit 1
fi
tar -tf "$tarball" | sed "s|^sefer-$version/||" | sort >"$tmp/contents"
for f in meson.build debian/control debian/rules webui/node_modules/uplot/package.json \
    webui/node_modules/uplot/dist/uPlot.iife.min.js webui/node_modules/uplot/dist/uPlot.min.css \
    webui/node_modules/d3/dist/d3.min.js webui/node_modules/d3-flame-graph/dist/d3-flamegraph.umd.min.js; do
    grep -qx "$f" "$tmp/contents" || fail "the tarball lacks $f"
done
unwanted=$(grep -E '^\.git/|^build|/meson-private/|node_modules/(.*/)?node_modules|^tests/browser/node_modules' "$tmp/contents" | head -5)
[ -z "$unwanted" ] || fail "the tarball holds files it should not: $unwanted"
ok "$(basename "$tarball"): $(wc -l <"$tmp/contents") entries, $(du -k "$tarball" | cut -f1) KiB, with debian/ and the dashboard's libraries"

# 2. the packages, from the unpacked tarball, with its own meson test
step "dpkg-buildpackage -us -uc -b (in the unpacked tarball; dh_auto_test runs meson test)"
tar -C "$tmp" -xf "$tarball"
# DEB_BUILD_OPTIONS as a buildd sets it, whatever the caller's: checks on,
# and parallel=N for the cores (without it debhelper builds with ninja -j1
# and dh_auto_test runs meson test one test at a time: twice as long here).
# The tarball's meson test leaves out the suites that scripts/test.sh runs
# on the same sources in the release build just before this test
# (reliability, size-classes, preload: 340 of the 570 s of test time, two
# at a time, at 2a020ad), so CI does not run them twice; what is left still
# shows that the tarball holds what its tests need and that the library
# built with Debian's flags passes them.  SEFER_DEB_TEST_ARGS set by the
# caller replaces that choice (empty: the whole suite; debian/rules).
deb_test_args=${SEFER_DEB_TEST_ARGS---no-suite reliability --no-suite size-classes --no-suite preload}
echo "note: the tarball's meson test runs with: ${deb_test_args:-(the whole suite)}"
if (cd "$tmp/sefer-$version" && DEB_BUILD_OPTIONS="parallel=$(nproc)" SEFER_DEB_TEST_ARGS="$deb_test_args" \
    dpkg-buildpackage -us -uc -b) >"$tmp/build.log" 2>&1; then
    summary=$(sed -n '/^Ok:/,/^Timeout:/p' "$tmp/build.log" | tr -s ' \n' ' ')
    ok "the tarball built the packages, and its meson test passed: $summary"
else
    tail -60 "$tmp/build.log"
    # the whole log of each test that failed in there (the tarball's build
    # directory goes with $tmp)
    for log in "$tmp/sefer-$version"/obj-*/meson-logs/testlog.txt; do
        [ -f "$log" ] && awk '/^=+ [0-9]+\/[0-9]+ =+$/ { if (bad) printf "%s", block; block = ""; bad = 0 }
            { block = block $0 "\n" }
            /^result: / && !/exit status (0|77)$/ { bad = 1 }
            END { if (bad) printf "%s", block }' "$log"
    done
    fail "dpkg-buildpackage in the unpacked tarball (the log's end is above)"
    exit 1
fi
debs=()
for p in "${packages[@]}"; do
    debs+=("$(ls "$tmp/${p}_${version}_"*.deb)")
done

# 3. lintian
step "lintian"
lintian -I --pedantic -E "$tmp"/sefer_"${version}"_*.changes 2>&1 | grep -v '^running with root privileges' >"$tmp/lintian"
if grep -q '^[EWIPX]: ' "$tmp/lintian"; then
    cat "$tmp/lintian"
    fail "lintian tags (above) that debian/*.lintian-overrides does not explain"
else
    ok "lintian: no tag (pedantic and info included; overrides in debian/ say why)"
fi

# 4. installed
step "apt-get install ${debs[*]##*/}"
mkdir -p "$(dirname "$marker")"
for deb in "${debs[@]}"; do
    echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
done >"$marker"
installed=1
if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${debs[@]}" >"$tmp/apt.log" 2>&1; then
    cat "$tmp/apt.log"
    fail "apt-get install"
    exit 1
fi
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
lib=/usr/lib/$ma/libsefer.so.$soversion
out=$(LD_PRELOAD=$lib "$py" -c '
import ctypes
sefer = ctypes.CDLL(None)
sefer.sefer_version.restype = ctypes.c_char_p
sefer.malloc.restype = ctypes.c_void_p
p = sefer.malloc(1000)
# a block of sefer heap has a usable size there; glibc has none
print("python3 under sefer", sefer.sefer_version().decode(), "usable", sefer.sefer_usable_size(ctypes.c_void_p(p)) >= 1000)
sefer.free(ctypes.c_void_p(p))' 2>&1)
[ "$out" = "python3 under sefer $version usable True" ] && ok "LD_PRELOAD=$lib python3: $out" ||
    fail "LD_PRELOAD=$lib python3: $out"
check_sefer_run /usr/bin/sefer "$lib"
check_sefer_soak /usr/bin/sefer /usr/libexec/sefer/sefer-soak "$lib" /usr/share/sefer/soak.toml
check_pkg_config "$prog_c" "$soversion"
# The pages as packaged (gzipped by dh_installman), and as man finds them
# once installed, unless this machine's dpkg drops /usr/share/man (slim
# container images do: path-exclude in /etc/dpkg/dpkg.cfg.d/).
dpkg-deb -x "${debs[2]}" "$tmp/tools"
for page in man1/sefer.1.gz man5/sefer.conf.5.gz; do
    LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -Tutf8 -l "$tmp/tools/usr/share/man/$page" >/dev/null 2>"$tmp/man.err"
    [ -f "$tmp/tools/usr/share/man/$page" ] && [ ! -s "$tmp/man.err" ] &&
        ok "sefer-tools has /usr/share/man/$page: renders with no warning" ||
        { fail "/usr/share/man/$page in sefer-tools"; cat "$tmp/man.err"; }
done
if grep -qs '^path-exclude.*/usr/share/man' /etc/dpkg/dpkg.cfg.d/*; then
    echo "note: dpkg here does not install /usr/share/man (path-exclude): man sefer not tried"
else
    for page in sefer sefer.conf; do
        where=$(man -w "$page" 2>/dev/null)
        [[ $where == /usr/share/man/man?/$page.?.gz ]] && ok "man -w $page: $where" || fail "man -w $page: '$where'"
    done
fi

# 5. removed
step "apt-get purge ${packages[*]}"
if purge "${packages[@]}"; then
    installed=0
    left=$(ls -d "$lib" /usr/bin/sefer /usr/libexec/sefer /usr/share/sefer /usr/include/sefer.h \
        "/usr/lib/$ma/pkgconfig/sefer.pc" 2>/dev/null)
    [ -z "$left" ] && ok "purged: no file left" || fail "left after purge: $left"
else
    cat "$tmp/apt.log"
    fail "apt-get purge"
fi
step "done"
exit $((fails > 0))
