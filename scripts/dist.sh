#!/usr/bin/env bash
# scripts/dist.sh - run by `meson dist` (meson.add_dist_script in
# meson.build) in the tree it is about to pack: adds what the build needs
# and git does not hold, so that the tarball builds with no network and no
# npm (docs/install.md, "Release tarball").
#
# That is the dashboard's libraries from npm (webui/meson.build embeds them
# into libsefer.so): uPlot (the charts), d3 and d3-flame-graph (the Sites
# view's flame graph).  Of each: the files embed.py reads, its licence,
# package.json (embed.py --check-libs compares its version with
# webui/package.json's pin), and the readable form of each minified file.
set -euo pipefail
src=${MESON_PROJECT_SOURCE_ROOT:?run by meson dist}
dist=${MESON_PROJECT_DIST_ROOT:?run by meson dist}

if ! versions=$(python3 "$src/webui/embed.py" --check-libs "$src/webui"); then
    echo "scripts/dist.sh: the tarball would not build its dashboard (see above)" >&2
    exit 1
fi
add() { # PACKAGE FILE...
    local pkg=$1 f
    shift
    for f in package.json LICENSE "$@"; do
        install -D -m 644 "$src/webui/node_modules/$pkg/$f" "$dist/webui/node_modules/$pkg/$f"
    done
}
add uplot dist/uPlot.iife.min.js dist/uPlot.min.css dist/uPlot.iife.js
add d3 dist/d3.min.js dist/d3.js
add d3-flame-graph dist/d3-flamegraph.umd.min.js dist/d3-flamegraph.umd.js
echo "scripts/dist.sh: $versions added to the tarball (webui/node_modules/)"
