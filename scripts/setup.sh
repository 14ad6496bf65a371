#!/usr/bin/env bash
# scripts/setup.sh - make this machine able to build and test sefer, then
# build it (release) in build/: Debian packages, the npm packages of the
# dashboard (webui/) and of its browser test (tests/browser/), the build.
#
# Idempotent: packages already installed are left alone, and `apt-get update`
# only runs when something has to be installed.  Safe to run as often as you
# like; the second run only reconfigures and rebuilds what changed.
#
# Environment:
#   SEFER_SETUP_NO_BUILD=1   install packages only, do not configure/compile
#   SEFER_SETUP_CLANG=1      also install clang (not needed by anything here:
#                            the sanitizer builds use gcc's libubsan/libtsan)
#   SEFER_SETUP_MESON_OPTIONS="-Dx=y ..."  more options for the release build's
#                            meson setup (scripts/test.sh passes
#                            -Dintrospect=enabled)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cd "$root"

export DEBIAN_FRONTEND=noninteractive

# What the project needs, by Debian package name:
#  - toolchain and build system: build-essential gcc g++ meson ninja-build pkg-config
#  - sanitizer runtimes for gcc's -fsanitize=undefined / -fsanitize=thread
#    (libgcc-12-dev pulls them in already; named here so nobody removes them)
#  - libraries the library and its tests use: check libmicrohttpd-dev libcjson-dev
#  - tools: valgrind, time (/usr/bin/time -v), python3, perl, sqlite3,
#    prometheus (its promtool checks /metrics in tests/introspect and the
#    rules of config/prometheus/; tests/introspect/test_prometheus.c runs
#    the prometheus server itself, with its own config, folder and port)
#  - reference allocators for bench/: libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4
#  - the dashboard's browser test (tests/browser): chromium (Debian's; the
#    test drives /usr/bin/chromium, no browser is downloaded)
#  - packaging (tests/package, docs/install.md): debhelper (dh and its
#    meson support, dpkg-buildpackage), lintian, git and xz-utils (meson
#    dist), man-db (man -l for the man pages), systemd (systemd-analyze
#    verify for docs/deploy.md's drop-ins; nothing is started)
#  - the heap profile (introspect/symbols.c, pprof.c, gzip.c): libdw-dev and
#    zlib1g-dev for their headers (libdw1 and zlib are opened with dlopen),
#    libdeflate0, which gzip.c opens first (no header needed), golang-go for
#    `go tool pprof` in tests/introspect
#  - node and npm, only if `node`/`npm` are not there already (a machine
#    with NodeSource's nodejs has both; Debian's npm would conflict with it):
#    npm installs uPlot, which the dashboard embeds (webui/), and
#    playwright-core for the browser test (tests/browser/)
packages=(
    build-essential gcc g++ meson ninja-build pkg-config
    libubsan1 libtsan2
    check libmicrohttpd-dev libcjson-dev
    valgrind time python3 perl sqlite3 prometheus
    libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4
    chromium
    debhelper lintian git xz-utils man-db systemd
    libdw-dev zlib1g-dev libdeflate0 golang-go
)
if [ "${SEFER_SETUP_CLANG:-0}" = 1 ]; then
    packages+=(clang)
fi

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
        *"install ok installed"*) ;;
        *) missing+=("$p") ;;
    esac
done
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing: ${missing[*]}"
    if [ "$(id -u)" != 0 ]; then
        sudo=sudo
    else
        sudo=
    fi
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${missing[@]}" </dev/null
    # The tests run promtool and a prometheus server of their own: on a
    # machine where installing started the system's server, stop it - it
    # listens on 9090, sefer's default introspection port.
    if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null &&
        systemctl is-active --quiet prometheus 2>/dev/null; then
        echo "setup: stopping and disabling the prometheus service (port 9090; the tests run their own)"
        $sudo systemctl disable --now prometheus || true
    fi
else
    echo "setup: all ${#packages[@]} packages present"
fi

# npm packages, pinned in package.json + package-lock.json: `npm ci` where
# node_modules lacks the pinned version of any of them (webui: uPlot, d3 and
# d3-flame-graph, embedded into libsefer.so by the build; tests/browser:
# playwright-core).
npm_ci_if_needed() {
    local dir=$1 pkg want have
    shift
    for pkg in "$@"; do
        want=$(node -p "require('./$dir/package.json').dependencies['$pkg']")
        have=$(node -p "try { require('./$dir/node_modules/$pkg/package.json').version } catch (e) { 'none' }")
        if [ "$want" != "$have" ]; then
            echo "setup: npm ci in $dir ($pkg $want; node_modules has $have)"
            (cd "$dir" && npm ci --no-audit --no-fund)
            return
        fi
    done
}
npm_ci_if_needed webui uplot d3 d3-flame-graph
npm_ci_if_needed tests/browser playwright-core

if [ "${SEFER_SETUP_NO_BUILD:-0}" = 1 ]; then
    exit 0
fi

# Release build in build/.  A valid build dir is reconfigured (keeps ninja's
# incremental state); if that fails the dir is wiped and set up again.
opts=(--buildtype=release -Doverride=true)
# shellcheck disable=SC2206  # word splitting wanted: a list of options
opts+=(${SEFER_SETUP_MESON_OPTIONS:-})
if [ -f build/meson-private/coredata.dat ]; then
    meson setup --reconfigure build "${opts[@]}" ||
        meson setup --wipe build "${opts[@]}"
else
    meson setup build "${opts[@]}"
fi
meson compile -C build
