#!/bin/sh
# check.sh PROGRAM LIBRARY - the test 'phase-control': runs
# tests/phase_control/phase_control under sefer and checks its line: the peak is the
# entry plus the 64 KiB block, the exit is the entry, one allocation and
# one free of 65536 bytes.
set -eu
out=$(LD_PRELOAD="$2" "$1")
echo "$out"
val() { echo "$out" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
entry=$(val entry) peak=$(val peak) exit_=$(val exit)
[ -n "$entry" ] || { echo "no result line"; exit 1; }
[ "$peak" -eq $((entry + 65536)) ] || { echo "peak $peak is not entry $entry + 65536"; exit 1; }
[ "$exit_" -eq "$entry" ] || { echo "exit $exit_ is not entry $entry"; exit 1; }
[ "$(val allocs)" -eq 1 ] && [ "$(val frees)" -eq 1 ] && [ "$(val bytes_allocated)" -eq 65536 ] ||
    { echo "counts wrong"; exit 1; }
echo "ok"
