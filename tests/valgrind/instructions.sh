#!/usr/bin/env bash
# tests/valgrind/instructions.sh LIB FASTPATH BUILDTYPE - the fast paths'
# instructions stay under their ceilings.
#
# callgrind counts the instructions of bench/fastpath's loop of malloc +
# free pairs under sefer (200 000 pairs, minus a run of none): an exact
# count, the same on any machine for the same binary, so this judges no
# speed.  Each ceiling is the figure measured when it was set plus about
# one instruction, so that a change that puts the paths' instructions back
# (a route through the slow path, a test or a count added) fails here
# rather than in a benchmark nobody ran:
#   levels 0-1, malloc(64) + free           57.0   ceiling 59.3 (issue 19's bound)
#   the heap profile armed (2 MiB)           64.1   ceiling 65.5
#   the sampled guard on (8 MiB)             64.2   ceiling 65.5
#   guard level 2                            98.6   ceiling 100.0
#   levels 0-1, a medium malloc(20000)+free  79.0   ceiling 80.5
# (docs/design.md, "The exported entry points"; docs/benchmarks.md,
# "instructions").  And a floor of 30 for each: a loop whose pairs the
# compiler elided, or that never reached sefer, counts far less.
# The figures are the release build's (-O3, as scripts/setup.sh builds);
# other builds (the Debian package's -O2, -O0) skip.
set -u
lib=$1
prog=$2
buildtype=$3
if [ "$buildtype" != release ]; then
    echo "SKIP: the ceilings are the release build's instructions; this build is '$buildtype'"
    exit 77
fi
if ! command -v valgrind >/dev/null; then
    echo "SKIP: valgrind is not installed"
    exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fails=0

# ir ENV... -- ARGS...: callgrind's total instructions of one run
ir() {
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" LD_PRELOAD="$lib" valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$prog" "$@" >/dev/null 2>&1 || return 1
    awk '/^(summary|totals):/ {print $2; exit}' "$out"
}

# check NAME CEILING ENV... -- ARGS...: instructions a pair, 200 000 pairs
# minus none
check() {
    local name=$1 ceiling=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local full none
    full=$(ir "${envs[@]}" -- "$@" -n 200000) && none=$(ir "${envs[@]}" -- "$@" -n 0)
    if [ -z "${full:-}" ] || [ -z "${none:-}" ]; then
        echo "FAIL: $name: callgrind or bench/fastpath failed"
        fails=$((fails + 1))
        return
    fi
    local per
    per=$(awk -v a="$full" -v b="$none" 'BEGIN {printf "%.1f", (a - b) / 200000}')
    if awk -v p="$per" -v c="$ceiling" 'BEGIN {exit !(p >= 30 && p <= c)}'; then
        echo "ok: $name: $per instructions a pair (ceiling $ceiling)"
    else
        echo "FAIL: $name: $per instructions a pair, outside 30-$ceiling"
        fails=$((fails + 1))
    fi
}

check "levels 0-1, malloc(64) + free" 59.3 SEFER_GUARD_LEVEL=1 -- pairs -s 64
check "the heap profile armed at 2 MiB" 65.5 SEFER_PROFILE_SAMPLE_BYTES=2MiB -- pairs -s 64
check "the sampled guard at 8 MiB" 65.5 SEFER_GUARD_SAMPLE_BYTES=8MiB -- pairs -s 64
check "guard level 2" 100.0 SEFER_GUARD_LEVEL=2 -- pairs -s 64
check "levels 0-1, malloc(20000) + free" 80.5 SEFER_GUARD_LEVEL=1 -- pairs -s 20000
[ $fails = 0 ] || exit 1
echo "all instruction counts under their ceilings"
