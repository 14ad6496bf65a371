#!/bin/sh
# check-symbols.sh NM ARCHIVE - fails if the objects that run before
# the first allocation is served call anything outside a list of functions
# known not to allocate.
#
# sefer reads its config inside the first malloc, maybe inside the dynamic
# loader, and that first malloc then runs through the heap, page, segment
# and OS code: a call into stdio, strerror, setlocale or the like could
# allocate, re-enter sefer while it is initialising, and hang.  ARCHIVE
# holds those objects (tests/startup/meson.build names them): start-up
# (init.c, knobs.c, knob_table.c, toml.c, str.c, guard_report.c, track.c,
# entry.c) and the allocation path (override.c, alloc.c, heap.c, page.c,
# segment.c, cache.c, ring.c, segmap.c, sizeclass.c, free.c, guarded.c,
# os.c, clock.c, globals.c, memlimit.c: it reads the cgroup's files at
# start-up).  sf_* calls stay inside the library.
nm_prog=$1
archive=$2
# Allocation-free everywhere: system-call wrappers, string and memory
# functions, locks, errno, abort (glibc's abort flushes no stdio since 2.27).
allowed='_GLOBAL_OFFSET_TABLE_ __errno_location _exit abort close environ fstat fstat64 getenv
secure_getenv memchr memcmp memcpy memmove memset open open64 read write syscall
mmap mmap64 munmap madvise mprotect mincore clock_gettime pthread_mutex_lock pthread_mutex_unlock
pthread_mutex_trylock pthread_mutex_init
pthread_key_create sched_yield strchr strcmp strlen strncmp __stack_chk_fail'
# Allowed in one object only, and why:
#   init.c: pthread_atfork, from the constructor, after sf_ensure_init() and
#     never from inside malloc: the allocation glibc may make there is
#     served by an initialised sefer.
#   heap.c: pthread_setspecific, after the new heap is stored in
#     sf_tls_heap: for a key index of 32 or more glibc callocs the key's
#     second-level array, and that calloc finds the thread's heap claimed.
#   knobs.c: getauxval (AT_SECURE, before reading /proc/self/environ when
#     libc has not set environ yet): it reads the auxiliary vector the
#     loader kept, and allocates nothing.
per_object='init.c.o:pthread_atfork heap.c.o:pthread_setspecific knobs.c.o:getauxval'
bad=0
list=$("$nm_prog" -u "$archive" | awk '
    /:$/ { n = split($0, parts, "/"); obj = parts[n]; sub(/:$/, "", obj); next }
    NF >= 2 && $(NF-1) == "U" { print obj " " $NF }
    NF == 1 { print obj " " $1 }' | sort -u)
objects=$("$nm_prog" -u "$archive" | awk '/:$/ { n = split($0, parts, "/"); sub(/:$/, "", parts[n]); print parts[n] }' |
    sort -u | tr '\n' ' ')
printf '%s\n' "$list" | {
    bad=0
    while read -r obj sym; do
        [ -n "$sym" ] || continue
        case "$sym" in
        sf_* | __ubsan_* | __asan_* | __tsan_* | __sanitizer_* | __gcov_* | __llvm_*) continue ;;
        esac
        ok=0
        for a in $allowed; do
            [ "$sym" = "$a" ] && ok=1 && break
        done
        for a in $per_object; do
            [ "$obj:$sym" = "$a" ] && ok=1 && break
        done
        if [ $ok = 0 ]; then
            echo "$obj calls $sym, which is not known to be free of malloc" >&2
            bad=1
        fi
    done
    [ $bad = 0 ] && echo "start-up and allocation-path code (${objects% }): only allocation-free calls"
    exit $bad
}
