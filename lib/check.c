/* check.c - the internal consistency checker behind sefer_check().
 *
 * Walks what sefer knows about its memory and checks that the pieces agree:
 *
 *   every live segment (the process-wide list, under sf_seg_lock): its
 *     address, magic, kind, geometry and owner, its links in the list, and
 *     its bytes in the segment map; the list (plus the large cache) against
 *     the count segments.max is enforced on;
 *   the segment map the other way round: every non-zero byte belongs to a
 *     listed segment.  Only the map's resident pages are read (mincore), so
 *     the check never faults in the 32 MiB table;
 *   spans: one block, inside its mapping;
 *   the pages and lists of every heap the checker can read without racing
 *     its owner: the calling thread's own heap, abandoned heaps (claimed for
 *     the duration exactly as a thread collecting one claims it, so nobody
 *     adopts or collects them meanwhile) and the fallback heap (under its
 *     lock).  For those: each segment's free-page mask against its pages'
 *     in_use, page geometry, both free lists of every page (links decoded
 *     with sf_link_decode, every block a carved block start carrying the
 *     free mark, none twice, so a cycle ends the walk), used + free <=
 *     carved, the class queues and the full list, direct[], the class
 *     lists (page.c: each block the heap's, of the list's class, with
 *     the free mark, none twice, as many as the room says), the segment
 *     free lists, pages_in_use, the purge queue (and its byte counts),
 *     the remote-free ring and overflow list, and the level-3 quarantine.
 *
 * The pages of a heap whose thread is running are that thread's alone: for
 * them only the segment header and the segment map are checked (a running
 * owner changes its pages without telling anyone), and so are those of a
 * heap whose owner was another thread when the process forked (in the
 * child: the fork may have cut one of its changes in half; heap.c,
 * sf_heaps_after_fork_child).  The segment list and
 * the segment map change together under sf_seg_lock (segment.c,
 * segment_link_all), which a pass holds: a listed segment missing from the
 * map, or a map byte that names no listed segment, is damage, never
 * another thread's work half done.  (It once was: the two changed one
 * after the other, and a checker that retried its findings for 127 ms
 * still reported a free preempted between them on a loaded machine.)
 *
 * Nothing here calls malloc (the checker holds locks malloc takes): scratch
 * memory comes from the OS layer and messages are built in a fixed buffer. */
#include "internal.h"

#include <limits.h>
#include <sys/mman.h>

#define FALLBACK_IDX ((int64_t)ck.nheaps) /* heap indexes: registry slots, then the fallback */
#define PAGE_BLOCKS_MAX ((1u << SF_SMALL_PAGE_SHIFT) / 16) /* most blocks a page can hold */

struct heap_tally {
    uint32_t pages;        /* its pages in use, found in its segments */
    uint32_t page_slots;   /* page descriptors in its segments */
    uint32_t free_segs[2]; /* its small / medium segments with a free page */
    uint64_t carved;       /* blocks carved in its pages */
};

/* One check at a time (check_lock): the state is static. */
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    sf_str_t out;
    size_t problems;
    int64_t mine;          /* the calling thread's heap index, or -1 */
    uint32_t nheaps;       /* registry slots made when this pass began */
    bool *full;            /* [nheaps + 1]: heaps whose pages and lists are checked */
    struct heap_tally *tally; /* [nheaps + 1] */
    size_t heap_bytes;     /* mapped for full and tally */
    size_t listed;         /* segments in the list */
    uint64_t listed_units; /* 4 MiB units they span */
    uint64_t *set;         /* chunk + 1 of each listed segment (open addressing) */
    size_t set_cap, set_bytes;
    uint64_t seen[PAGE_BLOCKS_MAX / 64]; /* blocks of one page met on its free lists */
    /* the exit sweep (guard levels 2-3, sf_guard_sweep): on in its pass;
     * spans too when no other thread runs; the first damaged block found
     * of each kind */
    bool sweep, sweep_spans;
    bool sweep_heap; /* the sweep reads the pages of the heap being checked */
    const void *sweep_overflow, *sweep_uaf;
} ck;

/* ---- reporting ------------------------------------------------------------- */

/* Counts a problem and describes it as "what at 0x..." (the first few fit). */
static void report(const char *what, const void *at) {
    ck.problems++;
    if (ck.problems > 1) sf_str_add(&ck.out, "; ");
    sf_str_add(&ck.out, what);
    sf_str_add(&ck.out, " at ");
    sf_str_addx(&ck.out, (uintptr_t)at);
}

/* ---- heaps ------------------------------------------------------------------- */

/* The index of a heap (a registry slot, or FALLBACK_IDX), -1 if heap is no
 * heap, or a slot made after the pass began (known, not checked: -2). */
static int64_t heap_index(const sf_heap_t *heap) {
    if (heap == &sf_heap_fallback) return FALLBACK_IDX;
    int64_t slot = sf_heap_slot_of(heap);
    return slot >= (int64_t)ck.nheaps ? -2 : slot;
}

static sf_heap_t *heap_at(int64_t i) {
    return i == FALLBACK_IDX ? &sf_heap_fallback : sf_heap_at((uint32_t)i);
}

static bool heap_checked(int64_t i) { return i >= 0 && ck.full[i]; }

/* Abandoned heaps are claimed (ABANDONED -> COLLECTING) so that nobody
 * adopts or collects them while their pages are read.  False: no memory
 * for the per-heap tables. */
static bool claim_heaps(void) {
    ck.nheaps = sf_heap_slots();
    ck.heap_bytes = sf_align_up((ck.nheaps + 1) * (sizeof *ck.full + sizeof *ck.tally), SF_OS_PAGE);
    ck.tally = sf_os_map_plain(ck.heap_bytes); /* fresh: all zero */
    if (ck.tally == NULL) return false;
    ck.full = (bool *)(ck.tally + ck.nheaps + 1);
    sf_heap_t *me = sf_tls_heap;
    ck.mine = me->kind == SF_HEAP_REAL ? heap_index(me) : -1;
    if (ck.mine == FALLBACK_IDX || ck.mine < 0) ck.mine = -1;
    for (uint32_t i = 0; i < ck.nheaps; i++) {
        sf_heap_t *heap = sf_heap_at(i);
        int expected = SF_HEAP_ABANDONED;
        /* (a heap a fork cut: its counts may be a change behind its lists,
         * heap.c, sf_heaps_after_fork_child; not a finding) */
        ck.full[i] = heap != NULL && !heap->cut_by_fork &&
                     ((int64_t)i == ck.mine ||
                      atomic_compare_exchange_strong(&heap->state, &expected, SF_HEAP_COLLECTING));
        /* and its segment lock: another thread may be purging its waiting
         * pages (before the pass locks, which such a purge takes; the exit
         * sweep waits a bounded time, and skips the heap past it) */
        if (!ck.full[i] || heap->kind != SF_HEAP_REAL) continue;
        if (!ck.sweep) {
            sf_segment_lock(heap);
        } else if (!sf_segment_lock_bounded(heap)) {
            ck.full[i] = false;
            if ((int64_t)i != ck.mine) atomic_store(&heap->state, SF_HEAP_ABANDONED);
        }
    }
    ck.full[FALLBACK_IDX] = true; /* under sf_fallback_lock */
    return true;
}

static void release_heaps(void) {
    for (uint32_t i = 0; i < ck.nheaps; i++) {
        if (!ck.full[i]) continue;
        sf_heap_t *heap = sf_heap_at(i);
        if (heap->kind == SF_HEAP_REAL) sf_segment_unlock(heap);
        if ((int64_t)i != ck.mine) atomic_store(&heap->state, SF_HEAP_ABANDONED);
    }
    sf_os_unmap(ck.tally, ck.heap_bytes);
    ck.tally = NULL;
    ck.full = NULL;
}

/* ---- the set of listed segments -------------------------------------------- */

static size_t set_slot(uint64_t key) {
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (ck.set_cap - 1);
}

static bool set_init(size_t count) {
    size_t cap = 64;
    while (cap < 2 * count + 16)
        cap <<= 1;
    ck.set_bytes = sf_align_up(cap * sizeof *ck.set, SF_OS_PAGE);
    ck.set = sf_os_map_plain(ck.set_bytes); /* fresh: all zero */
    ck.set_cap = cap;
    return ck.set != NULL;
}

static void set_add(uintptr_t chunk) {
    size_t i = set_slot(chunk + 1);
    while (ck.set[i] != 0 && ck.set[i] != chunk + 1)
        i = (i + 1) & (ck.set_cap - 1);
    ck.set[i] = chunk + 1;
}

static bool set_has(uintptr_t chunk) {
    for (size_t i = set_slot(chunk + 1); ck.set[i] != 0; i = (i + 1) & (ck.set_cap - 1))
        if (ck.set[i] == chunk + 1) return true;
    return false;
}

static void set_free(void) {
    if (ck.set) sf_os_unmap(ck.set, ck.set_bytes);
    ck.set = NULL;
}

/* The listed small or medium segment holding p, or NULL: never reads p. */
static sf_segment_t *listed_owner_seg(const void *p) {
    uintptr_t chunk = (uintptr_t)p >> SF_SEG_SHIFT;
    if (!set_has(chunk)) return NULL;
    sf_segment_t *seg = (sf_segment_t *)(chunk << SF_SEG_SHIFT);
    return seg->kind <= SF_SEG_MEDIUM ? seg : NULL;
}

/* Whether page is a page descriptor of a listed small or medium segment. */
static bool valid_page(const sf_page_t *page) {
    sf_segment_t *seg = listed_owner_seg(page);
    if (seg == NULL || (uintptr_t)page < (uintptr_t)seg->pages) return false;
    uintptr_t off = (uintptr_t)page - (uintptr_t)seg->pages;
    return off % sizeof(sf_page_t) == 0 && off / sizeof(sf_page_t) < seg->page_count;
}

/* Whether p is a block start in an in-use page of one of heap's segments
 * (ring, overflow list and quarantine entries). */
static bool owned_block(const sf_heap_t *heap, const void *p) {
    sf_segment_t *seg = listed_owner_seg(p);
    if (seg == NULL || seg->heap != heap) return false;
    if ((((uintptr_t)p - (uintptr_t)seg) >> seg->page_shift) < seg->page_bias) return false;
    const sf_page_t *page = sf_page_of(seg, p);
    return page->in_use && !(page->flags & SF_PAGE_SPAN) && sf_page_is_block_start(page, p);
}

/* ---- pages of a checked heap ----------------------------------------------- */

/* The exit sweep's finding (below): the first damaged block of a kind. */
static void sweep_found(const void **first, const void *at) {
    if (*first == NULL) *first = at;
}

/* Walks one free list; returns its length.  Ends at the first bad link or
 * at a block met twice (a cycle, or a block on both lists). */
static size_t walk_free_list(const sf_page_t *page, const sf_block_t *b) {
    size_t n = 0;
    const sf_block_t *prev = NULL;
    while (b != NULL) {
        uintptr_t off = (uintptr_t)b - (uintptr_t)page->block_start;
        if ((uintptr_t)b < (uintptr_t)page->block_start || off >= sf_page_carved_bytes(page) ||
            off % page->block_size != 0) {
            report("free list leaves its page's carved blocks", b);
            if (ck.sweep && prev != NULL) sweep_found(&ck.sweep_uaf, prev); /* its link written over */
            return n;
        }
        size_t idx = off / page->block_size;
        if (ck.seen[idx / 64] >> (idx % 64) & 1) {
            report("block met twice on its page's free lists (cycle or double free)", b);
            return n;
        }
        ck.seen[idx / 64] |= (uint64_t)1 << (idx % 64);
        if (b->cookie != sf_page_cookie(page))
            report("block on a free list without the free mark", b);
        n++;
        prev = b;
        b = sf_link_decode(page, b);
    }
    return n;
}

static void check_page_owner(const sf_page_t *page, const sf_heap_t *heap) {
    uintptr_t fast = (uintptr_t)page->fast_heap;
    uint8_t flags = page->flags;
    if (flags & ~(SF_PAGE_FULL | SF_PAGE_GUARDED | SF_PAGE_SAMPLED))
        report("small/medium page with span flags", page);
    if (!(flags & SF_PAGE_GUARDED) != (sf_guard_level < 2))
        report("page's guarded flag disagrees with guard.level", page);
    if ((sf_guard_level < 2) != (page->secret == 0))
        report("page's free-list secret disagrees with guard.level", page);
    /* flags 0: the owner, or none (a phase took every page off the fast
     * paths, phase.c, and the owner puts a page back when it next takes it
     * up: until then its frees take the generic path); full: none;
     * guarded: none, or (level 2's fast path) the owner tagged with bit 0 */
    uintptr_t owner = fast & ~(uintptr_t)1;
    bool ok = flags == 0                                    ? fast == (uintptr_t)heap || fast == 0
              : (flags & (SF_PAGE_FULL | SF_PAGE_SAMPLED)) ? fast == 0
                                                            : owner == 0 || owner == (uintptr_t)heap;
    if (!ok) report("page's fast-path owner disagrees with its flags", page);
}

/* ---- the exit sweep (guard levels 2 and 3) --------------------------------- */

/* The blocks of a guarded page of a heap no running thread owns, after its
 * free lists were walked (ck.seen): every block's size word (an underflow
 * of the block after it lands there first); a live block's canary; at
 * level 3 a listed free block's zero fill.  A block carrying the free mark
 * but on neither list is free elsewhere (the quarantine, checked with its
 * heap, or waiting for its owner after another thread freed it, which
 * checked it then).  Such a free writes the mark before it fills the block
 * (guarded.c), so a canary that reads wrong is looked at again after the
 * mark: a block freed meanwhile is not damage. */
static void sweep_page(const sf_segment_t *seg, const sf_page_t *page) {
    uint32_t bs = page->block_size;
    for (uint32_t i = 0; i < page->capacity; i++) {
        const sf_block_t *b = (const sf_block_t *)(page->block_start + (size_t)i * bs);
        if (!sf_size_word_ok(*sf_size_word(page, b), bs)) {
            sweep_found(&ck.sweep_overflow, b);
            continue;
        }
        if (ck.seen[i / 64] >> (i % 64) & 1) {
            if (sf_guard_level >= 3 && !sf_junk_intact(page, b)) sweep_found(&ck.sweep_uaf, b);
            continue;
        }
        if (__atomic_load_n(&b->cookie, __ATOMIC_ACQUIRE) == sf_page_cookie(page)) continue;
        if (!sf_guarded_tail_intact(seg, page, b) &&
            __atomic_load_n(&b->cookie, __ATOMIC_ACQUIRE) != sf_page_cookie(page))
            sweep_found(&ck.sweep_overflow, b);
    }
}

/* Whether the quarantine's count and ring can be walked (a damaged count
 * would have the walks below go round the ring for ever). */
static bool quarantine_shape_ok(const sf_heap_t *heap) {
    uint32_t cap = heap->qring_cap;
    size_t most = heap->quarantine_head != NULL ? 1 : cap;
    return heap->quarantine_count <= most && (cap & (cap - 1)) == 0 &&
           (heap->quarantine_head == NULL || cap == 0);
}

/* The quarantine of a heap no running thread owns: each block's free mark
 * and first word (NULL while held), and at level 3 its zero fill. */
static void sweep_quarantine(const sf_heap_t *heap) {
    if (!quarantine_shape_ok(heap)) return; /* (check_quarantine reports it) */
    const sf_block_t *b;
    for (size_t i = 0; (b = sf_quarantine_at(heap, i)) != NULL; i++) {
        if (!owned_block(heap, b)) return; /* (check_quarantine reports it) */
        const sf_page_t *page = sf_page_of(sf_segment_of(b), b);
        if (b->cookie != sf_page_cookie(page) || b->next != NULL ||
            (sf_guard_level >= 3 && !sf_junk_intact(page, b)))
            sweep_found(&ck.sweep_uaf, b);
    }
}

/* The page's blocks on its class list (page.c, "Class lists"), after its
 * own free lists were walked (ck.seen): none on those too, no more than
 * the page counts out; and a page the fast free pushes through names its
 * owner's list.  (A list's own faults are check_class_lists'.) */
static void check_page_listed(const sf_segment_t *seg, const sf_page_t *page, const sf_heap_t *heap) {
    unsigned c = page->class_idx;
    if (c > SF_SMALL_CLASS_MAX || sf_guard_level >= 2) return;
    if (page->fast_divmagic != 0 && page->cl != sf_cl_of(seg->heap, c))
        report("page's class list is not its owner's", page);
    const sf_page_or_list_t *cl = sf_cl_of(heap, c);
    uint32_t mine = 0, n = 0;
    for (const sf_block_t *b = cl->free; b != NULL && n <= SF_CL_BLOCKS; b = b->next, n++) {
        if (!owned_block(heap, b)) break;
        if (sf_page_of(sf_segment_of(b), b) != page) continue;
        mine++;
        size_t idx = ((uintptr_t)b - (uintptr_t)page->block_start) / page->block_size;
        if (ck.seen[idx / 64] >> (idx % 64) & 1) report("block on both its class's free list and its page's", b);
    }
    if (mine > sf_page_used(page)) report("page counts fewer blocks out than its class list holds of it", page);
}

static void check_page(const sf_segment_t *seg, const sf_page_t *page, const sf_heap_t *heap) {
    unsigned c = page->class_idx;
    if (c < 1 || c >= SF_CLASS_COUNT || page->block_size != sf_class_size[c]) {
        report("page in use without a valid size class", page);
        return;
    }
    if ((seg->kind == SF_SEG_SMALL) != (c <= SF_SMALL_CLASS_MAX))
        report("size class in the wrong kind of segment", page);
    uint32_t bs = page->block_size;
    if (sf_page_divmagic(page) != UINT64_MAX / bs + 1 + ((bs & (bs - 1)) == 0))
        report("page's block-start constant is wrong", page);
    /* the free fast paths' words: the constant exactly while the page's
     * fast owner is its segment's heap, untagged or (level 2) tagged, but
     * for a tagged page at the guard page; the bound only untagged
     * (types.h) */
    bool plain = page->fast_heap != NULL && page->fast_heap == seg->heap;
    bool tagged = seg->heap != NULL && page->fast_heap == (sf_heap_t *)((uintptr_t)seg->heap | SF_L2_OWNER_TAG);
    if (page->fast_divmagic != (plain || (tagged && sf_page_tagged_keeps_constant(page)) ? sf_page_divmagic(page) : 0))
        report("page's fast-path block-start word disagrees with its owner", page);
    /* another thread's free's bound (types.h, remote_bytes) */
    if (page->remote_class != c || page->remote_bytes != (uint32_t)page->reserved * bs)
        report("page's remote-free bound disagrees with its blocks", page);
    /* (at most the carved blocks' bound: a fork that landed between the
     * capacity and the bound leaves it behind, never ahead, page.c) */
    if (plain ? page->fast_carved > sf_page_fast_bound(page) : page->fast_carved != 0)
        report("page's fast-path bound passes blocks not carved", page);
    uint8_t *end = page->page_start + page->page_bytes;
    if (page->block_start < page->page_start || page->reserved > PAGE_BLOCKS_MAX ||
        page->block_start + (size_t)page->reserved * bs > end || page->capacity > page->reserved) {
        report("page's blocks do not fit in it", page);
        return;
    }
    if (sf_page_used(page) > page->capacity) report("page has more blocks in use than carved", page);
    check_page_owner(page, heap);
    memset(ck.seen, 0, sizeof ck.seen);
    size_t nfree = walk_free_list(page, page->free);
    nfree += walk_free_list(page, page->local_free);
    if ((size_t)sf_page_used(page) + nfree > page->capacity)
        report("page's blocks in use plus free exceed its blocks carved", page);
    check_page_listed(seg, page, heap);
    if (ck.sweep_heap && (page->flags & SF_PAGE_GUARDED)) sweep_page(seg, page);
}

/* Whether the exit sweep reads heap hi's blocks: not the fallback heap's
 * (threads without a heap of their own allocate from it and write a
 * block's tail after its lock is released), and in the child of a fork
 * only the forking thread's own (the other heaps were abandoned in
 * whatever state the parent's threads left them, a block half handed out
 * among them). */
static bool sweep_reads(int64_t hi) {
    if (!ck.sweep || hi == FALLBACK_IDX) return false;
    return !sf_fork_child || hi == ck.mine;
}

static void check_segment_pages(const sf_segment_t *seg, int64_t hi) {
    sf_heap_t *heap = heap_at(hi);
    unsigned in_use = 0;
    ck.sweep_heap = sweep_reads(hi);
    if (seg->page_count < 64 && (seg->free_mask >> seg->page_count) != 0)
        report("segment's free-page mask names pages past its end", seg);
    if (seg->pages_ready > seg->page_count) report("segment's ready pages exceed its pages", seg);
    for (unsigned i = 0; i < seg->page_count; i++) {
        const sf_page_t *page = &seg->pages[i];
        bool marked_free = (seg->free_mask >> i) & 1;
        size_t start, bytes = sf_segment_page_place(seg, i, &start);
        if (i >= seg->pages_ready) { /* never taken: all zero (phase.c relies on it), and free if it has room */
            static const sf_page_t blank;
            if (memcmp(page, &blank, sizeof blank) != 0 || marked_free != (bytes != 0))
                report("page descriptor past the segment's ready ones is not blank", page);
            continue;
        }
        if (page->page_start != (const uint8_t *)seg + start) report("page descriptor's start is not its page", page);
        if (page->in_use) {
            in_use++;
            /* (segment.c, "The unused part of a segment") */
            if (start + bytes > SF_GET(seg->open_bytes)) report("page in use past its segment's accessible part", page);
            ck.tally[hi].carved += page->capacity;
            if (marked_free) report("page in use but free in its segment's mask", page);
            check_page(seg, page, heap);
        } else {
            if (!marked_free) report("unused page missing from its segment's free mask", page);
            /* (an unused page on the purge queue holds its class links
             * where free and local_free are) */
            if (page->fast_heap != NULL || (page->purge_at == 0 && (page->free != NULL || page->local_free != NULL)) ||
                page->used != 0)
                report("unused page still has an owner or blocks", page);
        }
    }
    if (in_use != seg->used_pages)
        report("segment's used_pages differs from its pages in use", seg);
    ck.tally[hi].pages += in_use;
    ck.tally[hi].page_slots += seg->page_count;
    if (seg->free_mask != 0) ck.tally[hi].free_segs[seg->kind]++;
}

/* ---- segments ---------------------------------------------------------------- */

/* One segment-map byte of a listed segment. */
static void check_map_byte(uintptr_t chunk, uint8_t want, const void *seg) {
    uint8_t v = atomic_load_explicit(&sf_segmap[chunk], memory_order_relaxed);
    if (v == want) return;
    report(v == SF_SEGMAP_NONE ? "segment missing from the segment map" : "segment map disagrees with the segment", seg);
}

static void check_small_medium(const sf_segment_t *seg, uintptr_t chunk) {
    bool small = seg->kind == SF_SEG_SMALL;
    unsigned shift = small ? SF_SMALL_PAGE_SHIFT : SF_MEDIUM_PAGE_SHIFT, bias = small ? 1 : 0;
    if (seg->page_shift != shift || seg->page_bias != bias ||
        seg->page_count != (SF_SEG_SIZE >> shift) - bias || seg->span_size != SF_SEG_SIZE) {
        report("segment's geometry is wrong for its kind", seg);
        return;
    }
    int64_t hi = heap_index(seg->heap);
    if (hi == -1) {
        report("segment's owner is not a heap", seg);
        return;
    }
    check_map_byte(chunk, small ? SF_SEGMAP_SMALL_HEAD : SF_SEGMAP_MEDIUM_HEAD, seg);
    ck.listed_units++;
    if (heap_checked(hi)) check_segment_pages(seg, hi);
}

static void check_span(const sf_segment_t *seg, uintptr_t chunk) {
    const sf_page_t *page = &seg->pages[0];
    size_t units = seg->span_size >> SF_SEG_SHIFT;
    const uint8_t *lo = (const uint8_t *)seg, *hi = lo + seg->span_size;
    if (seg->heap != NULL || seg->page_count != 1 || units == 0 || (seg->span_size & SF_SEG_MASK) ||
        chunk + units > SF_SEGMAP_CHUNKS ||
        (seg->kind == SF_SEG_LARGE) != (units <= SF_LARGE_MAX_SEGS)) {
        report("span's header is wrong", seg);
        return;
    }
    ck.listed_units += units;
    if (!(SF_GET(page->flags) & SF_PAGE_SPAN) || !SF_GET(page->in_use) ||
        page->block_start < lo + SF_OS_PAGE || ((uintptr_t)page->block_start & (SF_OS_PAGE - 1)) ||
        page->page_bytes > (size_t)(hi - page->block_start) ||
        SF_GET(page->span_bytes) > page->page_bytes)
        report("span's block does not fit its mapping", seg);
    for (size_t i = 0; i < units; i++)
        check_map_byte(chunk + i, i == 0 ? SF_SEGMAP_OTHER_HEAD : sf_segmap_back_value(i), seg);
    /* a live large block's canary (spans have no owner: only when no other
     * thread can be freeing it this instant) */
    if (ck.sweep && ck.sweep_spans && sf_page_used(page) != 0 && !sf_guarded_tail_intact(seg, page, page->block_start))
        sweep_found(&ck.sweep_overflow, page->block_start);
}

static void check_segment(const sf_segment_t *seg, const sf_segment_t *prev) {
    uintptr_t chunk = (uintptr_t)seg >> SF_SEG_SHIFT;
    if (((uintptr_t)seg & SF_SEG_MASK) != 0 || chunk >= SF_SEGMAP_CHUNKS) {
        report("listed segment not aligned to 4 MiB", seg);
        return;
    }
    if (seg->magic != (SF_SEG_MAGIC ^ (uintptr_t)seg)) report("segment's magic is wrong", seg);
    if (seg->all_prev != prev) report("segment list's back link is wrong", seg);
    if (ck.set) set_add(chunk);
    if (seg->kind <= SF_SEG_MEDIUM)
        check_small_medium(seg, chunk);
    else if (seg->kind <= SF_SEG_HUGE)
        check_span(seg, chunk);
    else
        report("segment of no known kind", seg);
}

/* Length of the segment list, walking at most `bound` entries. */
static size_t list_length(size_t bound) {
    size_t n = 0;
    for (const sf_segment_t *seg = sf_all_segments; seg != NULL && n <= bound; seg = seg->all_next)
        n++;
    return n;
}

static void check_segments(void) {
    size_t counted = (size_t)atomic_load(&sf_gstats.segments);
    size_t n = list_length(counted);
    if (n > counted) {
        report("segment list is longer than the segments counted (a cycle?)", sf_all_segments);
        n = counted;
    }
    ck.listed = n;
    set_init(n);
    const sf_segment_t *prev = NULL, *seg = sf_all_segments;
    for (size_t i = 0; i < n && seg != NULL; i++, prev = seg, seg = seg->all_next)
        check_segment(seg, prev);
    uint64_t cached = atomic_load(&sf_gstats.cache_bytes) >> SF_SEG_SHIFT;
    if (ck.listed_units + cached > atomic_load(&sf_gstats.segments))
        report("more segments mapped than counted against segments.max", sf_all_segments);
}

/* ---- the segment map, the other way round ----------------------------------- */

static void check_map_entry(uintptr_t chunk, uint8_t v) {
    uintptr_t head = chunk;
    for (unsigned steps = 0; v >= SF_SEGMAP_BACK0; steps++) {
        if (head < (uintptr_t)(v - SF_SEGMAP_BACK_BIAS) || steps > 64) {
            report("segment map's back-distance leads nowhere", (void *)(chunk << SF_SEG_SHIFT));
            return;
        }
        head -= (uintptr_t)(v - SF_SEGMAP_BACK_BIAS);
        v = atomic_load_explicit(&sf_segmap[head], memory_order_acquire);
    }
    void *at = (void *)(chunk << SF_SEG_SHIFT);
    if (v == SF_SEGMAP_NONE) {
        report("segment map's back-distance leads to no segment", at);
        return;
    }
    if (!set_has(head)) {
        report("segment map names a segment that is not listed", at);
        return;
    }
    const sf_segment_t *seg = (const sf_segment_t *)(head << SF_SEG_SHIFT);
    bool small = seg->kind == SF_SEG_SMALL, span = seg->kind >= SF_SEG_LARGE;
    if ((v == SF_SEGMAP_SMALL_HEAD) != small || (v == SF_SEGMAP_MEDIUM_HEAD) != (seg->kind == SF_SEG_MEDIUM) ||
        (head != chunk && (!span || chunk - head >= (seg->span_size >> SF_SEG_SHIFT))))
        report("segment map disagrees with the segment", at);
}

static void scan_map_range(size_t from, size_t to) {
    for (size_t c = from; c < to; c++) {
        uint8_t v = atomic_load_explicit(&sf_segmap[c], memory_order_relaxed);
        if (v != SF_SEGMAP_NONE) check_map_entry(c, v);
    }
}

/* Reads only the resident pages of the map: the others hold only zeros. */
static void scan_map(void) {
    uintptr_t base = (uintptr_t)sf_segmap, end = base + SF_SEGMAP_CHUNKS;
    uintptr_t p = base & ~(uintptr_t)(SF_OS_PAGE - 1);
    unsigned char vec[256];
    while (p < end) {
        size_t len = sizeof vec * SF_OS_PAGE;
        if (len > sf_align_up(end - p, SF_OS_PAGE)) len = sf_align_up(end - p, SF_OS_PAGE);
        if (mincore((void *)p, len, vec) != 0) memset(vec, 1, sizeof vec); /* unknown: read */
        for (size_t i = 0; i < len / SF_OS_PAGE; i++) {
            if (!(vec[i] & 1)) continue;
            uintptr_t lo = p + i * SF_OS_PAGE, hi = lo + SF_OS_PAGE;
            scan_map_range((lo < base ? base : lo) - base, (hi > end ? end : hi) - base);
        }
        p += len;
    }
}

/* ---- lists of a checked heap ------------------------------------------------ */

/* c 0: the full list; sampled: a queue of pages for sampled blocks */
static size_t walk_queue(const sf_heap_t *heap, const sf_page_queue_t *q, unsigned c, bool sampled,
                         size_t bound) {
    size_t n = 0;
    const sf_page_t *prev = NULL;
    for (const sf_page_t *page = q->first; page != NULL; prev = page, page = page->next) {
        if (n++ >= bound) {
            report("page queue longer than the heap's pages (a cycle?)", heap);
            return n;
        }
        if (!valid_page(page)) {
            report("page queue names no page of a live segment", page);
            return n;
        }
        bool full = page->flags & SF_PAGE_FULL;
        if (sf_segment_of(page)->heap != heap || !page->in_use || (c == 0) != full ||
            (c != 0 && page->class_idx != c) || (c != 0 && sampled != !!(page->flags & SF_PAGE_SAMPLED)))
            report("page in the wrong queue", page);
        if (page->prev != prev) report("page queue's back link is wrong", page);
        /* the bias marks the head of a class queue and of a medium class's
         * queue of sampled pages (page.c), and nothing else */
        bool head_of_class = c != 0 && prev == NULL && (!sampled || c >= SF_MEDIUM_CLASS_MIN);
        if (!!(page->used & SF_USED_BIAS) != head_of_class)
            report(head_of_class ? "class's current page lacks the bias" : "page behind the head carries the bias", page);
    }
    if (q->last != prev) report("page queue's last page is wrong", heap);
    return n;
}

static void check_direct(const sf_heap_t *heap) {
    if (sf_empty_page.free != NULL || sf_empty_page.local_free != NULL)
        report("the empty page has blocks", &sf_empty_page);
    bool small = SF_GET(heap->small); /* (entries name the class serving their size) */
    for (unsigned i = 0; i < SF_DIRECT_COUNT; i++) {
        unsigned c = i == 0 ? 1 : sf_class_of((size_t)i * 16);
        if (small) c = sf_small_heap_class(c);
        const sf_page_t *d = heap->direct[i];
        if (d != &sf_empty_page && d != heap->queues[c].first && d != sf_cl_of(heap, c))
            report("direct[] names neither the head of its class queue nor its class list", &heap->direct[i]);
    }
    for (unsigned i = 0; i < SF_MDIRECT_COUNT; i++) {
        const sf_page_t *d = heap->mdirect[i], *g = heap->gmdirect[i];
        if (d != &sf_empty_page && d != heap->queues[SF_MEDIUM_CLASS_MIN + i].first)
            report("mdirect[] names a page that does not head its class queue", &heap->mdirect[i]);
        if (g != &sf_empty_page && g != heap->queues[SF_MEDIUM_CLASS_MIN + i].first)
            report("gmdirect[] names a page that does not head its class queue", &heap->gmdirect[i]);
    }
    /* level 2's table above SF_GDIRECT_MAX: entry i serves blocks of up to
     * i * 256 bytes, tail included */
    for (unsigned i = 0; i < SF_GDIRECT_HI_COUNT; i++) {
        const sf_page_t *d = heap->gdirect_hi[i];
        if (d != &sf_empty_page && (i * 256 <= SF_GDIRECT_MAX || d != heap->queues[sf_class_of((size_t)i * 256)].first))
            report("gdirect_hi[] names a page that does not head its class queue", &heap->gdirect_hi[i]);
    }
}

/* The class lists (page.c, "Class lists"): each block one of the heap's,
 * of the list's class, carrying its page's free mark; as many as the room
 * says; none at guard levels 2-3 or under valgrind's tracking. */
static void check_class_lists(const sf_heap_t *heap) {
    for (unsigned c = 1; c <= SF_SMALL_CLASS_MAX; c++) {
        const sf_page_or_list_t *cl = sf_cl_of(heap, c);
        /* (cl_direct: 0 until the list is set up, its class's index after;
         * a list that holds blocks or has room was set up) */
        bool direct_ok = cl->cl_direct == sf_class_size[c] >> 4 ||
                         (cl->cl_direct == 0 && cl->free == NULL && (!cl->in_use || cl->committed == 0));
        if (cl->local_free != NULL || !direct_ok ||
            (cl->in_use && (cl->class_idx != c || cl->committed > SF_CL_BLOCKS || cl->used > cl->committed)) ||
            (!cl->in_use && cl->free != NULL)) {
            report("class free list's head is damaged", cl);
            continue;
        }
        uint32_t n = 0, cap = cl->committed;
        const sf_block_t *b, *seen[SF_CL_BLOCKS];
        for (b = cl->free; b != NULL; b = b->next, n++) {
            bool twice = false;
            for (uint32_t i = 0; i < n && i < cap && !twice; i++) twice = seen[i] == b;
            if (twice) {
                report("block met twice on its class's free list (cycle or double free)", b);
                break;
            }
            if (n == cap) {
                report("class free list longer than its bound", cl);
                break;
            }
            seen[n] = b;
            if (sf_pages_checked()) {
                report("class free list holds a block where no page has a fast owner", b);
                break;
            }
            if (!owned_block(heap, b)) {
                report("class free list leaves its heap's blocks", b);
                break;
            }
            const sf_page_t *page = sf_page_of(sf_segment_of(b), b);
            if (page->class_idx != c || (uintptr_t)b - (uintptr_t)page->block_start >= sf_page_carved_bytes(page))
                report("class free list holds a block of another class, or one not carved", b);
            else if (b->cookie != sf_page_cookie(page))
                report("block on a class free list without the free mark", b);
        }
        if (b == NULL && n != sf_cl_blocks(cl)) report("class free list's room disagrees with its blocks", cl);
    }
}

static void check_free_segs(const sf_heap_t *heap, const struct heap_tally *t) {
    for (unsigned k = 0; k < 2; k++) {
        size_t n = 0;
        const sf_segment_t *prev = NULL;
        for (const sf_segment_t *seg = heap->free_segs[k]; seg != NULL;
             prev = seg, seg = seg->heap_next) {
            if (n++ > ck.listed || listed_owner_seg(seg) != seg) {
                report("heap's segment list names no live segment (or loops)", seg);
                return;
            }
            if (seg->heap != heap || seg->kind != k || seg->free_mask == 0 ||
                seg->heap_prev != prev)
                report("heap's list of segments with free pages holds a wrong segment", seg);
        }
        if (n != t->free_segs[k])
            report("heap's list of segments with free pages misses some", heap);
    }
}

static void check_purge_queue(const sf_heap_t *heap, const struct heap_tally *t) {
    size_t n = 0, bytes = 0;
    const sf_page_t *prev = NULL;
    for (const sf_page_t *page = heap->purge.first; page != NULL; prev = page, page = page->next) {
        if (n++ > t->page_slots || !valid_page(page)) {
            report("purge queue names no page of a live segment (or loops)", page);
            return;
        }
        if (sf_segment_of(page)->heap != heap || page->in_use || page->purge_at == 0 ||
            page->prev != prev)
            report("purge queue holds a wrong page", page);
        bytes += page->committed ? page->page_bytes : 0;
    }
    if (heap->purge.last != prev) report("purge queue's last page is wrong", heap);
    if (n != heap->purge_count) report("purge queue's count is wrong", heap);
    /* what threads.cache_max and decommit.exited_keep count (segment.c) */
    if (bytes != heap->purge_bytes) report("purge queue's committed bytes differ from its count", heap);
    if (heap->exited_counted > heap->purge_bytes) report("exited heap's share counts more than it holds", heap);
    /* every page of the queue on exactly its class's list, and nothing else */
    size_t listed = 0;
    for (unsigned c = 1; c < SF_CLASS_COUNT; c++) {
        const sf_page_t *cprev = NULL;
        for (const sf_page_t *page = heap->purge_class[c]; page != NULL; cprev = page, page = page->class_next) {
            if (listed++ > n || !valid_page(page)) {
                report("purge class list names no queued page (or loops)", page);
                return;
            }
            if (page->purge_at == 0 || page->class_idx != c || page->class_prev != cprev)
                report("purge class list holds a wrong page", page);
        }
    }
    if (listed != n) report("purge queue and its class lists disagree", heap);
}

/* Remote frees waiting for the owner: published ring cells and the overflow
 * list (its links are plain pointers). */
static void check_remote(const sf_heap_t *heap, const struct heap_tally *t) {
    const sf_ring_t *ring = &heap->ring;
    if (ring->cells != NULL) {
        uint64_t head = atomic_load(&ring->head), tail = atomic_load(&ring->tail);
        if (tail - head > ring->mask + 1)
            report("remote-free ring holds more than its capacity", heap);
        for (uint64_t pos = head; pos != tail && pos - head <= ring->mask; pos++) {
            sf_ring_cell_t *cell = &ring->cells[pos & ring->mask];
            if (sf_ring_seq(ring, pos) != pos + 1) break;
            void *p = sf_remote_untag(atomic_load_explicit(&cell->ptr, memory_order_relaxed));
            if (!owned_block(heap, p)) report("remote-free ring holds no block of its heap", p);
        }
    }
    size_t n = 0;
    /* (links carry SF_REMOTE_SUSPECT: remote.c) */
    for (const sf_block_t *b = sf_remote_untag(atomic_load_explicit(&heap->overflow, memory_order_acquire)); b != NULL;
         b = sf_remote_untag(b->next)) {
        if (n++ > t->carved || !owned_block(heap, b)) {
            report("overflow list holds no block of its heap (or loops)", b);
            return;
        }
    }
}

static void check_quarantine(const sf_heap_t *heap) {
    if (!quarantine_shape_ok(heap)) {
        report("quarantine's count or ring is wrong", heap);
        return;
    }
    const sf_block_t *b;
    for (size_t n = 0; (b = sf_quarantine_at(heap, n)) != NULL; n++) {
        if (!owned_block(heap, b)) {
            report("quarantine holds no block of its heap", b);
            return;
        }
    }
}

static void check_heap(int64_t hi) {
    const sf_heap_t *heap = heap_at(hi);
    const struct heap_tally *t = &ck.tally[hi];
    size_t queued = 0;
    for (unsigned c = 1; c < SF_CLASS_COUNT; c++) {
        queued += walk_queue(heap, &heap->queues[c], c, false, t->pages);
        queued += walk_queue(heap, &heap->sampled[c], c, true, t->pages);
    }
    queued += walk_queue(heap, &heap->full, 0, false, t->pages);
    if (queued != t->pages || heap->pages_in_use != t->pages)
        report("heap's queues or pages_in_use disagree with its pages in use", heap);
    check_direct(heap);
    check_class_lists(heap);
    check_free_segs(heap, t);
    check_purge_queue(heap, t);
    check_remote(heap, t);
    check_quarantine(heap);
    if (sweep_reads(hi)) sweep_quarantine(heap);
}

/* ---- one pass ------------------------------------------------------------- */

/* The locks a pass holds, taken in this order and released in the other.
 * The exit sweep takes them with a bounded wait (sf_lock_bounded); past it
 * the sweep is skipped. */
static pthread_mutex_t *const pass_locks[] = {&sf_fallback_lock, &sf_cache_lock, &sf_seg_lock};
#define PASS_LOCKS (sizeof pass_locks / sizeof pass_locks[0])

static void drop_pass_locks_from(size_t i) {
    while (i-- > 0) {
        sf_unlock(pass_locks[i]);
        /* the fallback heap's segment lock, taken with its lock */
        if (pass_locks[i] == &sf_cache_lock) sf_segment_unlock(&sf_heap_fallback);
    }
}

static bool take_pass_locks(void) {
    for (size_t i = 0; i < PASS_LOCKS; i++) {
        if (pass_locks[i] == &sf_cache_lock) { /* the fallback heap's segment lock, after its lock */
            if (!ck.sweep) {
                sf_segment_lock(&sf_heap_fallback);
            } else if (!sf_segment_lock_bounded(&sf_heap_fallback)) {
                drop_pass_locks_from(i);
                return false;
            }
        }
        if (!ck.sweep) {
            sf_lock(pass_locks[i]);
        } else if (!sf_lock_bounded(pass_locks[i])) {
            /* (the fallback heap's segment lock before its lock: its next
             * holder would take the depth for its own) */
            if (pass_locks[i] == &sf_cache_lock) sf_segment_unlock(&sf_heap_fallback);
            drop_pass_locks_from(i);
            return false;
        }
    }
    return true;
}

static void drop_pass_locks(void) { drop_pass_locks_from(PASS_LOCKS); }

static void check_pass(char *why, size_t len) {
    static char scratch[8];
    sf_str_init(&ck.out, why != NULL && len > 0 ? why : scratch,
                why != NULL && len > 0 ? len : sizeof scratch);
    ck.problems = 0;
    ck.listed = 0;
    ck.listed_units = 0;
    if (!claim_heaps()) {
        report("no memory for the check's heap tables", NULL);
        return;
    }
    if (!take_pass_locks()) goto none;
    check_segments();
    if (ck.set != NULL) { /* without it pointers cannot be validated before use */
        for (int64_t i = 0; i <= FALLBACK_IDX; i++)
            if (ck.full[i] && (i == FALLBACK_IDX || heap_at(i)->kind == SF_HEAP_REAL))
                check_heap(i);
        scan_map();
    }
    drop_pass_locks();
none:
    release_heaps();
    set_free();
}

size_t sf_check_heap_consistency(char *why, size_t len) {
    sf_ensure_init();
    sf_lock(&check_lock);
    check_pass(why, len);
    size_t n = ck.problems;
    sf_unlock(&check_lock);
    return n;
}

/* One pass of the checker that also sweeps the guarded blocks of every heap
 * it can read (guard_exit.c, at exit); spans: whether spans are swept too.
 * The first damaged block of each kind, or NULL. */
void sf_guard_sweep(bool spans, const void **overflow, const void **uaf) {
    char why[256];
    *overflow = *uaf = NULL;
    if (!sf_lock_bounded(&check_lock)) return;
    ck.sweep = true;
    ck.sweep_spans = spans;
    ck.sweep_overflow = ck.sweep_uaf = NULL;
    check_pass(why, sizeof why);
    *overflow = ck.sweep_overflow;
    *uaf = ck.sweep_uaf;
    ck.sweep = false;
    sf_unlock(&check_lock);
}

/* fork's child: a thread of the parent may have been inside a check (it
 * holds check_lock for one pass); the child has only the
 * forking thread, which was not.  (Registered here, not among init.c's
 * handlers: the core does not call up into the checker.) */
static void check_after_fork_child(void) { pthread_mutex_init(&check_lock, NULL); }
__attribute__((constructor)) static void check_register_fork(void) {
    pthread_atfork(NULL, NULL, check_after_fork_child);
}

SEFER_EXPORT int sefer_check(void) {
    char why[1024], line[1200];
    sf_track_quiet_begin(); /* under memcheck: reads freed blocks and hidden fields */
    size_t n = sf_check_heap_consistency(why, sizeof why);
    sf_track_quiet_end();
    if (n == 0) return 0;
    sf_str_t s;
    sf_str_init(&s, line, sizeof line - 1);
    sf_str_add(&s, "sefer: check: ");
    sf_str_addu(&s, n);
    sf_str_add(&s, n == 1 ? " problem: " : " problems: ");
    sf_str_add(&s, why);
    line[s.len] = '\n'; /* room was kept for it */
    line[s.len + 1] = '\0';
    sf_write_stderr(line);
    return n > INT_MAX ? INT_MAX : (int)n;
}
