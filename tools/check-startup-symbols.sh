#!/bin/sh
# check-startup-symbols.sh NM ARCHIVE - fails if the objects that run at
# start-up (knobs.c, config_file.c) call anything outside a list of
# functions known not to allocate.  sefer reads its config inside the first
# malloc, maybe inside the dynamic loader: a call into stdio, strerror,
# setlocale or the like could allocate, re-enter sefer while it is
# initialising, and hang.  sf_* calls stay inside the library (sf_init_slow
# is only reached from the API functions, after start-up).
nm_prog=$1
archive=$2
allowed='_GLOBAL_OFFSET_TABLE_ __errno_location _exit close environ fstat fstat64 getenv secure_getenv
memchr memcmp memcpy memmove memset open open64 pthread_mutex_lock pthread_mutex_unlock
read strchr strcmp strlen strncmp __stack_chk_fail'
bad=0
for sym in $("$nm_prog" -u "$archive" | awk 'NF >= 2 && $(NF-1) == "U" {print $NF} NF == 1 && $1 !~ /:$/ {print $1}' | sort -u); do
    case "$sym" in
    sf_* | __ubsan_* | __asan_* | __tsan_* | __sanitizer_* | __gcov_* | __llvm_*) continue ;;
    esac
    ok=0
    for a in $allowed; do
        [ "$sym" = "$a" ] && ok=1 && break
    done
    if [ $ok = 0 ]; then
        echo "start-up code calls $sym, which is not known to be free of malloc" >&2
        bad=1
    fi
done
[ $bad = 0 ] && echo "start-up code ($archive): only allocation-free calls"
exit $bad
