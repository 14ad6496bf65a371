/* snapshot.h - copies of the live allocator structures for introspection.
 *
 * The introspection server (introspect/) never reads a segment, a page or a
 * heap slot while it builds a reply: it first copies what it needs into
 * plain structs (snapshot.c), then formats the copies.  The rules that keep
 * this cheap for the threads that allocate:
 *
 *   - buffers are allocated before sf_seg_lock is taken, and never while it
 *     is held (the copying thread allocates through sefer like any other);
 *   - sf_seg_lock is held for batches: SF_SNAP_LIST_BATCH segments of the
 *     list walk (pointers and ids only), then SF_SNAP_BATCH segments copied,
 *     so a thread that creates or releases a segment waits for a bounded,
 *     short moment, whatever the number of segments; the fast paths never
 *     take it;
 *   - fields that the owning thread changes without a lock are read with
 *     relaxed atomic loads (SF_GET): each value is one the field really held,
 *     but two values may be a few operations apart.
 *
 * docs/introspection.md states the resulting guarantees. */
#ifndef SEFER_SNAPSHOT_H
#define SEFER_SNAPSHOT_H

#include "internal.h"

#define SF_SNAP_LIST_BATCH 64  /* segments listed per hold of sf_seg_lock */
#define SF_SNAP_BATCH 64       /* segments copied per hold of sf_seg_lock */
#define SF_SNAP_FALLBACK ((int64_t)SF_HEAP_FALLBACK_SLOT) /* owner "slot" of the fallback heap */
#define SF_SNAP_NO_OWNER ((int64_t)-1) /* spans belong to no heap */

/* One page in use (free pages of a segment are not listed). */
typedef struct {
    uint16_t index;      /* page number in the segment (small: 1..63, medium: 0..7, span: 0) */
    uint8_t class_idx;   /* size class (0 for a span) */
    uint8_t flags;       /* enum sf_page_flag */
    uint32_t block_size; /* bytes (0 for a span: see span_bytes) */
    uint32_t used;       /* blocks handed out and not yet returned to the owner */
    uint32_t capacity;   /* blocks that fit in the page */
    uint32_t carved;     /* blocks carved from the page so far */
    uint64_t span_bytes; /* spans: usable bytes of the one block */
} sf_snap_page_t;

typedef struct {
    uint64_t id;        /* sefer's segment number, in creation order */
    uintptr_t base;     /* address of the header (the segment's start) */
    uint8_t kind;       /* enum sf_seg_kind */
    int64_t owner;      /* registry slot, SF_SNAP_FALLBACK, or SF_SNAP_NO_OWNER */
    uint16_t page_count; /* pages the segment is cut into */
    uint64_t size;      /* bytes mapped */
    uint64_t committed; /* bytes counted in bytes_committed */
    uint64_t used_bytes; /* bytes in allocated blocks */
    uint64_t blocks_used, blocks_total;
    uint32_t first_page, pages; /* this segment's records in sf_snapshot_t.page */
} sf_snap_segment_t;

typedef struct {
    sf_snap_segment_t *seg;
    size_t segs;
    sf_snap_page_t *page;
    size_t pages;
    uint64_t total;     /* segments listed by the walk (phase 1) */
    uint64_t vanished;  /* of those asked for, released before their copy */
    uint32_t lock_holds; /* times sf_seg_lock was taken */
    uint64_t list_hold_ns; /* the longest hold while listing (phase 1) */
    uint64_t max_hold_ns, total_ns; /* longest hold of any phase; the whole snapshot */
} sf_snapshot_t;

/* Copies segments [offset, offset + limit) of the list ordered by id (oldest
 * first).  Returns 0, or -1 with errno ENOMEM (nothing to release then). */
SF_HIDDEN int sf_snapshot_segments(sf_snapshot_t *s, uint64_t offset, uint64_t limit);
SF_HIDDEN void sf_snapshot_release(sf_snapshot_t *s);

/* One heap registry slot (or the fallback heap: slot SF_SNAP_FALLBACK). */
typedef struct {
    uint32_t slot;
    uint8_t state;   /* enum sf_heap_state; the fallback heap reads LIVE */
    bool ever_used;  /* the slot has been claimed at least once */
    bool small;      /* its small requests still take power-of-two classes (threads.small_from) */
    int tid;         /* owning thread's id, 0 if none */
    uint64_t allocs, remote_frees, remote_collected;
    bool has_ring;
    uint64_t ring_capacity, ring_pushed, ring_drained, ring_overflowed;
    bool overflow_waiting; /* blocks wait on the overflow list */
    /* blocks on each small class's list (lib/page.c, "Class lists"):
     * free, though their pages count them in use (at most SF_CL_BLOCKS) */
    uint8_t listed[SF_SMALL_CLASS_MAX + 1];
} sf_snap_heap_t;

/* The heaps in order: registry slots 0, 1, ... then the fallback heap.
 * Copies entries [offset, offset + limit) of that list into out[] (room
 * for limit); returns how many, and the list's length in *total.  No lock
 * is taken. */
SF_HIDDEN size_t sf_snapshot_heaps(sf_snap_heap_t *out, uint64_t offset, uint64_t limit, uint64_t *total);
/* Remote frees waiting in every heap's ring for their owner. */
SF_HIDDEN uint64_t sf_snapshot_ring_pending(void);

/* Resident set size from /proc/self/statm; false (with the reason in why)
 * if it cannot be read. */
SF_HIDDEN bool sf_snapshot_rss(uint64_t *bytes, char *why, size_t whylen);
/* The name of thread tid of this process (/proc/self/task/TID/comm). */
SF_HIDDEN bool sf_snapshot_thread_name(int tid, char *buf, size_t len);

#endif /* SEFER_SNAPSHOT_H */
