#!/usr/bin/env bash
# scripts/demo.sh - the main job: set the machine up (scripts/setup.sh),
# build sefer, and run a soak test under it with the dashboard live:
# `build/tools/sefer soak` prints the dashboard's URL in a box; open it in a
# browser on this machine while the soak runs (docs/dashboard.md).
#
# Usage: bash scripts/demo.sh [more `sefer soak` options, e.g. --threads 8]
#
# Runs without a terminal too (CI, a pipe): the soak ends by itself.
#   SOAK_SECONDS=N   how long the soak runs (default 120); Ctrl-C stops it
#                    earlier, cleanly
#   SOAK_LISTEN=ADDR where the dashboard listens (default 127.0.0.1:9090+:
#                    9090, or the next free port)
#   SEFER_INTROSPECT_TOKEN=T  the token that lets the page change knobs; if
#                    unset, a random one is made for this run and printed
# The exit status is the soak's: 0 when every block checked out.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cd "$root"

bash scripts/setup.sh

seconds=${SOAK_SECONDS:-120}
listen=${SOAK_LISTEN:-127.0.0.1:9090+}
if [ -z "${SEFER_INTROSPECT_TOKEN:-}" ]; then
    SEFER_INTROSPECT_TOKEN=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    export SEFER_INTROSPECT_TOKEN
    made_token=1
fi
# the heap profile on, so that the dashboard's Sites view shows which code
# holds the soak's memory (off by default: docs/benchmarks.md, profile-cost)
export SEFER_PROFILE_SAMPLE_BYTES=${SEFER_PROFILE_SAMPLE_BYTES:-512KiB}

echo
echo "demo: a ${seconds} s soak under sefer (config/soak.toml: guard level 2, delayed decommit,"
echo "demo: heap profile at one sample per ${SEFER_PROFILE_SAMPLE_BYTES}: the Sites view),"
echo "demo: watched live in the dashboard: open the URL in the box below in a browser on this"
echo "demo: machine (from another machine: ssh -L 9090:127.0.0.1:9090 THIS-HOST, then"
echo "demo: http://127.0.0.1:9090/, with the port the box shows)."
if [ "${made_token:-0}" = 1 ]; then
    echo "demo: token for changing knobs from the page (this run only): $SEFER_INTROSPECT_TOKEN"
fi
echo
exec build/tools/sefer soak --seconds "$seconds" --listen "$listen" "$@"
