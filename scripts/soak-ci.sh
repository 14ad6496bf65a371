#!/usr/bin/env bash
# scripts/soak-ci.sh - run CI's own check (.ci/run) again and again, each
# time in a fresh clone, with the machine idle or kept busy, and say how
# many runs passed.  This is the proof asked of a suite that "passes every
# time": one green run says little about a test whose verdict could move
# with the machine's speed; ten in a row, half of them beside a CPU load as
# large as the machine, say much more.
#
#   bash scripts/soak-ci.sh                 # 5 busy and 5 idle runs, interleaved
#   bash scripts/soak-ci.sh --runs 2        # 2 of each
#   bash scripts/soak-ci.sh --only busy     # busy runs only (or: idle)
#   bash scripts/soak-ci.sh --rev abc123    # a commit other than HEAD
#
# "Busy" means one CPU hog per core for the whole run: stress-ng --cpu N
# where stress-ng is installed, otherwise N shell loops.  Runs alternate
# busy, idle, busy, ... so that a drift of the machine over the hours does
# not fall on one kind only.  Each run is `bash .ci/run` in a new clone
# with CI=true and no standard input, as CI runs it; its log is kept in the
# output folder (default /tmp/sefer-soak-ci.XXXX) with one line a run in
# summary.txt:
#
#   run 3 busy 1c61b57 rc=0 812s "157 passed, 0 failed, 1 skipped (...)"
#
# Exit status 0 iff every run exited 0 and ended with "N passed, 0 failed".
set -uo pipefail

runs=5
only=both
rev=HEAD
out=
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --rev) rev=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "soak-ci.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case $only in both | busy | idle) ;; *) echo "soak-ci.sh: --only takes busy or idle" >&2; exit 2 ;; esac
case $runs in '' | *[!0-9]*) echo "soak-ci.sh: --runs takes a whole number" >&2; exit 2 ;; esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
commit=$(git -C "$root" rev-parse --short "$rev") || exit 2
[ -n "$out" ] || out=$(mktemp -d /tmp/sefer-soak-ci.XXXX)
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
cores=$(nproc)

hogs=()
start_load() {
    if command -v stress-ng >/dev/null 2>&1; then
        stress-ng --cpu "$cores" --quiet &
        hogs+=($!)
    else
        for _ in $(seq "$cores"); do
            sh -c 'while :; do :; done' &
            hogs+=($!)
        done
    fi
}
stop_load() {
    [ ${#hogs[@]} -gt 0 ] || return 0
    kill "${hogs[@]}" 2>/dev/null
    wait "${hogs[@]}" 2>/dev/null
    hogs=()
}
# The run under way is its own process group (setsid), waited for with
# `wait` so that a signal to this script is handled at once: stopping the
# script stops the run and everything it started, not only the load (a run
# in the foreground went on alone after the script was killed).
run_pid=
stop_run() {
    [ -n "$run_pid" ] || return 0
    kill -- -"$run_pid" 2>/dev/null
    wait "$run_pid" 2>/dev/null
    run_pid=
}
trap 'stop_run; stop_load; exit 130' INT TERM
trap stop_load EXIT

kinds=()
for _ in $(seq "$runs"); do
    case $only in
    both) kinds+=(busy idle) ;;
    *) kinds+=("$only") ;;
    esac
done

n=0 bad=0
for kind in "${kinds[@]}"; do
    n=$((n + 1))
    clone=$(mktemp -d /tmp/sefer-ci-clone.XXXX)
    git clone -q "$root" "$clone" && git -C "$clone" checkout -q "$commit" || { bad=$((bad + 1)); continue; }
    log=$out/run-$n-$kind.log
    echo "soak-ci: run $n of ${#kinds[@]} ($kind) at $commit in $clone, log $log"
    [ "$kind" = busy ] && start_load
    t0=$(date +%s)
    setsid bash -c 'cd "$1" && CI=true exec bash .ci/run </dev/null >"$2" 2>&1' soak-ci-run "$clone" "$log" &
    run_pid=$!
    wait "$run_pid"
    rc=$?
    run_pid=
    secs=$(($(date +%s) - t0))
    stop_load
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ "$rc" != 0 ] || ! grep -qE '^[0-9]+ passed, 0 failed' <<<"$last"; then
        bad=$((bad + 1))
        grep -E '^  failed (test|step) ' "$log" | sed 's/^/    /'
    fi
    printf 'run %d %s %s rc=%s %ss "%s"\n' "$n" "$kind" "$commit" "$rc" "$secs" "$last" | tee -a "$summary"
    rm -rf "$clone"
done
echo "soak-ci: $((n - bad)) of $n runs passed at $commit (summary: $summary)"
[ "$bad" = 0 ]
