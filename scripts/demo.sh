#!/usr/bin/env bash
# scripts/demo.sh - the main job, for now: set the machine up, build sefer,
# and compare it with glibc and mimalloc on a larson-style server workload
# (bench/compare-larson, interleaved runs, one table).
#
# Usage: scripts/demo.sh [extra arguments for bench/compare-larson]
#   With no arguments, compare-larson runs with --quick when it supports it.
#   DEMO_FULL=1 runs it without --quick.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cd "$root"

bash scripts/setup.sh

larson=bench/compare-larson
echo
if [ ! -f "$larson" ]; then
    echo "demo: $larson is not in this tree yet (the larson comparison is still being written)."
    if [ -f bench/realprogs ]; then
        echo "demo: showing bench/realprogs instead: real programs under sefer and glibc, 3 rounds."
        echo
        exec python3 bench/realprogs --rounds 3
    fi
    echo "demo: nothing to show; the build above succeeded."
    exit 0
fi

args=("$@")
if [ ${#args[@]} -eq 0 ] && [ "${DEMO_FULL:-0}" != 1 ] && grep -q -- '--quick' "$larson"; then
    args=(--quick)
fi
echo "demo: $larson ${args[*]}"
echo
if [ -x "$larson" ]; then
    exec "$larson" "${args[@]}"
fi
exec python3 "$larson" "${args[@]}"
