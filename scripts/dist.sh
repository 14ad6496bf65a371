#!/usr/bin/env bash
# scripts/dist.sh - run by `meson dist` (meson.add_dist_script in
# meson.build) in the tree it is about to pack: adds what the build needs
# and git does not hold, so that the tarball builds with no network and no
# npm (docs/install.md, "Release tarball").
#
# That is uPlot, the dashboard's chart library (webui/meson.build embeds it
# into libsefer.so): the files embed.py reads, its licence and package.json
# (embed.py --check-uplot compares its version with webui/package.json's
# pin), and dist/uPlot.iife.js, the readable form of the minified file.
set -euo pipefail
src=${MESON_PROJECT_SOURCE_ROOT:?run by meson dist}
dist=${MESON_PROJECT_DIST_ROOT:?run by meson dist}

if ! version=$(python3 "$src/webui/embed.py" --check-uplot "$src/webui"); then
    echo "scripts/dist.sh: the tarball would not build its dashboard (see above)" >&2
    exit 1
fi
for f in package.json LICENSE dist/uPlot.iife.min.js dist/uPlot.min.css dist/uPlot.iife.js; do
    install -D -m 644 "$src/webui/node_modules/uplot/$f" "$dist/webui/node_modules/uplot/$f"
done
echo "scripts/dist.sh: uPlot $version added to the tarball (webui/node_modules/uplot/)"
