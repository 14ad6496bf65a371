#!/usr/bin/env bash
# run_one.sh - run one real program twice, with glibc's malloc and with a
# preloaded allocator (LD_PRELOAD=LIB), and compare.
#
# Usage: run_one.sh KIND LIB SRCDIR [EXE]
#   KIND    python3 | perl | sqlite3 | gcc | cxx | probe
#   LIB     the allocator to preload (meson passes build/lib/libsefer.so)
#   SRCDIR  this directory (workload scripts)
#   EXE     for cxx: the C++ program; for probe: the probe program
#
# Passes (exit 0) when:
#   - the preload took effect: the program's own malloc references bind to
#     LIB (ld.so's LD_DEBUG=bindings, checked on a short run of the same
#     program; for gcc also in cc1), or, for probe, dlsym/dladdr say so;
#   - both runs exit 0, with byte-identical stdout;
#   - the preloaded run's stderr has no report from the allocator (no line
#     mentioning "sefer" or the name of LIB) nor from a sanitizer.
# Exit 77 (meson: skipped) when the program is not installed; 1 otherwise.
#
# Environment: PRELOAD_SCALE (default 1) scales the workloads;
#   PRELOAD_SYMBOL (default sefer_version) is what the probe must find in LIB;
#   PRELOAD_KEEP=1 keeps the work directory.  Anything else in the environment
#   (SEFER_CONFIG, SEFER_* knobs) reaches the preloaded run unchanged.
set -uo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 KIND LIB SRCDIR [EXE]" >&2
    exit 2
fi
kind=$1
lib=$2
src=$3
exe=${4:-}
scale=${PRELOAD_SCALE:-1}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ -f "$lib" ] || fail "no library at $lib"
lib=$(readlink -f "$lib")
libname=$(basename "$lib")
src=$(readlink -f "$src")
# meson passes built programs relative to the build directory
if [ -n "$exe" ] && [ -e "$exe" ]; then
    exe=$(readlink -f "$exe")
fi
stem=${libname%%.so*}
stem=${stem#lib}

# Run the interpreters and tools Debian ships, not a copy first in PATH.
pick() {
    local c
    for c in "$@"; do
        if [ -x "$c" ]; then
            echo "$c"
            return 0
        fi
        if command -v "$c" >/dev/null 2>&1; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/preload-$kind.XXXXXX")
if [ "${PRELOAD_KEEP:-0}" = 1 ]; then
    echo "work directory: $tmp"
else
    trap 'rm -rf "$tmp"' EXIT
fi
mkdir -p "$tmp/glibc" "$tmp/preload"

# Per kind: cmd (the real run), check_cmd (a short run for the binding
# check), bind_in (programs that must be seen binding malloc to LIB),
# stdin_file and extra environment.
stdin_file=/dev/null
extra_env=()
bind_in=()
case "$kind" in
python3)
    py=$(pick /usr/bin/python3 python3) || skip "python3 not installed"
    extra_env=(PYTHONMALLOC=malloc PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1)
    cmd=("$py" "$src/work.py" "$scale")
    check_cmd=("$py" -c 'import json; print(len(json.dumps(list(range(1000)))))')
    bind_in=(python3)
    ;;
perl)
    pl=$(pick /usr/bin/perl perl) || skip "perl not installed"
    cmd=("$pl" "$src/work.pl" "$scale")
    # shellcheck disable=SC2016  # perl code, not shell
    check_cmd=("$pl" -e 'my %h = map { $_ => 1 } 1..1000; print scalar(keys %h), "\n"')
    bind_in=(perl)
    ;;
sqlite3)
    sq=$(pick /usr/bin/sqlite3 sqlite3) || skip "sqlite3 not installed"
    awk -v rows=$((100000 * scale)) -f "$src/gen_sql.awk" >"$tmp/load.sql" ||
        fail "could not generate the SQL script"
    stdin_file=$tmp/load.sql
    cmd=("$sq" db.sqlite)
    check_cmd=("$sq" :memory: 'select 1')
    bind_in=(sqlite3)
    ;;
gcc)
    cc=$(pick /usr/bin/gcc gcc) || skip "gcc not installed"
    py=$(pick /usr/bin/python3 python3) || skip "python3 (to generate the C file) not installed"
    "$py" "$src/gen_c.py" $((40 * scale)) >"$tmp/gen.c" || fail "could not generate gen.c"
    # Compile under the allocator (the driver, cc1, as, collect2 and ld all
    # inherit LD_PRELOAD), then run what it built, also under it.
    # shellcheck disable=SC2016  # expanded by that sh, from its arguments
    cmd=(/bin/sh -c '"$1" -O2 -o prog "$2" "$3" && ./prog "$4" && cksum <prog' sh
         "$cc" "$src/prog.c" "$tmp/gen.c" "$scale")
    check_cmd=("$cc" -O2 -c -o "$tmp/check.o" "$src/prog.c")
    bind_in=(gcc cc1)
    ;;
cxx)
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        skip "C++ program not built (no C++ compiler?)"
    fi
    cmd=("$exe" "$scale")
    check_cmd=("$exe" 1)
    bind_in=("$(basename "$exe")")
    ;;
probe)
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        fail "probe program not built"
    fi
    sym=${PRELOAD_SYMBOL:-sefer_version}
    env -u LD_PRELOAD "$exe" "$sym" >"$tmp/glibc/out" 2>&1 || fail "probe failed without preload: $(cat "$tmp/glibc/out")"
    env LD_PRELOAD="$lib" "$exe" "$sym" >"$tmp/preload/out" 2>&1
    rc=$?
    echo "--- without LD_PRELOAD:"
    cat "$tmp/glibc/out"
    echo "--- with LD_PRELOAD=$lib:"
    cat "$tmp/preload/out"
    [ $rc = 0 ] || fail "probe exited $rc under the preload"
    if grep -q "^malloc .*$libname" "$tmp/glibc/out"; then
        fail "malloc resolves to $libname even without LD_PRELOAD"
    fi
    bad=$(grep -Ev "^symbol " "$tmp/preload/out" | grep -v " $lib\$" || true)
    [ -z "$bad" ] || fail "not served by $lib: $bad"
    grep -q "^symbol $sym absent" "$tmp/preload/out" && fail "$sym not found under the preload"
    # The process's first allocation before sefer's constructor (first_alloc.c,
    # a library's constructor, as libselinux's in sed): at every level the
    # block is that level's, the free of it reports nothing, and at levels
    # 2-3 a write one byte past it is still found.
    for level in 0 1 2 3; do
        for first in malloc calloc realloc aligned page medium span overflow; do
            out=$(env LD_PRELOAD="$lib" SEFER_GUARD_LEVEL=$level SEFER_GUARD_ON_ERROR=report \
                FIRST_ALLOC=$first "$exe" "$sym" 2>&1)
            rc=$?
            [ $rc = 0 ] || fail "level $level, first allocation $first: the probe exited $rc: $out"
            reports=$(printf '%s\n' "$out" | grep -c "^$stem:" || true)
            if [ $first = overflow ] && [ $level -ge 2 ]; then
                # (the free refused, the block is found again at exit)
                printf '%s\n' "$out" | grep -q "^$stem: write past the end of a block" ||
                    fail "level $level: the overflow of the first block was not reported: $out"
            else
                [ "$reports" = 0 ] || fail "level $level, first allocation $first: $out"
            fi
        done
    done
    echo "PASS: the first allocation, before $libname's constructor, at levels 0-3"
    echo "PASS: the malloc family resolves to $lib and $sym is visible"
    exit 0
    ;;
*)
    echo "unknown kind: $kind" >&2
    exit 2
    ;;
esac

# 1. Did the preload take effect?  ld.so reports every symbol binding.
dbg=$tmp/lddebug
mkdir -p "$dbg"
(cd "$tmp/preload" && env "${extra_env[@]}" LD_PRELOAD="$lib" LD_DEBUG=bindings \
    LD_DEBUG_OUTPUT="$dbg/ld" "${check_cmd[@]}" >/dev/null 2>"$tmp/check.err")
crc=$?
[ $crc = 0 ] || fail "short check run exited $crc under the preload: $(head -c 2000 "$tmp/check.err")"
cat "$dbg"/ld.* 2>/dev/null | grep "normal symbol \`malloc'" >"$tmp/malloc-bindings" || true
[ -s "$tmp/malloc-bindings" ] || fail "ld.so reported no binding of malloc at all (LD_DEBUG unsupported?)"
# A binding to the main program itself is fine: a non-PIE program's PLT
# entry is the canonical address of malloc, and it jumps to LIB.  A binding
# to libc is not: glibc's malloc would serve those calls.
others=$(grep -E " to [^ ]*/libc\.so[^ ]* \[" "$tmp/malloc-bindings" | head -5)
[ -z "$others" ] || fail "malloc bound to glibc despite the preload:"$'\n'"$others"
for p in "${bind_in[@]}"; do
    grep -E "binding file ([^ ]*/)?$p \[" "$tmp/malloc-bindings" | grep -Fq " to $lib [" ||
        fail "no binding of malloc from $p to $lib"
done
echo "preload check: malloc bound to $lib in ${bind_in[*]}, never to libc ($(wc -l <"$tmp/malloc-bindings") bindings)"

# 2. The two runs.
now() { date +%s.%N; }
run_arm() { # arm, then env assignments
    local arm=$1
    shift
    local t0 t1
    t0=$(now)
    (cd "$tmp/$arm" && env -u LD_PRELOAD "${extra_env[@]}" "$@" "${cmd[@]}" \
        <"$stdin_file" >"$tmp/$arm.out" 2>"$tmp/$arm.err")
    echo $? >"$tmp/$arm.rc"
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }' >"$tmp/$arm.time"
}
# PRELOAD_PROFILE_NAMES (regular expressions, space-separated): the
# preloaded run also profiles the heap (at PRELOAD_PROFILE_RATE bytes per
# sample, default 4096), each process writes its pprof file at exit, and
# every expression must match a function name in those files.
profile_env=()
if [ -n "${PRELOAD_PROFILE_NAMES:-}" ]; then
    mkdir -p "$tmp/prof"
    profile_env=(SEFER_PROFILE_SAMPLE_BYTES="${PRELOAD_PROFILE_RATE:-4096}"
                 SEFER_PROFILE_OUTPUT="$tmp/prof/%p.pb.gz")
fi
run_arm glibc
run_arm preload LD_PRELOAD="$lib" "${profile_env[@]}"
grc=$(cat "$tmp/glibc.rc")
prc=$(cat "$tmp/preload.rc")
echo "glibc:   exit $grc, $(wc -c <"$tmp/glibc.out") bytes of stdout, $(cat "$tmp/glibc.time") s"
echo "$stem: exit $prc, $(wc -c <"$tmp/preload.out") bytes of stdout, $(cat "$tmp/preload.time") s"

status=0
if [ "$grc" != 0 ]; then
    echo "FAIL: the glibc run itself exited $grc (workload or test bug); its stderr:"
    head -c 3000 "$tmp/glibc.err"
    status=1
fi
if [ "$prc" != "$grc" ]; then
    echo "FAIL: exit codes differ: glibc $grc, $stem $prc"
    status=1
fi
if [ ! -s "$tmp/glibc.out" ]; then
    echo "FAIL: the glibc run printed nothing"
    status=1
fi
if ! cmp -s "$tmp/glibc.out" "$tmp/preload.out"; then
    echo "FAIL: stdout differs (- glibc, + $stem):"
    diff -u "$tmp/glibc.out" "$tmp/preload.out" | head -60
    status=1
fi
reports=$(grep -Ei "sefer|$stem|runtime error:|Sanitizer" "$tmp/preload.err" | head -20 || true)
if [ -n "$reports" ]; then
    echo "FAIL: allocator reports on stderr under the preload:"
    echo "$reports"
    status=1
fi
if ! cmp -s "$tmp/glibc.err" "$tmp/preload.err"; then
    echo "note: stderr differs (not a failure by itself):"
    diff -u "$tmp/glibc.err" "$tmp/preload.err" | head -30
fi
if [ $status != 0 ]; then
    echo "--- stderr under $stem (first 3000 bytes):"
    head -c 3000 "$tmp/preload.err"
    exit 1
fi
if [ -n "${PRELOAD_PROFILE_NAMES:-}" ]; then
    shopt -s nullglob
    files=("$tmp"/prof/*.pb.gz)
    [ ${#files[@]} -gt 0 ] || fail "profiled run: no profile file written in $tmp/prof"
    # a pprof file's string table (field 6 of the Profile message) holds
    # the function names of its frames, one a line here
    python3 -c '
import gzip, sys
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7f) << s; s += 7
        if c < 0x80: return v, i
for path in sys.argv[1:]:
    b, i = gzip.open(path).read(), 0
    while i < len(b):
        key, i = varint(b, i)
        if key & 7 == 0: _, i = varint(b, i)
        elif key & 7 == 2:
            n, i = varint(b, i)
            if key >> 3 == 6: print(b[i:i + n].decode("utf-8", "replace"))
            i += n
        else: sys.exit("unexpected wire type in " + path)
' "${files[@]}" >"$tmp/prof-strings" || fail "profiled run: a profile file is not a gzipped profile.proto"
    for re in $PRELOAD_PROFILE_NAMES; do
        grep -Eq "$re" "$tmp/prof-strings" || fail "profiled run: no function matching $re in ${#files[@]} profile(s)"
    done
    echo "profile: ${#files[@]} file(s), functions matching $PRELOAD_PROFILE_NAMES found"
    # With profile.unwinder = check every stack was read by both walks:
    # each file's comment says how many samples, how many stacks sefer's
    # walk left to libgcc and where the two differed (each difference is
    # also a "sefer:" line on stderr, failed above).  Most stacks must have
    # been compared, not handed over.
    if [ "${SEFER_PROFILE_UNWINDER:-}" = check ]; then
        read -r samples fallbacks disagreements < <(grep -a '^sefer: samples=' "$tmp/prof-strings" |
            sed 's/.*samples=\([0-9]*\).*unwind_fallbacks=\([0-9]*\) unwind_disagreements=\([0-9]*\).*/\1 \2 \3/' |
            awk '{ s += $1; f += $2; d += $3 } END { print s + 0, f + 0, d + 0 }')
        echo "unwinders: $samples stacks read by both, $fallbacks left to libgcc, $disagreements differing"
        [ "$samples" -gt 0 ] || fail "profile.unwinder=check: no sample in the profiles"
        [ "$disagreements" -eq 0 ] || fail "profile.unwinder=check: the walks differed on $disagreements stacks"
        [ $((fallbacks * 10)) -le "$samples" ] ||
            fail "profile.unwinder=check: sefer's walk left $fallbacks of $samples stacks to libgcc"
    fi
fi
echo "PASS: $kind: same stdout and exit code under glibc and $stem"
exit 0
