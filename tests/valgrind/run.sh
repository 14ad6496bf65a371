#!/usr/bin/env bash
# tests/valgrind/run.sh LIB PROGRAM - memcheck watching a program on sefer.
#
# Valgrind replaces malloc in every object by default; --soname-synonyms=
# somalloc=nouserintercepts keeps sefer's (docs/design.md, "Under valgrind").
# Checks that:
#   1. a busy, correct program (threads, realloc, calloc, aligned, spans)
#      gets no memcheck error and no leak at guard levels 1, 2 and 3:
#      sefer's work on freed memory and its metadata stay invisible;
#   2. a buggy one gets each bug reported in sefer's heap: the three leaks
#      (64 B, 48 B, 1 MiB) as definitely lost, the read after free, the
#      uninitialised read, the write past the request, the double free;
#      and the allocations came from sefer (its frames are in the stacks);
#   3. valgrind.track = false turns it off (memcheck then sees no blocks).
set -u
lib=$1
prog=$2
if ! command -v valgrind >/dev/null; then
    echo "SKIP: valgrind is not installed"
    exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

memcheck() { # memcheck [VAR=VALUE...] -- ARGS...
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" LD_PRELOAD="$lib" valgrind --soname-synonyms=somalloc=nouserintercepts \
        --leak-check=full --error-exitcode=99 "$prog" "$@" >"$out" 2>&1
}

for level in 1 2 3; do
    memcheck SEFER_GUARD_LEVEL=$level -- clean
    rc=$?
    if [ $rc != 0 ] || ! grep -q "ERROR SUMMARY: 0 errors" "$out" ||
        ! grep -q "All heap blocks were freed" "$out"; then
        fail "clean program at guard level $level (exit $rc):"
        cat "$out"
    else
        echo "ok: clean program at guard level $level: no error, no leak"
    fi
done

memcheck SEFER_GUARD_ON_ERROR=report -- bugs
expect() { # expect PATTERN WHAT
    if grep -qE "$1" "$out"; then echo "ok: $2"; else fail "$2 not reported"; fi
}
expect "definitely lost: 1,048,688 bytes in 3 blocks" "three leaks (64 B, 48 B, 1 MiB) definitely lost"
expect "Invalid read of size 1" "read after free"
expect "depends on uninitialised value" "uninitialised read"
expect "Invalid write of size 1" "write one byte past the request"
expect "Invalid free" "double free (memcheck)"
expect "sefer: double free" "double free (sefer's own report)"
# "(in .../libsefer.so.0.1.0)" without debug info, "(track.c:78)" with it
# (the Debian package's build: -g)
expect "(at|by) 0x[0-9A-F]+: sf_tracked_malloc \((in .*libsefer|track\.c:[0-9]+\))" \
    "allocations served by sefer (its frames in the stacks)"
[ $fails = 0 ] || cat "$out"

memcheck SEFER_VALGRIND_TRACK=false SEFER_GUARD_ON_ERROR=report -- bugs
if grep -q "definitely lost: 1,048,688" "$out"; then
    fail "valgrind.track = false still tracked"
else
    echo "ok: valgrind.track = false: memcheck sees no sefer block"
fi

echo "$fails failed"
[ $fails = 0 ]
