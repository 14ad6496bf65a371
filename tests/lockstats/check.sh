#!/bin/sh
# check.sh LOCKSTATS_LIB NORMAL_LIB WORK - the test 'lockstats': the counter
# build (lib/lockstat.c, docs/scaling.md) reports plausible counts for a
# workload whose events are known (work.c), and the normal library, with
# the same variable set, reports nothing (its hooks compile to nothing).
set -u
lib=$1 normal=$2 work=$3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fail() { echo "lockstats: FAIL: $*"; [ -s "$out" ] && cat "$out"; exit 1; }

# (threads.heap_after=0: the second thread's first blocks come from its own
# heap too, so that every one of them is a remote free of the main thread)
SEFER_THREADS_HEAP_AFTER=0 SEFER_LOCK_STATS="$out" LD_PRELOAD="$lib" "$work" >/dev/null ||
    fail "work failed under the counter build"
[ "$(grep -c '^sefer-lockstats ' "$out")" = 1 ] || fail "expected one sefer-lockstats line in $out"
line=$(grep '^sefer-lockstats ' "$out")
# get KEY: the value of KEY=V on the line
get() { printf '%s\n' "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
atleast() { v=$(get "$1"); [ -n "$v" ] && [ "$v" -ge "$2" ] || fail "$1=$v, expected at least $2"; }
atmost() { v=$(get "$1"); [ -n "$v" ] && [ "$v" -le "$2" ] || fail "$1=$v, expected at most $2"; }

blocks=20000 spans=50
atleast allocs $((blocks + spans))
atleast remote_frees $blocks
# every remote free is one push on a page list, one ring claim, or one of
# at most SF_BATCH_BLOCKS (30, lib/types.h) in a batch pushed on the owner's
# inbox (lib/remote.c, "Batches")
xfree=$(get rmw.xfree_cas) ring=$(get rmw.ring_tail_cas) inbox=$(get rmw.inbox_cas)
[ $((xfree + ring + 30 * inbox)) -ge $blocks ] ||
    fail "xfree_cas $xfree + ring_tail_cas $ring + 30 x inbox_cas $inbox < $blocks remote frees"
# each span: taken from and put back to the large cache, linked and
# unlinked in the segment list, marked and cleared in the segment map
atleast lock.cache.acquired $((2 * spans))
atleast lock.seg.acquired $((2 * spans))
atleast rmw.segmap_store $((2 * spans))
atmost lock.cache.contended "$(get lock.cache.acquired)"
atleast lock.seg.hold_ns 1
atleast stat.committed 1
# the second thread claims a heap and releases it: a registry stack push
atleast rmw.ownerless_cas 1
atleast heap_slots 2

# the normal build: the same variable, no report
: >"$out"
SEFER_LOCK_STATS="$out" LD_PRELOAD="$normal" "$work" >/dev/null 2>"$err" || fail "work failed under the normal build"
[ -s "$out" ] && fail "the normal build wrote a report"
[ -s "$err" ] && fail "the normal build wrote to stderr: $(cat "$err")"
echo "lockstats: ok ($(get ops) ops, $(get lock.seg.acquired) segment-list and $(get lock.cache.acquired) cache acquisitions, $xfree xfree pushes)"
