/* internal.h - sefer's internal types, fast-path helpers and prototypes.
 *
 * Layout of memory (docs/design.md has the reasons):
 *
 *   segment (4 MiB, aligned to 4 MiB)
 *   +-----------+---------+---------+-----+---------+
 *   | metadata  | page 1  | page 2  | ... | page 63 |   small:  64 KiB pages
 *   +-----------+---------+---------+-----+---------+
 *   | meta | page 0 (448K)| page 1 (512 KiB) | ...   |   medium: 512 KiB pages
 *   +------+------------------------------------------+
 *   | meta | one block (large: 1..32 segments, huge: more)  |
 *
 * The header of any segment is found from an interior pointer by masking
 * (ptr & ~(SF_SEG_SIZE-1)); the page descriptor by (ptr - segment) >> page_shift.
 * A process-wide byte map (segmap.c) says whether a 4 MiB chunk holds a live
 * sefer segment, so "is this pointer ours?" never touches unmapped memory.
 *
 * Prototypes are grouped under the file that defines them. */
#ifndef SEFER_INTERNAL_H
#define SEFER_INTERNAL_H

#include "sefer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* With -Doverride=true sefer exports a checked memcpy, memmove and memset
 * (guarded_mem.c).  Its own calls go to glibc's instead, so that sefer's
 * work on freed blocks and its metadata is never checked as if it were the
 * program's: through pointers to glibc's routines, looked up once at
 * start-up (one indirect call, as a call through the GOT was), and until
 * then through sf_raw_*, glibc's _chk forms (libc_mem.c); a constant size
 * is left to the compiler (inlined, or a call of sf_raw_*). */
__attribute__((visibility("hidden"))) extern void *(*sf_libc_memcpy)(void *, const void *, size_t);
__attribute__((visibility("hidden"))) extern void *(*sf_libc_memmove)(void *, const void *, size_t);
__attribute__((visibility("hidden"))) extern void *(*sf_libc_memset)(void *, int, size_t);
#if defined(SF_INTERPOSE_MEM) && !defined(SF_DEFINES_MEM_FUNCTIONS)
void *memcpy(void *, const void *, size_t) __asm__("sf_raw_memcpy");
void *memmove(void *, const void *, size_t) __asm__("sf_raw_memmove");
void *memset(void *, int, size_t) __asm__("sf_raw_memset");
#define memcpy(d, s, n) (__builtin_constant_p(n) ? __builtin_memcpy(d, s, n) : sf_libc_memcpy(d, s, n))
#define memmove(d, s, n) (__builtin_constant_p(n) ? __builtin_memmove(d, s, n) : sf_libc_memmove(d, s, n))
#define memset(d, c, n) (__builtin_constant_p(n) ? __builtin_memset(d, c, n) : sf_libc_memset(d, c, n))
#endif


#define SF_HIDDEN __attribute__((visibility("hidden")))
#define SF_LIKELY(x) __builtin_expect(!!(x), 1)
#define SF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SF_NOINLINE __attribute__((noinline))
#define SF_INLINE static inline __attribute__((always_inline))

/* Fields one thread writes and others read without a lock (statistics,
 * page flags seen by a remote free).  SF_GET/SF_SET are relaxed atomic
 * accesses, a plain mov on x86-64.  SF_COUNT/SF_UNCOUNT bump a hot counter
 * by its only writer: one add instruction, except under ThreadSanitizer,
 * where the store is made atomic so the benign race is not reported.
 * SF_UNCOUNT yields the new value. */
#define SF_GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
#define SF_SET(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)
/* SF_PEEK: a read another thread may be writing, where any value read is
 * harmless (an aligned pointer on x86-64 is never torn): plain, so the
 * compiler can fold it into a compare; atomic under ThreadSanitizer. */
#if defined(__SANITIZE_THREAD__)
#define SF_PEEK(field) SF_GET(field)
#define SF_COUNT(field) SF_SET(field, (field) + 1)
#define SF_UNCOUNT(field) (SF_SET(field, (field) - 1), (field))
#else
#define SF_PEEK(field) (field)
#define SF_COUNT(field) ((field)++)
#define SF_UNCOUNT(field) (--(field))
#endif

/* ---- geometry ---------------------------------------------------------- */
#define SF_SEG_SHIFT 22
#define SF_SEG_SIZE ((size_t)1 << SF_SEG_SHIFT)
#define SF_SEG_MASK (SF_SEG_SIZE - 1)
#define SF_SMALL_PAGE_SHIFT 16 /* 64 KiB */
#define SF_MEDIUM_PAGE_SHIFT 19 /* 512 KiB */
#define SF_SPAN_PAGE_SHIFT 40   /* large/huge: one page covers the whole span */
#define SF_SMALL_PAGES (SF_SEG_SIZE >> SF_SMALL_PAGE_SHIFT)   /* 64, page 0 is metadata */
#define SF_MEDIUM_PAGES (SF_SEG_SIZE >> SF_MEDIUM_PAGE_SHIFT) /* 8, page 0 starts after metadata */
#define SF_SEG_META_SIZE ((size_t)64 << 10) /* header + page table; rest unused address */
#define SF_SMALL_MAX SEFER_SMALL_MAX
#define SF_MEDIUM_MAX SEFER_MEDIUM_MAX
#define SF_LARGE_MAX_SEGS 32 /* spans above 128 MiB are "huge": mapped and unmapped directly */
#define SF_OS_PAGE 4096
#define SF_MAX_ALIGN_FROM_CLASS SF_MEDIUM_MAX

/* ---- size classes (sizeclass.c) ----------------------------------------- */
/* 16-byte steps to 128 B, then four classes per power of two up to 128 KiB. */
#define SF_CLASS_COUNT 49 /* class 0 unused; 1..48 */
#define SF_DIRECT_MAX 1024
#define SF_DIRECT_COUNT (SF_DIRECT_MAX / 16 + 1)
#define SF_SMALL_CLASS_MAX 32 /* class of SF_SMALL_MAX */

SF_HIDDEN extern const uint32_t sf_class_size[SF_CLASS_COUNT];

SF_INLINE unsigned sf_class_of(size_t n) {
    if (n <= 128) return n == 0 ? 1 : (unsigned)((n + 15) >> 4);
    unsigned b = 63u - (unsigned)__builtin_clzl(n - 1); /* 2^b < n <= 2^(b+1) */
    return 5 + (b - 7) * 4 + (unsigned)((n - 1) >> (b - 2));
}
SF_HIDDEN unsigned sf_class_for_aligned(size_t n, size_t align);

/* ---- str.c: text without malloc ------------------------------------------ */
/* A bounded, always NUL-terminated string builder (truncates). */
typedef struct {
    char *buf;
    size_t cap, len;
} sf_str_t;
SF_HIDDEN void sf_str_init(sf_str_t *s, char *buf, size_t cap);
SF_HIDDEN void sf_str_add(sf_str_t *s, const char *text);
SF_HIDDEN void sf_str_addn(sf_str_t *s, const char *text, size_t n);
SF_HIDDEN void sf_str_addu(sf_str_t *s, uint64_t v);
SF_HIDDEN void sf_str_addx(sf_str_t *s, uintptr_t v); /* 0x..., lower case */
SF_HIDDEN void sf_str_add_clean(sf_str_t *s, const char *text, size_t n, size_t max);
SF_HIDDEN const char *sf_errno_text(int e); /* strerror's text, for the errnos of open/read */
SF_HIDDEN void sf_write_stderr(const char *msg);

/* ---- knobs (knobs.c) ------------------------------------------------------ */
enum sf_decommit { SF_DECOMMIT_NEVER, SF_DECOMMIT_EAGER, SF_DECOMMIT_DELAYED, SF_DECOMMIT_ADAPTIVE };
enum sf_on_error { SF_ON_ERROR_ABORT, SF_ON_ERROR_REPORT };
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
    X(RINGS_CAPACITY, "rings.capacity", SF_KNOB_UINT, 1024, 2, 1u << 20, 0, NULL,                   \
      "slots in each heap's remote-free ring (rounded up to a power of two)")                     \
    X(GUARD_LEVEL, "guard.level", SF_KNOB_UINT, 1, 0, 3, 0, NULL,                                   \
      "hardening level 0-3 (docs/design.md: guard levels)")                                       \
    X(GUARD_ON_ERROR, "guard.on_error", SF_KNOB_ENUM, SF_ON_ERROR_ABORT, 0, 1, 1, sf_on_error_names, \
      "what a detected misuse does: abort, or report and refuse the operation")                   \
    X(GUARD_QUARANTINE, "guard.quarantine", SF_KNOB_SIZE, 256ull << 10, 0, 64ull << 20, 0, NULL,     \
      "with guard.level 3: bytes of freed blocks each heap holds back before reuse")              \
    X(GUARD_PROTECT_RATE, "guard.protect_rate", SF_KNOB_SIZE, 64ull << 20, 0, 1ull << 40, 1, NULL,   \
      "with guard.level >= 2: bytes of freed large blocks made inaccessible a second, at most (0: all)") \
    X(VALGRIND_TRACK, "valgrind.track", SF_KNOB_BOOL, 1, 0, 1, 0, NULL,                             \
      "under valgrind's memcheck: announce every block to it (every operation then takes the slow path)") \
    X(PROFILE_SAMPLE_BYTES, "profile.sample_bytes", SF_KNOB_SIZE, 0, 0, 1ull << 40, 1, NULL,         \
      "heap profiling: mean bytes allocated between two samples (0: off; docs/introspection.md)") \
    X(PROFILE_DEPTH, "profile.depth", SF_KNOB_UINT, 32, 1, 64, 1, NULL,                             \
      "heap profiling: frames kept of each sampled allocation's stack")                           \
    X(PROFILE_MAX_BYTES, "profile.max_bytes", SF_KNOB_SIZE, 32ull << 20, 64ull << 10, 1ull << 40, 1, \
      NULL, "heap profiling: memory its tables may take; a sample that finds them full is dropped") \
    X(PROFILE_SEED, "profile.seed", SF_KNOB_UINT, 0, 0, UINT32_MAX, 0, NULL,                        \
      "heap profiling: seed of the sampling (0: a different one each run)")                       \
    X(PROFILE_OUTPUT, "profile.output", SF_KNOB_STRING, 0, 0, 0, 0, NULL,                          \
      "heap profiling: a pprof file written at exit and on SIGUSR2 (sefer run --profile)")        \
    X(INTROSPECT_ENABLED, "introspect.enabled", SF_KNOB_BOOL, 0, 0, 1, 0, NULL,                     \
      "start the introspection HTTP server")                                                       \
    X(INTROSPECT_LISTEN, "introspect.listen", SF_KNOB_STRING, 0, 0, 0, 0, NULL,                     \
      "address:port of the introspection server (default 127.0.0.1:9090)")                        \
    X(INTROSPECT_TOKEN, "introspect.token", SF_KNOB_STRING, 0, 0, 0, 0, NULL,                       \
      "bearer token for writes and non-loopback listening (empty: none)")                         \
    X(INTROSPECT_HISTORY, "introspect.history", SF_KNOB_BOOL, 1, 0, 1, 0, NULL,                     \
      "the server keeps every figure over time for /history (2.6 MiB at the default interval)") \
    X(INTROSPECT_HISTORY_INTERVAL, "introspect.history_interval", SF_KNOB_MS, 1000, 100, 600000, 0,  \
      NULL, "how often the server samples the figures for /history (the last hour at this resolution)")

enum sf_knob_id {
#define SF_KNOB_ENUM_(id, ...) SF_KNOB_##id,
    SF_KNOBS(SF_KNOB_ENUM_)
#undef SF_KNOB_ENUM_
        SF_KNOB_COUNT
};

/* Current values, read without locks (a torn read is impossible: 64-bit). */
SF_HIDDEN extern _Atomic uint64_t sf_knob_value[SF_KNOB_COUNT];
SF_INLINE uint64_t sf_knob(enum sf_knob_id id) {
    return atomic_load_explicit(&sf_knob_value[id], memory_order_relaxed);
}
SF_HIDDEN void sf_knobs_init(void);
SF_HIDDEN extern pthread_mutex_t sf_knob_lock;
SF_HIDDEN const char *sf_knob_source_name(int source); /* "default", "file", "env", "runtime" */
/* A knob's value (STRING: the text str) and where it came from; at run
 * time under sf_knob_lock (config.c). */
SF_HIDDEN void sf_knob_set(int i, uint64_t v, const char *str, uint8_t source);
SF_HIDDEN uint8_t sf_knob_source(int i);
SF_HIDDEN const char *sf_knob_string(int i);

/* ---- knob_table.c: the knob table as data, text -> value conversion ------ */
/* Pure (no state, no allocation, no system call), like toml.c and str.c:
 * the fuzz target and tools/knobs-doc link those three alone. */
#define SF_KNOB_STR_MAX 128               /* string knobs hold at most 127 bytes */
#define SF_CONFIG_FILE_MAX (64u << 10)    /* a SEFER_CONFIG file, at most */
struct sf_knob_def {
    const char *name;
    uint8_t type, runtime;
    uint64_t def, min, max;
    const char *const *choices; /* ENUM: NULL-terminated; the value is the index */
    const char *meaning;
};
SF_HIDDEN extern const struct sf_knob_def sf_knob_defs[SF_KNOB_COUNT];
SF_HIDDEN const char *sf_knob_default_string(int id);
SF_HIDDEN int sf_knob_lookup(const char *name, size_t len); /* -1: unknown */
SF_HIDDEN size_t sf_knob_env_name(int id, char *buf, size_t len);
/* Text as in SEFER_* variables and sefer_config_set -> value (STRING: 0, the
 * text is the value); false with the reason in why ("out of range 0-3"). */
SF_HIDDEN bool sf_knob_from_text(int id, const char *text, uint64_t *out, char *why, size_t whylen);
SF_HIDDEN void sf_knob_format_human(uint8_t type, uint64_t v, sf_str_t *s);
/* For toml.c: whether a table (the part of a name before its dot) exists;
 * a number (neg: written with a minus) within the knob's bounds; a text
 * (len bytes) as the knob's value; "what the knob takes" (toml: as TOML
 * writes it).  The three with a why append the reason to it. */
SF_HIDDEN bool sf_knob_table_known(const char *name, size_t len);
SF_HIDDEN bool sf_knob_check_number(int id, uint64_t v, bool neg, uint64_t *out, sf_str_t *why);
SF_HIDDEN bool sf_knob_convert_text(int id, const char *text, size_t len, uint64_t *out, sf_str_t *why);
SF_HIDDEN void sf_knob_expected(int id, sf_str_t *why, bool toml);

/* ---- toml.c: the SEFER_CONFIG parser -------------------------------------- */
/* The parser calls set() for each valid key = value (str: the text of a
 * STRING knob, else NULL), unset() when a key set earlier in the file turns
 * out to be duplicated (the file no longer sets it), and error() once per
 * bad line (key: the full knob name as written, "[table]", or "-").
 * Returns the number of errors. */
typedef struct sf_config_sink {
    void *ctx;
    void (*set)(void *ctx, int knob, uint64_t value, const char *str, unsigned line);
    void (*unset)(void *ctx, int knob, unsigned line);
    void (*error)(void *ctx, unsigned line, const char *key, const char *msg);
} sf_config_sink_t;
SF_HIDDEN unsigned sf_config_parse(const char *buf, size_t len, const sf_config_sink_t *sink);

/* ---- OS layer (os.c) ---------------------------------------------------- */
SF_HIDDEN void *sf_os_map_aligned(size_t size, size_t align);
SF_HIDDEN void sf_os_unmap(void *p, size_t size);
SF_HIDDEN void sf_os_decommit(void *p, size_t size);
SF_HIDDEN bool sf_os_decommit_try(void *p, size_t size);
SF_HIDDEN bool sf_os_protect(void *p, size_t size, bool accessible);
SF_HIDDEN bool sf_os_discard_protect(void *p, size_t size);
SF_HIDDEN void *sf_os_map_plain(size_t size);
SF_HIDDEN void *sf_os_reserve_none(size_t size);

/* ---- clock.c ------------------------------------------------------------ */
SF_HIDDEN uint64_t sf_now_ms(void); /* CLOCK_MONOTONIC_COARSE: deadlines */
SF_HIDDEN uint64_t sf_now_ns(void); /* CLOCK_MONOTONIC: durations reported */
/* Milliseconds since the Unix epoch, counted on CLOCK_BOOTTIME from
 * sf_clock_init (start-up): never backwards.  The time of events, phases
 * and /history. */
SF_HIDDEN void sf_clock_init(void);
SF_HIDDEN uint64_t sf_clock_ms(void);

/* ---- lockstat.c: the counter build (-Dlock_stats=true, docs/scaling.md) -- */
/* With SEFER_LOCK_STATS, every sf_lock/sf_unlock is counted and timed per
 * lock, every sf_stat_add/sub per process-wide counter, and each
 * read-modify-write on a cache line other threads also write is counted at
 * its call site with SF_LS_RMW(KIND) (for a CAS loop: once per attempt).
 * Without it (every normal build) the hooks are nothing: SF_LS_RMW and
 * SF_LS_STAT are ((void)0).  X(KIND, "name", what is counted). */
#define SF_LS_RMW_KINDS(X)                                                                 \
    X(RING_TAIL_CAS, "ring_tail_cas", "a producer claims a ring position (the owner's ring tail)") \
    X(RING_POP, "ring_pop", "the owner takes a ring cell (cell line and head, read by producers)") \
    X(RING_OVERFLOWED, "ring_overflowed", "fetch_add on ring.overflowed (a full ring)")   \
    X(OVERFLOW_CAS, "overflow_cas", "push onto the owner heap's overflow list")          \
    X(OVERFLOW_XCHG, "overflow_xchg", "the owner takes its overflow list")               \
    X(XFREE_CAS, "xfree_cas", "push onto a page's remote-free list (page->xfree)")        \
    X(XFREE_NOTIFY, "xfree_notify", "CAS on page->xfree setting or clearing the full-page flag") \
    X(XFREE_XCHG, "xfree_xchg", "the owner takes a page's remote-free list")             \
    X(HEAP_STATE, "heap_state", "CAS or store on a heap's state (claim, collect, release)") \
    X(OWNERLESS_CAS, "ownerless_cas", "push or pop on the registry's ownerless-heap stack") \
    X(SLOT_MAKE, "slot_make", "fetch_add on the registry's slot count, CAS of a new chunk") \
    X(ABANDONED_FLAG, "abandoned_flag", "CAS on the registry's next look for abandoned purges") \
    X(SEG_RESERVE_CAS, "seg_reserve_cas", "CAS on stats.segments (and its peak) against segments.max") \
    X(SEGMAP_STORE, "segmap_store", "a segment map byte written (read by every free's fast path)")
enum sf_ls_rmw {
#define SF_LS_RMW_ENUM_(id, ...) SF_RMW_##id,
    SF_LS_RMW_KINDS(SF_LS_RMW_ENUM_)
#undef SF_LS_RMW_ENUM_
        SF_RMW_KIND_COUNT
};
#ifdef SEFER_LOCK_STATS
SF_HIDDEN void sf_ls_lock(pthread_mutex_t *m);
SF_HIDDEN void sf_ls_unlock(pthread_mutex_t *m);
SF_HIDDEN void sf_ls_rmw(enum sf_ls_rmw kind);
SF_HIDDEN void sf_ls_stat(const _Atomic uint64_t *counter);
#define SF_LS_RMW(kind) sf_ls_rmw(SF_RMW_##kind)
#define SF_LS_STAT(counter) sf_ls_stat(counter)
#else
#define SF_LS_RMW(kind) ((void)0)
#define SF_LS_STAT(counter) ((void)0)
#endif

/* ---- globals.c: flags and counters every layer reads ---------------------- */
SF_HIDDEN extern uint8_t sf_guard_level; /* copied from the knob at start-up */
/* Guard level 2's fast paths are in use (level 2, not tracked by valgrind);
 * pages are off levels 0-1's fast paths when sf_guard_level >= 2 || sf_tracked. */
SF_HIDDEN extern bool sf_l2_fast;
/* What takes the generic paths out of their usual way, in one byte so that
 * each asks one question where it asked "tracked?" before (outside a phase
 * and valgrind, they cost what they cost without phases): SF_MODE_TRACKED
 * mirrors sf_tracked (set at start-up), SF_MODE_PHASE is set while a phase
 * is open (phase.c). */
enum { SF_MODE_TRACKED = 1, SF_MODE_PHASE = 2 };
SF_HIDDEN extern uint8_t sf_generic_mode; /* written with __atomic_fetch_or/and */
/* (SF_PEEK: a compare with memory; a thread that reads the old value a
 * moment after a phase began or ended is one operation counted or not) */
SF_INLINE unsigned sf_mode(void) { return SF_PEEK(sf_generic_mode); }
/* While a phase is open the fast paths are off (every malloc and free takes
 * the generic paths, which count): sf_phase_on() is their one question. */
SF_HIDDEN extern _Atomic int sf_phase_depth;
SF_INLINE bool sf_phase_on(void) { return atomic_load_explicit(&sf_phase_depth, memory_order_relaxed) != 0; }
/* Process-wide counters: */
#define SF_GUARD_KINDS_COUNTED 7 /* enum sf_guard_kind (guard_report.c) */
struct sf_global_stats {
    _Atomic uint64_t committed, reserved, metadata, decommitted_total, segments, segments_peak;
    _Atomic uint64_t cache_bytes, cache_spans, cache_hits, cache_misses, os_maps, enomem;
    /* operations not counted in a heap: spans, and threads without a heap */
    _Atomic uint64_t shared_allocs, shared_remote_frees, fallback_allocs;
    _Atomic uint64_t guard[SF_GUARD_KINDS_COUNTED];
};
SF_HIDDEN extern struct sf_global_stats sf_gstats;
SF_INLINE void sf_stat_add(_Atomic uint64_t *c, uint64_t v) {
    SF_LS_STAT(c);
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}
SF_INLINE void sf_stat_sub(_Atomic uint64_t *c, uint64_t v) {
    SF_LS_STAT(c);
    atomic_fetch_sub_explicit(c, v, memory_order_relaxed);
}

/* ---- segment map (segmap.c) --------------------------------------------- */
#define SF_SEGMAP_CHUNKS ((size_t)1 << (47 - SF_SEG_SHIFT))
SF_HIDDEN extern _Atomic uint8_t sf_segmap[SF_SEGMAP_CHUNKS];
enum { SF_SEGMAP_NONE, SF_SEGMAP_SMALL_HEAD, SF_SEGMAP_OTHER_HEAD, SF_SEGMAP_BACK0 };
/* True iff a small segment's header starts at 4 MiB chunk `chunk` (a
 * pointer shifted right by SF_SEG_SHIFT; NULL's chunk 0 never does).  The free
 * fast path's only question; a plain load outside ThreadSanitizer so the
 * compiler can fold it into the compare. */
SF_INLINE bool sf_segmap_is_small_chunk(uintptr_t chunk) {
#if defined(__SANITIZE_THREAD__)
    uint8_t v = atomic_load_explicit(&sf_segmap[chunk < SF_SEGMAP_CHUNKS ? chunk : 0], memory_order_relaxed);
#else
    uint8_t v = ((const uint8_t *)sf_segmap)[chunk < SF_SEGMAP_CHUNKS ? chunk : 0];
#endif
    return chunk < SF_SEGMAP_CHUNKS && v == SF_SEGMAP_SMALL_HEAD;
}
/* head: SF_SEGMAP_SMALL_HEAD, SF_SEGMAP_OTHER_HEAD, or SF_SEGMAP_NONE to clear. */
SF_HIDDEN void sf_segmap_mark(void *seg, size_t chunks, uint8_t head);
struct sf_segment_s;
SF_HIDDEN struct sf_segment_s *sf_segmap_header(const void *p);

/* ---- blocks, pages, segments, heaps ------------------------------------- */
typedef struct sf_block_s {
    struct sf_block_s *next;
    uintptr_t cookie; /* == sf_page_cookie(page) while the block is free */
} sf_block_t;

struct sf_heap_s;
struct sf_segment_s;

enum sf_page_flag {
    SF_PAGE_FULL = 1,   /* in the heap's full list, not its class queue */
    SF_PAGE_SPAN = 2,   /* large or huge: the page is the whole span, one block */
    SF_PAGE_GUARDED = 4, /* guard level >= 2 or tracked by valgrind: off levels 0-1's fast paths */
    SF_PAGE_SAMPLED = 8  /* serves sampled blocks only (profile.c): off every free fast path */
};

typedef struct sf_page_s {
    /* hot: touched by malloc/free fast paths */
    union {
        struct {                    /* in use */
            sf_block_t *free;       /* blocks ready for malloc (owner only) */
            sf_block_t *local_free; /* blocks freed by the owner since the last collect */
        };
        struct { /* empty, on its heap's purge queue: the heap's other such pages
                    that last served the same class (segment.c) */
            struct sf_page_s *class_next, *class_prev;
        };
    };
    struct sf_heap_s *fast_heap; /* owner heap while flags == 0, else NULL: the
                                    free fast path's one ownership test */
    uint32_t used;          /* blocks handed out and not yet returned to the owner */
    uint8_t flags;          /* non-zero sends free to the generic path */
    uint8_t class_idx;
    uint8_t in_use;     /* allocated to a size class (or span) */
    uint8_t committed;  /* memory not decommitted since last use */
    uint32_t block_size;
    uint16_t capacity;   /* blocks carved so far (read by other threads: SF_GET) */
    uint16_t reserved;   /* blocks that fit (at most 4096: 64 KiB / 16 B) */
    uint8_t *block_start;
    uint64_t divmagic;   /* ceil(2^64 / block_size): interior-pointer check */
    uint64_t purge_at; /* delayed decommit deadline (ms), 0: none */
    /* second cache line: the owner's fast paths never touch it */
    /* Blocks freed by other threads (remote.c): a lock-free stack threaded
     * through the blocks, pushed with a CAS, taken whole by the owner with
     * an exchange.  Bit 0 (SF_XFREE_NOTIFY) says the page is full and the
     * next remote free must tell the owner through its ring. */
    _Atomic uintptr_t xfree;
    /* queue links: class queue, full list or purge list */
    struct sf_page_s *next, *prev;
    uint8_t *page_start;
    size_t page_bytes;
    union {
        size_t span_bytes; /* spans: usable bytes of the block (a page-size multiple) */
        size_t prof_charged; /* class pages: `free` was charged to the heap's sampling
                                countdown (profile.c), so what is left on it is refunded
                                if the page goes away */
    };
    uintptr_t secret;  /* guard level >= 2: free-list links are XOR-ed with it (else 0) */
    union {
        size_t requested;     /* spans at guard level >= 2: the size asked for */
        uintptr_t canary_key; /* blocks at guard level >= 2: canary = address ^ key */
    };
} __attribute__((aligned(128))) sf_page_t; /* a power of two: page index is one shift */

enum sf_seg_kind { SF_SEG_SMALL, SF_SEG_MEDIUM, SF_SEG_LARGE, SF_SEG_HUGE };

typedef struct sf_segment_s {
    uint64_t magic;          /* SF_SEG_MAGIC ^ address */
    struct sf_heap_s *heap;  /* owner heap (small/medium); NULL for spans */
    uint8_t page_shift;
    uint8_t page_bias; /* page number of pages[0]: 1 for small (page 0 is metadata) */
    uint8_t kind;
    uint8_t fresh_zero; /* span memory known to be zero (fresh mapping) */
    uint16_t page_count;
    uint16_t used_pages;
    uint64_t free_mask; /* pages not in use */
    size_t span_size;   /* bytes mapped */
    size_t committed_bytes; /* counted in stats.bytes_committed */
    uint64_t id;
    /* heap's list of segments with free pages */
    struct sf_segment_s *heap_next, *heap_prev;
    /* process-wide list of live segments (under sf_seg_lock) */
    struct sf_segment_s *all_next, *all_prev;
    sf_page_t pages[]; /* page_count descriptors; pages[i] is page i + page_bias */
} sf_segment_t;

#define SF_SEG_MAGIC 0x5365666572536567ull /* "SeferSeg" */
#define SF_PAGE_DESC_SHIFT 7
_Static_assert(sizeof(sf_page_t) == (1u << SF_PAGE_DESC_SHIFT), "page descriptor size");
_Static_assert(offsetof(sf_page_t, xfree) >= 64, "remote frees stay off the fast paths' cache line");
/* The header fills the first 128-byte slot, so in a small segment the
 * descriptor of page i (1..63) sits at seg + i * 128: the fast path finds it
 * by OR-ing shifted pointer bits into the segment address. */
_Static_assert(offsetof(sf_segment_t, pages) == sizeof(sf_page_t), "segment header size");
/* The value a free block's second word holds: derived from its page, so a
 * block from another page never matches. */
SF_INLINE uintptr_t sf_page_cookie(const sf_page_t *page) { return (uintptr_t)page; }

SF_INLINE sf_segment_t *sf_segment_of(const void *p) {
    return (sf_segment_t *)((uintptr_t)p & ~(uintptr_t)SF_SEG_MASK);
}
SF_INLINE sf_page_t *sf_page_of(sf_segment_t *seg, const void *p) {
    return &seg->pages[(((uintptr_t)p - (uintptr_t)seg) >> seg->page_shift) - seg->page_bias];
}
/* True iff p is the start of a block carved in page (not interior, not
 * padding, not a block the page has not handed out yet).  The divisibility
 * test, off * ceil(2^64/size) < ceil(2^64/size), is exact for off < 2^32. */
SF_INLINE size_t sf_page_carved_bytes(const sf_page_t *page) {
    return (size_t)SF_GET(page->capacity) * SF_GET(page->block_size);
}
SF_INLINE bool sf_page_is_block_start(const sf_page_t *page, const void *p) {
    uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)page->block_start);
    return off < sf_page_carved_bytes(page) && off * page->divmagic < page->divmagic;
}

/* Remote-free ring: a bounded multi-producer single-consumer queue of block
 * pointers (one per heap).  Cells carry a sequence number so a producer never
 * waits: a full ring refuses the push and the caller takes the overflow path. */
typedef struct {
    _Atomic uint64_t seq;
    void *_Atomic ptr;
} sf_ring_cell_t;

typedef struct {
    _Atomic uint64_t tail __attribute__((aligned(64))); /* producers: pushes so far */
    _Atomic uint64_t head __attribute__((aligned(64))); /* the consumer: drained so far */
    _Atomic uint64_t overflowed;
    uint64_t mask;
    sf_ring_cell_t *cells;
} sf_ring_t;

typedef struct {
    sf_page_t *first, *last;
} sf_page_queue_t;

/* How much memory was in use lately (decommit.c): the most in use at once
 * in each of the last SF_REUSE_WINDOW intervals of decommit.delay. */
#define SF_REUSE_WINDOW 8
typedef struct {
    uint64_t epoch;                  /* the interval peak[epoch % WINDOW] covers */
    uint64_t peak[SF_REUSE_WINDOW];  /* pages (a heap) or bytes (the large cache) */
} sf_reuse_t;

/* A heap's sampling state (profile.c): per size class, how many more
 * allocations are not sampled; the blocks on its pages' free lists are
 * charged to it when a list is handed to the fast path. */
typedef struct {
    uint64_t skip[SF_CLASS_COUNT];
    uint64_t rate; /* the profile.sample_bytes they were drawn with (0: none) */
    uint64_t rng;  /* 0: not seeded yet */
} sf_heap_prof_t;

enum sf_heap_state { SF_HEAP_FREE, SF_HEAP_LIVE, SF_HEAP_ABANDONED, SF_HEAP_COLLECTING };
/* A thread's sf_tls_heap is a real registry heap, or one of two markers whose
 * direct table holds only the empty page, so the fast path falls through:
 * UNCLAIMED (claim a slot on the slow path) or SHARED (the thread is past
 * teardown, or no heap could be made: use the locked fallback heap). */
enum sf_heap_kind { SF_HEAP_UNUSED, SF_HEAP_REAL, SF_HEAP_UNCLAIMED, SF_HEAP_SHARED };

/* The registry grows in chunks of heaps mapped on demand (heap.c): slot i
 * is heap i % SF_HEAP_CHUNK of chunk i / SF_HEAP_CHUNK.  At most
 * SF_HEAP_SLOTS_MAX heaps ever exist; threads past that use the fallback. */
#define SF_HEAP_CHUNK_SHIFT 6
#define SF_HEAP_CHUNK (1u << SF_HEAP_CHUNK_SHIFT)
#define SF_HEAP_SLOTS_MAX (1u << 20)
#define SF_HEAP_FALLBACK_SLOT UINT32_MAX /* the fallback heap's "slot" */

typedef struct sf_heap_s {
    /* owner only: the fast paths read the tables and bump allocs */
    sf_page_t *direct[SF_DIRECT_COUNT]; /* fast path: class page by (size+15)/16 */
    sf_page_t *gdirect[SF_DIRECT_COUNT]; /* guard level 2's fast path: the same, by
                                         (size+8+15)/16; all empty page otherwise */
    uint64_t allocs;                 /* owner-only plain counter (frees are derived) */
    sf_page_queue_t queues[SF_CLASS_COUNT];
    sf_page_queue_t full;
    sf_page_queue_t purge;               /* freed pages awaiting delayed decommit */
    sf_page_t *purge_class[SF_CLASS_COUNT]; /* the same pages by last class, newest first */
    sf_segment_t *free_segs[2];          /* small, medium segments with free pages */
    uint32_t pages_in_use;
    uint64_t remote_frees;    /* frees this thread sent to others */
    uint64_t remote_collected; /* blocks other threads freed, taken from page lists */
    uint64_t page_allocs;
    sf_reuse_t page_reuse;    /* its pages in use lately (decommit.policy = adaptive) */
    /* phase.c: while phases are open, the counts of this heap's thread and
     * its delta of block bytes not yet added to the shared sum */
    uint64_t phase_counts[4];
    int64_t phase_delta;
    uint32_t phase_epoch;
    uint32_t purge_count;     /* pages on its purge queue */
    sf_block_t *quarantine_head, *quarantine_tail; /* guard level 3: freed, held back */
    size_t quarantine_bytes, quarantine_count;
    sf_heap_prof_t prof;                  /* heap profiling: countdowns (profile.c) */
    sf_page_queue_t sampled[SF_CLASS_COUNT]; /* pages serving sampled blocks only */
    /* read by other threads: written once, or rarely (at thread start and exit) */
    uint8_t kind __attribute__((aligned(64)));
    uint32_t slot;
    _Atomic int state;
    _Atomic int tid;
    _Atomic uint32_t next_ownerless; /* link in the stack of ownerless heaps (slot + 1) */
    _Atomic(sf_block_t *) overflow;  /* remote frees that found the ring full */
    sf_ring_t ring;
} sf_heap_t;

SF_HIDDEN extern __thread sf_heap_t *sf_tls_heap __attribute__((tls_model("initial-exec")));
SF_HIDDEN extern sf_page_t sf_empty_page;
SF_HIDDEN extern sf_heap_t sf_heap_unclaimed, sf_heap_shared, sf_heap_fallback;
SF_HIDDEN extern pthread_mutex_t sf_fallback_lock;

/* ---- init.c ---------------------------------------------------------------- */
SF_HIDDEN extern _Atomic int sf_initialized;
SF_HIDDEN void sf_init_slow(void);
SF_INLINE void sf_ensure_init(void) {
    if (SF_UNLIKELY(!atomic_load_explicit(&sf_initialized, memory_order_acquire))) sf_init_slow();
}
SF_HIDDEN extern pthread_key_t sf_thread_key;
SF_HIDDEN extern bool sf_thread_key_ok;
SF_HIDDEN extern bool sf_tracked; /* under valgrind with valgrind.track on (track.c) */
SF_INLINE bool sf_pages_checked(void) { return sf_guard_level >= 2 || sf_tracked; }

/* ---- segment.c -------------------------------------------------------------- */
SF_HIDDEN extern pthread_mutex_t sf_seg_lock;
SF_HIDDEN extern sf_segment_t *sf_all_segments;
SF_HIDDEN sf_page_t *sf_segment_page_alloc(sf_heap_t *heap, unsigned class_idx);
SF_HIDDEN void sf_segment_page_free(sf_heap_t *heap, sf_page_t *page);
SF_HIDDEN sf_segment_t *sf_span_alloc(size_t size, size_t align, void **block_out);
SF_HIDDEN void sf_span_free(sf_segment_t *seg);
SF_HIDDEN void sf_span_release(sf_segment_t *seg, bool reusable); /* (after the quarantine) */
SF_HIDDEN bool sf_span_resize(sf_segment_t *seg, sf_page_t *page, size_t new_size);
SF_HIDDEN size_t sf_segment_collect_purges(sf_heap_t *heap, bool force);
SF_HIDDEN bool sf_reserve_segments(size_t count);

SF_HIDDEN void sf_release_segments(size_t count);

/* ---- phase.c, phase_count.c: phase measurements (sefer_phase_begin/end) ---- */
enum sf_phase_what { SF_PHASE_ALLOC, SF_PHASE_FREE, SF_PHASE_REALLOC, SF_PHASE_ALLOCATED };
#define SF_PHASE_FOLD ((int64_t)64 << 10) /* a heap's delta of block bytes goes shared past this */
#define SF_PHASES_OPEN_MAX 16             /* nested phases at once */
#define SF_PHASES_KEPT 64                 /* ended phases kept for /phases */
/* what: ALLOC, FREE or REALLOC (not ALLOCATED); bytes: the change in bytes
 * in allocated blocks it made (+ for an allocation, - for a free) */
SF_HIDDEN void sf_phase_count(enum sf_phase_what what, int64_t bytes);
SF_HIDDEN void sf_phase_committed(uint64_t committed);
/* What they count into (phase_count.c), reset by phase.c when the first
 * phase begins and read when one ends: the shared sum of block bytes (exact
 * at the first phase's entry, then kept by the folds), the epoch (bumped
 * when the first phase begins), the heaps that counted in it, the open
 * phases (entries in use: sf_phase_open_count; peaks are read up to it),
 * and the counts of threads without a heap (the others count in their
 * heap's owner-only fields). */
struct sf_open_phase {
    char name[64];
    uint64_t start_ns, start_ms;
    uint64_t bytes_entry, committed_entry;
    _Atomic int64_t bytes_peak;
    _Atomic uint64_t committed_peak;
    uint64_t allocs0, frees0, reallocs0, allocated0;
};
SF_HIDDEN extern _Atomic int64_t sf_phase_shared_bytes;
SF_HIDDEN extern _Atomic uint32_t sf_phase_epoch;
SF_HIDDEN extern _Atomic uint64_t sf_phase_counting;
SF_HIDDEN extern struct sf_open_phase sf_phase_open[SF_PHASES_OPEN_MAX];
SF_HIDDEN extern _Atomic int sf_phase_open_count;
SF_HIDDEN extern _Atomic uint64_t sf_phase_orphan_counts[4];
typedef struct {
    char name[64];
    uint64_t running_ns, start_ms, block_bytes_entry, block_bytes_peak;
} sf_phase_open_t;
typedef struct {
    struct sefer_phase done[SF_PHASES_KEPT]; /* oldest first */
    size_t ndone;
    uint64_t done_total; /* phases ended since the start */
    sf_phase_open_t open[SF_PHASES_OPEN_MAX]; /* outermost first */
    size_t nopen;
} sf_phase_snap_t;
SF_HIDDEN void sf_phase_snapshot(sf_phase_snap_t *out);
/* Bytes of the allocated block at p (its class size or span), 0 if p is no
 * block start (alloc.c). */
SF_HIDDEN size_t sf_block_bytes(const void *p);

/* ---- decommit.c: how much free memory stays committed ---------------------- */
SF_HIDDEN void sf_reuse_level(sf_reuse_t *r, uint64_t now, uint64_t in_use);
SF_HIDDEN uint64_t sf_reuse_keep(sf_reuse_t *r, uint64_t now, uint64_t in_use);

/* ---- cache.c ---------------------------------------------------------------- */
SF_HIDDEN extern pthread_mutex_t sf_cache_lock;
/* committed_out: bytes of the span that may still be resident, counted from
 * its start (0: it reads as zero) */
SF_HIDDEN void *sf_cache_take(size_t min_size, size_t max_size, size_t *size_out, size_t *committed_out,
                              size_t *guard_out);
SF_HIDDEN bool sf_cache_put(void *base, size_t size, size_t committed, size_t guard, bool freed_block);
SF_HIDDEN size_t sf_cache_purge(bool all);
SF_HIDDEN bool sf_cache_holds(const void *p);

/* ---- page.c ----------------------------------------------------------------- */
SF_HIDDEN void sf_page_init(sf_page_t *page, unsigned class_idx);
SF_HIDDEN void *sf_page_malloc_class(sf_heap_t *heap, unsigned class_idx);
SF_HIDDEN void sf_page_local_free_slow(sf_heap_t *heap, sf_page_t *page, sf_block_t *b);
/* Whether b sits on the page's owner-side free lists (owner context). */
SF_HIDDEN bool sf_page_holds_free_block(const sf_page_t *page, const void *b);
SF_HIDDEN void sf_page_unfull(sf_heap_t *heap, sf_page_t *page);
SF_HIDDEN void sf_page_on_empty(sf_heap_t *heap, sf_page_t *page);
SF_HIDDEN void sf_queue_remove(sf_page_queue_t *q, sf_page_t *page);
SF_HIDDEN void sf_queue_push_front(sf_page_queue_t *q, sf_page_t *page);
SF_HIDDEN void sf_page_update_direct(sf_heap_t *heap, unsigned class_idx);
SF_HIDDEN size_t sf_page_collect_heap(sf_heap_t *heap, bool force);
SF_HIDDEN size_t sf_page_collect_heap_ex(sf_heap_t *heap, bool force, bool purge_now);

/* ---- ring.c ----------------------------------------------------------------- */
/* Cells hold their sequence number minus their index, so a ring fresh from
 * mmap (all zero) is empty and its cells are touched only when used;
 * sf_ring_reset gives an empty ring's pages back. */
SF_HIDDEN bool sf_ring_init(sf_ring_t *ring, size_t capacity);
SF_HIDDEN bool sf_ring_push(sf_ring_t *ring, void *p);
SF_HIDDEN void *sf_ring_pop(sf_ring_t *ring);
SF_HIDDEN void sf_ring_reset(sf_ring_t *ring);
/* The sequence number of the cell at position pos (acquire). */
SF_INLINE uint64_t sf_ring_seq(const sf_ring_t *ring, uint64_t pos) {
    return atomic_load_explicit(&ring->cells[pos & ring->mask].seq, memory_order_acquire) + (pos & ring->mask);
}
SF_INLINE uint64_t sf_ring_pending(sf_ring_t *ring) {
    return atomic_load_explicit(&ring->tail, memory_order_relaxed) -
           atomic_load_explicit(&ring->head, memory_order_relaxed);
}

/* ---- heap.c: the heap registry and heap lifetimes ---------------------------- */
SF_HIDDEN sf_heap_t *sf_heap_for_thread(void);
SF_HIDDEN void sf_heap_thread_done(void *value);
SF_HIDDEN void sf_heap_owner_free(sf_heap_t *heap, sf_page_t *page, sf_block_t *b);
SF_HIDDEN void sf_heaps_after_fork_child(void);
SF_HIDDEN size_t sf_heaps_collect_abandoned(bool purge_now);
SF_HIDDEN void sf_heaps_purge_abandoned(void);
SF_HIDDEN bool sf_heap_try_collect_abandoned(sf_heap_t *heap);
SF_HIDDEN uint32_t sf_heap_slots(void);           /* slots made so far: 0 .. n-1 */
SF_HIDDEN sf_heap_t *sf_heap_at(uint32_t slot);   /* NULL if slot is not made (yet) */
SF_HIDDEN int64_t sf_heap_slot_of(const void *p); /* -1 if p is no registry heap */
SF_HIDDEN size_t sf_heap_registry_bytes(void);    /* mapped for heap slots */

/* ---- remote.c: frees by threads that do not own the block ----------------- */
#define SF_XFREE_NOTIFY ((uintptr_t)1)
SF_HIDDEN void sf_remote_free(sf_heap_t *owner, sf_page_t *page, sf_block_t *b);
SF_HIDDEN void sf_heap_remote_free(sf_heap_t *owner, sf_block_t *b); /* the ring path */
SF_HIDDEN void sf_heap_drain_remote(sf_heap_t *heap);
SF_HIDDEN uint32_t sf_page_collect_remote(sf_heap_t *heap, sf_page_t *page);
SF_HIDDEN bool sf_page_set_notify(sf_page_t *page);
SF_HIDDEN void sf_page_clear_notify(sf_page_t *page);

/* ---- alloc.c / free.c (fast paths: fastpath.h) ------------------------------ */
SF_HIDDEN void *sf_malloc_generic(size_t n, sf_heap_t *heap);
SF_HIDDEN void *sf_malloc_slow(size_t n, sf_heap_t *heap);        /* generic, minus tracking */
SF_HIDDEN void *sf_malloc_aligned_slow(size_t align, size_t n);   /* align > 16, ditto */
SF_HIDDEN void *sf_malloc_aligned(size_t align, size_t n);
SF_HIDDEN void *sf_realloc(void *p, size_t n);
SF_HIDDEN size_t sf_usable_size(const void *p);
SF_HIDDEN size_t sf_usable_size_quiet(const void *p); /* without valgrind's brackets */
SF_HIDDEN void *sf_reallocarray(void *p, size_t count, size_t size);
SF_HIDDEN int sf_posix_memalign(void **out, size_t align, size_t n);
SF_HIDDEN void *sf_aligned_alloc(size_t align, size_t n);
SF_HIDDEN void *sf_memalign(size_t align, size_t n);
SF_HIDDEN void *sf_valloc(size_t n);
SF_HIDDEN void *sf_pvalloc(size_t n);
SF_HIDDEN size_t sf_trim(void);
SF_HIDDEN void sf_print_stats(void);
SF_HIDDEN void sf_free_generic(void *p);
SF_HIDDEN void sf_free_checked(void *p); /* sf_free_generic minus level 2's fast push */
SF_HIDDEN void sf_free_tracked_tail(void *p); /* track.c's end of a free: sf_free_checked, uncounted */
SF_HIDDEN sf_page_t *sf_free_check_block(const void *p, sf_segment_t **seg_out);

/* ---- guard_report.c: a detected misuse --------------------------------------- */
enum sf_guard_kind {
    SF_GUARD_INVALID,
    SF_GUARD_INTERIOR,
    SF_GUARD_DOUBLE,
    SF_GUARD_OVERFLOW,
    SF_GUARD_USE_AFTER_FREE,
    /* level 3, counted with the kind above them in sefer_stats: */
    SF_GUARD_MISMATCH, /* operator delete of new[], or the wrong size (as invalid frees) */
    SF_GUARD_BOUNDS,   /* memcpy/memmove/memset out of a block (as overflows) */
    SF_GUARD_KINDS
};
SF_HIDDEN void sf_guard_report(enum sf_guard_kind kind, const void *p);

/* Free-list links: XOR-ed with the page's secret at guard level >= 2; the
 * secret is 0 below that, so the slow paths use these unconditionally and
 * the fast paths (which never see a guarded page) use plain links. */
SF_INLINE sf_block_t *sf_link_decode(const sf_page_t *page, const sf_block_t *b) {
    return (sf_block_t *)((uintptr_t)b->next ^ page->secret);
}
SF_INLINE void sf_link_set(const sf_page_t *page, sf_block_t *b, const sf_block_t *next) {
    b->next = (sf_block_t *)((uintptr_t)next ^ page->secret);
}

/* ---- guarded.c: guard levels 2 and 3 -------------------------------------- */
/* A small or medium block at level >= 2 is laid out
 *     [request][canary: 8 bytes][slack][size word: 4 bytes]
 * The canary (the block's address XOR its page's canary key) starts right
 * after the requested bytes, so an overflow of even one byte reaches it; the
 * size word holds the request size in its low 24 bits and, at level 3, how
 * the block was allocated (SF_FAMILY_*) in the next 8: anything else there
 * is not a size (an underflow of the next block wrote into it).  Blocks are
 * at least SF_GUARD_MIN_BLOCK bytes, so the size word of a free block never
 * shares the free mark's word and reads as a size too (0, or its last one). */
#define SF_GUARD_TAIL 12
#define SF_GUARD_MIN_BLOCK 32
#define SF_SIZE_BITS 24
#define SF_SIZE_MASK ((1u << SF_SIZE_BITS) - 1)
enum sf_family { SF_FAMILY_MALLOC, SF_FAMILY_NEW, SF_FAMILY_NEW_ARRAY };
#define SF_JUNK 0 /* level 3 fills freed blocks with it (zero on free) */

SF_INLINE uint32_t *sf_size_word(const sf_page_t *page, const void *b) {
    return (uint32_t *)((uint8_t *)b + page->block_size - sizeof(uint32_t));
}
SF_INLINE uint64_t sf_canary_value(const sf_page_t *page, const void *b) {
    return (uint64_t)((uintptr_t)b ^ page->canary_key);
}
/* Whether a size word can be one (of a block of bsize bytes). */
SF_INLINE bool sf_size_word_ok(uint32_t w, uint32_t bsize) {
    return (w & SF_SIZE_MASK) + SF_GUARD_TAIL <= bsize && (w >> SF_SIZE_BITS) <= SF_FAMILY_NEW_ARRAY;
}

/* The free fast paths' ownership word (page->fast_heap): the owner heap
 * while flags == 0 (levels 0-1: sf_free), the owner heap with bit 0 set
 * while the page is guarded and nothing else (level 2: sf_free_l2), NULL
 * otherwise (full page, span, level 3: the generic path).  Either fast path
 * compares it with one value, so each rejects the other's pages. */
#define SF_L2_OWNER_TAG ((uintptr_t)1)
SF_INLINE void sf_page_set_fast_owner(sf_page_t *page, sf_heap_t *heap) {
    uint8_t f = SF_GET(page->flags);
    uintptr_t v = f == 0                                          ? (uintptr_t)heap
                  : f == SF_PAGE_GUARDED && sf_l2_fast      ? (uintptr_t)heap | SF_L2_OWNER_TAG
                                                                  : 0;
    SF_SET(page->fast_heap, (sf_heap_t *)v);
    /* a phase that began meanwhile must not find a fast page (phase.c) */
    if (v != 0) {
        atomic_thread_fence(memory_order_seq_cst);
        if (sf_phase_on()) SF_SET(page->fast_heap, NULL);
    }
}
/* Two random secrets, made at start-up: free-list links (page->secret) and
 * canaries (page->canary_key) are keyed with them at level >= 2. */
SF_HIDDEN extern uintptr_t sf_guard_secret, sf_canary_secret;
SF_HIDDEN void sf_guard_init(void);
SF_HIDDEN void *sf_guarded_malloc(size_t n, size_t align);
SF_HIDDEN bool sf_guarded_free_ok(sf_segment_t *seg, sf_page_t *page, void *p, bool owner);
SF_HIDDEN size_t sf_guarded_usable(sf_segment_t *seg, sf_page_t *page, const void *p);
SF_HIDDEN void sf_junk_fill(sf_page_t *page, sf_block_t *b);
SF_HIDDEN bool sf_junk_intact(const sf_page_t *page, const sf_block_t *b);
SF_HIDDEN void sf_guarded_shuffle(uint16_t *order, uint32_t n);
/* memcpy, memmove, memset check their destination (guarded_mem.c): level
 * 3, not under valgrind; set at start-up. */
SF_HIDDEN extern bool sf_mem_checked;
SF_HIDDEN void sf_mem_resolve(void); /* libc_mem.c (-Doverride=true) */
SF_HIDDEN void *sf_zero_alloc(void);
SF_HIDDEN bool sf_zero_holds(const void *p);
SF_HIDDEN bool sf_zero_free(void *p);
SF_HIDDEN void *sf_guarded_new(size_t n, size_t align, enum sf_family family);
SF_HIDDEN void sf_guarded_delete(void *p, enum sf_family family, size_t size);
SF_HIDDEN void sf_quarantine_push(sf_heap_t *heap, sf_page_t *page, sf_block_t *b);
SF_HIDDEN void sf_quarantine_flush(sf_heap_t *heap);
SF_HIDDEN bool sf_quarantine_holds(const sf_heap_t *heap, const void *b);
SF_HIDDEN void *sf_alloc_class(unsigned c);

/* ---- guarded_span.c: freed large blocks wait (guard level >= 2) ----------- */
SF_HIDDEN extern pthread_mutex_t sf_span_quarantine_lock;
SF_HIDDEN bool sf_span_quarantine_put(sf_segment_t *seg); /* false: not taken, release it */
SF_HIDDEN bool sf_span_quarantine_holds(const void *p);
SF_HIDDEN void sf_span_quarantine_flush(void);
SF_HIDDEN void *sf_alloc_span(size_t n, size_t align);

/* ---- entry.c: the fast paths malloc and free run, chosen at start-up ----- */
SF_HIDDEN extern void *(*sf_entry_malloc)(size_t);
SF_HIDDEN extern void (*sf_entry_free)(void *);
SF_HIDDEN void sf_entry_choose(void);

/* ---- track.c: valgrind's memcheck sees sefer's blocks ------------------- */
SF_HIDDEN void sf_track_init(void);
SF_HIDDEN void *sf_tracked_malloc(size_t n, size_t align);
SF_HIDDEN void sf_tracked_free(void *p);
SF_HIDDEN void sf_track_quiet_begin(void); /* sefer's own work on freed memory */
SF_HIDDEN void sf_track_quiet_end(void);
SF_HIDDEN void sf_track_zeroed(void *p, size_t n);
SF_HIDDEN size_t sf_track_usable(const void *p, size_t usable);
SF_HIDDEN void sf_track_page_blocks(sf_page_t *page);
SF_HIDDEN void sf_track_segment_header(sf_segment_t *seg);

/* ---- profile.c: sampled heap profiling (docs/design.md, "Heap profiling") -- */
/* Set once profile.sample_bytes is first non-zero, never cleared: the slow
 * paths then hand lists to the fast path through the profiler, which cuts
 * them at the next sample.  While it is false no fast path changes. */
SF_HIDDEN extern bool sf_prof_armed;
SF_INLINE bool sf_prof_is_armed(void) { return SF_PEEK(sf_prof_armed); }
SF_HIDDEN void sf_prof_init(void);         /* after the knobs are read */
SF_HIDDEN void sf_prof_constructor(void);  /* warms the unwinder up (outside malloc) */
SF_HIDDEN void sf_prof_knob_changed(void); /* profile.sample_bytes set at run time */
/* sf_page_malloc_class: the class's current page has nothing on its free
 * list; true if this allocation is the class's next sample. */
SF_HIDDEN bool sf_prof_due(sf_heap_t *heap, unsigned class_idx);
/* The owner's frees of `page` (local_free, not empty; free is empty)
 * become its list, charged: the first block, or NULL if this allocation is
 * the class's next sample (the caller then takes the slow path). */
SF_HIDDEN void *sf_prof_swap(sf_heap_t *heap, sf_page_t *page);
/* sf_malloc_generic's swap: the same, or the slow path for the sample (one
 * tail call taking the registers as they are: nothing moves on the path
 * without profiling) */
SF_HIDDEN void *sf_prof_malloc_swap(size_t n, sf_heap_t *heap, sf_page_t *page);
/* page->free was just given a list (local_free now NULL): charge it. */
SF_HIDDEN void sf_prof_charge(sf_heap_t *heap, sf_page_t *page);
SF_HIDDEN void sf_prof_refund(sf_heap_t *heap, sf_page_t *page); /* page leaves its heap */
/* sf_alloc_class: p came from a sampled page of class c: record its stack. */
SF_HIDDEN void sf_prof_after_class_alloc(void *p);
SF_HIDDEN void *sf_prof_span(void *p); /* sf_alloc_span: maybe sample a span */
SF_HIDDEN void sf_prof_freed(const void *p); /* a block of a SAMPLED page is freed */
SF_HIDDEN void sf_prof_fork_prepare(void);
SF_HIDDEN void sf_prof_fork_parent(void);
/* page.c */
SF_HIDDEN sf_page_queue_t *sf_page_queue(sf_heap_t *heap, const sf_page_t *page);

/* ---- stats.c ---------------------------------------------------------------- */
SF_HIDDEN void sf_stats_collect(struct sefer_stats *out);

/* ---- event.c: the event timeline (/events, docs/introspection.md) -------- */
/* Recording is safe anywhere: inside malloc and free slow paths with sefer
 * locks held, in any thread, in a signal handler (no malloc, no lock, no
 * waiting).  a, b, c, d and code mean, per kind:
 *   SERVER_START   a port, b pid
 *   KNOB           code knob, a old value, b new value, c old source, d new source
 *   ENOMEM         a refusals so far, b bytes asked for (the first, then every 1000th)
 *   GUARD          code enum sf_guard_kind, a address, b detections of the kind so far
 *                  (the first SF_EVENT_GUARD_FIRST of a kind, then every 1000th)
 *   RING_OVERFLOW  code heap slot, a its ring's overflows so far, b ring capacity
 *                  (the first overflow, then at most one a minute while they go on)
 *   TRIM           a bytes released
 *   PROFILE_MARK   text name, a id (for the heap profiler, issue 11)
 *   PHASE_BEGIN/END text name, a b c the phase's figures (for phases, issue 12) */
enum sf_event_kind {
    SF_EVENT_NONE,
    SF_EVENT_SERVER_START,
    SF_EVENT_KNOB,
    SF_EVENT_ENOMEM,
    SF_EVENT_GUARD,
    SF_EVENT_RING_OVERFLOW,
    SF_EVENT_TRIM,
    SF_EVENT_PROFILE_MARK,
    SF_EVENT_PHASE_BEGIN,
    SF_EVENT_PHASE_END,
    SF_EVENT_KINDS
};
#define SF_EVENT_CAP 1024      /* events kept; older ones are dropped (counted) */
#define SF_EVENT_GUARD_FIRST 10 /* guard detections recorded one by one, per kind */
typedef struct {
    uint64_t seq;     /* event number, from 1 */
    uint64_t time_ms; /* sf_clock_ms() */
    uint32_t kind, code;
    uint64_t a, b, c, d;
    char text[64];
} sf_event_t;
typedef struct {
    uint64_t recorded;      /* events numbered so far */
    uint64_t dropped;       /* of those, no longer (or never) readable */
    uint64_t capacity;      /* SF_EVENT_CAP */
    uint64_t complete_upto; /* every event up to this number was returned or is gone */
} sf_events_info_t;
SF_HIDDEN void sf_event_record(sf_event_t *e); /* fills seq and time_ms */
SF_HIDDEN void sf_event_knob(int knob, uint64_t old_value, uint64_t new_value, int old_source, int new_source);
SF_HIDDEN void sf_event_enomem(uint64_t count, size_t size);
SF_HIDDEN void sf_event_guard(int kind, const void *p, uint64_t count);
SF_HIDDEN void sf_event_ring_overflow(const sf_heap_t *owner);
SF_HIDDEN void sf_event_trim(size_t released);
SF_HIDDEN void sf_event_server_start(int port, int pid);
SF_HIDDEN void sf_event_profile_mark(const char *name, uint64_t id);
SF_HIDDEN void sf_event_phase(bool begin, const char *name, uint64_t a, uint64_t b, uint64_t c);
/* Copies events after number `after` (at most max, oldest first) into out;
 * stops at one still being written (the next read returns it). */
SF_HIDDEN size_t sf_events_read(uint64_t after, sf_event_t *out, size_t max, sf_events_info_t *info);
SF_HIDDEN void sf_events_after_fork_child(void);

/* ---- small helpers -------------------------------------------------------- */
SF_INLINE size_t sf_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }
SF_INLINE bool sf_is_pow2(size_t n) { return n != 0 && (n & (n - 1)) == 0; }
#ifdef SEFER_LOCK_STATS
SF_INLINE void sf_lock(pthread_mutex_t *m) { sf_ls_lock(m); }
SF_INLINE void sf_unlock(pthread_mutex_t *m) { sf_ls_unlock(m); }
#else
SF_INLINE void sf_lock(pthread_mutex_t *m) { pthread_mutex_lock(m); }
SF_INLINE void sf_unlock(pthread_mutex_t *m) { pthread_mutex_unlock(m); }
#endif

/* ---- check.c: the internal consistency checker (sefer_check) ------------- */
/* Checks that sefer's structures agree (docs/reliability.md says what, and
 * for which heaps).  Returns the number of problems; why (if len > 0) gets
 * the first few, NUL-terminated.  Takes sf_fallback_lock, sf_cache_lock and
 * sf_seg_lock: never call it with one of them held. */
SF_HIDDEN size_t sf_check_heap_consistency(char *why, size_t len);

#endif /* SEFER_INTERNAL_H */
