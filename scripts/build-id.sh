#!/bin/sh
# scripts/build-id.sh SRCDIR - prints what libsefer.so was built from, one
# word, for sefer_build() (lib/build.c, docs/api.md):
#
#   a3f9c2e          the commit checked out in SRCDIR, tree as committed
#   a3f9c2e-dirty    the same with changes to tracked files (a build of
#                    uncommitted code: its figures belong to no commit)
#   <BUILD_ID file>  SRCDIR is not a git checkout but holds a BUILD_ID file
#                    (`meson dist` writes one into the tarball: see --dist)
#   unknown          neither
#
# Untracked files do not make a tree dirty: the build compiles only what
# meson.build names, and a new file it names is a change to meson.build.
# The checkout must be SRCDIR itself, not a repository that happens to
# contain it (a tarball unpacked inside someone else's git tree).
#
# scripts/build-id.sh --dist: run by `meson dist` (meson.add_dist_script);
# writes the commit into $MESON_DIST_ROOT/BUILD_ID.
set -u

if [ "${1:-}" = --dist ]; then
    "$0" "$MESON_SOURCE_ROOT" >"$MESON_DIST_ROOT/BUILD_ID"
    exit $?
fi

src=$(cd "${1:-.}" && pwd -P) || exit 1
if top=$(git -C "$src" rev-parse --show-toplevel 2>/dev/null) &&
    [ "$(cd "$top" && pwd -P)" = "$src" ] &&
    commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null); then
    if [ -n "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        commit="$commit-dirty"
    fi
    echo "$commit"
elif [ -s "$src/BUILD_ID" ]; then
    # (kept to characters that need no quoting in C, JSON or a Prometheus label)
    head -n 1 "$src/BUILD_ID" | tr -cd 'A-Za-z0-9._+-'
    echo
else
    echo unknown
fi
