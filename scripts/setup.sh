#!/usr/bin/env bash
# scripts/setup.sh - make this machine able to build and test sefer, then
# build it (release) in build/.
#
# Idempotent: packages already installed are left alone, and `apt-get update`
# only runs when something has to be installed.  Safe to run as often as you
# like; the second run only reconfigures and rebuilds what changed.
#
# Environment:
#   SEFER_SETUP_NO_BUILD=1   install packages only, do not configure/compile
#   SEFER_SETUP_CLANG=1      also install clang (not needed by anything here:
#                            the sanitizer builds use gcc's libubsan/libtsan)
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
#    prometheus (for its promtool, which checks /metrics in tests/introspect)
#  - reference allocators for bench/: libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4
packages=(
    build-essential gcc g++ meson ninja-build pkg-config
    libubsan1 libtsan2
    check libmicrohttpd-dev libcjson-dev
    valgrind time python3 perl sqlite3 prometheus
    libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4
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
    # Only promtool is wanted from prometheus: on a machine where installing
    # started its server, stop it - it listens on 9090, sefer's default
    # introspection port.
    if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null &&
        systemctl is-active --quiet prometheus 2>/dev/null; then
        echo "setup: stopping and disabling the prometheus service (port 9090; only promtool is needed)"
        $sudo systemctl disable --now prometheus || true
    fi
else
    echo "setup: all ${#packages[@]} packages present"
fi

if [ "${SEFER_SETUP_NO_BUILD:-0}" = 1 ]; then
    exit 0
fi

# Release build in build/.  A valid build dir is reconfigured (keeps ninja's
# incremental state); if that fails the dir is wiped and set up again.
opts=(--buildtype=release -Doverride=true)
if [ -f build/meson-private/coredata.dat ]; then
    meson setup --reconfigure build "${opts[@]}" ||
        meson setup --wipe build "${opts[@]}"
else
    meson setup build "${opts[@]}"
fi
meson compile -C build
