/* types.h - sefer's types, the geometry they describe, and the attributes
 * and relaxed accesses their fields are read with.
 *
 * Layout of memory (docs/design.md has the reasons):
 *
 *   segment (4 MiB, aligned to 4 MiB)
 *   +-----------+---------+---------+-----+---------+
 *   | metadata  | page 1  | page 2  | ... | page 63 |   small:  64 KiB pages
 *   +-----------+---------+---------+-----+---------+
 *   | meta | page 0 (960K)| page 1 (1 MiB)   | ...   |   medium: 1 MiB pages
 *   +------+------------------------------------------+
 *   | meta | one block (large: 1..32 segments, huge: more)  |
 *
 * The header of any segment is found from an interior pointer by masking
 * (ptr & ~(SF_SEG_SIZE-1)); the page descriptor by (ptr - segment) >> page_shift.
 * A process-wide byte map (segmap.c) says whether a 4 MiB chunk holds a live
 * sefer segment, so "is this pointer ours?" never touches unmapped memory.
 *
 * Only types, constants and the inline accessors that compute from a type
 * alone: what a file defines is declared in internal.h, under its name. */
#ifndef SEFER_TYPES_H
#define SEFER_TYPES_H

#include "sefer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SF_HIDDEN __attribute__((visibility("hidden")))
#define SF_LIKELY(x) __builtin_expect(!!(x), 1)
#define SF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SF_NOINLINE __attribute__((noinline))
#define SF_INLINE static inline __attribute__((always_inline))
/* The fast paths' functions start on a cache line of their own: else a
 * change anywhere earlier in the library moves them by a few bytes, and
 * where their hot instructions fall across 64-byte lines (the core's
 * fetch and op-cache windows) moved a benchmark row by up to a tenth with
 * the same instructions (docs/benchmarks.md, "Code alignment"). */
#define SF_HOT __attribute__((aligned(64)))

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
/* SF_OWN_SET and SF_ADD: the same for a store and an addition of any
 * amount by a field's only writer (the countdown word, internal.h). */
#if defined(__SANITIZE_THREAD__)
#define SF_PEEK(field) SF_GET(field)
#define SF_COUNT(field) SF_SET(field, (field) + 1)
#define SF_UNCOUNT(field) (SF_SET(field, (field) - 1), (field))
#define SF_OWN_SET(field, v) SF_SET(field, v)
#define SF_ADD(field, v) SF_SET(field, (field) + (v))
#else
#define SF_PEEK(field) (field)
#define SF_COUNT(field) ((field)++)
#define SF_UNCOUNT(field) (--(field))
#define SF_OWN_SET(field, v) ((field) = (v))
#define SF_ADD(field, v) ((field) += (v))
#endif

/* n rounded up to a multiple of a (a power of two). */
SF_INLINE size_t sf_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }
SF_INLINE bool sf_is_pow2(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

/* ---- geometry ------------------------------------------------------------ */
#define SF_SEG_SHIFT 22
#define SF_SEG_SIZE ((size_t)1 << SF_SEG_SHIFT)
#define SF_SEG_MASK (SF_SEG_SIZE - 1)
#define SF_SMALL_PAGE_SHIFT 16 /* 64 KiB */
#define SF_MEDIUM_PAGE_SHIFT 20 /* 1 MiB */
#define SF_SPAN_PAGE_SHIFT 40   /* large/huge: one page covers the whole span */
#define SF_SMALL_PAGES (SF_SEG_SIZE >> SF_SMALL_PAGE_SHIFT)   /* 64, page 0 is metadata */
#define SF_MEDIUM_PAGES (SF_SEG_SIZE >> SF_MEDIUM_PAGE_SHIFT) /* 4, page 0 starts after metadata */
#define SF_SEG_META_SIZE ((size_t)64 << 10) /* header + page table; rest unused address */
#define SF_SMALL_MAX SEFER_SMALL_MAX
#define SF_MEDIUM_MAX SEFER_MEDIUM_MAX
#define SF_LARGE_MAX_SEGS 32 /* spans above 128 MiB are "huge": mapped and unmapped directly */
#define SF_OS_PAGE 4096
#define SF_MAX_ALIGN_FROM_CLASS SF_MEDIUM_MAX
/* the segment map (segmap.c): one byte per 4 MiB chunk of a 47-bit address space */
#define SF_SEGMAP_CHUNKS ((size_t)1 << (47 - SF_SEG_SHIFT))

/* ---- size classes (the table: sizeclass.c) ------------------------------- */
/* 16-byte steps to 128 B, then four classes per power of two up to 256 KiB. */
#define SF_CLASS_COUNT 53 /* class 0 unused; 1..52 */
/* The fast path's table covers every small size, so that no size below
 * SF_SMALL_MAX takes another route at random (docs/design.md, "Random
 * sizes"); guard level 2's table only the sizes up to 1 KiB, where its cost
 * is in the checks, not the route. */
#define SF_DIRECT_MAX SF_SMALL_MAX
#define SF_DIRECT_COUNT (SF_DIRECT_MAX / 16 + 1)
#define SF_GDIRECT_MAX 1024
#define SF_GDIRECT_COUNT (SF_GDIRECT_MAX / 16 + 1)
/* above SF_GDIRECT_MAX, up to SF_SMALL_MAX: by 256-byte steps (every class
 * there is a multiple of 256) */
#define SF_GDIRECT_HI_COUNT (SF_SMALL_MAX / 256 + 1)
#define SF_SMALL_CLASS_MAX 32 /* class of SF_SMALL_MAX */
/* A class list (page.c, "Class lists"): its head's bytes, and the blocks
 * it holds at most: SF_CL_BLOCKS, fewer where threads.class_list_bytes
 * says (64 KiB by default: fewer above 1 KiB; internal.h, sf_cl_cap). */
#define SF_CL_BYTES 32
#define SF_CL_BLOCKS 64u
/* Medium classes (above SF_SMALL_MAX) have a table of their own, by class:
 * by size in 16-byte steps it would be 16 K entries. */
#define SF_MEDIUM_CLASS_MIN (SF_SMALL_CLASS_MAX + 1)
#define SF_MDIRECT_COUNT (SF_CLASS_COUNT - SF_MEDIUM_CLASS_MIN)

/* ---- the process-wide counters (globals.c) ------------------------------- */
#define SF_GUARD_KINDS_COUNTED 7 /* enum sf_guard_kind (guard_report.c) */
struct sf_global_stats {
    _Atomic uint64_t committed, reserved, metadata, decommitted_total, segments, segments_peak;
    _Atomic uint64_t cache_bytes, cache_spans, cache_hits, cache_misses, os_maps, enomem;
    /* operations not counted in a heap: spans, and threads without a heap;
     * and the threads that could not get a heap (heap.c) */
    _Atomic uint64_t shared_allocs, shared_remote_frees, fallback_allocs, heap_fallbacks;
    _Atomic uint64_t growth_shed; /* segment.c, "Growth" */
    _Atomic uint64_t exited_waiting; /* waiting pages of heaps whose thread is gone (heap.c) */
    /* waiting pages of every heap (segment.c, "the segment lock"), and what
     * threads.cache_max purged of them (heap.c, sf_heaps_shed_waiting) */
    _Atomic uint64_t heaps_waiting, cache_max_purges, cache_max_purged;
    _Atomic uint64_t memlimit_purges, memlimit_refusals; /* memlimit.c */
    _Atomic uint64_t guard[SF_GUARD_KINDS_COUNTED];
};

/* ---- blocks, pages, segments, heaps -------------------------------------- */
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

/* sf_page_t.committed while the page is in use: its memory was decommitted
 * (or never used) when the use began, so what it carves is memory not
 * touched before; or it was resident already (medium_shed.c asks). */
enum { SF_COMMIT_FRESH = 1, SF_COMMIT_RESIDENT = 2 };

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
    union {
        struct sf_heap_s *fast_heap; /* owner heap while flags == 0, else NULL: the
                                        free fast path's one ownership test */
        uint16_t cl_direct; /* a class list's head (no page: never fast_heap):
                               its class's direct[] index once set up, else 0
                               (page.c, sf_cl_full) */
    };
    uint32_t used;          /* blocks handed out and not yet returned to the owner,
                               plus SF_USED_BIAS on a class's current page */
    uint8_t flags;          /* non-zero sends free to the generic path */
    uint8_t class_idx;
    uint8_t in_use;     /* allocated to a size class (or span) */
    uint8_t committed;  /* memory not decommitted since last use: 0, or
                           SF_COMMIT_FRESH / SF_COMMIT_RESIDENT for how this use began */
    uint32_t block_size;
    uint16_t capacity;   /* blocks carved so far (read by other threads: SF_GET) */
    uint16_t reserved;   /* blocks that fit (at most 4096: 64 KiB / 16 B) */
    uint8_t *block_start;
    uint64_t fast_divmagic; /* the class's block-start constant (sf_class_divmagic)
                               while the page's fast owner is its segment's heap,
                               plain (levels 0-1) or tagged (level 2's fast free,
                               which reads it here; not at the guard page:
                               sf_page_tagged_keeps_constant), else 0
                               (sf_page_divmagic: the constant for every other
                               path) */
    uint64_t fast_carved; /* the level 0-1 free fast path's bound, on a plain fast
                             page only, else 0: capacity * (fast_divmagic *
                             block_size mod 2^64).  Its block-start test is
                             off * fast_divmagic < fast_carved, which only the
                             blocks carved so far pass (sf_page_fast_bound), and
                             no offset of any other page (0: it says "plain fast
                             page" without a read of fast_heap) */
    /* second cache line: the owner's fast paths never touch it */
    /* Blocks freed by other threads (remote.c): a lock-free stack threaded
     * through the blocks, pushed with a CAS, taken whole by the owner with
     * an exchange.  Bit 0 (SF_XFREE_NOTIFY) says the page is full and the
     * next remote free must tell the owner through its ring; bits 48-63
     * count the blocks on it (sf_page_blocks_out). */
    _Atomic uintptr_t xfree;
    /* queue links: class queue, full list or purge list */
    struct sf_page_s *next, *prev;
    uint8_t *page_start;
    size_t page_bytes;
    union {
        size_t span_bytes; /* spans: usable bytes of the block (a page-size multiple) */
        /* levels 0-1, a small page whose owner frees onto its class list
         * (cl below): how many of its blocks the list held when the owner
         * last counted them (0 when the page became fast).  A free onto the
         * page past a full list that leaves no more blocks out than that
         * counts again, and a page whose only blocks out are listed takes
         * them back and empties (page.c, "Pages only a list keeps") */
        struct {
            uint16_t cl_seen;
            uint8_t remote_class; /* a page in use: its class (for remote_bytes' test) */
            uint8_t remote_pad;
            /* a page in use: the bytes its blocks span (reserved *
             * block_size), else 0.  Another thread's free at levels 0-1
             * (free.c, free_remote_small) tests a pointer against it and
             * remote_class's constant before it writes into the block:
             * this line, not the owner's first (the "hot" one above), and
             * written only when the page is taken and given back (a bound
             * of the blocks carved, written as the owner carves, cost the
             * producer/consumer rows 5-18 %: the consumer's copy of the
             * line went stale at each carve).  An uncarved block start
             * passes: the mark and link written there are the carving's
             * to overwrite, and the owner refuses the block */
            uint32_t remote_bytes;
        };
    };
    union {
        uintptr_t secret; /* in use, guard level >= 2: free-list links are XOR-ed
                             with it (else 0; sf_page_init sets it) */
        uint64_t purge_at; /* free pages: delayed decommit deadline (ms), 0: none
                              (read only while in_use is 0; page_free clears it) */
    };
    union {
        size_t requested;     /* spans at guard level >= 2: the size asked for */
        uintptr_t canary_key; /* blocks at guard level >= 2: canary = address ^ key */
        struct sf_page_s *cl; /* levels 0-1, a small page its owner frees into on the fast
                                 path (fast_divmagic set, at levels 0-1 a plain page's
                                 only): the owner's class list of its
                                 class (page.c, "Class lists"; read into an
                                 sf_page_or_list_t *, below) */
    };
} __attribute__((aligned(128))) sf_page_t; /* a power of two: page index is one shift */
/* What direct[] names: a page descriptor, or a class list's head, which
 * is only a descriptor's first SF_CL_BYTES (sf_heap_t, cl_heads) and
 * aligned to them, not to 128.  Every read or write of a field through a
 * pointer that may be a list's head goes through this type (the same
 * struct, a typedef's lower alignment), so that no access assumes the
 * descriptor's alignment (UBSan's alignment check holds the code to it). */
typedef struct sf_page_s sf_page_or_list_t __attribute__((aligned(SF_CL_BYTES)));

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
    /* bit i: page i serves sampled blocks (SF_PAGE_SAMPLED), on this line
     * so that a thread freeing another's block asks it with the owner heap
     * (free.c, free_remote_small); written by the owner only */
    uint64_t sampled_mask;
    /* Always 0.  A free of a pointer in a small segment's first 64 KiB (its
     * header's page) finds the header where a page descriptor would be,
     * and these where that descriptor's fast_divmagic and fast_carved are:
     * the level 0-1 fast path's block-start test then fails, as for any
     * page not fast. */
    uint64_t not_a_page, not_a_page_bound;
    size_t committed_bytes; /* counted in stats.bytes_committed */
    uint64_t id;
    /* heap's list of segments with free pages */
    struct sf_segment_s *heap_next, *heap_prev;
    /* process-wide list of live segments (under sf_seg_lock) */
    struct sf_segment_s *all_next, *all_prev;
    /* bytes from the segment's start that are accessible: past them the
     * address no page has taken yet (a span: the slack past its block) is
     * no-access (segment.c, "The unused part of a segment"); SF_SEG_SIZE
     * (a span: span_size) when all of it is */
    size_t open_bytes;
    /* pages[0, pages_ready) hold their page's place (page_start,
     * page_bytes); those past it are all zero, free and never used, and get
     * it when first taken (segment.c, segment_ready_to): a fresh segment's
     * 63 descriptors fill two OS pages, and a heap using fewer than 31
     * pages then touches only the first (SF_SET: snapshots read it) */
    uint16_t pages_ready;
    bool closed; /* part of it was made no-access (the metadata page's too) */
    /* a large block's span: its second OS page, below the block, is
     * no-access (segment.c, "The unused part of a segment") */
    bool hole;
    sf_page_t pages[]; /* page_count descriptors; pages[i] is page i + page_bias */
} sf_segment_t;

/* The head of each class queue (the class's current page, the one direct[]
 * names) carries SF_USED_BIAS in its `used` count, so the free fast path's
 * "page now empty?" test never fires for it.  With random sizes a class's
 * current page holds one or two live blocks and empties at random: that one
 * data-dependent branch was most of what the free path lost there
 * (docs/design.md, "Random sizes").  The bias moves with the head
 * (page.c); every reader of the count goes through sf_page_used. */
#define SF_USED_BIAS (1u << 31)
SF_INLINE uint32_t sf_page_used(const sf_page_t *page) { return SF_GET(page->used) & ~SF_USED_BIAS; }

#define SF_SEG_MAGIC 0x5365666572536567ull /* "SeferSeg" */
/* A medium segment's last word of metadata, at guard levels 0-1 (level 2
 * has a guard page there).  A write of 1 MiB downwards from a block on page
 * 1 runs through page 0 and the unused end of the header, never reaching
 * the header's fields or magic; it does overwrite this, which every free of
 * a medium block checks (docs/security.md, "The misuse suite"). */
#define SF_SEG_END_MARK_OFF (SF_SEG_META_SIZE - sizeof(uint64_t))
SF_INLINE const uint64_t *sf_segment_end_mark(const void *seg) {
    return (const uint64_t *)((uintptr_t)seg + SF_SEG_END_MARK_OFF);
}
/* (the segment's own address: a compare with a register, where a value
 * mixed with a constant took five instructions on every medium free) */
SF_INLINE uint64_t sf_segment_end_mark_value(const void *seg) { return (uintptr_t)seg; }
#define SF_PAGE_DESC_SHIFT 7
/* A class list's head covers the fields of a page descriptor the paths
 * that find it in direct[] touch (sf_heap_t, cl_heads) */
_Static_assert(offsetof(sf_page_t, free) == 0 && offsetof(sf_page_t, local_free) + sizeof(void *) <= SF_CL_BYTES &&
                   offsetof(sf_page_t, used) + sizeof(uint32_t) <= SF_CL_BYTES &&
                   offsetof(sf_page_t, flags) < SF_CL_BYTES && offsetof(sf_page_t, class_idx) < SF_CL_BYTES &&
                   offsetof(sf_page_t, in_use) < SF_CL_BYTES && offsetof(sf_page_t, committed) < SF_CL_BYTES &&
                   offsetof(sf_page_t, cl_direct) + sizeof(uint16_t) <= SF_CL_BYTES && SF_CL_BLOCKS <= UINT8_MAX,
               "a class list's head holds what its readers read");
_Static_assert(sizeof(sf_page_t) == (1u << SF_PAGE_DESC_SHIFT), "page descriptor size");
_Static_assert(offsetof(sf_page_t, xfree) >= 64, "remote frees stay off the fast paths' cache line");
/* The header fills the first 128-byte slot, so in a small segment the
 * descriptor of page i (1..63) sits at seg + i * 128: the fast path finds it
 * by OR-ing shifted pointer bits into the segment address. */
_Static_assert(offsetof(sf_segment_t, pages) == sizeof(sf_page_t), "segment header size");
_Static_assert(offsetof(sf_segment_t, not_a_page) == offsetof(sf_page_t, fast_divmagic) &&
                   offsetof(sf_segment_t, not_a_page_bound) == offsetof(sf_page_t, fast_carved),
               "a small segment's header read as a page descriptor is never a fast page");
_Static_assert(offsetof(sf_page_t, fast_carved) + sizeof(uint64_t) <= 64,
               "the free fast path's bound is on the line its block-start constant is");
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
 * test, off * m < m with m = floor(2^64/size) + 1, is exact for off < 2^32. */
SF_INLINE size_t sf_page_carved_bytes(const sf_page_t *page) {
    return (size_t)SF_GET(page->capacity) * SF_GET(page->block_size);
}
/* floor(2^64 / size) + 1 of each class (sizeclass.c); UINT64_MAX for class 0,
 * and 0 (no offset passes) for every byte value past the last class: a
 * damaged descriptor's class_idx reads inside the table, and its blocks
 * are refused. */
SF_HIDDEN extern const uint64_t sf_class_divmagic[256];
/* The page's block-start constant: its class's, or a span's (one block, at
 * offset 0: only 0 passes UINT64_MAX). */
SF_INLINE uint64_t sf_page_divmagic(const sf_page_t *page) {
    return page->block_size ? sf_class_divmagic[page->class_idx] : UINT64_MAX;
}
/* The level 0-1 free fast path's bound for page's blocks carved so far
 * (fast_carved while the page is fast).  With m its class's constant and
 * s its block size, e = m * s mod 2^64 is in (0, s] (sizeclass.c), and an
 * offset off in the page gives off * m mod 2^64 = k * e for the block
 * start off = k * s, but at least m for any other offset (m > 2^64 / s,
 * and no product wraps while (k + 1) * e stays under m: a small page's
 * offsets are under 64 KiB and a medium page's under 4 MiB, m above
 * 2^46; an offset wrapped below the first block by d gives 2^64 less the
 * product of d, at least m less small multiples of e).  So
 * off * m < capacity * e holds for exactly the starts of the blocks
 * carved, as off * m < m holds for every block start: the fast path
 * compares with this word in place of m, no instruction more, and a free
 * of a block-aligned address not yet carved (never handed out) goes to the
 * generic path, which refuses it. */
SF_INLINE uint64_t sf_page_fast_bound(const sf_page_t *page) {
    return (uint64_t)SF_GET(page->capacity) * (sf_class_divmagic[page->class_idx] * (uint64_t)page->block_size);
}
SF_INLINE bool sf_page_is_block_start(const sf_page_t *page, const void *p) {
    uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)page->block_start);
    uint64_t m = sf_page_divmagic(page);
    return off < sf_page_carved_bytes(page) && off * m < m;
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

/* A batch of blocks of one heap, freed by the thread of another (remote.c,
 * "Batches"): filled by that thread without touching the blocks, pushed
 * whole onto the owner's inbox, emptied by the owner.  256 bytes. */
#define SF_BATCH_BLOCKS 30
#define SF_BATCHES 16 /* a heap's batches, one OS page: one filling, the rest in flight */
typedef struct sf_batch_s {
    struct sf_batch_s *next;    /* in the owner's inbox */
    _Atomic uint32_t in_flight; /* set by its sender as it pushes it, cleared by the
                                   owner once it has taken its blocks */
    uint32_t n;
    void *blocks[SF_BATCH_BLOCKS];
} sf_batch_t;

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

/* A heap's sampling state (profile.c) but for its countdown, which sits
 * beside `allocs` (sf_heap_t.countdown). */
enum { SF_PROF_FORCE_NONE, SF_PROF_FORCE_SAMPLE, SF_PROF_FORCE_COUNTED };
typedef struct {
    /* the countdown (sf_heap_t.countdown) runs to the nearer of two
     * points: the profile's next sample and the sampled guard's
     * (guard.sample_bytes, guard_sample.c); each lies this many bytes past
     * it (profile.c, countdown_set) */
    int64_t prof_extra, guard_extra;
    uint64_t rate;  /* the profile.sample_bytes the countdown was drawn with (0: none) */
    uint64_t rng;   /* 0: not seeded yet */
    uint32_t pace_epoch; /* sf_prof_pace_epoch when it last looked (profile.c, pacing) */
    uint8_t guard_drawn; /* the sampled guard's point was drawn once (the first run-out
                            only starts its count) */
    uint8_t guard_passed; /* its point was passed on to the next allocation (profile.c,
                             sf_countdown_out) */
    uint8_t force;  /* the next class allocation (page.c, sf_page_malloc_class) is a
                       sample (SF_PROF_FORCE_SAMPLE) or counted already
                       (SF_PROF_FORCE_COUNTED); profile.c, sf_sample_take */
} sf_heap_prof_t;

enum sf_heap_state { SF_HEAP_FREE, SF_HEAP_LIVE, SF_HEAP_ABANDONED, SF_HEAP_COLLECTING };
/* A thread's sf_tls_heap is a real registry heap, or one of two markers whose
 * direct table holds only the empty page, so the fast path falls through:
 * UNCLAIMED (claim a slot on the slow path) or SHARED (the thread is past
 * teardown, or it could get no heap: every one of the SF_HEAP_SLOTS_MAX
 * owned, or no memory for one; it uses the locked fallback heap). */
enum sf_heap_kind { SF_HEAP_UNUSED, SF_HEAP_REAL, SF_HEAP_UNCLAIMED, SF_HEAP_SHARED };

/* The registry grows in chunks of heaps mapped on demand (heap.c): slot i
 * is heap i % SF_HEAP_CHUNK of chunk i / SF_HEAP_CHUNK.  Its capacity is
 * fixed: at most SF_HEAP_SLOTS_MAX heaps ever exist (2^20, 1,048,576: the
 * chunk table is static), so at most that many threads have a heap at once;
 * a thread that starts allocating while all of them are owned uses the
 * locked fallback heap for the rest of its life, counted in heap_fallbacks.
 * A test variant builds with a smaller value (-DSF_HEAP_SLOTS_MAX=64,
 * tests/reliability); it must be a multiple of SF_HEAP_CHUNK. */
#define SF_HEAP_CHUNK_SHIFT 6
#define SF_HEAP_CHUNK (1u << SF_HEAP_CHUNK_SHIFT)
#ifndef SF_HEAP_SLOTS_MAX
#define SF_HEAP_SLOTS_MAX (1u << 20)
#endif
#define SF_HEAP_FALLBACK_SLOT UINT32_MAX /* the fallback heap's "slot" */

/* A small page's class is carved up to this many blocks at once once its
 * heap refills often (page.c, "Carving ahead"). */
#define SF_CARVE_MIN 16u
#define SF_CARVE_WARM 64 /* refills before a heap carves ahead (page.c, carves_ahead) */

typedef struct sf_heap_s {
    /* owner only: the fast paths read the tables and bump allocs */
    sf_page_t *direct[SF_DIRECT_COUNT]; /* fast path: class page by (size+15)/16 */
    sf_page_t *gdirect[SF_GDIRECT_COUNT]; /* guard level 2's fast path: the same, by
                                         (size+8+15)/16; all empty page otherwise */
    /* owner-only plain counter (frees are derived); the allocations the
     * counting paths made since the countdown last ran out are still in
     * its low part (sf_heap_allocs) */
    uint64_t allocs;
    /* two counts in one word (internal.h, "The countdown word"): from bit
     * SF_COUNTDOWN_SHIFT up, signed, the bytes the heap's allocations may
     * take before the heap profile's next sample point or the sampled
     * guard's, the nearer (fastpath.h, sf_sample_tick; profile.c): below
     * zero, the allocation that took it there asks sf_countdown_out which
     * point it reached (a sample, unless the heap had not drawn a gap at
     * the rate in force); the bits below, allocations not yet added to
     * `allocs` */
    int64_t countdown;
    sf_page_queue_t queues[SF_CLASS_COUNT];
    sf_page_queue_t full;
    sf_page_queue_t purge;               /* freed pages awaiting delayed decommit */
    sf_page_t *purge_class[SF_CLASS_COUNT]; /* the same pages by last class, newest first */
    sf_segment_t *free_segs[2];          /* small, medium segments with free pages */
    uint32_t pages_in_use;
    uint32_t refills;         /* page refills (page.c) since its thread claimed it, up to
                                 SF_CARVE_WARM: from there on small pages carve ahead */
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
    uint64_t purge_bytes;     /* their committed bytes (SF_SET: sf_heaps_shed_waiting reads it) */
    uint64_t exited_counted;  /* of those, counted in sf_gstats.exited_waiting (its thread is gone) */
    uint32_t purge_medium;    /* those of them in medium segments */
    uint32_t memlimit_epoch;  /* the sf_memlimit_epoch its pages were purged for */
    /* freed blocks held back (guarded.c): one in quarantine_head (level 2's
     * frees, levels 0-1's realloc),
     * level 3's in the ring qring (qring_cap entries, a power of two, the
     * oldest at qring_first; mapped at the heap's first level-3 free); their
     * count and bytes read by the statistics from other threads (SF_GET) */
    sf_block_t *quarantine_head;
    struct sf_page_s *held_page; /* quarantine_head's page (sf_quarantine_swap_one) */
    uint32_t qring_cap, qring_first;
    size_t quarantine_bytes, quarantine_count;
    sf_heap_prof_t prof;                  /* heap profiling: countdowns (profile.c) */
    sf_page_queue_t sampled[SF_CLASS_COUNT]; /* pages serving sampled blocks only */
    /* medium classes' pages, by class - SF_MEDIUM_CLASS_MIN: as direct[]
     * (levels 0-1 only).  Here, past what the small fast paths touch, so
     * that their fields keep the offsets they had (churn-16 and -64 ran
     * 4-5 % slower with it after gdirect[], same instructions) */
    sf_page_t *mdirect[SF_MDIRECT_COUNT];
    /* guard level 2's fast path above SF_GDIRECT_MAX, up to SF_SMALL_MAX:
     * the class page by (size + tail + 255) / 256 (here for the same reason) */
    sf_page_t *gdirect_hi[SF_GDIRECT_HI_COUNT];
    /* guard level 2's fast path for medium classes: as mdirect[], by class -
     * SF_MEDIUM_CLASS_MIN of the request with its tail */
    sf_page_t *gmdirect[SF_MDIRECT_COUNT];
    /* the segment lock (segment.c): the heap's segments, free pages and
     * purge queue, taken by whoever changes them (the owner, a collector)
     * and by a thread purging the heap's waiting pages for threads.cache_max
     * or memory.limit; depth: the holder's nesting (holder only).
     * Here, in the padding before the next line: no field above moves) */
    _Atomic uint32_t seg_busy;
    uint32_t seg_depth;
    uint8_t shed_class; /* where medium_shed.c's next round of the classes starts */
    uint8_t unfulls[SF_CLASS_COUNT]; /* frees of its own blocks into its full pages, per class,
                                        halved each time the class looks for a page, cleared
                                        at claim (page.c, "Picky page switches") */
    /* a small heap (docs/design.md, "Small heaps"): its requests up to
     * SF_SMALL_HEAP_MAX take the power-of-two classes of at least
     * SF_SMALL_HEAP_MIN until a page of a class fills, or the smallest
     * carves past SF_SMALL_HEAP_MIN_CARVED (page.c, page_retire_full and
     * page_extend); written by the owner only */
    uint8_t small;
    /* read by other threads: written once, or rarely (at thread start and exit) */
    uint8_t kind __attribute__((aligned(64)));
    uint32_t slot;
    _Atomic int state;
    _Atomic int tid;
    _Atomic uint32_t next_ownerless; /* link in the stack of ownerless heaps (slot + 1) */
    _Atomic bool in_ownerless;       /* on that stack (maybe stale: adopted by a free, heap.c) */
    bool cut_by_fork; /* in a fork child: another thread of the parent owned it (heap.c) */
    _Atomic(sf_block_t *) overflow;  /* remote frees that found the ring full */
    sf_ring_t ring;
    /* batches of this heap's blocks freed by other threads: pushed by them,
     * taken whole by the owner (remote.c, "Batches") */
    _Atomic(sf_batch_t *) inbox __attribute__((aligned(64)));
    /* owner only: the batch being filled with another heap's blocks, that
     * heap, this heap's SF_BATCHES batches (mapped at its first remote free;
     * in flight: in an owner's inbox), and the blocks other threads' batches
     * brought back (read by statistics) */
    sf_batch_t *outbox __attribute__((aligned(64)));
    struct sf_heap_s *outbox_to;
    sf_batch_t *batches;
    uint16_t batch_next, batch_backoff; /* where to look for a free batch first;
                                           frees left to skip batches (all were in flight) */
    uint64_t remote_batched;
    /* level 3's quarantine ring (above; its pointer here, past every field
     * a fast path reads, so that none moved) */
    struct sf_block_s **qring;
    /* Class lists (page.c, "Class lists"): per small class, the blocks the
     * owner freed last, ahead of their pages.  Each is the head of a page
     * descriptor, which direct[] names as it names a page: free is the
     * list, used counts down the room left (SF_COUNT on a pop), class_idx
     * the class, in_use says the list is set up and committed holds its
     * capacity (blocks, at most SF_CL_BLOCKS, less after a page took its
     * blocks back: page.c, "Pages only a list keeps"), cl_direct its
     * class's index in direct[] (0 until set up: sf_cl_full); local_free
     * stays NULL.
     * Only those first SF_CL_BYTES of a descriptor exist, so they are
     * read and written through sf_page_or_list_t alone (sf_cl_of), never
     * as bytes of another type.  Owner only but for statistics' reads of
     * the room (SF_GET). */
    unsigned char cl_heads[SF_SMALL_CLASS_MAX + 1][SF_CL_BYTES] __attribute__((aligned(64)));
    /* Per small class, owner only (page.c, "Pages only a list keeps"),
     * one constant offset past its list's head (cl_run_of: no class
     * index): the list's head when its pages were last counted, and
     * whether pages that took their blocks back lowered its capacity (what
     * comes back when it empties: a capacity set lower otherwise, as the
     * tests' class_list_room.h sets 0, stays). */
    struct sf_cl_run {
        struct sf_block_s *mark;
        uint8_t lowered;
        unsigned char pad[SF_CL_BYTES - sizeof(void *) - 1];
    } cl_runs[SF_SMALL_CLASS_MAX + 1];
} sf_heap_t;
_Static_assert(sizeof(struct sf_cl_run) == SF_CL_BYTES &&
                   offsetof(sf_heap_t, cl_runs) == offsetof(sf_heap_t, cl_heads) + sizeof(((sf_heap_t *)0)->cl_heads),
               "a class list's run record lies at one offset from its head");

#endif /* SEFER_TYPES_H */
