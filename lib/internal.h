/* internal.h - what each file of lib/ defines for the others: prototypes,
 * variables and the inline helpers that read them, grouped under the file
 * that defines them, in the order of the layers (docs/design.md, "Layers":
 * base, core, inspection, api).
 *
 * The types are in types.h, the knob table in knobs.h, the schemas of the
 * event timeline and of phases in events.h and phase.h, the lock and
 * counter hooks in lockstat.h; the fast paths in fastpath.h.  The heap
 * profile's and the snapshots' read sides have their headers too
 * (profile.h, snapshot.h). */
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

#include "events.h"
#include "knobs.h"
#include "lockstat.h"
#include "phase.h"
#include "types.h"

/* ======== base ========================================================== */

/* ---- globals.c: flags and counters every layer reads --------------------- */
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
/* The process-wide counters (types.h), bumped on slow paths only. */
SF_HIDDEN extern struct sf_global_stats sf_gstats;
SF_INLINE void sf_stat_add(_Atomic uint64_t *c, uint64_t v) {
    SF_LS_STAT(c);
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}
SF_INLINE void sf_stat_sub(_Atomic uint64_t *c, uint64_t v) {
    SF_LS_STAT(c);
    atomic_fetch_sub_explicit(c, v, memory_order_relaxed);
}

/* ---- clock.c: the clocks ------------------------------------------------- */
SF_HIDDEN uint64_t sf_now_ms(void); /* CLOCK_MONOTONIC_COARSE: deadlines */
SF_HIDDEN uint64_t sf_now_ns(void); /* CLOCK_MONOTONIC: durations reported */
/* Milliseconds since the Unix epoch, counted on CLOCK_BOOTTIME from
 * sf_clock_init (start-up): never backwards.  The time of events, phases
 * and /history. */
SF_HIDDEN void sf_clock_init(void);
SF_HIDDEN uint64_t sf_clock_ms(void);

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

/* ---- os.c: the kernel's memory calls ------------------------------------- */
SF_HIDDEN void *sf_os_map_aligned(size_t size, size_t align);
SF_HIDDEN void sf_os_unmap(void *p, size_t size);
SF_HIDDEN void sf_os_decommit(void *p, size_t size);
SF_HIDDEN bool sf_os_decommit_try(void *p, size_t size);
SF_HIDDEN bool sf_os_resident(const void *p, size_t size, unsigned char *vec);
/* Drops [p, p + size)'s pages if the kernel agrees, with no fallback: for
 * memory nothing relies on reading as zero.  False: nothing changed. */
SF_HIDDEN bool sf_os_shed(void *p, size_t size);
SF_HIDDEN bool sf_os_protect(void *p, size_t size, bool accessible);
SF_HIDDEN bool sf_os_no_access(void *p, size_t size);
SF_HIDDEN bool sf_os_discard_protect(void *p, size_t size);
SF_HIDDEN void *sf_os_map_plain(size_t size);
SF_HIDDEN void *sf_os_reserve_none(size_t size);

/* ---- libc_mem.c: glibc's memcpy, memmove, memset (-Doverride=true) ------- */
SF_HIDDEN void sf_mem_resolve(void); /* from the library constructor */

/* ---- knob_table.c: the knob table as data, text -> value conversion ------ */
/* Pure (no state, no allocation, no system call), like toml.c and str.c:
 * the fuzz target and tools/knobs-doc link those three alone. */
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

/* ---- toml.c: the SEFER_CONFIG parser ------------------------------------- */
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

/* ---- knobs.c: the knob values, read at start-up -------------------------- */
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

/* ---- event.c: the event timeline (/events, docs/introspection.md) -------- */
SF_HIDDEN void sf_event_record(sf_event_t *e); /* fills seq and time_ms */
SF_HIDDEN void sf_event_knob(int knob, uint64_t old_value, uint64_t new_value, int old_source, int new_source);
SF_HIDDEN void sf_event_enomem(uint64_t count, size_t size);
SF_HIDDEN void sf_event_guard(int kind, const void *p, uint64_t count);
SF_HIDDEN void sf_event_ring_overflow(const sf_heap_t *owner);
SF_HIDDEN void sf_event_trim(size_t released);
SF_HIDDEN void sf_event_memory_pressure(uint64_t committed, uint64_t limit, size_t released);
SF_HIDDEN void sf_event_server_start(int port, int pid);
SF_HIDDEN void sf_event_profile_mark(const char *name, uint64_t id);
SF_HIDDEN void sf_event_phase(bool begin, const char *name, uint64_t a, uint64_t b, uint64_t c);
/* Copies events after number `after` (at most max, oldest first) into out;
 * stops at one still being written (the next read returns it). */
SF_HIDDEN size_t sf_events_read(uint64_t after, sf_event_t *out, size_t max, sf_events_info_t *info);
SF_HIDDEN void sf_events_after_fork_child(void);

/* ======== core ========================================================== */

/* ---- sizeclass.c: the size-class table ----------------------------------- */
SF_HIDDEN extern const uint32_t sf_class_size[SF_CLASS_COUNT];

/* The class of n > 128 bytes, four a power of two, as a constant expression
 * (sizeclass.c builds the medium table with it): with 2^b < n <= 2^(b+1),
 * 5 + (b - 7) * 4 + (n - 1) / 2^(b - 2). */
#define SF_LOG2_BELOW(n) (63 - __builtin_clzll((unsigned long long)(n) - 1))
#define SF_CLASS_ABOVE_128(n) (5 + (SF_LOG2_BELOW(n) - 7) * 4 + (((n) - 1) >> (SF_LOG2_BELOW(n) - 2)))
SF_INLINE unsigned sf_class_of(size_t n) {
    if (n <= 128) return n == 0 ? 1 : (unsigned)((n + 15) >> 4);
    return (unsigned)SF_CLASS_ABOVE_128(n);
}
/* The class a small heap (docs/design.md, "Small heaps") serves class c's
 * requests from: up to SF_SMALL_HEAP_MAX bytes, the smallest power of two
 * at least c's size and SF_SMALL_HEAP_MIN (every alignment c's blocks
 * have, these have too); above it, c.  (Power-of-two classes above 512 B
 * ran bursts of 2-8 KiB at 0.78x: their blocks all start on the same few
 * cache sets.  Below 64 B, the classes of 16 and 32 B each held an OS page
 * for a few blocks: 1000 threads of bench/manythreads peaked 8 % higher.
 * A small heap whose 64-byte class carves past SF_SMALL_HEAP_MIN_CARVED
 * bytes leaves small mode: page.c, page_extend.) */
#define SF_SMALL_HEAP_MAX 512u
#define SF_SMALL_HEAP_MIN 64u
#define SF_SMALL_HEAP_MIN_CARVED ((size_t)16 << 10)
SF_INLINE unsigned sf_small_heap_class(unsigned c) {
    uint32_t s = sf_class_size[c];
    if (s > SF_SMALL_HEAP_MAX) return c;
    uint32_t p = s <= SF_SMALL_HEAP_MIN ? SF_SMALL_HEAP_MIN : (uint32_t)1 << (32 - __builtin_clz(s - 1));
    return sf_class_of(p);
}
/* mdirect[]'s index of a medium request (SF_SMALL_MAX < n <= SF_MEDIUM_MAX):
 * sf_class_of(n) - SF_MEDIUM_CLASS_MIN by a table of 2 KiB steps, five
 * instructions fewer than the formula on the medium malloc fast path. */
SF_HIDDEN extern const uint8_t sf_medium_class_by_2k[SF_MEDIUM_MAX / 2048];
SF_INLINE unsigned sf_medium_class_index(size_t n) { return sf_medium_class_by_2k[(n - 1) >> 11]; }
SF_HIDDEN unsigned sf_class_for_aligned(size_t n, size_t align);
/* Page colouring of medium classes.  A medium class whose size is not a
 * power of two (10-14 KiB, 20-28 KiB, ...) is a multiple of 2 or 4 KiB, so
 * its blocks all start at the same offsets within 4 KiB, and the hot block
 * of every such class (frees go on top of the list) started on the same
 * one or two sets of the data cache.  Such a page's first block starts a
 * class-dependent number of cache lines past its natural place, within
 * the page's slack (no block is lost; a page its blocks fill exactly, as
 * some classes fill page 0 of a medium segment, is not coloured): `room`
 * bytes from that place to the page's end.  Its blocks are then aligned to 64 bytes only, which
 * sf_class_for_aligned knows.  Power-of-two classes keep their alignment
 * (aligned requests rely on it) and the small classes are coloured by
 * which block their page hands out first (page.c, page_extend). */
SF_INLINE bool sf_class_coloured(uint32_t bsize) { return bsize > SF_SMALL_MAX && (bsize & (bsize - 1)) != 0; }
SF_INLINE size_t sf_page_colour(uint32_t bsize, unsigned class_idx, size_t room) {
    if (!sf_class_coloured(bsize)) return 0;
    /* (past the slack, the colour wrapped into it: a page whose slack is
     * 2 KiB, all some classes have, still gets one of 32 colours) */
    size_t slack = room % bsize, colour = (size_t)((class_idx * 23u) & 63u) * 64u;
    return colour <= slack ? colour : (colour % (slack + 64)) & ~(size_t)63;
}
/* Whether a request of n bytes (no alignment) is served by a span.  With
 * decommit.policy = eager, requests above 128 KiB stay spans, as they were
 * before the classes went up to 256 KiB: a span's memory goes back the
 * moment it is freed, where a freed block of a class stays resident with
 * its page (the soak's RSS crept 30 % higher: docs/design.md, "Medium
 * blocks"). */
#define SF_EAGER_MEDIUM_MAX ((size_t)128 << 10)
SF_INLINE bool sf_request_is_span(size_t n) {
    return n > SF_MEDIUM_MAX || (n > SF_EAGER_MEDIUM_MAX && sf_knob(SF_KNOB_DECOMMIT_POLICY) == SF_DECOMMIT_EAGER);
}
/* Class c's entry in the tables of levels 0-1's fast paths: direct[] by
 * size for a small class, mdirect[] by class for a medium one. */
SF_INLINE sf_page_t **sf_class_direct(sf_heap_t *heap, unsigned c) {
    return c < SF_MEDIUM_CLASS_MIN ? &heap->direct[sf_class_size[c] >> 4] : &heap->mdirect[c - SF_MEDIUM_CLASS_MIN];
}

/* ---- segmap.c: the segment map ("is this pointer ours?") ----------------- */
SF_HIDDEN extern _Atomic uint8_t sf_segmap[SF_SEGMAP_CHUNKS];
enum { SF_SEGMAP_NONE, SF_SEGMAP_SMALL_HEAD, SF_SEGMAP_OTHER_HEAD, SF_SEGMAP_MEDIUM_HEAD, SF_SEGMAP_BACK0 };
/* A span's chunk i > 0 holds SF_SEGMAP_BACK0 - 1 + i (at most 255): its
 * header is that value minus SF_SEGMAP_BACK_BIAS chunks earlier. */
#define SF_SEGMAP_BACK_BIAS (SF_SEGMAP_BACK0 - 1)
SF_INLINE uint8_t sf_segmap_back_value(size_t i) {
    return (uint8_t)(i + SF_SEGMAP_BACK_BIAS > 255 ? 255 : i + SF_SEGMAP_BACK_BIAS);
}
/* True iff a small segment's header starts at 4 MiB chunk `chunk` (a
 * pointer shifted right by SF_SEG_SHIFT; NULL's chunk 0 never does).  The free
 * fast path's only question; a plain load outside ThreadSanitizer so the
 * compiler can fold it into the compare. */
/* The map's byte for chunk (below SF_SEGMAP_CHUNKS), a plain load outside
 * ThreadSanitizer, which the compiler folds into the free fast path's
 * compare. */
SF_INLINE uint8_t sf_segmap_byte(uintptr_t chunk) {
#if defined(__SANITIZE_THREAD__)
    return atomic_load_explicit(&sf_segmap[chunk], memory_order_relaxed);
#else
    return ((const uint8_t *)sf_segmap)[chunk];
#endif
}
SF_INLINE bool sf_segmap_is_small_chunk(uintptr_t chunk) {
    uint8_t v = sf_segmap_byte(chunk < SF_SEGMAP_CHUNKS ? chunk : 0);
    return chunk < SF_SEGMAP_CHUNKS && v == SF_SEGMAP_SMALL_HEAD;
}
/* Whether chunk (below SF_SEGMAP_CHUNKS) is a medium segment's head: the
 * free fast path's second question, once the small one said no.  The empty
 * asm hides where chunk came from: else the compiler keeps the byte's
 * address from the first question in a register, one instruction more on
 * the small path. */
SF_INLINE bool sf_segmap_medium_at(uintptr_t chunk) {
    __asm__("" : "+r"(chunk));
    return atomic_load_explicit(&sf_segmap[chunk], memory_order_relaxed) == SF_SEGMAP_MEDIUM_HEAD;
}
/* The same for a medium segment (free's second question, asked only when
 * the first said no).  An atomic load: the compiler does not merge it with
 * the first question's plain one, which then stays a compare with memory
 * (a shared load would cost the small path a register load). */
SF_INLINE bool sf_segmap_is_medium_chunk(uintptr_t chunk) {
    return chunk < SF_SEGMAP_CHUNKS &&
           atomic_load_explicit(&sf_segmap[chunk], memory_order_relaxed) == SF_SEGMAP_MEDIUM_HEAD;
}
/* head: SF_SEGMAP_SMALL_HEAD, SF_SEGMAP_MEDIUM_HEAD, SF_SEGMAP_OTHER_HEAD
 * (a span), or SF_SEGMAP_NONE to clear. */
SF_HIDDEN void sf_segmap_mark(void *seg, size_t chunks, uint8_t head);
SF_HIDDEN sf_segment_t *sf_segmap_header(const void *p);
/* The same, a pointer in a segment's first chunk (every class block's)
 * answered inline: the checked free's first question (level 3 asks it on
 * every free). */
SF_INLINE sf_segment_t *sf_segmap_header_near(const void *p) {
    uintptr_t chunk = (uintptr_t)p >> SF_SEG_SHIFT;
    if (SF_LIKELY(chunk < SF_SEGMAP_CHUNKS)) {
        uint8_t v = atomic_load_explicit(&sf_segmap[chunk], memory_order_acquire);
        if (SF_LIKELY(v != SF_SEGMAP_NONE && v < SF_SEGMAP_BACK0)) return (sf_segment_t *)(chunk << SF_SEG_SHIFT);
    }
    return sf_segmap_header(p);
}

/* ---- segment.c: segments and spans --------------------------------------- */
/* Where page i of a small or medium segment lies: its start, from the
 * segment (the metadata's end for a page it overlaps), and its bytes (0:
 * inside the metadata; less the guard page at the end for the last, with
 * guard pages).  What segment.c writes into a descriptor when the page is
 * first taken, and what check.c expects there. */
SF_INLINE size_t sf_segment_page_place(const sf_segment_t *seg, unsigned i, size_t *start_out) {
    size_t start = (size_t)(i + seg->page_bias) << seg->page_shift, end = start + ((size_t)1 << seg->page_shift);
    if (start < SF_SEG_META_SIZE) start = SF_SEG_META_SIZE;
    *start_out = start;
    size_t bytes = end > start ? end - start : 0;
    if (sf_guard_level >= 2 && i == (unsigned)seg->page_count - 1u && bytes != 0) bytes -= SF_OS_PAGE;
    return bytes;
}
SF_HIDDEN extern pthread_mutex_t sf_seg_lock;
SF_HIDDEN extern sf_segment_t *sf_all_segments;
SF_HIDDEN sf_page_t *sf_segment_page_alloc(sf_heap_t *heap, unsigned class_idx);
SF_HIDDEN void sf_segment_page_free(sf_heap_t *heap, sf_page_t *page);
SF_HIDDEN sf_segment_t *sf_span_alloc(size_t size, size_t align, void **block_out);
SF_HIDDEN void sf_span_free(sf_segment_t *seg);
SF_HIDDEN void sf_span_release(sf_segment_t *seg, bool reusable); /* (after the quarantine) */
SF_HIDDEN bool sf_span_resize(sf_segment_t *seg, sf_page_t *page, size_t new_size);
SF_HIDDEN size_t sf_segment_collect_purges(sf_heap_t *heap, bool force);
SF_HIDDEN size_t sf_segment_purge_oldest(sf_heap_t *heap, size_t bytes);
SF_HIDDEN size_t sf_segment_shed(sf_heap_t *heap, uint64_t bytes, uint64_t due_before);
SF_HIDDEN void sf_segment_lock(sf_heap_t *heap);   /* the heap's segment lock (segment.c) */
SF_HIDDEN void sf_segment_unlock(sf_heap_t *heap);
SF_HIDDEN bool sf_segment_lock_bounded(sf_heap_t *heap);
SF_HIDDEN bool sf_reserve_segments(size_t count);
SF_HIDDEN void sf_release_segments(size_t count);

/* ---- memlimit.c: memory.limit ---------------------------------------------- */
SF_HIDDEN extern _Atomic uint64_t sf_memlimit_next; /* committed above it: sf_memlimit_pressure */
SF_HIDDEN extern _Atomic uint64_t sf_memlimit_hard; /* committed past it is refused (UINT64_MAX: never) */
SF_HIDDEN extern _Atomic uint32_t sf_memlimit_epoch; /* heaps purge their pages when it moves */
SF_HIDDEN void sf_memlimit_refresh(void);
SF_HIDDEN uint64_t sf_memlimit_bytes(void);
SF_HIDDEN void sf_memlimit_pressure(uint64_t committed);
SF_HIDDEN bool sf_memlimit_admit_slow(size_t bytes);
SF_HIDDEN void sf_memlimit_after_fork_child(void);
/* Whether `bytes` more may be committed (memory.limit_action = fail). */
SF_INLINE bool sf_memlimit_admit(size_t bytes) {
    uint64_t hard = atomic_load_explicit(&sf_memlimit_hard, memory_order_relaxed);
    uint64_t c = atomic_load_explicit(&sf_gstats.committed, memory_order_relaxed);
    return SF_LIKELY(c <= hard && bytes <= hard - c) || sf_memlimit_admit_slow(bytes);
}

/* ---- cache.c: the large cache -------------------------------------------- */
SF_HIDDEN extern pthread_mutex_t sf_cache_lock;
/* What of a span is no-access, kept with it in the large cache so that a
 * span reused for a block of the same layout needs no mprotect (segment.c,
 * "Guard pages" and "The unused part of a segment"). */
typedef struct {
    size_t open;  /* bytes from its start accessible but for the hole; the
                     rest no-access, and never resident (levels 0-1) */
    size_t guard; /* guard level >= 2: offset of its end guard page (0: none) */
    bool hole;    /* levels 0-1: its second OS page no-access (below a large block) */
} sf_span_access_t;

/* committed_out: bytes of the span that may still be resident, counted from
 * its start (0: it reads as zero); access_out: what of it is no-access (the
 * taker opens what it uses); pages_out: whether that memory held a
 * released segment's pages (not a large block).  resident_min: 0, any span;
 * else only a span whose first resident_min bytes may all be resident, or
 * NULL (nothing counted: the caller asks again) */
SF_HIDDEN void *sf_cache_take(size_t min_size, size_t max_size, size_t resident_min, size_t *size_out,
                              size_t *committed_out, sf_span_access_t *access_out, bool *pages_out);
SF_HIDDEN bool sf_cache_put(void *base, size_t size, size_t resident, size_t counted, sf_span_access_t access,
                            bool freed_block);
SF_HIDDEN size_t sf_cache_purge(bool all);
SF_HIDDEN size_t sf_cache_shed(size_t bytes, bool pages_only);
SF_HIDDEN bool sf_cache_holds(const void *p);

/* ---- decommit.c: how much free memory stays committed -------------------- */
SF_HIDDEN void sf_reuse_level(sf_reuse_t *r, uint64_t now, uint64_t in_use);
SF_HIDDEN uint64_t sf_reuse_keep(sf_reuse_t *r, uint64_t now, uint64_t in_use);

/* ---- page.c: pages of a size class, the allocation slow path ------------- */
SF_HIDDEN void sf_page_init(sf_page_t *page, unsigned class_idx);
SF_HIDDEN void *sf_page_malloc_class(sf_heap_t *heap, unsigned class_idx);
SF_HIDDEN void sf_page_local_free_slow(sf_heap_t *heap, sf_page_t *page, sf_block_t *b);
/* The local_free swap of a page with fewer than SF_CARVE_MIN blocks carved:
 * `list` (what local_free held) becomes the free list, the page carves
 * ahead if its heap refills often, and the first block is handed out. */
SF_HIDDEN void *sf_page_swap_short(sf_heap_t *heap, sf_page_t *page, sf_block_t *list);
/* Whether b sits on the page's owner-side free lists (owner context). */
SF_HIDDEN bool sf_page_holds_free_block(const sf_page_t *page, const void *b);
/* Class lists (page.c, "Class lists").  Small class c's list in heap, as
 * the page descriptor direct[] names (the empty asm: to the compiler a
 * pointer to any descriptor, not into a 32-byte array, which the reads
 * through sf_page_or_list_t never leave: types.h's assertion). */
SF_INLINE sf_page_or_list_t *sf_cl_of(const sf_heap_t *heap, unsigned c) {
    void *head = (void *)(uintptr_t)heap->cl_heads[c]; /* (const as strchr drops it) */
    __asm__("" : "+r"(head));
    return (sf_page_or_list_t *)head;
}
/* Whether a direct[] entry of heap names one of its class lists. */
SF_INLINE bool sf_is_cl(const sf_heap_t *heap, const sf_page_or_list_t *page) {
    return (uintptr_t)page - (uintptr_t)heap->cl_heads < sizeof heap->cl_heads;
}
/* Whether threads.class_list_bytes leaves class c's list no room: 0, or
 * below the class's size (sf_cl_cap's 0, without its division). */
SF_INLINE bool sf_cl_off(unsigned c) {
    return sf_knob(SF_KNOB_THREADS_CLASS_LIST_BYTES) < sf_class_size[c];
}
/* The most blocks class c's list holds (its capacity once set up):
 * threads.class_list_bytes' worth, at most SF_CL_BLOCKS. */
SF_INLINE uint32_t sf_cl_cap(unsigned c) {
    uint64_t bytes = sf_knob(SF_KNOB_THREADS_CLASS_LIST_BYTES), size = sf_class_size[c];
    /* (no division in the default's case, nor with the lists off) */
    if (bytes >= SF_CL_BLOCKS * size) return SF_CL_BLOCKS;
    return sf_cl_off(c) ? 0 : (uint32_t)(bytes / size);
}
/* The most of its blocks a page may have on class c's list and still take
 * them back: a quarter of the list's capacity (page.c, "Pages only a list
 * keeps"). */
SF_INLINE uint32_t sf_cl_few(unsigned c) {
    uint32_t quarter = sf_cl_cap(c) / 4;
    return quarter != 0 ? quarter : 1;
}
/* The blocks on a list now (another thread's read: a moment's figure). */
SF_INLINE uint32_t sf_cl_blocks(const sf_page_or_list_t *cl) {
    if (!SF_GET(cl->in_use)) return 0; /* (never set up: page.c's cl_full_rare) */
    uint32_t cap = SF_GET(cl->committed), room = SF_GET(cl->used);
    /* (room is -1 for a moment in sf_cl_full: full; above the capacity
     * for a moment while an emptied list's capacity comes back, page.c's
     * cl_restore, which writes the room first: empty) */
    return room == UINT32_MAX ? cap : room <= cap ? cap - room : 0;
}
SF_HIDDEN void sf_cl_full(sf_heap_t *heap, sf_page_t *page, void *p);
SF_HIDDEN sf_page_t *sf_cl_dry(sf_heap_t *heap, sf_page_or_list_t *cl);
SF_HIDDEN bool sf_cl_take_over(sf_heap_t *heap, const sf_page_t *page);
SF_HIDDEN void sf_cl_flush_all(sf_heap_t *heap);
SF_HIDDEN void sf_cl_count(const sf_heap_t *heap, uint64_t *blocks, uint64_t *bytes);
SF_HIDDEN void sf_page_unfull(sf_heap_t *heap, sf_page_t *page);
/* The owner frees one of its blocks into a full page of its own (free.c):
 * counted for a small class of 16 blocks a page or more, which then takes
 * its pages picky (page.c, "Picky page switches"); not a page of sampled
 * blocks, which is off its class queue. */
SF_INLINE void sf_page_note_unfull(sf_heap_t *heap, const sf_page_t *page) {
    if ((page->flags & (SF_PAGE_FULL | SF_PAGE_SAMPLED)) != SF_PAGE_FULL || page->class_idx > SF_SMALL_CLASS_MAX ||
        page->reserved < 16)
        return;
    uint8_t *n = &heap->unfulls[page->class_idx];
    if (*n != UINT8_MAX) (*n)++;
}
SF_HIDDEN void sf_page_on_empty(sf_heap_t *heap, sf_page_t *page);
SF_HIDDEN void sf_queue_remove(sf_page_queue_t *q, sf_page_t *page);
SF_HIDDEN void sf_queue_push_front(sf_page_queue_t *q, sf_page_t *page);
SF_HIDDEN void sf_page_update_direct(sf_heap_t *heap, unsigned class_idx);
SF_HIDDEN void sf_page_set_small(sf_heap_t *heap, bool small);
SF_HIDDEN size_t sf_page_collect_heap(sf_heap_t *heap, bool force);
SF_HIDDEN size_t sf_page_collect_heap_ex(sf_heap_t *heap, bool force, bool purge_now);
SF_HIDDEN sf_page_queue_t *sf_page_queue(sf_heap_t *heap, const sf_page_t *page);
/* free == NULL: every fast-path pop falls through to the slow path */
SF_HIDDEN extern sf_page_t sf_empty_page;
/* Free-list links: XOR-ed with the page's secret at guard level >= 2; the
 * secret is 0 below that, so the slow paths use these unconditionally and
 * the fast paths (which never see a guarded page) use plain links. */
SF_INLINE sf_block_t *sf_link_decode(const sf_page_t *page, const sf_block_t *b) {
    return (sf_block_t *)((uintptr_t)b->next ^ page->secret);
}
SF_INLINE void sf_link_set(const sf_page_t *page, sf_block_t *b, const sf_block_t *next) {
    b->next = (sf_block_t *)((uintptr_t)next ^ page->secret);
}

/* ---- medium_shed.c: freed medium blocks give their pages back ------------ */
/* Before `carving` (a medium page of `heap`) carves `bytes` of blocks,
 * as many bytes of the heap's other free medium blocks give their interior
 * pages back. */
SF_HIDDEN void sf_medium_shed(sf_heap_t *heap, const sf_page_t *carving, size_t bytes);
/* sefer_trim: every free medium block of `heap` gives its interior pages
 * back; the bytes given back. */
SF_HIDDEN size_t sf_medium_shed_all(sf_heap_t *heap);

/* ---- heap.c: the heap registry and heap lifetimes ------------------------ */
SF_HIDDEN extern __thread sf_heap_t *sf_tls_heap __attribute__((tls_model("initial-exec")));
SF_HIDDEN extern sf_heap_t sf_heap_unclaimed, sf_heap_shared, sf_heap_fallback;
SF_HIDDEN extern __thread bool sf_tls_may_adopt __attribute__((tls_model("initial-exec")));
SF_HIDDEN extern pthread_mutex_t sf_fallback_lock;

SF_HIDDEN sf_heap_t *sf_heap_for_thread(void);
SF_HIDDEN bool sf_heap_adopt_for_free(sf_heap_t *owner);
/* The calling thread, with no heap, will not adopt one for a free: it
 * clears sf_tls_may_adopt, so that free asks sf_heap_adopt_for_free at a
 * thread's first free only. */
SF_HIDDEN void sf_heap_adopt_declined(void);
SF_HIDDEN void sf_heap_thread_done(void *value);
SF_HIDDEN void sf_heap_owner_free(sf_heap_t *heap, sf_page_t *page, sf_block_t *b);
SF_HIDDEN void sf_heaps_after_fork_child(void);
SF_HIDDEN size_t sf_heaps_collect_abandoned(bool purge_now);
SF_HIDDEN void sf_heaps_purge_abandoned(void);
SF_HIDDEN void sf_heaps_release_waiting(void);
SF_HIDDEN void sf_heaps_shed_waiting(void);
/* Whether every heap's waiting pages together pass threads.cache_max. */
SF_INLINE bool sf_heaps_over_cache_max(void) {
    return atomic_load_explicit(&sf_gstats.heaps_waiting, memory_order_relaxed) > sf_knob(SF_KNOB_THREADS_CACHE_MAX);
}
SF_HIDDEN void sf_heaps_shed_refresh(void);
SF_HIDDEN void sf_decommit_tick(void); /* the introspection server's thread, once a second or more */
SF_HIDDEN void sf_heaps_fork_prepare(void);
SF_HIDDEN void sf_heaps_fork_parent(void);
SF_HIDDEN void sf_heap_tables_empty(sf_heap_t *heap);
SF_HIDDEN bool sf_heap_try_collect_abandoned(sf_heap_t *heap);
SF_HIDDEN uint32_t sf_heap_slots(void);           /* slots made so far: 0 .. n-1 */
SF_HIDDEN sf_heap_t *sf_heap_at(uint32_t slot);   /* NULL if slot is not made (yet) */
SF_HIDDEN int64_t sf_heap_slot_of(const void *p); /* -1 if p is no registry heap */
SF_HIDDEN size_t sf_heap_registry_bytes(void);    /* mapped for heap slots */

/* ---- ring.c: the remote-free ring ---------------------------------------- */
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

/* ---- remote.c: frees by threads that do not own the block ---------------- */
#define SF_XFREE_NOTIFY ((uintptr_t)1)
/* The page's remote list: its first block, and how many blocks it holds,
 * pushed with the same CAS (a page has at most 4096 blocks out; a count
 * that wrapped would only make the statistics below count a few blocks as
 * out that are not). */
#define SF_XFREE_COUNT_SHIFT 48
#define SF_XFREE_ONE ((uintptr_t)1 << SF_XFREE_COUNT_SHIFT)
SF_INLINE sf_block_t *sf_xfree_list(uintptr_t word) {
    return (sf_block_t *)(word & (SF_XFREE_ONE - 1) & ~SF_XFREE_NOTIFY);
}
/* Blocks of a page that are really out (statistics, snapshots): its count
 * less the ones other threads freed that its owner has not taken back yet.
 * A steady owner may take them back only when its lists run dry (remote.c):
 * on a workload whose blocks are freed by other threads they were up to
 * two thirds of bytes_in_blocks (docs/design.md, "Heap profiling").
 * *pending (if not NULL): those waiting, so that the two add up to the
 * count as it was read once. */
SF_INLINE uint32_t sf_page_blocks_out(const sf_page_t *page, uint32_t *pending) {
    uint32_t used = sf_page_used(page);
    uint32_t waiting = (uint32_t)(atomic_load_explicit(&page->xfree, memory_order_relaxed) >> SF_XFREE_COUNT_SHIFT);
    if (waiting > used) waiting = used;
    if (pending != NULL) *pending = waiting;
    return used - waiting;
}
SF_HIDDEN void sf_remote_free(sf_heap_t *owner, sf_page_t *page, sf_block_t *b);
SF_HIDDEN void sf_heap_remote_free(sf_heap_t *owner, sf_block_t *b); /* the ring path */
SF_HIDDEN void sf_heap_drain_remote(sf_heap_t *heap);
SF_HIDDEN bool sf_outbox_put_slow(sf_heap_t *me, sf_heap_t *owner, sf_block_t *b, uintptr_t cookie);
SF_HIDDEN void sf_outbox_send(sf_heap_t *me, bool may_collect);
/* Puts b, a small block of `owner`'s freed by this thread (heap me), in the
 * batch it is filling for that heap (remote.c, "Batches"), with its free
 * mark (cookie: its page's) written: the owner's free of it, while it
 * waits, finds the mark and reports a double free.  False: no batch takes
 * it (me is not a thread's own heap, the owner is not live, every batch is
 * in flight, or b carries its mark already: a suspect), the caller pushes
 * it on its page's list, which sends a suspect to the owner's ring. */
SF_INLINE bool sf_outbox_put(sf_heap_t *me, sf_heap_t *owner, sf_block_t *b, uintptr_t cookie) {
    sf_batch_t *bt = me->outbox;
    if (SF_LIKELY(bt != NULL && me->outbox_to == owner && bt->n < SF_BATCH_BLOCKS && b->cookie != cookie)) {
        b->cookie = cookie;
        bt->blocks[bt->n] = b;
        bt->n++;
        return true;
    }
    return sf_outbox_put_slow(me, owner, b, cookie);
}
/* A ring or overflow entry whose freeing thread found the block's free mark
 * already written (remote.c, drain_block): the low bit of the pointer. */
#define SF_REMOTE_SUSPECT ((uintptr_t)1)
/* The block of a ring cell or overflow link, its suspect tag taken off. */
SF_INLINE sf_block_t *sf_remote_untag(const void *entry) {
    return (sf_block_t *)((uintptr_t)entry & ~SF_REMOTE_SUSPECT);
}
SF_HIDDEN uint32_t sf_page_collect_remote(sf_heap_t *heap, sf_page_t *page);
SF_HIDDEN bool sf_page_set_notify(sf_page_t *page);
SF_HIDDEN void sf_page_clear_notify(sf_page_t *page);

/* ---- alloc.c: the generic allocation paths (fast paths: fastpath.h) ------ */
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
SF_HIDDEN void *sf_alloc_class(unsigned c);              /* a block of class c, any guard level */
SF_HIDDEN void *sf_alloc_refused(size_t size); /* NULL, errno ENOMEM, counted (enomem) and an event */
SF_HIDDEN void *sf_alloc_class_refused(unsigned c);      /* its NULL: counted (enomem), an event, errno */
SF_HIDDEN void *sf_alloc_span(size_t n, size_t align);   /* a large or huge block */
/* Bytes of the allocated block at p (its class size or span), 0 if p is no
 * block start. */
SF_HIDDEN size_t sf_block_bytes(const void *p);

/* ---- free.c: the generic free path --------------------------------------- */
SF_HIDDEN void sf_free_generic(void *p);
/* A medium block's free from the fast path (fastpath.h, sf_free_as): pushed
 * on top, or held (realloc's old block). */
SF_HIDDEN void sf_free_medium_top(void *p, sf_heap_t *heap);
SF_HIDDEN void sf_free_medium_held(void *p, sf_heap_t *heap);
SF_HIDDEN void sf_free_checked(void *p); /* sf_free_generic minus level 2's fast push */
SF_HIDDEN void sf_free_tracked_tail(void *p); /* track.c's end of a free: sf_free_checked, uncounted */
SF_HIDDEN sf_page_t *sf_free_check_block(const void *p, sf_segment_t **seg_out);

/* ---- entry.c: the fast paths malloc and free run, chosen at start-up ----- */
/* Every entry's malloc (fastpath.h, sf_malloc) and the exported free run
 * levels 0-1's fast paths, bounded by these instead of constants: a request below small_end takes direct[], a
 * request n above the small sizes with n - (SF_DIRECT_MAX + 1) below
 * medium_span mdirect[] (a span, not an end: a thread that saw small_end
 * 0 and medium_span not yet 0 while sf_entry_choose ran must not send a
 * small size, 0 among them, to mdirect[]), a pointer in a chunk below
 * chunk_end the segment map.  A mode that changes malloc (level 2, the
 * sampled guard, the armed profile) sets malloc's two to 0, one that
 * changes free (levels 2 and 3) chunk_end (sf_entry_choose).  The choice costs small
 * sizes no instruction (the comparison was there with a constant); medium
 * sizes pay four: the span's subtraction and the comparison of malloc's mode
 * (two jumps) before it. */
typedef struct sf_entry_bounds {
    size_t small_end, medium_span;
    uintptr_t chunk_end;
    /* past the bounds, the mode's paths inlined there (fastpath.h): level
     * 2's malloc, the counted malloc of the armed profile and the sampled
     * guard (levels 0-1; the guard not at level 3), level 2's free; else
     * the slow paths (entry.c) */
    uint8_t malloc_mode; /* SF_ENTRY_PLAIN, _COUNTED or _L2 (one at a time) */
    bool free_l2;
} sf_entry_bounds_t;
/* malloc's modes, ordered so that one comparison with SF_ENTRY_COUNTED
 * sorts all three: below it the plain path (the medium sizes), equal the
 * counted one, above level 2's (fastpath.h, sf_malloc) */
enum { SF_ENTRY_PLAIN = 0, SF_ENTRY_COUNTED = 1, SF_ENTRY_L2 = 2 };
SF_HIDDEN extern sf_entry_bounds_t sf_entry_bounds;
/* malloc's mode, through SF_PEEK as the bounds are (atomic under TSan:
 * sf_entry_choose stores it while threads run; a plain compare with memory
 * otherwise, where an atomic load cost a register move, one instruction
 * more). */
SF_INLINE uint8_t sf_entry_malloc_mode(void) { return SF_PEEK(sf_entry_bounds.malloc_mode); }
SF_HIDDEN void *sf_malloc_entry_slow(size_t n, sf_heap_t *heap);
/* The sampled guard's count of the thread's own requests, where its
 * allocations meet no heap countdown that knows the request (level 3;
 * threads without a heap of their own; phases): a block in a slot, or
 * NULL (not due, or no slot). */
SF_HIDDEN void *sf_gsample_thread_tick(size_t n);
SF_HIDDEN void sf_free_entry_slow(void *p);
SF_HIDDEN void sf_entry_choose(void);

/* ---- guard_report.c: a detected misuse ----------------------------------- */
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

/* Guard level >= 2's refill from local_free (page.c's page_refill and
 * level 2's own swap, alloc.c): the list the owner freed becomes the free
 * list less its head, the block freed last, which stays behind on
 * local_free, so that a freed block is not the next one malloc hands out
 * (a double free after the size was allocated again then still finds it
 * free).  With that one block alone the page carves instead while it can
 * (false: the caller carves, or looks elsewhere): classes above 2 KiB
 * carve one block at a time, and their block freed last came straight
 * back at the next malloc (tests/reliability/misuse.c: reuse-immediate,
 * double-free-reused, 4 KiB).  Such a class (blocks above SF_OS_PAGE / 2)
 * also carves while its owner holds fewer than SF_GUARDED_SWAP_MIN of its
 * blocks freed (capacity less live: the blocks on local_free; those
 * other threads freed stay counted live until collected): with one block
 * live at a time it settled on two blocks circulating and swapped, the
 * slow way round, on every malloc (8-64 KiB one at a time, 213
 * instructions a pair; 157 with the minimum, bench/fastpath and
 * callgrind).  A small class then circulates four blocks and swaps every
 * third malloc; a medium one keeps a block or more on its free list, so
 * its frees go behind the head (free.c, l2_free_behind_head) and it stops
 * swapping.  (For classes of 2 KiB and less the minimum cost more lines
 * than the swaps: 16-2048 B one at a time ran 0.95x, docs/design.md.)
 * Carved to its end, the page hands the block out (else it stalls).
 * (Carving ahead to SF_CARVE_MIN here, as level 1 does, made level 2 swap
 * less often still but run random sizes 10-15 % slower in bursts: more
 * blocks circulating through local_free, more lines touched.)  The link
 * followed must name a carved block start of the page, as page_pop
 * requires (a write after free that hit it is reported, and the rest of
 * the list dropped). */
#define SF_GUARDED_SWAP_MIN 4u
SF_INLINE bool sf_page_guarded_swap(sf_page_t *page) {
    sf_block_t *list = page->local_free;
    if (list == NULL) return false;
    bool can_carve = page->capacity < page->reserved;
    if (can_carve && page->block_size > SF_OS_PAGE / 2 && page->capacity - sf_page_used(page) < SF_GUARDED_SWAP_MIN)
        return false;
    sf_block_t *rest = sf_link_decode(page, list);
    if (rest == NULL && can_carve) return false;
    page->local_free = NULL;
    page->free = list;
    if (rest == NULL) return true;
    sf_link_set(page, list, NULL);
    if (SF_UNLIKELY(!sf_page_is_block_start(page, rest))) {
        sf_guard_report(SF_GUARD_USE_AFTER_FREE, list);
        return true;
    }
    page->local_free = list;
    page->free = rest;
    return true;
}
/* Run once before a detection aborts the process (introspect/
 * profile_views.c: the heap profile to profile.output); NULL: none. */
SF_HIDDEN extern void (*sf_guard_abort_hook)(void);

/* ---- guarded.c: guard levels 2 and 3 ------------------------------------- */
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

SF_HIDDEN bool sf_guarded_tail_intact(const sf_segment_t *seg, const sf_page_t *page, const void *p);
SF_INLINE uint32_t *sf_size_word(const sf_page_t *page, const void *b) {
    return (uint32_t *)((uint8_t *)b + page->block_size - sizeof(uint32_t));
}
/* A canary's first byte (the one a 1-byte overflow writes) is always odd:
 * blocks are 16-byte aligned and every canary key has bit 0 set (page.c,
 * guarded.c).  So the NUL of an off-by-one string copy, or any even byte,
 * is found every time, not 255 times in 256. */
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
/* Whether a free fast path takes page's blocks, by its flags: else its
 * word is NULL whoever owns it (a level 3 page, full, sampled, a span). */
SF_INLINE bool sf_page_flags_fast(const sf_page_t *page) {
    uint8_t f = SF_GET(page->flags);
    return f == 0 || (f == SF_PAGE_GUARDED && sf_l2_fast);
}
/* The free fast paths' two words (types.h, fast_divmagic and
 * fast_carved), by the page's owner: the constant while a fast free path
 * of its segment's heap takes the page (levels 0-1's plain page, or level
 * 2's tagged one, whose free reads the constant here rather than look the
 * class's up), the bound only on a plain page (level 0-1's test fails
 * every offset while it is 0).  A phase clears them from another thread
 * (phase.c), every bound before any constant, and an owner's later bound
 * stays only while no phase is on (page.c, carved_bound_follows; below,
 * the fence after the owner word). */
/* Whether a page level 2's fast free takes (tagged) keeps the class's
 * constant.  That free tests a small block's start with the constant
 * alone, no bound, and then reads the block: on a small page that ends
 * early at its segment's end guard page, offsets in the guard page pass.
 * Such a page keeps none, and its frees take the checked path, which
 * bounds the offset first (one small page in 63; test class-lists-l2,
 * guard_page_free_refused). */
SF_INLINE bool sf_page_tagged_keeps_constant(const sf_page_t *page) {
    return page->class_idx > SF_SMALL_CLASS_MAX || page->page_bytes == ((size_t)1 << SF_SMALL_PAGE_SHIFT);
}
SF_INLINE void sf_page_set_fast_gate(sf_page_t *page, bool constant, bool bound) {
    SF_SET(page->fast_divmagic, constant ? sf_class_divmagic[page->class_idx] : 0);
    SF_SET(page->fast_carved, bound ? sf_page_fast_bound(page) : 0);
}
SF_INLINE void sf_page_set_fast_owner(sf_page_t *page, sf_heap_t *heap) {
    uintptr_t v = !sf_page_flags_fast(page) ? 0
                  : SF_GET(page->flags) == 0 ? (uintptr_t)heap
                                             : (uintptr_t)heap | SF_L2_OWNER_TAG;
    SF_SET(page->fast_heap, (sf_heap_t *)v);
    /* the level 0-1 free fast path's word (types.h, fast_divmagic): it asks
     * the segment header whose the page is, not fast_heap, whose line the
     * owner writes (a thread freeing another's block then read it) */
    bool own = v != 0 && SF_PEEK(sf_segment_of(page)->heap) == heap;
    bool plain = own && v == (uintptr_t)heap;
    sf_page_set_fast_gate(page, own && (plain || sf_page_tagged_keeps_constant(page)), plain);
    /* a small page: the list the fast path's free pushes the owner's
     * blocks on (the fallback heap's stay empty: no thread's own heap is
     * the fallback, so none of its pages meets a fast free) */
    if (plain && page->class_idx <= SF_SMALL_CLASS_MAX && sf_guard_level < 2) {
        page->cl = sf_cl_of(heap, page->class_idx);
        /* (not counted yet: the first free past the full list that leaves
         * no more out than a page may give back counts them, page.c,
         * "Pages only a list keeps") */
        page->cl_seen = (uint16_t)sf_cl_few(page->class_idx);
    }
    /* a phase that began meanwhile must not find a fast page (phase.c) */
    if (v != 0) {
        atomic_thread_fence(memory_order_seq_cst);
        if (sf_phase_on()) {
            sf_page_set_fast_gate(page, false, false);
            SF_SET(page->fast_heap, NULL);
        }
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
/* Level 3: what a write after free or an underflow left on a free block
 * before its memory is used again (page.c's page_pop, guarded.c's empty
 * page check): its free mark and zero fill (a write after free), else its
 * size word (an underflow of the block after it reaches it first).
 * SF_GUARD_KINDS: intact.  (Inline: out of line, 7 instructions more a
 * level-3 malloc.) */
SF_INLINE enum sf_guard_kind sf_guarded_freed_fault(const sf_page_t *page, const sf_block_t *b) {
    if (b->cookie != sf_page_cookie(page) || !sf_junk_intact(page, b)) return SF_GUARD_USE_AFTER_FREE;
    if (!sf_size_word_ok(*sf_size_word(page, b), page->block_size)) return SF_GUARD_OVERFLOW;
    return SF_GUARD_KINDS;
}
SF_HIDDEN bool sf_guarded_check_empty_page(sf_page_t *page);
SF_HIDDEN void sf_guarded_shuffle(uint16_t *order, uint32_t n);
/* memcpy, memmove, memset check their destination (guarded_mem.c): level
 * 3, not under valgrind; set at start-up. */
SF_HIDDEN extern bool sf_mem_checked;
SF_HIDDEN void *sf_zero_alloc(void);
SF_HIDDEN bool sf_zero_holds(const void *p);
SF_HIDDEN bool sf_zero_free(void *p);
SF_HIDDEN void *sf_guarded_new(size_t n, size_t align, enum sf_family family);
SF_HIDDEN void sf_guarded_delete(void *p, enum sf_family family, size_t size);
/* Marks a block new or new[] returned (levels 2-3); level 2's check of the
 * block delete was given (false: reported, the free refused). */
SF_HIDDEN void sf_new_mark(void *p, enum sf_family family);
SF_HIDDEN bool sf_l2_delete_ok(void *p, enum sf_family family, size_t size);
SF_HIDDEN void sf_quarantine_push(sf_heap_t *heap, sf_page_t *page, sf_block_t *b);
/* The one-block quarantine (level 2's frees, levels 0-1's realloc): b in,
 * the block held before out. */
SF_HIDDEN void sf_quarantine_swap_one(sf_heap_t *heap, sf_page_t *page, sf_block_t *b);
SF_HIDDEN void sf_quarantine_flush(sf_heap_t *heap);
SF_HIDDEN bool sf_quarantine_holds(const sf_heap_t *heap, const void *b);
/* The quarantine's i-th block from the oldest, NULL past its end. */
SF_HIDDEN const sf_block_t *sf_quarantine_at(const sf_heap_t *heap, size_t i);

/* ---- guard_sample.c: the sampled guard (guard.sample_bytes) -------------- */
SF_HIDDEN extern bool sf_gsample_on; /* set at start-up */
SF_HIDDEN void sf_gsample_init(void);
/* A sampled block of n bytes in a slot, or NULL (too big, no slot free,
 * guard.sample_max_rate, or the thread inside a sample already). */
SF_HIDDEN void *sf_gsample_take(size_t n);
SF_HIDDEN bool sf_gsample_quiet(bool on); /* sampling off for the thread (on), or back (the old state) */
/* Bytes to the next sampled allocation: uniform in [1, 2 guard.sample_bytes]. */
SF_HIDDEN int64_t sf_gsample_draw(void);
/* The thread's own count of its requests' bytes (entry.c,
 * sf_gsample_thread_tick), at *left, ran out: a block in a slot, or NULL. */
SF_HIDDEN void *sf_gsample_thread_due(size_t n, int64_t *left);
SF_HIDDEN bool sf_gsample_holds(const void *p);
SF_HIDDEN bool sf_gsample_free(void *p); /* false: not a sampled block */
SF_HIDDEN size_t sf_gsample_usable(const void *p);
SF_HIDDEN void *sf_gsample_realloc(void *p, size_t n);
SF_HIDDEN const void *sf_gsample_damaged(void);
SF_HIDDEN void sf_gsample_counts(uint64_t *samples, uint64_t *live);
SF_HIDDEN void sf_gsample_fork_prepare(void);
SF_HIDDEN void sf_gsample_fork_parent(void);

/* ---- guarded_span.c: freed large blocks wait (guard level >= 2) ---------- */
SF_HIDDEN extern pthread_mutex_t sf_span_quarantine_lock;
SF_HIDDEN bool sf_span_quarantine_put(sf_segment_t *seg); /* false: not taken, release it */
SF_HIDDEN bool sf_span_quarantine_holds(const void *p);
/* guard.protect_rate's bucket, shared with level 1's span freed last
 * (cache.c): false if `cost` bytes are not to be protected now. */
SF_HIDDEN bool sf_protect_budget_take(uint64_t cost);
SF_HIDDEN void sf_span_quarantine_flush(void);

/* ---- track.c: valgrind's memcheck sees sefer's blocks -------------------- */
SF_HIDDEN void sf_track_init(void);
SF_HIDDEN void *sf_tracked_malloc(size_t n, size_t align);
SF_HIDDEN void sf_tracked_free(void *p);
SF_HIDDEN void sf_track_quiet_begin(void); /* sefer's own work on freed memory */
SF_HIDDEN void sf_track_quiet_end(void);
SF_HIDDEN void sf_track_zeroed(void *p, size_t n);
SF_HIDDEN size_t sf_track_usable(const void *p, size_t usable);
SF_HIDDEN void sf_track_page_blocks(sf_page_t *page);
SF_HIDDEN void sf_track_segment_header(sf_segment_t *seg);
SF_HIDDEN extern bool sf_tracked; /* under valgrind with valgrind.track on */
/* Pages are off levels 0-1's fast paths. */
SF_INLINE bool sf_pages_checked(void) { return sf_guard_level >= 2 || sf_tracked; }

/* ---- profile.c: sampled heap profiling (docs/design.md, "Heap profiling") --- */
/* Set once profile.sample_bytes is first non-zero, never cleared: from
 * then on every entry's malloc takes the counted path (entry.c) and the
 * slow paths look for sampled blocks; free never changes. */
SF_HIDDEN extern bool sf_prof_armed;
SF_INLINE bool sf_prof_is_armed(void) { return SF_PEEK(sf_prof_armed); }
SF_HIDDEN void sf_prof_init(void);         /* after the knobs are read */
SF_HIDDEN void sf_prof_constructor(void);  /* loads and warms libgcc's unwinder if wanted (outside malloc) */
SF_HIDDEN void sf_prof_knob_changed(void); /* profile.sample_bytes set at run time */
/* The countdown word (sf_heap_t.countdown).  The counted fast paths (the
 * armed profile's malloc and the sampled guard's; fastpath.h,
 * sf_hand_out_ticked) and level 2's pops made two read-modify-writes on
 * every malloc, the countdown's bytes and `allocs`, each waiting on the
 * one before on its own word: without the second, 16-256 B bursts ran 1.23x faster armed
 * (docs/benchmarks.md, profile-cost).  So one word holds both: the bits
 * from SF_COUNTDOWN_SHIFT up, signed, are the bytes left, the bits below
 * it allocations not yet in `allocs`, and one subtraction of
 * ((n + 1) << SHIFT) - 1 takes n + 1 bytes and counts one allocation
 * (sf_sample_tick_counting).  The word's sign is the bytes' (the low part
 * is a count, never negative), so the run-out test is the same jump.  The
 * count never carries into the bytes: every counting allocation takes at
 * least a byte (hence n + 1: malloc(0) takes one), the bytes start at most
 * SF_COUNTDOWN_MAX, below 2^SHIFT, and each run-out (and every set,
 * sf_countdown_set) moves the count into `allocs` first.  The other paths
 * that count (sf_sample_tick) take bytes only and count `allocs` as they
 * always did. */
#define SF_COUNTDOWN_SHIFT 30 /* (2^30: an imul's immediate, fastpath.h) */
#define SF_COUNTDOWN_ALLOCS ((1ull << SF_COUNTDOWN_SHIFT) - 1)
#define SF_COUNTDOWN_MAX ((int64_t)1 << 29)

/* The bytes left (negative: run out, by that many). */
SF_INLINE int64_t sf_countdown_left(const sf_heap_t *heap) { return heap->countdown >> SF_COUNTDOWN_SHIFT; }

/* The owner moves the low part's allocations into `allocs`: the word
 * first, then `allocs` (release), so that sf_heap_allocs, reading them the
 * other way round, never counts them twice. */
SF_INLINE void sf_countdown_flush(sf_heap_t *heap) {
    uint64_t w = (uint64_t)heap->countdown, c = w & SF_COUNTDOWN_ALLOCS;
    SF_SET(heap->countdown, (int64_t)(w - c));
    __atomic_store_n(&heap->allocs, heap->allocs + c, __ATOMIC_RELEASE);
}

/* The owner sets the bytes left, at most SF_COUNTDOWN_MAX (returned: what
 * it set), the count flushed. */
SF_INLINE int64_t sf_countdown_set(sf_heap_t *heap, int64_t left) {
    if (left > SF_COUNTDOWN_MAX) left = SF_COUNTDOWN_MAX;
    sf_countdown_flush(heap);
    SF_SET(heap->countdown, (int64_t)((uint64_t)left << SF_COUNTDOWN_SHIFT));
    return left;
}

/* The heap's allocations so far, from any thread (never counted twice). */
SF_INLINE uint64_t sf_heap_allocs(const sf_heap_t *heap) {
    /* (`allocs` read again after the word: a flush between the two reads
     * is then seen, and the word read again; what stays open is an owner
     * stopped between its two stores, a count missed until it goes on) */
    uint64_t a = __atomic_load_n(&heap->allocs, __ATOMIC_ACQUIRE);
    for (int tries = 0;; tries++) {
        uint64_t c = (uint64_t)__atomic_load_n(&heap->countdown, __ATOMIC_ACQUIRE) & SF_COUNTDOWN_ALLOCS;
        uint64_t again = __atomic_load_n(&heap->allocs, __ATOMIC_ACQUIRE);
        if (again == a || tries == 3) return again + c;
        a = again;
    }
}

/* The heap's countdown (sf_heap_t.countdown) fell below zero with an
 * allocation that counted `size` bytes: which point it reached, the heap
 * profile's (the allocation is a sample, whose record takes its weight from
 * size) or the sampled guard's (the caller places the allocation in a slot,
 * sf_gsample_take; only where guard_here: a path that knows the request's
 * size; elsewhere the guard's point moves to the next allocation that
 * counts, once), or none; the countdown is drawn again either way (profile.c,
 * "one countdown, two points"). */
enum sf_count_out { SF_COUNT_OUT_NONE, SF_COUNT_OUT_PROFILE, SF_COUNT_OUT_GUARD };
SF_HIDDEN enum sf_count_out sf_countdown_out(sf_heap_t *heap, uint64_t size, bool guard_here);
/* A pop's countdown fell below zero on a request of n bytes, which it
 * counted (fastpath.h, sf_sample_tick): serves it, sampled if it is due.
 * sf_sample_take_counted: the same after sf_sample_tick_counting, which
 * took n + 1 bytes and counted the allocation too. */
SF_HIDDEN void *sf_sample_take(size_t n, sf_heap_t *heap);
SF_HIDDEN void *sf_sample_take_counted(size_t n, sf_heap_t *heap);
/* The same for a block of class c (sf_heap_pop's callers ask for a class:
 * aligned requests among them). */
SF_HIDDEN void *sf_sample_take_class(unsigned c, sf_heap_t *heap);
/* sf_alloc_class: p came from a sampled page of class c: record its stack. */
SF_HIDDEN void sf_prof_after_class_alloc(void *p);
SF_HIDDEN void *sf_prof_span(void *p); /* sf_alloc_span: maybe sample a span */
SF_HIDDEN void sf_prof_freed(const void *p); /* a block of a SAMPLED page is freed */
SF_HIDDEN void sf_prof_span_resized(sf_page_t *page); /* realloc resized its span in place */
SF_HIDDEN void sf_prof_fork_prepare(void);
SF_HIDDEN void sf_prof_fork_parent(void);

/* ---- profile_stack.c: the call stack of a sample --------------------------- */
/* libgcc's unwinder found or loaded, outside malloc: at start-up when
 * stacks are wanted, and before profile.sample_bytes or profile.unwinder
 * turns stack walks on at run time (config.c); whether it is there */
SF_HIDDEN bool sf_prof_libgcc_load(void);

/* ---- phase_count.c: what the generic paths count for open phases --------- */
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
SF_HIDDEN extern _Atomic int64_t sf_phase_shared_bytes;
SF_HIDDEN extern _Atomic uint32_t sf_phase_epoch;
SF_HIDDEN extern _Atomic uint64_t sf_phase_counting;
SF_HIDDEN extern struct sf_open_phase sf_phase_open[SF_PHASES_OPEN_MAX];
SF_HIDDEN extern _Atomic int sf_phase_open_count;
SF_HIDDEN extern _Atomic uint64_t sf_phase_orphan_counts[4];

/* ---- init.c: start-up and fork ------------------------------------------- */
SF_HIDDEN extern _Atomic int sf_initialized;
SF_HIDDEN extern bool sf_fork_child; /* set in the child of a fork */
SF_HIDDEN void sf_init_slow(void);
SF_INLINE void sf_ensure_init(void) {
    if (SF_UNLIKELY(!atomic_load_explicit(&sf_initialized, memory_order_acquire))) sf_init_slow();
}
SF_HIDDEN extern pthread_key_t sf_thread_key;
SF_HIDDEN extern bool sf_thread_key_ok;

/* ======== inspection ==================================================== */

/* ---- stats.c: statistics, summed on demand ------------------------------- */
SF_HIDDEN void sf_stats_collect(struct sefer_stats *out);
SF_HIDDEN void sf_print_stats(void); /* malloc_stats() */

/* ---- check.c: the internal consistency checker (sefer_check) ------------- */
/* Checks that sefer's structures agree (docs/reliability.md says what, and
 * for which heaps).  Returns the number of problems; why (if len > 0) gets
 * the first few, NUL-terminated.  Takes sf_fallback_lock, sf_cache_lock and
 * sf_seg_lock: never call it with one of them held. */
SF_HIDDEN size_t sf_check_heap_consistency(char *why, size_t len);
SF_HIDDEN void sf_guard_sweep(bool spans, const void **overflow, const void **uaf);

/* ---- phase.c: phases begun and ended ------------------------------------- */
SF_HIDDEN void sf_phase_snapshot(sf_phase_snap_t *out);

/* lockstat.c: the hooks of lockstat.h.  snapshot.c: snapshot.h. */

#endif /* SEFER_INTERNAL_H */
