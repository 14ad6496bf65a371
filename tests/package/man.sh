#!/usr/bin/env bash
# tests/package/man.sh KNOBS-DOC PAGE... - the man pages render with man -l
# without a single warning (man --warnings: groff's -w mac, as lintian runs
# it), and sefer.conf(5) lists every knob of SF_KNOBS (the build generates
# that list with knobs-doc --man; here the knob names come from knobs-doc's
# markdown table, the other output of the same declarations).
set -u
knobs_doc=$1
shift
command -v man >/dev/null || { echo "SKIP: man is not installed (package man-db)"; exit 77; }
command -v groff >/dev/null || { echo "SKIP: groff is not installed (package groff-base)"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for page in "$@"; do
    name=$(basename "$page")
    LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 "$page" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc = 0 ] && [ ! -s "$tmp/err" ] && [ -s "$tmp/out" ]; then
        ok "$name renders without warnings ($(wc -l <"$tmp/out") lines)"
    else
        fail "$name: man -l exit $rc, warnings:"
        cat "$tmp/err"
    fi
    case $name in
    *.5)
        "$knobs_doc" | sed -n 's/^| `\([a-z_]*\.[a-z_]*\)` |.*/\1/p' >"$tmp/knobs"
        missing=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l -Tutf8 "$page" 2>/dev/null | col -b |
            sed -n '/^KNOBS/,/^FILES/p' | grep -oE '^ {7}[a-z_]+\.[a-z_]+$' | tr -d ' ' |
            diff - "$tmp/knobs")
        [ -s "$tmp/knobs" ] && [ -z "$missing" ] && ok "$name: KNOBS lists the $(wc -l <"$tmp/knobs") knobs of SF_KNOBS" ||
            fail "$name: KNOBS differs from SF_KNOBS: $missing"
        ;;
    esac
done
exit $((fails > 0))
