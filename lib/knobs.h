/* knobs.h - the knob table: every knob declared once (SF_KNOBS), and the
 * types its rows use.
 *
 * One X-macro row per knob drives everything else: the table as data and
 * the text conversions (knob_table.c), the SEFER_CONFIG parser (toml.c),
 * the SEFER_* variables and the values (knobs.c), sefer_config_* and
 * /config (config.c, introspect/), and the docs and man page
 * (tools/knobs-doc.c). */
#ifndef SEFER_KNOBS_H
#define SEFER_KNOBS_H

#include <stdint.h>

enum sf_decommit { SF_DECOMMIT_NEVER, SF_DECOMMIT_EAGER, SF_DECOMMIT_DELAYED, SF_DECOMMIT_ADAPTIVE };
enum sf_on_error { SF_ON_ERROR_ABORT, SF_ON_ERROR_REPORT };
enum sf_limit_action { SF_LIMIT_PURGE, SF_LIMIT_FAIL };
enum sf_thp { SF_THP_NEVER, SF_THP_MADVISE, SF_THP_SYSTEM };
enum sf_unwinder { SF_UNWINDER_TABLE, SF_UNWINDER_LIBGCC, SF_UNWINDER_CHECK };
/* A size knob whose choices name "auto" takes it as this value. */
#define SF_KNOB_AUTO UINT64_MAX
enum sf_knob_type { SF_KNOB_UINT, SF_KNOB_SIZE, SF_KNOB_MS, SF_KNOB_BOOL, SF_KNOB_ENUM, SF_KNOB_STRING };
enum sf_knob_source { SF_SRC_DEFAULT, SF_SRC_FILE, SF_SRC_ENV, SF_SRC_RUNTIME };

/* X(id, name, type, default, min, max, runtime, enum-choices, meaning) */
#define SF_KNOBS(X)                                                                                \
    X(SEGMENTS_MAX, "segments.max", SF_KNOB_UINT, 65536, 1, 1u << 24, 1, NULL,                      \
      "cap on mapped 4 MiB segments (cached spans included); past it allocation fails with ENOMEM") \
    X(LARGE_CACHE_SLOTS, "large_cache.slots", SF_KNOB_UINT, 32, 0, 64, 1, NULL,                     \
      "freed large spans and empty segments kept for reuse, at most")                             \
    X(LARGE_CACHE_MAX_BYTES, "large_cache.max_bytes", SF_KNOB_SIZE, 256ull << 20, 0, 1ull << 40, 1, \
      NULL, "byte budget of the large cache, process-wide")                                       \
    X(LARGE_CACHE_TTL, "large_cache.ttl", SF_KNOB_MS, 2000, 0, 3600000, 1, NULL,                    \
      "a cached span unused this long is unmapped")                                                \
    X(DECOMMIT_POLICY, "decommit.policy", SF_KNOB_ENUM, SF_DECOMMIT_ADAPTIVE, 0, 3, 1,              \
      sf_decommit_names,                                                                          \
      "when empty pages and cached spans go back to the OS: never, eager, delayed or adaptive")  \
    X(DECOMMIT_DELAY, "decommit.delay", SF_KNOB_MS, 100, 0, 3600000, 1, NULL,                       \
      "how long an empty page or cached span stays committed at least (delayed, adaptive)")      \
    X(DECOMMIT_EXITED_KEEP, "decommit.exited_keep", SF_KNOB_SIZE, 32ull << 20, 0, 1ull << 40, 1, NULL, \
      "empty pages that heaps of exited threads keep committed, process-wide, for the threads that adopt them; past it they go back at once") \
    X(THREADS_CACHE_MAX, "threads.cache_max", SF_KNOB_SIZE, 32ull << 20, 0, 1ull << 40, 1, NULL,      \
      "empty pages that all heaps together keep committed, process-wide (live and exited threads'); past it, those past decommit.delay go back at once, whichever heap holds them") \
    X(THREADS_HEAP_AFTER, "threads.heap_after", SF_KNOB_UINT, 16, 0, 1u << 20, 1, NULL,               \
      "allocations a thread makes within one second before it gets a heap of its own; until then it allocates from the shared heap (0: at its first allocation)") \
    X(THREADS_CLASS_LIST_BYTES, "threads.class_list_bytes", SF_KNOB_SIZE, 64ull << 10, 0, 512ull << 10, 1, NULL, \
      "freed blocks up to 8 KiB a heap keeps on each class's list, ahead of their pages, for its next mallocs of the class: at most this many bytes and 64 blocks a class (0: no lists; a change reaches a list when it next runs dry, at sefer_trim or at its thread's exit)") \
    X(THREADS_SMALL_FROM, "threads.small_from", SF_KNOB_UINT, 16, 0, 1u << 20, 1, NULL,              \
      "once the process has had this many heaps at once, a thread's new heap serves requests up to 512 B from power-of-two classes of at least 64 B until a page of a class fills or 16 KiB of 64-byte blocks are carved (0: never)") \
    X(MEMORY_LIMIT, "memory.limit", SF_KNOB_SIZE, SF_KNOB_AUTO, 0, 1ull << 50, 1, sf_auto_names,     \
      "the process's memory limit: auto (its cgroup's memory.max or memory.limit_in_bytes), a size, or 0 for none") \
    X(MEMORY_SOFT_PERCENT, "memory.soft_percent", SF_KNOB_UINT, 90, 10, 100, 1, NULL,                \
      "committed memory above this percentage of memory.limit purges every idle page and cached span at once") \
    X(MEMORY_LIMIT_ACTION, "memory.limit_action", SF_KNOB_ENUM, SF_LIMIT_PURGE, 0, 1, 1,              \
      sf_limit_action_names, "at memory.limit itself: purge (and let the kernel decide), or fail the allocation with ENOMEM") \
    X(MEMORY_THP, "memory.thp", SF_KNOB_ENUM, SF_THP_NEVER, 0, 2, 1, sf_thp_names,                  \
      "transparent huge pages for segments and spans: never, madvise (ask for them), or system (what the system says)") \
    X(RINGS_CAPACITY, "rings.capacity", SF_KNOB_UINT, 1024, 2, 1u << 20, 0, NULL,                   \
      "slots in each heap's remote-free ring (rounded up to a power of two)")                     \
    X(GUARD_LEVEL, "guard.level", SF_KNOB_UINT, 1, 0, 3, 0, NULL,                                   \
      "hardening level 0-3 (docs/design.md: guard levels)")                                       \
    X(GUARD_ON_ERROR, "guard.on_error", SF_KNOB_ENUM, SF_ON_ERROR_ABORT, 0, 1, 1, sf_on_error_names, \
      "what a detected misuse does: abort, or report and refuse the operation")                   \
    X(GUARD_QUARANTINE, "guard.quarantine", SF_KNOB_SIZE, 256ull << 10, 0, 64ull << 20, 0, NULL,     \
      "with guard.level 3: bytes of freed blocks each heap holds back before reuse")              \
    X(GUARD_PROTECT_RATE, "guard.protect_rate", SF_KNOB_SIZE, 64ull << 20, 0, 1ull << 40, 1, NULL,   \
      "with guard.level >= 1: bytes of freed large blocks made inaccessible a second, at most (0: all)") \
    X(GUARD_SAMPLE_BYTES, "guard.sample_bytes", SF_KNOB_SIZE, 0, 0, 1ull << 40, 0, NULL,              \
      "sampled guard, at any level: about one malloc in this many bytes placed against an inaccessible page and kept inaccessible after free (0: off)") \
    X(GUARD_SAMPLE_MAX_RATE, "guard.sample_max_rate", SF_KNOB_UINT, 100, 0, 1000, 1, NULL,            \
      "sampled guard: at most this many samples a second, process-wide, whatever the allocation rate (0: no cap)") \
    X(GUARD_UNUSED_NO_ACCESS, "guard.unused_no_access", SF_KNOB_BOOL, 1, 0, 1, 1, NULL,              \
      "with guard.level 0-1: the part of a new segment no page has taken yet, a large block's span past the block and the page below it are no-access, so an overflow or underflow out of the part in use faults") \
    X(GUARD_CHECK_AT_EXIT, "guard.check_at_exit", SF_KNOB_BOOL, 1, 0, 1, 1, NULL,                   \
      "at exit, check every block still allocated as a free would (canary, size word; level 3: every freed block's fill), with guard.level >= 2, and the sampled guard's blocks at any level") \
    X(VALGRIND_TRACK, "valgrind.track", SF_KNOB_BOOL, 1, 0, 1, 0, NULL,                             \
      "under valgrind's memcheck: announce every block to it (every operation then takes the slow path)") \
    X(PROFILE_SAMPLE_BYTES, "profile.sample_bytes", SF_KNOB_SIZE, 0, 0, 1ull << 40, 1, NULL,         \
      "heap profiling: mean bytes allocated between two samples (0: off; docs/introspection.md)") \
    X(PROFILE_MAX_SAMPLES, "profile.max_samples", SF_KNOB_UINT, 1000, 0, 1000000, 1, NULL,          \
      "heap profiling: samples a second, process-wide, past which the mean gap between samples grows (weights kept unbiased; 0: no pacing)") \
    X(PROFILE_DEPTH, "profile.depth", SF_KNOB_UINT, 32, 1, 64, 1, NULL,                             \
      "heap profiling: frames kept of each sampled allocation's stack")                           \
    X(PROFILE_UNWINDER, "profile.unwinder", SF_KNOB_ENUM, SF_UNWINDER_TABLE, 0, 2, 1, sf_unwinder_names, \
      "heap profiling: how stacks are read: table (sefer's cached walk of the unwind tables), libgcc, or check (both, compared)") \
    X(PROFILE_MAX_BYTES, "profile.max_bytes", SF_KNOB_SIZE, 32ull << 20, 64ull << 10, 1ull << 40, 1, \
      NULL, "heap profiling: memory its tables may take; a sample that finds them full is dropped") \
    X(PROFILE_SEED, "profile.seed", SF_KNOB_UINT, 0, 0, UINT32_MAX, 0, NULL,                        \
      "heap profiling: seed of the sampling (0: a different one each run)")                       \
    X(PROFILE_OUTPUT, "profile.output", SF_KNOB_STRING, 0, 0, 0, 0, NULL,                          \
      "heap profiling: a pprof file written at exit, on SIGUSR2 and before a guard check aborts (sefer run --profile)")        \
    X(INTROSPECT_ENABLED, "introspect.enabled", SF_KNOB_BOOL, 0, 0, 1, 0, NULL,                     \
      "start the introspection HTTP server")                                                       \
    X(INTROSPECT_LISTEN, "introspect.listen", SF_KNOB_STRING, 0, 0, 0, 0, NULL,                     \
      "address:port of the introspection server (default 127.0.0.1:9090)")                        \
    X(INTROSPECT_TOKEN, "introspect.token", SF_KNOB_STRING, 0, 0, 0, 0, NULL,                       \
      "bearer token for writes and non-loopback listening (empty: none)")                         \
    X(INTROSPECT_HISTORY, "introspect.history", SF_KNOB_BOOL, 1, 0, 1, 0, NULL,                     \
      "the server keeps every figure over time for /history (2.6 MiB at the default interval)") \
    X(INTROSPECT_HISTORY_INTERVAL, "introspect.history_interval", SF_KNOB_MS, 1000, 100, 600000, 0,  \
      NULL, "how often the server samples the figures for /history (the last hour at this resolution)") \
    X(INTROSPECT_IDLE_TIMEOUT, "introspect.idle_timeout", SF_KNOB_MS, 5000, 1000, 3600000, 0, NULL,  \
      "the server closes a connection that stays silent this long (whole seconds, rounded up)")      \
    X(INTROSPECT_STOP_WAIT, "introspect.stop_wait", SF_KNOB_MS, 2000, 0, 60000, 0, NULL,              \
      "how long a stop (and exit) waits for the server's thread (0: not at all); one still running ends on its own")

enum sf_knob_id {
#define SF_KNOB_ENUM_(id, ...) SF_KNOB_##id,
    SF_KNOBS(SF_KNOB_ENUM_)
#undef SF_KNOB_ENUM_
        SF_KNOB_COUNT
};

#define SF_KNOB_STR_MAX 128               /* string knobs hold at most 127 bytes */
#define SF_CONFIG_FILE_MAX (64u << 10)    /* a SEFER_CONFIG file, at most */
struct sf_knob_def {
    const char *name;
    uint8_t type, runtime;
    uint64_t def, min, max;
    const char *const *choices; /* ENUM: NULL-terminated; the value is the index */
    const char *meaning;
};

#endif /* SEFER_KNOBS_H */
