/* segment.c - segments and spans: where pages and large blocks come from.
 *
 * A small or medium segment belongs to one heap and is cut into pages of one
 * size (64 KiB or 1 MiB); the heap keeps a list of its segments that still
 * have free pages.  A span (large or huge) is one block in one or more whole
 * segments, owned by no heap: any thread frees it directly.
 *
 * Every mapping goes through span_map/span_unmap, which apply the
 * segments.max cap and the large cache.  The process-wide list of live
 * segments (for statistics and introspection) is guarded by sf_seg_lock,
 * taken only when a segment is created or released. */
#include "internal.h"

pthread_mutex_t sf_seg_lock = PTHREAD_MUTEX_INITIALIZER;
sf_segment_t *sf_all_segments;
static uint64_t next_segment_id;
static _Atomic bool enomem_reported;

static void report_cap_once(void) {
    if (atomic_exchange(&enomem_reported, true)) return;
    sf_write_stderr("sefer: segments.max reached: allocations fail with ENOMEM until memory is "
                    "freed (reported once)\n");
}

/* Counts `count` more mapped segments against segments.max. */
bool sf_reserve_segments(size_t count) {
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t max = sf_knob(SF_KNOB_SEGMENTS_MAX);
        uint64_t cur = atomic_load(&sf_gstats.segments);
        while (cur + count <= max) {
            SF_LS_RMW(SEG_RESERVE_CAS);
            if (atomic_compare_exchange_weak(&sf_gstats.segments, &cur, cur + count)) {
                uint64_t peak = atomic_load(&sf_gstats.segments_peak);
                while (cur + count > peak &&
                       (SF_LS_RMW(SEG_RESERVE_CAS),
                        !atomic_compare_exchange_weak(&sf_gstats.segments_peak, &peak, cur + count))) {
                }
                return true;
            }
        }
        if (attempt != 0) break;
        /* at the cap: the empty segments heaps keep for their waiting pages
         * (segment_waits) go to the cache, and the cache gives back */
        sf_heaps_release_waiting();
        if (atomic_load(&sf_gstats.cache_spans) > 0) sf_cache_purge(true);
    }
    /* a single request larger than the whole cap is just too big to serve */
    if (count <= sf_knob(SF_KNOB_SEGMENTS_MAX)) report_cap_once();
    return false;
}

void sf_release_segments(size_t count) { sf_stat_sub(&sf_gstats.segments, count); }

/* Maps `size` bytes aligned to SF_SEG_SIZE from the OS, within segments.max. */
static void *span_map(size_t size) {
    if (!sf_reserve_segments(size >> SF_SEG_SHIFT)) return NULL;
    void *p = sf_os_map_aligned(size, SF_SEG_SIZE);
    if (p != NULL && ((uintptr_t)p >> SF_SEG_SHIFT) + (size >> SF_SEG_SHIFT) > SF_SEGMAP_CHUNKS) {
        sf_os_unmap(p, size); /* above the 47-bit space the map covers */
        p = NULL;
    }
    if (p == NULL) {
        sf_release_segments(size >> SF_SEG_SHIFT);
        return NULL;
    }
    sf_stat_add(&sf_gstats.reserved, size);
    return p;
}

/* Guard pages (guard level >= 2).  Every mapping has a no-access page at
 * SEG_GUARD_OFF, just below 64 KiB: after a segment's metadata, before a
 * large block (which starts at 64 KiB); and one after what is used of it: a
 * segment's last page, or the page right after a large block.  The first is
 * set when the mapping is made and stays; the second moves only when a
 * cached span is reused for something that ends elsewhere, so a loop of
 * same-sized large blocks makes no mprotect (cache.c keeps its offset). */
#define SEG_GUARD_OFF (SF_SEG_META_SIZE - SF_OS_PAGE)

static bool guard_pages(void) { return sf_guard_level >= 2; }

/* Moves the end guard page of the span at base from offset `from` (0: none)
 * to `to`.  False if the old one could not be made accessible again: the
 * span cannot be used (span_drop it). */
static bool guard_move(uint8_t *base, size_t from, size_t to) {
    if (from == to) return true;
    if (from != 0 && !sf_os_protect(base + from, SF_OS_PAGE, true)) return false;
    sf_os_protect(base + to, SF_OS_PAGE, false);
    return true;
}

/* A span of at least *size bytes: from the cache (up to max_size, *size set
 * to what was taken) or a new mapping.  *resident: how many bytes from the
 * start may still hold old pages (a reused cached span; 0 for a fresh
 * mapping, which reads as zero).  *access: what of it is no-access (a fresh
 * mapping: nothing at levels 0-1, the guard page below 64 KiB at level 2;
 * see "The unused part of a segment" and "Guard pages"). */
static bool heap_release_empty(sf_heap_t *heap);
/* keep_kind: SF_SEG_SMALL or SF_SEG_MEDIUM (a page: the cache's spans and
 * the heap's pages of the other size go), or SHED_SPAN (a span: the
 * heap's pages and the cache's memory of released segments go; cached
 * large blocks' spans could serve it, or the next one) */
#define SHED_SPAN 255u
static void shed_before_growth(sf_heap_t *heap, size_t bytes, unsigned keep_kind);

/* heap: the calling thread's own heap (or one it holds the lock of), whose
 * idle memory goes first (see "Growth" below); NULL: none.  touch: the
 * bytes from the span's start its taker will use (a segment: all of it; a
 * large block: its header and block, not the slack past the block).
 *
 * Resident memory first, wherever it is: a cached span whose first `touch`
 * bytes may all be resident, then the heap's own empty segments (released
 * to the cache, resident as they are), and only then a cached span the
 * decommit policy emptied, or a new mapping.  The cache's smallest fit
 * alone took the decommitted spans of freed large blocks while the heap's
 * empty small segments waited, resident, beside them: bench/phases's 16 KiB
 * blocks were faulted in anew on every cycle, and as much of the small
 * pages shed for it ("Growth"), 0.3 of the row's time.  (Not under eager
 * decommit, which keeps nothing resident in the cache, nor with guard
 * pages, whose spans and segments always end in one: there the first two
 * asks could never be answered.) */
static void *span_take(sf_heap_t *heap, size_t *size, size_t max_size, size_t touch, bool cacheable,
                       size_t *resident, sf_span_access_t *access, bool *pages) {
    *pages = false;
    size_t want = !guard_pages() && sf_knob(SF_KNOB_DECOMMIT_POLICY) != SF_DECOMMIT_EAGER ? touch : 0;
    for (int attempt = 0; cacheable && attempt < 3; attempt++) {
        /* 0: resident (any, if want is 0); 1: the same, after the heap's
         * empty segments went to the cache (skipped if it had none); 2:
         * any, if the first two asked for resident memory */
        if (attempt == 1 && (heap == NULL || !heap_release_empty(heap))) continue;
        if (attempt == 2 && want == 0) break;
        size_t got = 0;
        void *p = sf_cache_take(*size, max_size, attempt < 2 ? want : 0, &got, resident, access, pages);
        if (p != NULL) {
            *size = got;
            return p;
        }
    }
    *resident = 0;
    *access = (sf_span_access_t){*size, 0, false};
    uint8_t *p = span_map(*size);
    if (p != NULL && guard_pages()) sf_os_protect(p + SEG_GUARD_OFF, SF_OS_PAGE, false);
    return p;
}

/* committed: its bytes counted in stats.bytes_committed; resident: how far
 * from its start they may lie (at least committed); access: what of it is
 * no-access (its open part at least resident); all kept with it in the
 * cache.  freed_block: the span of a large block freed just now. */
static void span_unmap(void *base, size_t size, size_t committed, size_t resident, sf_span_access_t access,
                       bool cacheable, bool freed_block) {
    if (cacheable && sf_cache_put(base, size, resident, committed, access, freed_block)) return;
    sf_os_unmap(base, size);
    sf_stat_sub(&sf_gstats.committed, committed);
    sf_stat_sub(&sf_gstats.reserved, size);
    sf_stat_add(&sf_gstats.decommitted_total, committed);
    sf_release_segments(size >> SF_SEG_SHIFT);
}

/* Gives back a span span_take returned, unused (its counted bytes were
 * handed to the taker, who counted none yet). */
static void span_drop(void *base, size_t size) {
    span_unmap(base, size, 0, 0, (sf_span_access_t){size, 0, false}, false, false);
}

/* The list of all segments and the segment map change together, under
 * sf_seg_lock: sefer_check (check.c) walks the one and reads the other
 * holding it.  Each changed alone, a thread that had cleared a span's map
 * bytes and then waited for the lock (a check holds it for a whole pass),
 * or was preempted between the two, showed the checker a listed segment
 * missing from the map; under load that lasted through every one of the
 * checker's passes and was reported as damage.  (The free paths read the
 * map without the lock, as before: no pointer into a segment exists
 * before it is linked, and none may be freed after it is unlinked.) */
static void segment_link_all(sf_segment_t *seg, size_t chunks, uint8_t head) {
    seg->not_a_page = seg->not_a_page_bound = 0; /* (types.h) */
    seg->sampled_mask = 0;
    sf_lock(&sf_seg_lock);
    seg->id = ++next_segment_id;
    seg->all_prev = NULL;
    seg->all_next = sf_all_segments;
    if (sf_all_segments) sf_all_segments->all_prev = seg;
    sf_all_segments = seg;
    sf_segmap_mark(seg, chunks, head);
    sf_unlock(&sf_seg_lock);
}

static void segment_unlink_all(sf_segment_t *seg, size_t chunks) {
    sf_lock(&sf_seg_lock);
    sf_segmap_mark(seg, chunks, SF_SEGMAP_NONE);
    if (seg->all_prev) seg->all_prev->all_next = seg->all_next;
    else sf_all_segments = seg->all_next;
    if (seg->all_next) seg->all_next->all_prev = seg->all_prev;
    sf_unlock(&sf_seg_lock);
}

static size_t header_bytes(unsigned page_count) {
    return sizeof(sf_segment_t) + page_count * sizeof(sf_page_t);
}

/* The OS pages the header's descriptors reach into. */
static size_t header_pages_bytes(unsigned page_count) { return sf_align_up(header_bytes(page_count), SF_OS_PAGE); }

/* committed_bytes and span_bytes are read by introspection snapshots while
 * the owner changes them: relaxed stores (a plain mov). */
static void commit_add(sf_segment_t *seg, size_t n) {
    SF_SET(seg->committed_bytes, seg->committed_bytes + n);
    sf_stat_add(&sf_gstats.committed, n);
    uint64_t now = atomic_load_explicit(&sf_gstats.committed, memory_order_relaxed);
    if (SF_UNLIKELY(sf_phase_on())) sf_phase_committed(now);
    if (SF_UNLIKELY(now > atomic_load_explicit(&sf_memlimit_next, memory_order_relaxed))) sf_memlimit_pressure(now);
}

/* ---- the segment lock ----------------------------------------------------- */

/* A heap's segments, their free pages and its purge queue of waiting pages
 * were its owner's alone (or a collector's, which holds the heap as its
 * owner would).  But a thread that frees a lot and then waits (a worker
 * parked on a queue) never reaches its next page allocation, where its
 * waiting pages would have gone back: they stayed committed for as long as
 * it waited, and nothing else could give them back.  threads.cache_max and
 * memory.limit need any thread to be able to decommit any heap's waiting
 * pages.  So whoever changes that state takes the heap's segment lock: the
 * holder of the heap (nested calls count seg_depth, which only the holder
 * touches) and a thread purging another heap's pages (sf_segment_shed, a
 * try only: it never waits for a heap).  It is taken once per page taken
 * from or given back to a segment, never on a block's path. */

/* One try at the flag (a load first: a held lock's line is not written). */
static bool seg_try(sf_heap_t *heap) {
    uint32_t expected = 0;
    return atomic_load_explicit(&heap->seg_busy, memory_order_relaxed) == 0 &&
           atomic_compare_exchange_strong_explicit(&heap->seg_busy, &expected, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

static void seg_release(sf_heap_t *heap) { atomic_store_explicit(&heap->seg_busy, 0, memory_order_release); }

static void seg_lock(sf_heap_t *heap) {
    if (heap->seg_depth++ != 0) return;
    while (!seg_try(heap)) sched_yield(); /* a purge of a few pages holds it */
}

static void seg_unlock(sf_heap_t *heap) {
    if (--heap->seg_depth != 0) return;
    seg_release(heap);
    /* (the caller holds this heap's lock no more; it may hold others, or
     * the fallback heap's lock: the purge only tries heaps' locks and
     * skips those held) */
    if (SF_UNLIKELY(sf_heaps_over_cache_max())) sf_heaps_shed_waiting();
}

void sf_segment_lock(sf_heap_t *heap) { seg_lock(heap); }

/* The same with a bounded wait, for the exit sweep (check.c), which may run
 * in a thread interrupted while it held the lock: false if it is not had
 * within about as long as sf_lock_bounded waits, or if the caller holds
 * it already (its holder, interrupted, was changing the heap). */
bool sf_segment_lock_bounded(sf_heap_t *heap) {
    if (heap->seg_depth != 0) return false;
    for (int i = 0; i < 20000; i++) {
        if (seg_try(heap)) {
            heap->seg_depth = 1;
            return true;
        }
        sched_yield();
    }
    return false;
}
void sf_segment_unlock(sf_heap_t *heap) { seg_unlock(heap); }

/* ---- small and medium segments ---------------------------------------- */

static void heap_seglist_push(sf_heap_t *heap, sf_segment_t *seg) {
    sf_segment_t **head = &heap->free_segs[seg->kind];
    seg->heap_prev = NULL;
    seg->heap_next = *head;
    if (*head) (*head)->heap_prev = seg;
    *head = seg;
}

static void heap_seglist_remove(sf_heap_t *heap, sf_segment_t *seg) {
    if (seg->heap_prev) seg->heap_prev->heap_next = seg->heap_next;
    else heap->free_segs[seg->kind] = seg->heap_next;
    if (seg->heap_next) seg->heap_next->heap_prev = seg->heap_prev;
    seg->heap_next = seg->heap_prev = NULL;
}

/* A segment cut from a cached span whose first `resident` bytes may hold
 * old pages: those of its pages the kernel says are resident (in part)
 * count as committed from the start, so using them is no growth
 * (shed_before_growth) and the decommit policy gives them back like any
 * other page.  (The cache's figure is an upper bound, holes and all: a
 * page it covers may be resident or not.) */
static void mark_resident_pages(sf_segment_t *seg, size_t resident) {
    unsigned char vec[SF_SEG_SIZE / SF_OS_PAGE];
    bool known = sf_os_resident(seg, SF_SEG_SIZE, vec);
    for (unsigned i = 0; i < seg->page_count; i++) {
        sf_page_t *pg = &seg->pages[i];
        size_t start = (size_t)(pg->page_start - (uint8_t *)seg), end = start + pg->page_bytes;
        if (pg->page_bytes == 0 || start >= resident) continue;
        bool any = !known;
        for (size_t o = start; o < end && !any; o += SF_OS_PAGE) any = vec[o / SF_OS_PAGE] & 1;
        if (!any) continue;
        pg->committed = SF_COMMIT_RESIDENT;
        commit_add(seg, pg->page_bytes);
    }
}

/* log2 of the page size of a small or medium segment. */
static unsigned kind_page_shift(unsigned kind) {
    return kind == SF_SEG_SMALL ? SF_SMALL_PAGE_SHIFT : SF_MEDIUM_PAGE_SHIFT;
}

/* Gives pages[pages_ready .. idx] their place (the owner, under its
 * segment lock; the pages are free and all zero until then). */
static void segment_ready_to(sf_segment_t *seg, unsigned idx) {
    for (unsigned i = seg->pages_ready; i <= idx; i++) {
        size_t start, bytes = sf_segment_page_place(seg, i, &start);
        /* (relaxed stores: a snapshot reads them once the page is in use,
         * under sf_seg_lock, which this owner does not hold) */
        SF_SET(seg->pages[i].page_start, (uint8_t *)seg + start);
        SF_SET(seg->pages[i].page_bytes, bytes);
    }
    if (idx >= seg->pages_ready) SF_SET(seg->pages_ready, (uint16_t)(idx + 1));
}

/* ---- the unused part of a segment ------------------------------------------
 *
 * At guard levels 0-1 a block has no canary and no guard page beside it: a
 * write that runs far past its block, or below it, lands on whatever lies
 * there (other blocks, the next segment's header) and nothing notices.  So a
 * new segment's address past its metadata is made no-access
 * (guard.unused_no_access), and opened as pages are taken: a write that runs
 * out of the part in use faults there, as one past the top of glibc's heap
 * does.  A segment opens by at least the page taken and by as much again as
 * is open already, at most UNUSED_STEP_MAX at a time: a small segment opens
 * in 8 mprotect calls over its life, about one for every eight pages it
 * takes (each of which costs its sixteen page faults anyway), a medium
 * segment in at most four (steps of 256 KiB, 18 calls, ran the phases row,
 * a fresh segment every 4 MiB, a little slower, within its rounds'
 * spread).  A large block's span is closed the same way past its block
 * (the slack up to the span's 4 MiB boundary), opens as realloc grows the
 * block in place, and goes to the large cache as it is: the cache keeps
 * how far each span is open, so a span reused for a block of the same size
 * needs no mprotect (cache.c).  Levels 2-3 have their guard pages and
 * canaries instead.  A segment so closed is four kernel mappings (its descriptors,
 * the metadata page's hole, the open part, the closed part) and three once
 * open to its end, where an open one is one (or none: adjacent open ones
 * merge), so from UNUSED_SEGMENTS_MAX live segments on new ones stay open:
 * the kernel allows 65 530 mappings by default, and the program needs its
 * own. */
#define UNUSED_STEP_MAX ((size_t)1 << 20)
#define UNUSED_SEGMENTS_MAX 4096u

/* resident: how far from the segment's start old pages may lie (a span
 * reused from the large cache): that part stays open.  Made no-access and
 * then opened again, such pages lose their write permission in the page
 * table and each takes a fault at its next write: the phases row ran at
 * 0.71x, larson with 1.26x the minor faults, before this was left out. */
static bool unused_closes(void) {
    /* (not with huge pages asked for: the 4 KiB no-access pieces would
     * keep the segment's first 2 MiB from ever being one) */
    return !guard_pages() && !sf_tracked && sf_knob(SF_KNOB_GUARD_UNUSED_NO_ACCESS) &&
           sf_knob(SF_KNOB_MEMORY_THP) == SF_THP_NEVER &&
           atomic_load_explicit(&sf_gstats.segments, memory_order_relaxed) <= UNUSED_SEGMENTS_MAX;
}

static void segment_close_unused(sf_segment_t *seg, size_t resident) {
    SF_SET(seg->open_bytes, SF_SEG_SIZE);
    seg->closed = false;
    if (!unused_closes()) return;
    size_t open = sf_align_up(resident, SF_OS_PAGE);
    if (open < SF_SEG_META_SIZE) open = SF_SEG_META_SIZE;
    if (open >= SF_SEG_SIZE) return;
    /* (recorded closed even if the kernel refused: mprotect changes one
     * mapping after another and stops at the first it cannot, so a span
     * made of several may be left part no-access; opening what is
     * accessible already is harmless) */
    SF_SET(seg->open_bytes, open);
    seg->closed = true;
    if (!sf_os_no_access((uint8_t *)seg + open, SF_SEG_SIZE - open)) return;
    /* and the metadata page past the descriptors (a medium segment's last
     * OS page of it holds the end mark, and stays), if fresh: a write that
     * runs up into the segment from below, or down from its first page,
     * faults there before it reaches anything it could corrupt unseen */
    size_t from = header_pages_bytes(seg->page_count);
    size_t to = seg->kind == SF_SEG_MEDIUM ? SF_SEG_META_SIZE - SF_OS_PAGE : SF_SEG_META_SIZE;
    if (resident == 0 && from < to) sf_os_no_access((uint8_t *)seg + from, to - from);
}

/* Opens seg up to page idx's end at least; false if the kernel refused
 * (the page cannot be used). */
static bool segment_open_for(sf_segment_t *seg, unsigned idx) {
    size_t start, end = sf_segment_page_place(seg, idx, &start) + start, open = seg->open_bytes;
    if (end <= open) return true;
    size_t step = open - SF_SEG_META_SIZE, to = open + (step < UNUSED_STEP_MAX ? step : UNUSED_STEP_MAX);
    if (to < end) to = end;
    if (to > SF_SEG_SIZE) to = SF_SEG_SIZE;
    if (!sf_os_protect((uint8_t *)seg + open, to - open, true)) return false;
    SF_SET(seg->open_bytes, to);
    return true;
}

/* Opens all of seg before it goes to the large cache, which knows only how
 * far from its start each span is open (the metadata page's closed part
 * lies before the open pages); false if it could not (unmap it instead). */
static bool segment_open_all(sf_segment_t *seg) {
    if (!seg->closed) return true;
    size_t from = header_pages_bytes(seg->page_count); /* (the metadata page's part too) */
    if (!sf_os_protect((uint8_t *)seg + from, SF_SEG_SIZE - from, true)) return false;
    SF_SET(seg->open_bytes, SF_SEG_SIZE);
    seg->closed = false;
    return true;
}

static sf_segment_t *segment_create(sf_heap_t *heap, unsigned kind) {
    size_t size = SF_SEG_SIZE, resident = 0;
    sf_span_access_t access;
    bool pages = false;
    sf_segment_t *seg = span_take(heap, &size, SF_SEG_SIZE, SF_SEG_SIZE, true, &resident, &access, &pages);
    if (seg == NULL) return NULL;
    /* (a large block's span, cached closed past its block or with its
     * hole: opened whole, then closed again below as a fresh segment is;
     * what it opens holds no page) */
    size_t from = access.hole ? SF_OS_PAGE : access.open;
    if ((from < size && !sf_os_protect((uint8_t *)seg + from, size - from, true)) ||
        (guard_pages() && !guard_move((uint8_t *)seg, access.guard, SF_SEG_SIZE - SF_OS_PAGE))) {
        span_drop(seg, size);
        return NULL;
    }
    bool zero = resident == 0;
    unsigned shift = kind_page_shift(kind);
    unsigned bias = kind == SF_SEG_SMALL ? 1 : 0; /* small page 0 is the metadata */
    unsigned count = (unsigned)(SF_SEG_SIZE >> shift) - bias;
    size_t hdr = header_pages_bytes(count);
    if (!zero) memset(seg, 0, header_bytes(count));
    seg->magic = SF_SEG_MAGIC ^ (uintptr_t)seg;
    seg->heap = heap;
    seg->page_shift = (uint8_t)shift;
    seg->page_bias = (uint8_t)bias;
    seg->kind = (uint8_t)kind;
    seg->page_count = (uint16_t)count;
    seg->span_size = size;
    seg->committed_bytes = 0;
    if (kind == SF_SEG_MEDIUM && !guard_pages()) { /* (its page counted as the header's) */
        *(uint64_t *)sf_segment_end_mark(seg) = sf_segment_end_mark_value(seg);
        hdr += hdr < SF_SEG_META_SIZE ? SF_OS_PAGE : 0;
    }
    commit_add(seg, hdr);
    /* guard pages (span_take): after the metadata, and at the segment's
     * end, so an overflow of the last page cannot reach the next segment
     * (sf_segment_page_place takes it off the last page) */
    seg->pages_ready = 0;
    for (unsigned i = 0; i < count; i++) {
        size_t start;
        if (sf_segment_page_place(seg, i, &start) != 0) seg->free_mask |= (uint64_t)1 << i;
    }
    /* A fresh header stays untouched past the descriptors in use; one
     * with old data was written whole by the memset above anyway, and
     * valgrind's tracking marks every descriptor's pointers at once. */
    if (!zero || sf_tracked) segment_ready_to(seg, count - 1);
    if (sf_tracked) sf_track_segment_header(seg);
    if (resident != 0) mark_resident_pages(seg, resident);
    segment_close_unused(seg, resident);
    segment_link_all(seg, 1, kind == SF_SEG_SMALL ? SF_SEGMAP_SMALL_HEAD : SF_SEGMAP_MEDIUM_HEAD);
    heap_seglist_push(heap, seg);
    return seg;
}

static void segment_release(sf_heap_t *heap, sf_segment_t *seg) {
    heap_seglist_remove(heap, seg);
    segment_unlink_all(seg, 1);
    /* the cache knows a resident prefix, not a set of pages: up to the end
     * of the last committed page */
    size_t end = header_pages_bytes(seg->page_count);
    if (seg->kind == SF_SEG_MEDIUM && !guard_pages() && end < SF_SEG_META_SIZE) end = SF_SEG_META_SIZE;
    for (unsigned i = 0; i < seg->pages_ready; i++) { /* (the rest were never committed) */
        const sf_page_t *page = &seg->pages[i];
        size_t page_end = (size_t)(page->page_start - (uint8_t *)seg) + page->page_bytes;
        if (page->committed && page_end > end) end = page_end;
    }
    if (end < seg->committed_bytes) end = seg->committed_bytes;
    bool cacheable = segment_open_all(seg);
    sf_span_access_t access = {SF_SEG_SIZE, guard_pages() ? SF_SEG_SIZE - SF_OS_PAGE : 0, false};
    span_unmap(seg, seg->span_size, seg->committed_bytes, end, access, cacheable, false);
}

static void page_decommit(sf_segment_t *seg, sf_page_t *page) {
    if (!page->committed) return;
    sf_os_decommit(page->page_start, page->page_bytes);
    page->committed = 0;
    SF_SET(seg->committed_bytes, seg->committed_bytes - page->page_bytes);
    sf_stat_sub(&sf_gstats.committed, page->page_bytes);
    sf_stat_add(&sf_gstats.decommitted_total, page->page_bytes);
}

/* A page that emptied waits on its heap's purge queue (ordered by deadline)
 * and on the list of the heap's waiting pages of its class. */
static void purge_queue_add(sf_heap_t *heap, sf_page_t *page, uint64_t deadline) {
    page->purge_at = deadline;
    page->prev = heap->purge.last;
    page->next = NULL;
    if (heap->purge.last) heap->purge.last->next = page;
    else heap->purge.first = page;
    heap->purge.last = page;
    sf_page_t **head = &heap->purge_class[page->class_idx];
    page->class_prev = NULL;
    page->class_next = *head;
    if (*head) (*head)->class_prev = page;
    *head = page;
    heap->purge_count++;
    heap->purge_medium += sf_segment_of(page)->kind == SF_SEG_MEDIUM;
    if (page->committed) {
        SF_SET(heap->purge_bytes, heap->purge_bytes + page->page_bytes);
        sf_stat_add(&sf_gstats.heaps_waiting, page->page_bytes);
    }
}

static void purge_queue_remove(sf_heap_t *heap, sf_page_t *page) {
    sf_queue_remove(&heap->purge, page);
    if (page->class_prev) page->class_prev->class_next = page->class_next;
    else heap->purge_class[page->class_idx] = page->class_next;
    if (page->class_next) page->class_next->class_prev = page->class_prev;
    page->class_next = page->class_prev = NULL; /* (they are free and local_free again) */
    page->purge_at = 0;
    heap->purge_count--;
    heap->purge_medium -= sf_segment_of(page)->kind == SF_SEG_MEDIUM;
    if (page->committed) {
        SF_SET(heap->purge_bytes, heap->purge_bytes - page->page_bytes);
        sf_stat_sub(&sf_gstats.heaps_waiting, page->page_bytes);
    }
    /* an ownerless heap's share of sf_gstats.exited_waiting is at most what
     * it holds, whoever took its pages (heap.c, exited_pages_bound) */
    if (heap->exited_counted > heap->purge_bytes) {
        sf_stat_sub(&sf_gstats.exited_waiting, heap->exited_counted - heap->purge_bytes);
        heap->exited_counted = heap->purge_bytes;
    }
}

/* Whether a page of seg waits on its heap's purge queue.  A segment whose
 * last page in use empties stays with its heap while one does: its pages
 * are resident and may be wanted again within the delay, and a heap whose
 * pages of a size come and go (random medium sizes: a class's second page)
 * gave its segment to the large cache and took one back, under the cache's
 * lock, every few bursts.  It goes when its last waiting page is
 * decommitted (sf_segment_collect_purges), at once with eager or no
 * decommit, and when segments.max is reached (sf_reserve_segments). */
static bool segment_waits(const sf_segment_t *seg) {
    for (unsigned i = 0; i < seg->page_count; i++)
        if (!seg->pages[i].in_use && seg->pages[i].purge_at) return true; /* (in use: the secret) */
    return false;
}

/* Takes a waiting page off the purge queue and decommits it, and its
 * segment goes if nothing else of it is in use or waits; returns the
 * bytes given back. */
static size_t purge_now(sf_heap_t *heap, sf_page_t *page) {
    purge_queue_remove(heap, page);
    size_t bytes = page->committed ? page->page_bytes : 0;
    sf_segment_t *seg = sf_segment_of(page);
    page_decommit(seg, page);
    if (seg->used_pages == 0 && !segment_waits(seg)) segment_release(heap, seg);
    return bytes;
}

/* Decommits pages whose delayed-decommit deadline has passed, oldest
 * first, but keeps as many as the heap took for use lately
 * (decommit.c: 0 unless decommit.policy = adaptive); all of them with
 * `force`.  The purge queue is ordered by deadline. */
static size_t collect_purges(sf_heap_t *heap, bool force) {
    if (heap->purge.first == NULL) return 0;
    /* (a heap whose thread is gone keeps nothing for its recent peak: the
     * peak was that thread's; the fallback heap, shared, is never that) */
    int state = atomic_load_explicit(&heap->state, memory_order_relaxed);
    bool ownerless = heap != &sf_heap_fallback && (state == SF_HEAP_ABANDONED || state == SF_HEAP_COLLECTING);
    uint64_t now = sf_now_ms(),
             keep = force || ownerless ? 0 : sf_reuse_keep(&heap->page_reuse, now, heap->pages_in_use);
    size_t freed = 0;
    sf_page_t *page;
    while ((page = heap->purge.first) != NULL && (force || page->purge_at <= now) && heap->purge_count > keep) {
        freed += purge_now(heap, page);
    }
    return freed;
}

size_t sf_segment_collect_purges(sf_heap_t *heap, bool force) {
    seg_lock(heap);
    size_t freed = collect_purges(heap, force);
    seg_unlock(heap);
    return freed;
}

/* Decommits heap's waiting pages, oldest first, whatever their deadlines,
 * until `bytes` went back or none waits; returns the bytes given back. */
static size_t purge_oldest(sf_heap_t *heap, uint64_t bytes, uint64_t due_before) {
    size_t freed = 0;
    sf_page_t *page;
    while (freed < bytes && (page = heap->purge.first) != NULL && page->purge_at <= due_before)
        freed += purge_now(heap, page);
    return freed;
}

size_t sf_segment_purge_oldest(sf_heap_t *heap, size_t bytes) {
    seg_lock(heap);
    size_t freed = purge_oldest(heap, bytes, UINT64_MAX);
    seg_unlock(heap);
    return freed;
}

/* A purge of any heap's waiting pages, by any thread (threads.cache_max,
 * memory.limit): oldest first, those whose deadline is at most
 * due_before, until `bytes` went back; 0 at once if the heap's segment
 * lock is held (its holder is changing them: the purge tries the next
 * heap). */
size_t sf_segment_shed(sf_heap_t *heap, uint64_t bytes, uint64_t due_before) {
    if (!seg_try(heap)) return 0;
    size_t freed = purge_oldest(heap, bytes, due_before);
    seg_release(heap);
    return freed;
}

/* The most recently freed page that served class_idx and still waits for
 * its decommit, or NULL.  Its memory is resident up to where that class
 * carved it: taking it again for the same class reuses exactly that, where
 * a page of another class may keep its old prefix resident beyond what the
 * new class uses; the pages nobody takes back age out of the queue and are
 * decommitted. */
static sf_page_t *purge_queue_find(sf_heap_t *heap, unsigned class_idx) {
    return heap->purge_class[class_idx];
}

/* How far into the purge queue a resident page of the right size is
 * looked for when none of the class waits. */
#define PURGE_OTHER_LOOKAHEAD 16

/* No page of the class waits: the oldest waiting page of the same page
 * size past its delay, if one is near the front of the queue.  It is
 * resident, and the purge queue holds it only because a recent peak of
 * this heap's use may come back (decommit.c), so it serves the new class
 * rather than a fresh page being faulted in beside it, old pages and all.
 * (Its old class's prefix past the new class's first carve used to go back
 * to the OS, against pages creeping up to their longest prefix: the
 * phases workload then refaulted 176 MiB at every change of size and ran
 * 1.45x slower, and no row of bench/compare held less memory for it.  What
 * bounds idle memory now is the growth rule: "Growth" below.)
 *
 * A medium page still within its delay stays its class's: with random sizes a
 * class needs a second page now and then and lets it go again, and when
 * the others took such a page in turn (trimming each, as pages reused for
 * another class were then) every refill paid a madvise and faulted the
 * prefix in again; 256 KiB blocks ran at 2 M allocations a second
 * (docs/design.md, "Medium blocks"). */
static sf_page_t *purge_queue_other(sf_heap_t *heap, unsigned class_idx, uint64_t now) {
    bool small = class_idx <= SF_SMALL_CLASS_MAX;
    sf_page_t *page = heap->purge.first;
    for (unsigned n = 0; page != NULL && n < PURGE_OTHER_LOOKAHEAD; n++, page = page->next)
        if ((page->class_idx <= SF_SMALL_CLASS_MAX) == small && (small || page->purge_at <= now)) return page;
    return NULL;
}

/* A free page of seg with nothing resident if there is one (never used,
 * or decommitted: the resident ones wait on the purge queue); else the
 * lowest. */
static unsigned free_page_index(const sf_segment_t *seg) {
    for (uint64_t m = seg->free_mask; m != 0; m &= m - 1) {
        unsigned i = (unsigned)__builtin_ctzll(m);
        if (seg->pages[i].purge_at == 0) return i;
    }
    return (unsigned)__builtin_ctzll(seg->free_mask);
}

static sf_page_t *page_alloc(sf_heap_t *heap, unsigned class_idx);

sf_page_t *sf_segment_page_alloc(sf_heap_t *heap, unsigned class_idx) {
    seg_lock(heap);
    sf_page_t *page = page_alloc(heap, class_idx);
    seg_unlock(heap);
    return page;
}

static sf_page_t *page_alloc(sf_heap_t *heap, unsigned class_idx) {
    unsigned kind = class_idx <= SF_SMALL_CLASS_MAX ? SF_SEG_SMALL : SF_SEG_MEDIUM;
    if ((++heap->page_allocs & 15) == 0) {
        collect_purges(heap, false);
        sf_heaps_purge_abandoned();
    }
    /* (memory.limit_action = fail: a page's worth, whether or not the page
     * found is resident; at the limit none is, the admission purged them) */
    if (!sf_memlimit_admit((size_t)1 << kind_page_shift(kind)))
        return NULL;
    sf_page_t *page;
    sf_segment_t *seg;
    unsigned idx;
    uint64_t now = sf_now_ms();
    bool collected = false;
again:
    page = purge_queue_find(heap, class_idx);
    if (page == NULL) page = purge_queue_other(heap, class_idx, now);
    if (page != NULL) {
        seg = sf_segment_of(page);
        idx = (unsigned)(page - seg->pages);
        if (seg->free_mask == ((uint64_t)1 << idx)) heap_seglist_remove(heap, seg);
        seg->free_mask &= ~((uint64_t)1 << idx);
    } else {
        seg = heap->free_segs[kind];
        /* Before a new segment: the blocks other threads freed into this
         * heap, which wait on their pages' remote lists until the owner
         * runs dry there (remote.c), may have emptied pages of other
         * classes; taken in, those pages go back to their segments and
         * serve this one.  (On the soak workload 60-90 MiB of blocks sat
         * on remote lists: docs/design.md, "Heap profiling".) */
        if (seg == NULL && !collected) {
            collected = true;
            if (sf_page_collect_heap_ex(heap, false, false) != 0) goto again; /* (waiting pages first) */
        }
        if (seg == NULL && (seg = segment_create(heap, kind)) == NULL) return NULL;
        idx = free_page_index(seg);
        if (!segment_open_for(seg, idx)) {
            /* (a segment made just now holds nothing and waits for
             * nothing: nothing else would ever release it) */
            if (seg->used_pages == 0 && !segment_waits(seg)) segment_release(heap, seg);
            return NULL;
        }
        seg->free_mask &= ~((uint64_t)1 << idx);
        if (seg->free_mask == 0) heap_seglist_remove(heap, seg);
        if (idx >= seg->pages_ready) segment_ready_to(seg, idx);
        page = &seg->pages[idx];
    }
    seg->used_pages++;
    if (page->purge_at) purge_queue_remove(heap, page);
    if (!page->committed) {
        page->committed = SF_COMMIT_FRESH;
        commit_add(seg, page->page_bytes);
        shed_before_growth(heap, page->page_bytes, kind);
    } else {
        page->committed = SF_COMMIT_RESIDENT;
    }
    sf_reuse_level(&heap->page_reuse, now, heap->pages_in_use + 1); /* (counted by the caller) */
    sf_page_init(page, class_idx);
    return page;
}

static void page_free(sf_heap_t *heap, sf_page_t *page);

void sf_segment_page_free(sf_heap_t *heap, sf_page_t *page) {
    seg_lock(heap);
    page_free(heap, page);
    seg_unlock(heap);
}

static void page_free(sf_heap_t *heap, sf_page_t *page) {
    sf_segment_t *seg = sf_segment_of(page);
    unsigned idx = (unsigned)(page - seg->pages);
    SF_SET(page->in_use, 0);
    SF_SET(page->remote_bytes, 0);
    page->purge_at = 0;
    SF_SET(page->fast_heap, NULL);
    sf_page_set_fast_gate(page, false, false);
    page->free = page->local_free = NULL;
    SF_SET(page->used, 0);
    if (seg->free_mask == 0) heap_seglist_push(heap, seg);
    seg->free_mask |= (uint64_t)1 << idx;
    seg->used_pages--;
    switch (sf_knob(SF_KNOB_DECOMMIT_POLICY)) {
    case SF_DECOMMIT_EAGER:
        if (seg->used_pages != 0) page_decommit(seg, page); /* (else all of it goes below) */
        break;
    case SF_DECOMMIT_DELAYED:
    case SF_DECOMMIT_ADAPTIVE:
        purge_queue_add(heap, page, sf_now_ms() + sf_knob(SF_KNOB_DECOMMIT_DELAY) + 1);
        break;
    default:
        break;
    }
    if (seg->used_pages == 0 && !segment_waits(seg)) segment_release(heap, seg);
}

/* ---- growth: idle memory before new memory --------------------------------- */

/* Memory freed in one size must serve the next before anything new is
 * mapped: a program that frees 200 MiB of 64-byte blocks and then
 * allocates 200 MiB of 16 KiB blocks, then of 4 MiB blocks, should peak
 * near 200 MiB, not near 600.  Two things stood in the way.  A heap keeps
 * its empty segments while their pages wait out decommit.delay (and, with
 * the adaptive policy, as long as its recent peak says they may come
 * back), but a waiting small page serves no medium class and no span.
 * And the large cache kept resident spans too big or too scattered for
 * the request while a new mapping was faulted in beside them.
 *
 * So a request the large cache cannot serve from resident memory first
 * gives the cache the heap's segments that have no page in use, resident
 * as they are (they merge with the cached spans they touch), and asks
 * again (span_take): a small segment becomes a medium one, or part of a
 * span, with no fault (its resident pages count as committed in their new
 * segment: segment_create).
 * And whenever memory that is not resident is about to be used (a page
 * committed from a fresh or decommitted state, a span's block beyond
 * what its reused span had resident) under the delayed and adaptive
 * policies, as many idle resident bytes go back to the OS at once,
 * whatever their deadlines, of the idle memory that could not have served
 * the request (shed_before_growth says which).  A growing heap holds no
 * more idle memory than it had before it grew.  In a steady state nothing
 * is committed from scratch, and nothing is shed. */

/* The calling thread's heap, if it owns one outright (the fallback heap is
 * shared under a lock the span path does not take). */
static sf_heap_t *growth_heap(void) {
    sf_heap_t *heap = sf_tls_heap;
    return heap->kind == SF_HEAP_REAL && heap != &sf_heap_fallback ? heap : NULL;
}

/* Gives heap's segments with no page in use to the large cache, their
 * resident pages kept; returns whether there were any. */
static bool heap_release_empty(sf_heap_t *heap) {
    bool any = false;
    seg_lock(heap);
    for (unsigned kind = SF_SEG_SMALL; kind <= SF_SEG_MEDIUM; kind++) {
        sf_segment_t *seg = heap->free_segs[kind], *next;
        for (; seg != NULL; seg = next) {
            next = seg->heap_next;
            if (seg->used_pages != 0) continue;
            for (unsigned i = 0; i < seg->page_count; i++)
                if (seg->pages[i].purge_at) purge_queue_remove(heap, &seg->pages[i]);
            segment_release(heap, seg);
            any = true;
        }
    }
    seg_unlock(heap);
    return any;
}

/* How far into the purge queue shed_purges looks past pages it keeps. */
#define SHED_LOOKAHEAD 64

/* Decommits heap's waiting pages, oldest first, but those of segments of
 * keep_kind (pages that could serve the request), until `bytes` went back
 * or none is left near the front; returns the bytes given back. */
static size_t shed_purges(sf_heap_t *heap, size_t bytes, unsigned keep_kind) {
    uint32_t others = keep_kind == SF_SEG_SMALL    ? heap->purge_medium
                      : keep_kind == SF_SEG_MEDIUM ? heap->purge_count - heap->purge_medium
                                                   : heap->purge_count; /* (SHED_SPAN) */
    size_t freed = 0;
    unsigned kept = 0;
    sf_page_t *page, *next;
    for (page = heap->purge.first; freed < bytes && others != 0 && page != NULL && kept < SHED_LOOKAHEAD;
         page = next) {
        next = page->next;
        if (sf_segment_of(page)->kind == keep_kind) {
            kept++;
            continue;
        }
        others--;
        freed += purge_now(heap, page);
    }
    return freed;
}

/* `bytes` of memory not resident are about to be used (mapped, or a page
 * decommitted or never used is committed): as much idle resident memory
 * goes back that could not have served the request: for a page, the
 * cache's spans (the heap chose its own free page over them) and the
 * heap's waiting pages of the other page size; for a span, the heap's
 * waiting pages and the cached memory of released segments.  (A span's
 * growth does not shed cached large blocks' spans: a chain of reallocs
 * doubling to 64 MiB, or a loop of large blocks alternating two spans,
 * would fault them in again on every round; the decommit policy ages
 * them out.) */
static void shed_before_growth(sf_heap_t *heap, size_t bytes, unsigned keep_kind) {
    uint64_t policy = sf_knob(SF_KNOB_DECOMMIT_POLICY);
    if (policy != SF_DECOMMIT_DELAYED && policy != SF_DECOMMIT_ADAPTIVE) return;
    size_t freed = sf_cache_shed(bytes, keep_kind == SHED_SPAN);
    if (freed < bytes && heap != NULL) {
        seg_lock(heap);
        freed += shed_purges(heap, bytes - freed, keep_kind);
        seg_unlock(heap);
    }
    if (freed != 0) sf_stat_add(&sf_gstats.growth_shed, freed);
}

/* ---- spans: large and huge blocks ----------------------------------------- */

/* Resident pages of released segments kept past a span's new block. */
#define SPAN_PAGES_TAIL_KEEP ((size_t)1 << 20)

/* Where the unused part closes (`closes`; levels 0-1, see "The unused part
 * of a segment"), a large block's span no-access from `need` bytes on and
 * in its second page (the hole, below the block), else all of it open; *a:
 * what is no-access now, updated.  need covers the header, the block and
 * any old pages still resident past it (closed and opened again, each
 * would take a fault at its next write).  The hole is made only in a span
 * that reads as zero (`zero`: a new mapping, or a cached span the decommit
 * policy emptied), and kept while the span is reused: in a piece of a
 * split or joined span it would cost calls at nearly every reuse in a
 * loop over blocks of varying sizes (a join opens the upper span's hole,
 * a split leaves the back without one: 2019 calls in 3000 blocks where
 * 86 were made without holes), and the page may hold old data.  False if
 * the kernel refused to open what the block needs. */
static bool span_set_access(uint8_t *base, size_t span, sf_span_access_t *a, size_t need, bool closes, bool zero) {
    size_t want = closes && need < span ? need : span;
    /* (recorded closed even if the kernel refused: see segment_close_unused) */
    if (a->open < want && !sf_os_protect(base + a->open, want - a->open, true)) return false;
    if (a->open < 2 * SF_OS_PAGE && want > SF_OS_PAGE) a->hole = false; /* (that opened it) */
    if (a->open > want) sf_os_no_access(base + want, a->open - want);
    a->open = want;
    if (closes && !a->hole && zero) {
        sf_os_no_access(base + SF_OS_PAGE, SF_OS_PAGE);
        a->hole = true;
    } else if (!closes && a->hole) {
        if (!sf_os_protect(base + SF_OS_PAGE, SF_OS_PAGE, true)) return false;
        a->hole = false;
    }
    return true;
}

/* Opens a span up to `end` at least for its block to grow in place, by as
 * much again as is open already at most UNUSED_STEP_MAX at a time (a block
 * grown a page at a time makes one mprotect call per step, not per page);
 * false if the kernel refused. */
static bool span_open_for(sf_segment_t *seg, size_t end) {
    size_t open = seg->open_bytes;
    if (end <= open) return true;
    size_t to = unused_closes() ? open + (open < UNUSED_STEP_MAX ? open : UNUSED_STEP_MAX) : seg->span_size;
    if (to < end) to = sf_align_up(end, SF_OS_PAGE);
    if (to > seg->span_size) to = seg->span_size;
    if (!sf_os_protect((uint8_t *)seg + open, to - open, true)) return false;
    SF_SET(seg->open_bytes, to);
    seg->closed = to < seg->span_size;
    return true;
}

/* Layout: header in the first OS page, the block at the first address
 * aligned to max(align, SF_OS_PAGE) after it; at guard level >= 2 the block
 * starts at 64 KiB or later, after the guard page below it, and a guard
 * page follows its last page (see "Guard pages" above). */
sf_segment_t *sf_span_alloc(size_t size, size_t align, void **block_out) {
    bool guarded = guard_pages(), closes = !guarded && unused_closes();
    size_t balign = align > SF_OS_PAGE ? align : SF_OS_PAGE;
    /* the lowest block offset: past the header's page, and the hole where
     * the unused part closes */
    size_t first = guarded ? SF_SEG_META_SIZE : closes ? 2 * SF_OS_PAGE : SF_OS_PAGE;
    size_t lead = balign > first ? balign : first;     /* room before the block, at most */
    size_t tail = guarded ? SF_OS_PAGE : 0;
    /* (a request of 0 bytes, aligned_alloc(4 MiB, 0), still takes a page:
     * a block of no bytes aligned to the segment size lay at its span's
     * end, in a chunk the segment map does not give to the span, and its
     * free was refused as foreign) */
    size_t rounded = sf_align_up(size != 0 ? size : 1, SF_OS_PAGE);
    if (rounded < size || rounded + lead < rounded || rounded + lead > ((size_t)1 << 46)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t span = sf_align_up(rounded + lead + tail, SF_SEG_SIZE);
    bool cacheable = span <= (size_t)SF_LARGE_MAX_SEGS * SF_SEG_SIZE;
    size_t resident = 0;
    sf_span_access_t access;
    if (!sf_memlimit_admit(rounded + first)) {
        errno = ENOMEM;
        return NULL;
    }
    /* (with guard pages cached spans are not split: one up to twice the
     * size serves whole, its old pages kept, rather than a new mapping) */
    bool pages = false;
    sf_heap_t *heap = growth_heap();
    /* the blocks on its class lists back to their pages first, as before
     * any growth of the heap (page.c, "Class lists"): a page they alone
     * keep in use would keep its segment from the request */
    if (heap != NULL) sf_cl_flush_all(heap);
    sf_segment_t *seg =
        span_take(heap, &span, guarded ? 2 * span : span, lead + rounded, cacheable, &resident, &access, &pages);
    if (seg == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    bool zero = resident == 0;
    uint8_t *block = (uint8_t *)sf_align_up((uintptr_t)seg + first, balign);
    if (guarded && !guard_move((uint8_t *)seg, access.guard, (size_t)(block - (uint8_t *)seg) + rounded)) {
        span_drop(seg, span);
        errno = ENOMEM;
        return NULL;
    }
    /* a reused span may hold old pages past the new block (in its last
     * segment): they stay, counted as committed, for a later growth or the
     * next block of this span, instead of being dropped and faulted in
     * again: a large block's old pages are likely a large block's again.
     * Not so the pages of released segments (small and medium pages) the
     * span was cut from: past SPAN_PAGES_TAIL_KEEP they go back now.  (A
     * 4 MiB block takes a span of two segments; cut from released
     * segments, each left almost 4 MiB of their pages idle and resident:
     * the phases workload peaked 70 MiB higher.  Dropping every span's
     * tail made a loop over large blocks of random sizes 5x slower:
     * docs/design.md, "Growth".) */
    size_t used = (size_t)(block - (uint8_t *)seg) + rounded;
    resident = sf_align_up(resident, SF_OS_PAGE);
    if (pages && !guarded && resident > used + SPAN_PAGES_TAIL_KEEP) {
        size_t keep = used + SPAN_PAGES_TAIL_KEEP;
        sf_os_decommit((uint8_t *)seg + keep, resident - keep);
        sf_stat_add(&sf_gstats.decommitted_total, resident - keep);
        resident = keep;
    }
    if (!span_set_access((uint8_t *)seg, span, &access, used > resident ? sf_align_up(used, SF_OS_PAGE) : resident,
                         closes, zero)) {
        span_drop(seg, span);
        errno = ENOMEM;
        return NULL;
    }
    if (used > resident) shed_before_growth(growth_heap(), used - resident, SHED_SPAN);
    if (!zero) memset(seg, 0, header_bytes(1));
    size_t off = (size_t)(block - (uint8_t *)seg);
    if (sf_guard_level >= 3 && resident > off) /* zero on malloc: old pages of the span */
        memset(block, 0, (resident < used ? resident : used) - off);
    seg->magic = SF_SEG_MAGIC ^ (uintptr_t)seg;
    seg->heap = NULL;
    seg->page_shift = SF_SPAN_PAGE_SHIFT;
    seg->page_bias = 0;
    seg->kind = cacheable ? SF_SEG_LARGE : SF_SEG_HUGE;
    seg->fresh_zero = zero;
    seg->page_count = 1;
    seg->pages_ready = 1;
    seg->open_bytes = access.open;
    seg->closed = access.open < span;
    seg->hole = access.hole;
    seg->used_pages = 1;
    seg->span_size = span;
    seg->committed_bytes = 0;
    commit_add(seg, used > resident ? used : resident);
    sf_page_t *page = &seg->pages[0];
    SF_SET(page->flags, SF_PAGE_SPAN);
    SF_SET(page->in_use, 1);
    SF_SET(page->used, 1);
    page->block_start = block;
    page->block_size = 0;
    page->page_start = block;
    /* room to grow in place; none at guard level >= 2 (realloc moves there) */
    page->page_bytes = guarded ? rounded : (size_t)((uint8_t *)seg + span - block);
    if (sf_tracked) sf_track_segment_header(seg);
    sf_page_set_fast_gate(page, false, false); /* (never fast: the generic free) */
    page->capacity = page->reserved = 1;
    page->span_bytes = rounded;
    segment_link_all(seg, span >> SF_SEG_SHIFT, SF_SEGMAP_OTHER_HEAD);
    *block_out = block;
    return seg;
}

/* A large or huge block is freed: at guard level >= 2 it waits in the span
 * quarantine first (guarded_span.c), which releases it later. */
void sf_span_free(sf_segment_t *seg) {
    segment_unlink_all(seg, seg->span_size >> SF_SEG_SHIFT);
    if (guard_pages() && sf_span_quarantine_put(seg)) return;
    sf_span_release(seg, true);
}

/* reusable: false if part of it may still be inaccessible (unmapped then,
 * never cached). */
void sf_span_release(sf_segment_t *seg, bool reusable) {
    const sf_page_t *page = &seg->pages[0];
    size_t guard = guard_pages() ? (size_t)(page->block_start - (uint8_t *)seg) + page->span_bytes : 0;
    sf_span_access_t access = {seg->open_bytes, guard, seg->hole};
    span_unmap(seg, seg->span_size, seg->committed_bytes, seg->committed_bytes, access,
               reusable && seg->kind == SF_SEG_LARGE, true);
}

/* Grows or shrinks a span's block in place if the span has room; shrinking
 * by a megabyte or more gives the pages past the new end back.  The span's
 * committed bytes run from its start to the block's end, or further where
 * old pages of a reused span are still resident (sf_span_alloc). */
bool sf_span_resize(sf_segment_t *seg, sf_page_t *page, size_t new_size) {
    size_t rounded = sf_align_up(new_size, SF_OS_PAGE);
    if (rounded < new_size || rounded > page->page_bytes) return false;
    size_t old = page->span_bytes, lead = (size_t)(page->block_start - (uint8_t *)seg);
    if (rounded > old) {
        if (!span_open_for(seg, lead + rounded)) return false;
        if (lead + rounded > seg->committed_bytes) {
            if (!sf_memlimit_admit(lead + rounded - seg->committed_bytes)) return false;
            commit_add(seg, lead + rounded - seg->committed_bytes);
        }
    } else if (old - rounded >= ((size_t)1 << 20)) {
        size_t drop = seg->committed_bytes - (lead + rounded);
        sf_os_decommit(page->block_start + rounded, drop);
        SF_SET(seg->committed_bytes, lead + rounded);
        sf_stat_sub(&sf_gstats.committed, drop);
        sf_stat_add(&sf_gstats.decommitted_total, drop);
    } else {
        return true; /* small shrink: keep the pages, keep the size */
    }
    SF_SET(page->span_bytes, rounded);
    return true;
}
