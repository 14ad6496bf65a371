/* snapshot.c - copies of segments, pages and heap slots for introspection.
 *
 * A segment snapshot is taken in two phases, each in short holds of
 * sf_seg_lock (which segment creation and release take, never the
 * malloc/free fast paths), so that no thread waits long for it:
 *
 *   1. walk the list of live segments and copy each one's address, id and
 *      page count, SF_SNAP_LIST_BATCH segments per hold (the list is newest
 *      first, so ids descend; each batch resumes after the last one);
 *   2. for the window asked for, batches of SF_SNAP_BATCH segments, one hold
 *      each: check that the segment still lives, copy its header and the
 *      descriptors of its pages in use.
 *
 * A segment released before its copy is skipped and counted as vanished; a
 * segment created after the walk passed its place is not in the snapshot.
 * Holding the lock is what makes phase 2 safe: a segment is cleared from the
 * segment map before it is unlinked (under the lock) and unmapped after, and
 * marked only after it is linked, so while we hold the lock a chunk whose map
 * byte names a header is mapped memory, and the header's id tells whether it
 * is still the segment phase 1 saw.
 *
 * Buffers come from malloc before the lock is taken; if the list outgrows
 * the buffer, phase 1 grows it between two holds. */
#include "snapshot.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct seg_ref {
    sf_segment_t *seg;
    uint64_t id;
    uint32_t page_count;
};

static void lock_timed(sf_snapshot_t *s, uint64_t *t0) {
    sf_lock(&sf_seg_lock);
    *t0 = sf_now_ns();
    s->lock_holds++;
}

static void unlock_timed(sf_snapshot_t *s, uint64_t t0) {
    uint64_t held = sf_now_ns() - t0;
    sf_unlock(&sf_seg_lock);
    if (held > s->max_hold_ns) s->max_hold_ns = held;
}

/* True iff ref still names a live segment.  Holds sf_seg_lock. */
static bool still_live(const struct seg_ref *ref) {
    uintptr_t chunk = (uintptr_t)ref->seg >> SF_SEG_SHIFT;
    uint8_t v = atomic_load_explicit(&sf_segmap[chunk], memory_order_relaxed);
    if (v != SF_SEGMAP_SMALL_HEAD && v != SF_SEGMAP_MEDIUM_HEAD && v != SF_SEGMAP_OTHER_HEAD) return false;
    return ref->seg->magic == (SF_SEG_MAGIC ^ (uintptr_t)ref->seg) && ref->seg->id == ref->id;
}

/* Where the walk goes on after refs[0, n): after the newest segment of the
 * last batch that still lives (still in the list, so its successor is the
 * next older live segment), or from the head if the whole batch is gone.
 * Holds sf_seg_lock. */
static sf_segment_t *resume_point(const struct seg_ref *refs, size_t n) {
    for (size_t i = n; i-- > 0 && i + SF_SNAP_LIST_BATCH >= n;)
        if (still_live(&refs[i])) return refs[i].seg->all_next;
    return sf_all_segments;
}

/* Phase 1: every live segment's address, id and page count, newest first,
 * SF_SNAP_LIST_BATCH per hold.  The list is ordered by id, newest first
 * (new segments are linked at its head), so a batch goes on from the last
 * one's position and skips what it already has: segments created meanwhile
 * are not listed, segments released meanwhile may be (phase 2 finds them
 * gone).  Returns the array (malloc) and its length in *count, or NULL. */
static struct seg_ref *list_segments(sf_snapshot_t *s, size_t *count) {
    size_t cap = (size_t)atomic_load_explicit(&sf_gstats.segments, memory_order_relaxed) + 64, n = 0;
    struct seg_ref *refs = malloc(cap * sizeof *refs);
    if (refs == NULL) return NULL;
    memset(refs, 0, cap * sizeof *refs); /* fault its pages in now, not under the lock */
    for (;;) {
        uint64_t t0, last_id = n ? refs[n - 1].id : UINT64_MAX;
        unsigned took = 0;
        lock_timed(s, &t0);
        sf_segment_t *seg = n ? resume_point(refs, n) : sf_all_segments;
        for (; seg != NULL && took < SF_SNAP_LIST_BATCH && n < cap; seg = seg->all_next) {
            if (seg->id >= last_id) continue; /* listed already, or newer than the walk */
            refs[n++] = (struct seg_ref){seg, seg->id, seg->page_count};
            took++;
        }
        unlock_timed(s, t0);
        if (seg == NULL) break;
        if (n == cap) { /* the list grew since we sized the buffer */
            struct seg_ref *more = realloc(refs, 2 * cap * sizeof *refs);
            if (more == NULL) {
                free(refs);
                return NULL;
            }
            refs = more;
            memset(refs + cap, 0, cap * sizeof *refs);
            cap *= 2;
        }
    }
    *count = n;
    return refs;
}

/* Blocks that fit in a page of block size bs (as sf_page_init counts them). */
static uint32_t page_fit(const sf_page_t *page, uint32_t bs) {
    uintptr_t natural = bs & (0u - bs), page_start = (uintptr_t)SF_GET(page->page_start);
    uintptr_t start = sf_align_up(page_start, natural);
    uintptr_t end = page_start + SF_GET(page->page_bytes);
    /* (a coloured page's colour is within its slack: the same count) */
    return end > start ? (uint32_t)((end - start) / bs) : 0;
}

/* Copies one page descriptor; false if the page is not in use. */
static bool copy_page(const sf_segment_t *seg, unsigned i, sf_snap_page_t *out) {
    const sf_page_t *page = &seg->pages[i];
    uint8_t flags = SF_GET(page->flags);
    memset(out, 0, sizeof *out);
    out->index = (uint16_t)(i + seg->page_bias);
    out->flags = flags;
    if (flags & SF_PAGE_SPAN) {
        out->used = sf_page_used(page);
        out->capacity = out->carved = 1;
        out->span_bytes = SF_GET(page->span_bytes);
        return true;
    }
    if (!SF_GET(page->in_use)) return false;
    uint32_t bs = SF_GET(page->block_size);
    if (bs == 0) return false; /* being set up this very moment */
    out->block_size = bs;
    out->class_idx = (uint8_t)sf_class_of(bs);
    out->capacity = page_fit(page, bs);
    out->carved = SF_GET(page->capacity);
    out->used = sf_page_blocks_out(page, NULL);
    /* relaxed reads of a page being re-initialised may disagree for a moment */
    if (out->carved > out->capacity) out->carved = out->capacity;
    if (out->used > out->carved) out->used = out->carved;
    return true;
}

static int64_t owner_of(const sf_segment_t *seg) {
    if (seg->heap == NULL) return SF_SNAP_NO_OWNER;
    if (seg->heap == &sf_heap_fallback) return SF_SNAP_FALLBACK;
    return (int64_t)seg->heap->slot;
}

/* Copies a live segment and its pages in use.  Holds sf_seg_lock. */
static void copy_segment(sf_snapshot_t *s, const sf_segment_t *seg) {
    sf_snap_segment_t *out = &s->seg[s->segs++];
    memset(out, 0, sizeof *out);
    out->id = seg->id;
    out->base = (uintptr_t)seg;
    out->kind = seg->kind;
    out->owner = owner_of(seg);
    out->page_count = seg->page_count;
    out->size = seg->span_size;
    out->committed = SF_GET(seg->committed_bytes);
    out->first_page = (uint32_t)s->pages;
    for (unsigned i = 0; i < seg->page_count; i++) {
        sf_snap_page_t *pg = &s->page[s->pages];
        if (!copy_page(seg, i, pg)) continue;
        s->pages++;
        out->pages++;
        out->blocks_used += pg->used;
        out->blocks_total += pg->capacity;
        out->used_bytes += pg->span_bytes ? pg->span_bytes * pg->used : (uint64_t)pg->used * pg->block_size;
    }
}

/* Phase 2 over refs[from, to) (newest-first indexes), in id order. */
static void copy_window(sf_snapshot_t *s, const struct seg_ref *refs, size_t from, size_t to) {
    size_t i = to;
    while (i > from) {
        uint64_t t0;
        lock_timed(s, &t0);
        for (unsigned n = 0; n < SF_SNAP_BATCH && i > from; n++) {
            const struct seg_ref *ref = &refs[--i];
            if (still_live(ref)) copy_segment(s, ref->seg);
            else s->vanished++;
        }
        unlock_timed(s, t0);
    }
}

int sf_snapshot_segments(sf_snapshot_t *s, uint64_t offset, uint64_t limit) {
    memset(s, 0, sizeof *s);
    sf_ensure_init();
    uint64_t start = sf_now_ns();
    size_t count = 0;
    struct seg_ref *refs = list_segments(s, &count);
    if (refs == NULL) goto nomem;
    s->list_hold_ns = s->max_hold_ns;
    s->total = count;
    /* ascending id order: index k of the window is refs[count - 1 - k] */
    size_t first = offset < count ? (size_t)offset : count;
    size_t want = limit < count - first ? (size_t)limit : count - first;
    size_t from = count - first - want, to = count - first, page_records = 0;
    for (size_t i = from; i < to; i++) page_records += refs[i].page_count;
    s->seg = malloc((want ? want : 1) * sizeof *s->seg);
    s->page = malloc((page_records ? page_records : 1) * sizeof *s->page);
    if (s->seg == NULL || s->page == NULL) {
        free(refs);
        sf_snapshot_release(s);
        goto nomem;
    }
    /* a page fault under the lock can wait for the process's mmap lock,
     * which other threads' mmap and munmap hold: touch the buffers first */
    memset(s->seg, 0, (want ? want : 1) * sizeof *s->seg);
    memset(s->page, 0, (page_records ? page_records : 1) * sizeof *s->page);
    sf_track_quiet_begin(); /* under memcheck: reads fields hidden from it (track.c) */
    copy_window(s, refs, from, to);
    sf_track_quiet_end();
    free(refs);
    s->total_ns = sf_now_ns() - start;
    return 0;
nomem:
    errno = ENOMEM;
    return -1;
}

void sf_snapshot_release(sf_snapshot_t *s) {
    free(s->seg);
    free(s->page);
    s->seg = NULL;
    s->page = NULL;
    s->segs = s->pages = 0;
}

/* ---- heap slots ---------------------------------------------------------- */

static void copy_heap(sf_heap_t *heap, uint32_t slot, sf_snap_heap_t *out) {
    memset(out, 0, sizeof *out);
    out->slot = slot;
    out->ever_used = __atomic_load_n(&heap->kind, __ATOMIC_ACQUIRE) == SF_HEAP_REAL;
    out->state = (uint8_t)atomic_load_explicit(&heap->state, memory_order_relaxed);
    out->tid = atomic_load_explicit(&heap->tid, memory_order_relaxed);
    if (!out->ever_used) return;
    out->allocs = sf_heap_allocs(heap);
    out->remote_frees = SF_GET(heap->remote_frees);
    out->remote_collected = SF_GET(heap->remote_collected);
    out->small = SF_GET(heap->small) != 0;
    out->overflow_waiting = atomic_load_explicit(&heap->overflow, memory_order_relaxed) != NULL;
    for (unsigned c = 1; c <= SF_SMALL_CLASS_MAX; c++) out->listed[c] = (uint8_t)sf_cl_blocks(sf_cl_of(heap, c));
    if (heap->ring.cells == NULL) return; /* the fallback heap has no ring */
    out->has_ring = true;
    out->ring_capacity = heap->ring.mask + 1;
    /* head first: a push seen without its drain would read as pending */
    out->ring_drained = atomic_load_explicit(&heap->ring.head, memory_order_acquire);
    out->ring_pushed = atomic_load_explicit(&heap->ring.tail, memory_order_acquire);
    if (out->ring_pushed < out->ring_drained) out->ring_pushed = out->ring_drained;
    out->ring_overflowed = atomic_load_explicit(&heap->ring.overflowed, memory_order_relaxed);
}

size_t sf_snapshot_heaps(sf_snap_heap_t *out, uint64_t offset, uint64_t limit, uint64_t *total) {
    sf_ensure_init();
    uint32_t slots = sf_heap_slots();
    *total = (uint64_t)slots + 1;
    size_t n = 0;
    for (uint64_t i = offset; i < *total && n < limit; i++) {
        sf_snap_heap_t *h = &out[n++];
        if (i == slots) {
            copy_heap(&sf_heap_fallback, SF_HEAP_FALLBACK_SLOT, h);
            /* the fallback heap serves whoever holds its lock: always usable */
            h->state = SF_HEAP_LIVE;
            h->tid = 0;
            continue;
        }
        sf_heap_t *heap = sf_heap_at((uint32_t)i);
        if (heap != NULL) copy_heap(heap, (uint32_t)i, h);
        else *h = (sf_snap_heap_t){.slot = (uint32_t)i, .state = SF_HEAP_FREE}; /* being made */
    }
    return n;
}

uint64_t sf_snapshot_ring_pending(void) {
    uint64_t pending = 0;
    uint32_t slots = sf_heap_slots();
    for (uint32_t i = 0; i < slots; i++) {
        sf_heap_t *heap = sf_heap_at(i);
        if (heap == NULL || __atomic_load_n(&heap->kind, __ATOMIC_ACQUIRE) != SF_HEAP_REAL) continue;
        uint64_t head = atomic_load_explicit(&heap->ring.head, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&heap->ring.tail, memory_order_acquire);
        pending += tail > head ? tail - head : 0;
    }
    return pending;
}

/* ---- /proc ------------------------------------------------------------------ */

/* Reads a small /proc file into buf (NUL-terminated); bytes read or -1. */
static ssize_t read_small(const char *path, char *buf, size_t len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n;
    do n = read(fd, buf, len - 1);
    while (n < 0 && errno == EINTR);
    int e = errno;
    close(fd);
    errno = e;
    if (n < 0) return -1;
    buf[n] = '\0';
    return n;
}

bool sf_snapshot_rss(uint64_t *bytes, char *why, size_t whylen) {
    char buf[256];
    unsigned long long size = 0, resident = 0;
    if (read_small("/proc/self/statm", buf, sizeof buf) < 0) {
        snprintf(why, whylen, "/proc/self/statm: %s", sf_errno_text(errno));
        return false;
    }
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2) {
        snprintf(why, whylen, "/proc/self/statm: unexpected content");
        return false;
    }
    long pagesize = sysconf(_SC_PAGESIZE);
    *bytes = (uint64_t)resident * (uint64_t)(pagesize > 0 ? pagesize : SF_OS_PAGE);
    return true;
}

bool sf_snapshot_thread_name(int tid, char *buf, size_t len) {
    char path[64];
    if (tid <= 0 || len == 0) return false;
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
    ssize_t n = read_small(path, buf, len);
    if (n <= 0) return false;
    if (buf[n - 1] == '\n') buf[n - 1] = '\0';
    return true;
}
