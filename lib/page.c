/* page.c - pages of one size class and the allocation slow path.
 *
 * A page hands out blocks from `free`; the owner's frees go to `local_free`
 * (so malloc and free never touch the same list head); when `free` runs dry
 * the slow path swaps `local_free` in, carves more blocks from the untouched
 * part of the page, or moves on to another page of the class queue (the
 * next, or, once the owner frees into full pages, one with some blocks to
 * hand out: "Picky page switches" below).  A page
 * with nothing left goes to the heap's full list, where the fast path never
 * looks; a free into it (flags != 0) brings it back.  A page whose blocks
 * have all come back is returned to its segment, except the class's current
 * page (the head of its queue), kept so that a class used in bursts does not
 * retire and refill a page on every other call: its `used` count carries
 * SF_USED_BIAS (types.h), so the free that empties it notices nothing; the
 * forced collects (sf_page_collect_heap: sefer_trim, thread exit) give it
 * back. */
#include "fastpath.h"
#include "internal.h"
#include "profile.h"

sf_page_t sf_empty_page; /* free == NULL: every fast-path pop falls through */

void sf_queue_remove(sf_page_queue_t *q, sf_page_t *page) {
    if (page->prev) page->prev->next = page->next;
    else q->first = page->next;
    if (page->next) page->next->prev = page->prev;
    else q->last = page->prev;
    page->next = page->prev = NULL;
}

void sf_queue_push_front(sf_page_queue_t *q, sf_page_t *page) {
    page->prev = NULL;
    page->next = q->first;
    if (q->first) q->first->prev = page;
    else q->last = page;
    q->first = page;
}

static void queue_push_back(sf_page_queue_t *q, sf_page_t *page) {
    page->next = NULL;
    page->prev = q->last;
    if (q->last) q->last->next = page;
    else q->first = page;
    q->last = page;
}

/* ---- class queues: the head carries the bias ------------------------------ */

/* Class queues, and the queues of medium classes' pages for sampled
 * blocks: a sampled page taken and given back per sample cost a 1 MiB
 * page's commit for each sample of a 64-256 KiB class.  (Small classes'
 * sampled pages go when they empty: kept, one per class and heap, they
 * added half to the peak RSS of small programs of many sizes.) */
static bool is_class_queue(const sf_heap_t *heap, const sf_page_queue_t *q) {
    return (q >= heap->queues && q < heap->queues + SF_CLASS_COUNT) ||
           (q >= heap->sampled + SF_MEDIUM_CLASS_MIN && q < heap->sampled + SF_CLASS_COUNT);
}

/* After a change to queue q whose head was old_first: if q is a class
 * queue and its head changed, the bias moves from the old head to the new. */
static void move_bias(sf_heap_t *heap, sf_page_queue_t *q, sf_page_t *old_first) {
    sf_page_t *first = q->first;
    if (first == old_first || !is_class_queue(heap, q)) return;
    if (old_first != NULL) SF_SET(old_first->used, old_first->used & ~SF_USED_BIAS);
    if (first != NULL) SF_SET(first->used, first->used | SF_USED_BIAS);
}

static void class_remove(sf_heap_t *heap, sf_page_queue_t *q, sf_page_t *page) {
    sf_page_t *old_first = q->first;
    sf_queue_remove(q, page);
    move_bias(heap, q, old_first);
}

static void class_push_front(sf_heap_t *heap, sf_page_queue_t *q, sf_page_t *page) {
    sf_page_t *old_first = q->first;
    sf_queue_push_front(q, page);
    move_bias(heap, q, old_first);
}

static void class_push_back(sf_heap_t *heap, sf_page_queue_t *q, sf_page_t *page) {
    sf_page_t *old_first = q->first;
    queue_push_back(q, page);
    move_bias(heap, q, old_first);
}

/* Points the direct-table entries of a class at its first page.  Invariant:
 * direct[] (mdirect[] for a medium class) names the first page of its class
 * queue or the empty page, never a page that is full, released, or serving
 * another class (in a small heap, the class that serves the size:
 * sf_small_heap_class). */
void sf_page_update_direct(sf_heap_t *heap, unsigned class_idx) {
    /* guard level >= 2: levels 0-1's tables stay empty, so their fast paths
     * never see a guarded page; level 2's fast path reads gdirect,
     * gdirect_hi and gmdirect (level 3 has no fast path) */
    sf_page_t **table = sf_pages_checked() ? heap->gdirect : heap->direct;
    unsigned lo, hi;
    /* eager decommit: malloc does not use the classes above 128 KiB (their
     * entries stay empty; a class page still in use takes its frees) */
    bool unused = false;
    if (table == heap->direct && class_idx >= SF_MEDIUM_CLASS_MIN) {
        table = heap->mdirect;
        lo = hi = class_idx - SF_MEDIUM_CLASS_MIN;
        unused = sf_request_is_span(sf_class_size[class_idx]);
    } else if (table == heap->gdirect && class_idx >= SF_MEDIUM_CLASS_MIN) {
        table = heap->gmdirect; /* (level 2 takes a class even where eager decommit makes spans) */
        lo = hi = class_idx - SF_MEDIUM_CLASS_MIN;
    } else if (table == heap->gdirect && sf_class_size[class_idx] > SF_GDIRECT_MAX) {
        table = heap->gdirect_hi; /* (by 256-byte steps: every class here is a multiple of 256) */
        lo = sf_class_size[class_idx - 1] / 256 + 1;
        hi = sf_class_size[class_idx] / 256;
    } else {
        if (sf_class_size[class_idx] > (table == heap->gdirect ? SF_GDIRECT_MAX : SF_DIRECT_MAX)) return;
        lo = class_idx == 1 ? 0 : sf_class_size[class_idx - 1] / 16 + 1;
        /* level >= 2: blocks are at least SF_GUARD_MIN_BLOCK (guarded.c) */
        if (table == heap->gdirect && sf_class_size[class_idx] < SF_GUARD_MIN_BLOCK) return;
        if (table == heap->gdirect && sf_class_size[class_idx] == SF_GUARD_MIN_BLOCK) lo = 0;
        hi = sf_class_size[class_idx] / 16;
        if (SF_UNLIKELY(heap->small) && table == heap->direct) {
            /* a small heap: a power-of-two class up to SF_SMALL_HEAP_MAX
             * serves every size above the power of two below it, and the
             * other classes up to there have no entries */
            if (sf_small_heap_class(class_idx) != class_idx) return;
            if (sf_class_size[class_idx] <= SF_SMALL_HEAP_MAX) /* (above half its size) */
                lo = sf_class_size[class_idx] == SF_SMALL_HEAP_MIN ? 0 : sf_class_size[class_idx] / 2 / 16 + 1;
        }
    }
    sf_page_t *page = heap->queues[class_idx].first;
    if (page == NULL || unused) page = &sf_empty_page;
    else if (table == heap->direct && class_idx <= SF_SMALL_CLASS_MAX && sf_cl_of(heap, class_idx)->free != NULL)
        page = sf_cl_of(heap, class_idx); /* (its blocks first: "Class lists" below) */
    for (unsigned i = lo; i <= hi; i++) SF_SET(table[i], page);
    /* a phase that began meanwhile must find no fast page (phase.c) */
    if (page != &sf_empty_page) {
        atomic_thread_fence(memory_order_seq_cst);
        if (sf_phase_on())
            for (unsigned i = lo; i <= hi; i++) SF_SET(table[i], &sf_empty_page);
    }
}

/* The page's bit in its segment's sampled_mask (owner context). */
static void mark_sampled(sf_page_t *page, bool sampled) {
    sf_segment_t *seg = sf_segment_of(page);
    uint64_t bit = (uint64_t)1 << ((unsigned)(page - seg->pages) + seg->page_bias);
    SF_SET(seg->sampled_mask, sampled ? seg->sampled_mask | bit : seg->sampled_mask & ~bit);
}

void sf_page_init(sf_page_t *page, unsigned class_idx) {
    uint32_t bsize = sf_class_size[class_idx];
    uintptr_t natural = bsize & (0u - bsize);
    uint8_t *start = (uint8_t *)sf_align_up((uintptr_t)page->page_start, natural);
    uint8_t *end = page->page_start + page->page_bytes;
    if (end > start) start += sf_page_colour(bsize, class_idx, (size_t)(end - start));
    page->block_start = start;
    SF_SET(page->block_size, bsize);
    page->reserved = (uint16_t)((size_t)(end - start) / bsize);
    sf_page_set_fast_gate(page, false, false); /* (sf_page_set_fast_owner: when the page is fast) */
    SF_SET(page->capacity, 0);
    SF_SET(page->remote_class, (uint8_t)class_idx);
    SF_SET(page->remote_bytes, (uint32_t)page->reserved * bsize);
    page->free = page->local_free = NULL;
    atomic_store_explicit(&page->xfree, 0, memory_order_relaxed);
    SF_SET(page->used, 0);
    SF_SET(page->flags, (uint8_t)(sf_pages_checked() ? SF_PAGE_GUARDED : 0));
    mark_sampled(page, false);
    bool keyed = sf_guard_level >= 2;
    page->secret = keyed ? sf_guard_secret ^ ((uintptr_t)page * 0x9e3779b97f4a7c15ull) : 0;
    /* (bit 0 stays the secret's, 1: a descriptor's address is a multiple of
     * 128, so the product's is 0; a canary's first byte is then odd) */
    page->canary_key = keyed ? sf_canary_secret ^ ((uintptr_t)page * 0xc2b2ae3d27d4eb4full) : 0;
    page->class_idx = (uint8_t)class_idx; /* (before the fast owner: its word is the class's) */
    sf_page_set_fast_owner(page, sf_segment_of(page)->heap);
    if (sf_tracked) sf_track_page_blocks(page);
    SF_SET(page->in_use, 1);
    page->next = page->prev = NULL;
}

/* Carving ahead.  A page's fresh blocks are carved into its free list a
 * few KiB at a time, touching only the memory about to be used (a block's
 * first line): blocks of 2 KiB and up one or two at a time.  Those blocks
 * then circulate between `free` and `local_free` while the class is used a
 * block or two at a time, and each time `free` runs dry malloc leaves its
 * fast path for the swap: on random sizes that was every other malloc of a
 * class, at random (a mispredicted branch each time).  So a heap that keeps
 * coming back for refills carves a small page's class up to SF_CARVE_MIN
 * blocks at once.  Not from the start: a thread that allocates a few
 * blocks and sleeps or exits would touch up to a whole 64 KiB page per
 * class for a block or two (20 generations of 1000 threads keeping 4
 * blocks each held 3x the memory: tests/reliability/test_many_threads.c),
 * so the carving starts after SF_CARVE_WARM refills since the heap's
 * thread claimed it.  Small pages only, at levels 0-1: medium blocks go
 * through the generic paths anyway, and a guarded page's fresh blocks are
 * junk-filled and checked, so carving ahead there costs more than it saves
 * (and changes what a stray write past a block meets). */
static bool carves_ahead(const sf_heap_t *heap, const sf_page_t *page) {
    return heap->refills >= SF_CARVE_WARM && page->block_size <= SF_SMALL_MAX && sf_guard_level < 2 &&
           page->capacity < SF_CARVE_MIN && page->capacity < page->reserved;
}

/* A medium page is about to carve a block: on a page whose memory was not
 * resident when its use began, memory not touched before, so idle free
 * medium blocks give theirs back first (medium_shed.c).  (A page taken
 * back resident carves over its old blocks: no growth.) */
static void medium_carving(sf_heap_t *heap, const sf_page_t *page) {
    if (page->block_size > SF_SMALL_MAX && page->committed == SF_COMMIT_FRESH)
        sf_medium_shed(heap, page, page->block_size);
}

/* The blocks of page in [lo, hi) linked in address order in front of
 * `next`, each with the free mark; returns the first (lo's, or next if
 * the run is empty).  What the block stores write cannot be the page's
 * fields, which a loop through sf_link_set would read again each time. */
static sf_block_t *carve_run(const sf_page_t *page, uint8_t *lo, uint8_t *hi, sf_block_t *next) {
    const size_t size = page->block_size;
    const uintptr_t secret = page->secret, cookie = sf_page_cookie(page);
    for (uint8_t *p = hi; p != lo;) {
        p -= size;
        sf_block_t *b = (sf_block_t *)p;
        b->next = (sf_block_t *)((uintptr_t)next ^ secret);
        b->cookie = cookie;
        next = b;
    }
    return next;
}

/* A fast page's bound (types.h, fast_carved) after its capacity grew: the
 * fast path then takes the new blocks' frees, and no free of a
 * block-aligned address past them.  Written after the capacity (a fork
 * that lands in between leaves a bound behind it, which refuses more, not
 * less) and before the blocks are handed out.  A phase clears every
 * page's bound and then its constant from another thread (phase.c) after
 * raising sf_phase_depth; the fence between this write and the read of
 * the depth after it means either the phase's clear of the bound comes
 * after this write, or this read sees the phase and clears the bound
 * itself, as sf_page_set_fast_owner does: a bound never outlives its
 * constant (with the constant 0, every offset's product, 0, would be
 * under it).  Only the owner runs its pages' fast frees, so its own
 * moment between the two writes is no one's to see. */
static void carved_bound_follows(sf_page_t *page) {
    sf_heap_t *plain = SF_PEEK(sf_segment_of(page)->heap); /* (the fast owner a plain page has) */
    if (plain == NULL || SF_GET(page->fast_heap) != plain) return;
    SF_SET(page->fast_carved, sf_page_fast_bound(page));
    atomic_thread_fence(memory_order_seq_cst);
    if (sf_phase_on() || SF_GET(page->fast_heap) != plain) SF_SET(page->fast_carved, 0);
}

/* Carves fresh blocks in front of the free list: 4 KiB of them (at least
 * one), or, carving ahead, as many as bring the page to SF_CARVE_MIN. */
static void page_extend(sf_heap_t *heap, sf_page_t *page) {
    medium_carving(heap, page);
    uint32_t avail = page->reserved - page->capacity;
    uint32_t want = 4096 / page->block_size;
    if (carves_ahead(heap, page) && want < SF_CARVE_MIN - page->capacity) want = SF_CARVE_MIN - page->capacity;
    if (want < 1) want = 1;
    if (want > avail) want = avail;
    uint8_t *first = page->block_start + (size_t)page->capacity * page->block_size;
    sf_block_t *prev = page->free;
    uint16_t order[SF_OS_PAGE / SF_GUARD_MIN_BLOCK];
    bool shuffled = sf_guard_level >= 3 && want <= sizeof order / sizeof order[0];
    if (shuffled) sf_guarded_shuffle(order, want); /* level 3: no predictable order */
    /* A fresh page hands out first the block nearest a line of its first
     * 4 KiB that depends on the class.  With frees on top of the list a
     * class in a steady state reuses its first few blocks; were they all at
     * offset 0 of 64 KiB-aligned pages, every class's would map to the same
     * set of the data cache (docs/design.md, "Cache misses"). */
    uint32_t rot = 0;
    if (page->capacity == 0) {
        uint32_t line = ((page->class_idx * 23u) & 63u) * 64u;
        rot = (line + page->block_size - 1) / page->block_size;
        if (rot >= want) rot = 0;
    }
    if (sf_guard_level < 2) {
        /* (the list: blocks rot .. want-1, then 0 .. rot-1, then the old
         * list; two runs of two stores a block) */
        uint8_t *mid = first + (size_t)rot * page->block_size;
        prev = carve_run(page, first, mid, prev);
        prev = carve_run(page, mid, first + (size_t)want * page->block_size, prev);
    } else {
        for (uint32_t i = want; i-- > 0;) {
            uint32_t at = i + rot < want ? i + rot : i + rot - want;
            sf_block_t *b = (sf_block_t *)(first + (size_t)(shuffled ? order[i] : at) * page->block_size);
            sf_link_set(page, b, prev);
            b->cookie = sf_page_cookie(page);
            if (sf_guard_level >= 3) sf_junk_fill(page, b); /* (up to the size word) */
            *sf_size_word(page, b) = 0; /* (the page may hold old data) */
            prev = b;
        }
    }
    page->free = prev;
    SF_SET(page->capacity, (uint16_t)(page->capacity + want));
    carved_bound_follows(page);
    /* a small heap's smallest class, which serves every request up to
     * SF_SMALL_HEAP_MIN, past SF_SMALL_HEAP_MIN_CARVED: the heap leaves
     * small mode, so that a thread of many tiny blocks pays at most 12
     * KiB for their rounding up (256 blocks of 16 B in 16 KiB where their
     * own class takes 4; a full page, 1024 of them, would take 64 KiB for
     * 16), and one of a few hundred blocks of 33-64 B stays small */
    if (SF_UNLIKELY(heap->small) && page->block_size == SF_SMALL_HEAP_MIN &&
        (size_t)page->capacity * SF_SMALL_HEAP_MIN > SF_SMALL_HEAP_MIN_CARVED && !(page->flags & SF_PAGE_SAMPLED))
        sf_page_set_small(heap, false);
    if (page->capacity == page->reserved) {
        /* mark the tail's would-be block as free: level 2's owner free
         * (fastpath.h, sf_l2_free_owned_as), whose block-start test has no
         * bound, would otherwise read its size word, which lies past the
         * page (on a small segment's last page, in the guard page), and
         * now sends it to the checked path, which refuses it (the tail is
         * a multiple of 16 bytes, so its second word is inside the page
         * when it exists) */
        uint8_t *tail = page->block_start + sf_page_carved_bytes(page);
        if (tail + sizeof(sf_block_t) <= page->page_start + page->page_bytes)
            ((sf_block_t *)tail)->cookie = sf_page_cookie(page);
    }
}

/* One refill more for the carving-ahead threshold (saturating: only the
 * threshold matters). */
static void count_refill(sf_heap_t *heap) {
    if (heap->refills < SF_CARVE_WARM) heap->refills++;
}

/* `list`, the blocks the owner freed, becomes the page's free list, and a
 * heap that refills often carves ahead beside them.  The one swap of both
 * callers below, so the threshold is crossed at the same refill on both. */
static void swap_in_local(sf_heap_t *heap, sf_page_t *page, sf_block_t *list) {
    page->free = list;
    if (carves_ahead(heap, page)) page_extend(heap, page);
}

/* The owner's frees become the page's free list (at guard level >= 2 less
 * the block freed last, and not while that block alone waits on a page
 * that can still carve: sf_page_guarded_swap).  False: nothing swapped. */
static bool refill_from_local(sf_heap_t *heap, sf_page_t *page) {
    if (sf_guard_level >= 2) return sf_page_guarded_swap(page);
    sf_block_t *list = page->local_free;
    if (list == NULL) return false;
    page->local_free = NULL;
    swap_in_local(heap, page, list);
    return true;
}

/* Makes `page` able to serve, if it can be: its own frees, then other
 * threads' (remote.c), then blocks not carved yet (and, carving ahead,
 * blocks not carved yet beside the frees).  False: it is full. */
static bool page_refill(sf_heap_t *heap, sf_page_t *page) {
    if (page->free) return true;
    count_refill(heap);
    sf_prof_pace_check(heap);
    if (page->local_free == NULL) sf_page_collect_remote(heap, page);
    if (!refill_from_local(heap, page)) {
        if (page->capacity >= page->reserved) return false;
        page_extend(heap, page);
    }
    return true;
}

/* sf_malloc_generic's swap of a current page with few blocks carved: the
 * same refill as page_refill's, then the first block handed out. */
void *sf_page_swap_short(sf_heap_t *heap, sf_page_t *page, sf_block_t *list) {
    count_refill(heap);
    swap_in_local(heap, page, list);
    sf_block_t *b = page->free;
    return sf_hand_out(heap, page, b, b->next);
}

/* The queue a page of `heap` in use belongs to while it is not full. */
sf_page_queue_t *sf_page_queue(sf_heap_t *heap, const sf_page_t *page) {
    return (page->flags & SF_PAGE_SAMPLED) ? &heap->sampled[page->class_idx] : &heap->queues[page->class_idx];
}

/* Makes the heap small or not (docs/design.md, "Small heaps"), and its
 * direct[] entries name the pages the new mode's classes would. */
void sf_page_set_small(sf_heap_t *heap, bool small) {
    SF_SET(heap->small, (uint8_t)small); /* (/heaps reads it: snapshot.c) */
    for (unsigned c = 1; c <= SF_SMALL_CLASS_MAX; c++) sf_page_update_direct(heap, c);
}

/* Puts a page with nothing left on the full list, unless a remote free
 * arrives while it goes there (then it can serve after all: true). */
static bool page_retire_full(sf_heap_t *heap, sf_page_queue_t *q, sf_page_t *page) {
    if (!sf_page_set_notify(page)) return page_refill(heap, page);
    class_remove(heap, q, page);
    SF_SET(page->flags, (uint8_t)(page->flags | SF_PAGE_FULL));
    sf_page_set_fast_owner(page, heap); /* NULL: full */
    sf_queue_push_front(&heap->full, page);
    /* a small heap whose page of one of its power-of-two classes filled
     * (64 KiB of that class in use) is small no more: every size its own
     * class from now on.  Not for the classes above, whose pages fill with
     * a few blocks (8 of 8 KiB), nor a page of sampled blocks.  (Its
     * 64-byte class leaves sooner: page_extend.) */
    if (SF_UNLIKELY(heap->small) && q == &heap->queues[page->class_idx] &&
        sf_class_size[page->class_idx] <= SF_SMALL_HEAP_MAX)
        sf_page_set_small(heap, false);
    return false;
}

/* Picky page switches.  A class whose current page runs dry takes the next
 * page of its queue with any block free, and a page that fills goes to the
 * full list, from which the owner's next free into it (a slow path) brings
 * it back to the queue's end.  Where a thread frees its own blocks at
 * random over many nearly full pages (a cache that replaces entries at
 * random: bench/churn), every page it switches to has a block or two free,
 * so nearly every malloc and every free of the class took a slow path:
 * churn of 1 KiB blocks ran at 0.23x tcmalloc's speed (docs/design.md,
 * "Picky page switches").  So a small class whose full pages the owner has
 * been freeing into (heap->unfulls, halved each time the class looks for a
 * page) passes over pages with fewer than an eighth of their blocks to hand
 * out, to the back of the queue, where more frees reach them; once
 * PICKY_LOOK such pages were passed over it takes a fresh page.  The slack
 * this adds, about an eighth of each page, keeps the switches several
 * blocks apart.  Only the owner's frees count: pages that other threads'
 * frees bring back (a producer's, bench/xmalloc) would grow by the blocks
 * still in flight.  A class with fewer such pages takes the best of them,
 * never a fresh page; classes of fewer than 16 blocks a page (above 4 KiB)
 * and medium classes (a fresh page is 1 MiB) are never picky. */
#define PICKY_LOOK 3

/* The blocks a page of the queue can still hand out (its free lists, the
 * frees of other threads taken in, and what is not carved yet), and
 * whether they are enough for a picky switch to take it: an eighth. */
static uint32_t page_available(const sf_page_t *page) { return page->reserved - sf_page_used(page); }
static bool picky_takes(const sf_page_t *page) { return page_available(page) >= page->reserved / 8u; }

/* A page passed over is still the class's, in its queue, after a fresh
 * page could not be had: the attempt may collect the heap's pages
 * (segment.c) and release one that emptied meanwhile. */
static bool still_queued(const sf_heap_t *heap, const sf_page_t *page, unsigned class_idx) {
    return SF_GET(page->in_use) && page->class_idx == class_idx && !(SF_GET(page->flags) & SF_PAGE_FULL) &&
           sf_segment_of(page)->heap == heap;
}

/* The page becomes its class's current one: at the front of the queue,
 * named by direct[]. */
static sf_page_t *make_current(sf_heap_t *heap, sf_page_queue_t *q, sf_page_t *page, unsigned class_idx) {
    if (page != q->first) {
        class_remove(heap, q, page);
        class_push_front(heap, q, page);
    }
    /* always: full pages ahead of it may have left the queue, and
     * direct[] must never name a page outside its class queue */
    sf_page_update_direct(heap, class_idx);
    return page;
}

/* A page of the class that can serve, from the class queue (or, sampled,
 * from the queue of pages for sampled blocks, which direct[] never names). */
static sf_page_t *find_page_in(sf_heap_t *heap, unsigned class_idx, bool sampled) {
    sf_page_queue_t *q = sampled ? &heap->sampled[class_idx] : &heap->queues[class_idx];
    bool picky = false;
    if (heap->unfulls[class_idx] != 0) { /* (counted for small classes only: sf_page_note_unfull) */
        picky = !sampled;
        heap->unfulls[class_idx] >>= 1;
    }
    sf_page_t *passed[PICKY_LOOK];
    unsigned npassed = 0;
    sf_page_t *page = q->first;
    while (page != NULL) {
        sf_page_t *next = page->next;
        if (page_refill(heap, page) || page_retire_full(heap, q, page)) {
            if (!picky || picky_takes(page)) break;
            /* (other threads' frees waiting on the page count too) */
            if (sf_page_collect_remote(heap, page) != 0 && picky_takes(page)) break;
            passed[npassed++] = page;
            if (npassed == PICKY_LOOK) {
                page = NULL; /* (a fresh page, below) */
                break;
            }
        }
        page = next;
    }
    /* the pages passed over wait at the back (the best of them serves
     * if the queue has no other and no fresh page can be had) */
    sf_page_t *best = NULL;
    for (unsigned i = 0; i < npassed; i++) {
        if (best == NULL || page_available(passed[i]) > page_available(best)) best = passed[i];
        if (passed[i] != q->last) {
            class_remove(heap, q, passed[i]);
            class_push_back(heap, q, passed[i]);
        }
    }
    if (page != NULL) return make_current(heap, q, page, class_idx);
    if (best != NULL && npassed < PICKY_LOOK) return make_current(heap, q, best, class_idx);
    page = sf_segment_page_alloc(heap, class_idx);
    if (page == NULL) {
        if (best != NULL && still_queued(heap, best, class_idx)) return make_current(heap, q, best, class_idx);
        sf_page_update_direct(heap, class_idx);
        return NULL;
    }
    heap->pages_in_use++;
    if (sampled) { /* off every free fast path: each free is recorded */
        SF_SET(page->flags, (uint8_t)(page->flags | SF_PAGE_SAMPLED));
        mark_sampled(page, true);
        sf_page_set_fast_owner(page, heap);
    }
    page_extend(heap, page);
    class_push_front(heap, q, page);
    sf_page_update_direct(heap, class_idx);
    return page;
}

/* Pops the page's next free block.  At guard level >= 2 the link is
 * decoded and must stay inside the page (a write into a freed block that
 * hit its link is caught here, and the rest of the list is dropped rather
 * than followed); at level 3 the block's junk fill and size word must be
 * intact (a block written after free, or under by its neighbour, is
 * reported and never handed out).  NULL: try again. */
static sf_block_t *page_pop(sf_heap_t *heap, sf_page_t *page) {
    sf_block_t *b = page->free;
    sf_block_t *next = sf_link_decode(page, b);
    SF_COUNT(page->used); /* a dropped block stays counted: it is never reused */
    /* (the block-start test is also the bound: below the first block the
     * offset wraps, past the carved ones it is too big) */
    if (sf_guard_level >= 2 && next != NULL && !sf_page_is_block_start(page, next)) {
        sf_guard_report(SF_GUARD_USE_AFTER_FREE, b);
        next = NULL;
    }
    page->free = next;
    /* level 3: the whole freed block is checked (handing it out would
     * write over the evidence) */
    if (sf_guard_level >= 3) {
        enum sf_guard_kind fault = sf_guarded_freed_fault(page, b);
        if (fault != SF_GUARD_KINDS) {
            sf_guard_report(fault, b);
            return NULL;
        }
    }
    SF_COUNT(heap->allocs);
    b->cookie = 0;
    return b;
}

static void *heap_malloc_from(sf_heap_t *heap, unsigned class_idx, bool sampled) {
    sf_outbox_send(heap, true);
    sf_heap_drain_remote(heap);
    for (;;) {
        sf_page_t *page = find_page_in(heap, class_idx, sampled);
        if (page == NULL) return NULL;
        sf_block_t *b = page_pop(heap, page);
        if (b != NULL) return b;
    }
}

/* The slow path for one class: take in remote frees, find or make a page. */
void *sf_page_malloc_class(sf_heap_t *heap, unsigned class_idx) {
    /* (the profile's word first: nothing below may see it) */
    uint8_t force = heap->prof.force;
    heap->prof.force = SF_PROF_FORCE_NONE;
    /* memory.limit's soft threshold was crossed since this heap last
     * looked: its empty pages go back to their segments, and every waiting
     * page is decommitted (memlimit.c; no other thread may do it for it) */
    uint32_t epoch = atomic_load_explicit(&sf_memlimit_epoch, memory_order_relaxed);
    if (SF_UNLIKELY(heap->memlimit_epoch != epoch)) {
        heap->memlimit_epoch = epoch;
        sf_page_collect_heap_ex(heap, false, true);
    }
    /* the heap profile's countdown (fastpath.h, sf_sample_tick), by the
     * class's size: the allocations that come this far did not count
     * themselves; one a fast pop found due comes forced (sf_sample_take) */
    bool sampled = force == SF_PROF_FORCE_SAMPLE;
    uint32_t size = sf_class_size[class_idx];
    if (force == SF_PROF_FORCE_NONE && sf_sample_tick(heap, size))
        sampled = sf_countdown_out(heap, size, false) == SF_COUNT_OUT_PROFILE;
    if (SF_UNLIKELY(sampled)) {
        void *p = heap_malloc_from(heap, class_idx, true);
        if (p != NULL) return p;
    }
    /* the current page may still have blocks (guard level >= 2 comes here
     * for every allocation): take one before the full slow path */
    sf_page_t *first = heap->queues[class_idx].first;
    if (first != NULL && first->free != NULL) {
        sf_block_t *b = page_pop(heap, first);
        if (b != NULL) return b;
    }
    return heap_malloc_from(heap, class_idx, false);
}


static bool list_holds(const sf_page_t *page, const sf_block_t *list, const void *b) {
    const uint8_t *lo = page->block_start, *hi = lo + sf_page_carved_bytes(page);
    for (uint32_t i = 0; list != NULL && i <= page->capacity; i++) {
        if (list == b) return true;
        if ((const uint8_t *)list < lo || (const uint8_t *)list >= hi) return false; /* corrupt */
        list = sf_link_decode(page, list);
    }
    return false;
}

/* Whether b sits on the page's owner-side free lists (owner context). */
bool sf_page_holds_free_block(const sf_page_t *page, const void *b) {
    return list_holds(page, page->free, b) || list_holds(page, page->local_free, b);
}

/* A full page has a free block again: back to the end of its class queue,
 * behind pages that have had longer to gather frees. */
void sf_page_unfull(sf_heap_t *heap, sf_page_t *page) {
    sf_page_clear_notify(page);
    SF_SET(page->flags, (uint8_t)(page->flags & ~SF_PAGE_FULL));
    sf_page_set_fast_owner(page, heap);
    sf_queue_remove(&heap->full, page);
    sf_page_queue_t *q = sf_page_queue(heap, page);
    class_push_back(heap, q, page);
    if (q->first == page) sf_page_update_direct(heap, page->class_idx);
}

/* A block comes back to a page whose flags are set (full, or guarded). */
void sf_page_local_free_slow(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    sf_link_set(page, b, page->local_free);
    b->cookie = sf_page_cookie(page);
    page->local_free = b;
    if (page->flags & SF_PAGE_FULL) sf_page_unfull(heap, page);
    if (SF_UNCOUNT(page->used) == 0) sf_page_on_empty(heap, page);
}

/* Gives an empty page back to its segment; false if level 3 found a
 * write after free there and kept it (sf_guarded_check_empty_page). */
static bool page_release(sf_heap_t *heap, sf_page_t *page) {
    if (sf_guard_level >= 3 && !sf_guarded_check_empty_page(page)) return false;
    sf_page_queue_t *q = sf_page_queue(heap, page);
    bool was_first = q->first == page;
    class_remove(heap, q, page);
    if (was_first) sf_page_update_direct(heap, page->class_idx);
    heap->pages_in_use--;
    sf_segment_page_free(heap, page);
    return true;
}

/* A page whose count of blocks out fell to zero: never a class's current
 * page, nor the head of a medium class's pages for sampled blocks (their
 * counts carry the bias), so one behind it, or a small class's page of
 * sampled blocks. */
void sf_page_on_empty(sf_heap_t *heap, sf_page_t *page) { (void)page_release(heap, page); }

/* Takes in remote frees and returns every page with no live block to its
 * segment (with `force`, also the last page of each class).  Returns the
 * number of pages released. */
size_t sf_page_collect_heap(sf_heap_t *heap, bool force) {
    return sf_page_collect_heap_ex(heap, force, force);
}

/* sf_page_collect_heap, with forced page release and forced decommit apart. */
size_t sf_page_collect_heap_ex(sf_heap_t *heap, bool force, bool purge_now) {
    sf_cl_flush_all(heap); /* (their blocks' pages may empty) */
    sf_outbox_send(heap, false); /* (a collector's: not inside a collection of another) */
    sf_heap_drain_remote(heap);
    /* after the drain: the blocks it returns go through the quarantine */
    if (force) sf_quarantine_flush(heap);
    /* full pages first: the ones other threads freed into rejoin their queues */
    for (sf_page_t *page = heap->full.first, *next; page != NULL; page = next) {
        next = page->next;
        sf_page_collect_remote(heap, page);
    }
    size_t released = 0;
    for (int sampled = 0; sampled < 2; sampled++) {
        sf_page_queue_t *queues = sampled ? heap->sampled : heap->queues;
        for (unsigned c = 1; c < SF_CLASS_COUNT; c++)
            for (sf_page_t *page = queues[c].first; page != NULL; page = page->next)
                sf_page_collect_remote(heap, page);
        for (unsigned c = 1; c < SF_CLASS_COUNT; c++) {
            /* every class queue keeps its head unless forced; a medium
             * class's page for sampled blocks too (is_class_queue: kept for
             * the class's next sample; released here, every collect sent
             * the next sample of each medium class to a new page), but not
             * in a purge (memory.limit) nor once the profile is off, and a
             * small class's never (they go when they empty) */
            bool keep_head = !force && (!sampled || (c > SF_SMALL_CLASS_MAX && !purge_now &&
                                                     sf_knob(SF_KNOB_PROFILE_SAMPLE_BYTES) != 0));
            sf_page_t *page = queues[c].first;
            while (page != NULL) {
                sf_page_t *next = page->next;
                if (sf_page_used(page) == 0 && (!keep_head || page != queues[c].first || next != NULL)) {
                    released += page_release(heap, page);
                }
                page = next;
            }
        }
    }
    sf_segment_collect_purges(heap, purge_now);
    return released;
}

/* ---- class lists ------------------------------------------------------------ */

/* Class lists.  A thread that frees its own small blocks at random over
 * many pages (a cache replacing entries at random, a parser's nodes of
 * every size) had the next malloc of each class take its blocks from the
 * class's current page, while the frees went to whichever pages the blocks
 * were on: the current page ran dry at once, and the class switched pages
 * (a slow path) every few calls (docs/design.md, "Class lists").  So each
 * small class of a heap has a list in front of its pages: a LIFO of the
 * blocks the owner freed last, on any of the class's pages, which the fast
 * path's free pushes onto through the page's `cl`.  The list's head is
 * shaped as the first bytes of a page descriptor (sf_heap_t, cl_heads), so
 * direct[] names it as it names a page and malloc pops it with the same
 * instructions: the fast paths are today's.
 *
 * Its `used` counts the room left down, so a free finds the list full on
 * the sign of one subtraction.  Nothing walks a list on the way: a full
 * list sends the frees to their pages (sf_cl_full) and points direct[] at
 * itself, so malloc takes the blocks back in LIFO order; once it runs dry,
 * malloc's slow path points direct[] back at the class's page (sf_cl_dry),
 * and the next frees fill the list again.  A class's current page that
 * runs dry while the list holds blocks hands over to the list
 * (sf_cl_take_over).  Frees into a full page (flags set: no fast owner)
 * take the checked path and go to their page, as before.
 *
 * A listed block is still counted out by its page (`used`), so its page
 * cannot go back to its segment: a list holds at most SF_CL_BLOCKS, and at
 * most threads.class_list_bytes of blocks (sf_cl_cap, its capacity, kept
 * in the head's `committed` when the list is set up or runs dry, so that a
 * change of the knob reaches it then; with the knob at 0 no block is
 * listed), and every collection of the
 * heap (a thread's exit, sefer_trim, an abandoned heap's collection, the
 * look before a new segment, memory.limit's purge) first returns every
 * listed block to its page (sf_cl_flush_all).  A listed block carries its
 * page's free mark, so a double free is found as before; statistics count
 * it free (sf_cl_count); sefer_check walks the lists (check.c).  Guard
 * levels 2-3 and valgrind's tracking never list a block: their pages have
 * no fast owner. */

/* The record beside class list cl (types.h, sf_heap_t.cl_runs). */
static struct sf_cl_run *cl_run_of(sf_page_or_list_t *cl) {
    return (struct sf_cl_run *)((unsigned char *)cl + sizeof(((sf_heap_t *)0)->cl_heads));
}

/* A list's capacity and room set (owner context).  Statistics read the
 * two from other threads (sf_cl_blocks: capacity less room), so the
 * stores go in the order that never shows blocks the list does not hold:
 * a capacity that shrinks first, one that grows last. */
static void cl_set_room(sf_page_or_list_t *cl, uint32_t cap, uint32_t room) {
    if (cap < cl->committed) {
        SF_SET(cl->committed, (uint8_t)cap);
        SF_SET(cl->used, room);
    } else {
        SF_SET(cl->used, room);
        SF_SET(cl->committed, (uint8_t)cap);
    }
}

/* sf_cl_full's rare cases (through cl_full_rare): a list used for the first time, or found
 * empty with a capacity not the knob's (pages took it, or the knob gave
 * none), is set up (a heap's lists start as zeroes: no room) and takes b,
 * if threads.class_list_bytes gives it room; a full list that direct[]
 * does not name yet comes to be named (but for a small heap's classes
 * served by another's entries: sf_page_update_direct); b goes to its page
 * but in the first case. */
static SF_NOINLINE void cl_set_up_or_name(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    sf_page_or_list_t *cl = page->cl;
    unsigned c = page->class_idx;
    /* (an empty list found full had its capacity taken by pages that took
     * their blocks back, "Pages only a list keeps" below, and direct[]
     * went back to a page before it ran dry: its capacity back too) */
    if (!cl->in_use || (cl->free == NULL && cl_run_of(cl)->lowered)) {
        uint32_t cap = sf_cl_cap(c);
        cl->class_idx = (uint8_t)c;
        cl->cl_direct = (uint16_t)(sf_class_size[c] >> 4); /* (sf_cl_full's look) */
        cl->local_free = NULL;
        /* (statistics read these three from other threads, in_use last:
         * sf_cl_blocks) */
        cl_set_room(cl, cap, cap != 0 ? cap - 1u : 0u); /* (b is on it) */
        SF_SET(cl->in_use, 1);
        /* (no room: the knob is read again at the next free) */
        cl_run_of(cl)->lowered = cap == 0;
        if (cap != 0) {
            b->cookie = sf_page_cookie(page);
            b->next = cl->free;
            cl->free = b;
            return;
        }
    } else {
        SF_COUNT(cl->used); /* (back to none) */
        /* (a list with no blocks is never named: a capacity of 0) */
        if (cl->free != NULL && heap->queues[c].first != NULL && (!heap->small || sf_small_heap_class(c) == c))
            sf_page_update_direct(heap, c);
    }
    sf_free_owned(heap, page, b);
}

/* The same, but first, and short, the case of every free with the lists
 * off (threads.class_list_bytes 0, or below the class's size): b to its
 * page. */
static SF_NOINLINE void cl_full_rare(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    sf_page_or_list_t *cl = page->cl;
    if (SF_LIKELY(sf_cl_off(page->class_idx) && cl->committed == 0 && cl->free == NULL && cl->in_use)) {
        SF_COUNT(cl->used); /* (back to no room) */
        sf_free_owned(heap, page, b);
        return;
    }
    cl_set_up_or_name(heap, page, b);
}

/* Pages only a list keeps.  A listed block is counted out by its page, so
 * a page whose every block out is listed stays in use: a thread that frees
 * many blocks in an order spread over their pages and then sleeps kept one
 * page in use for each page one of its listed blocks was on, up to
 * SF_CL_BLOCKS pages a class, where no purge of another thread reaches
 * (docs/design.md, "Class lists (built)").  The owner gives such pages
 * back on its frees past a full list, which are what freeing many blocks
 * and allocating none is made of:
 *
 *   - each page keeps how many of its blocks the list held when last
 *     counted (cl_seen; not counted yet, the most a page may give back,
 *     sf_cl_few); a free onto the page past a full list that leaves no
 *     more blocks out than that counts again (cl_give_back_page), and if
 *     they are all listed takes them off the list and back onto the page,
 *     which empties and goes back to its segment.  A drain's frees past
 *     the full list so count each page once as it nears empty, and give
 *     back the pages the list alone keeps;
 *   - the counts go stale as malloc pops and free pushes (fast paths that
 *     keep no count), so when a free past the full list empties a page
 *     (the sign that frees are draining the class: a thread that
 *     allocates and frees a class in turn, in bursts of one page or a
 *     few, seldom empties one that way), every page on the list is
 *     counted afresh and those it alone keeps give their blocks back
 *     (cl_sweep), unless nothing was popped or pushed since the last count
 *     (the list's head as it was then: cl_runs' mark).  Walking on every
 *     free past full instead (or after a run of them) cost bursts of one
 *     size larger than a page a retire and a refill of the list's page
 *     each time, and the run's count 15 instructions a free;
 *   - a page keeps its listed blocks if they are more than a quarter of
 *     the list's capacity (sf_cl_few): a list whose blocks crowd on a page
 *     holds that page as its own memory rather than strands it.  A thread
 *     freeing a burst in order lists its first blocks, all on one page,
 *     and a loop of such bursts gave that page back and carved it again
 *     every time (bench/instructions' burst64-4096: 79 instructions an
 *     operation before pages went back, 102 with that page too, and
 *     0.75-0.85x the time).  Blocks freed in a spread order lie a few to
 *     a page.  So a heap keeps at most three pages a class for its lists
 *     alone;
 *   - blocks taken back lower the list's capacity (committed) rather than
 *     leave it room, so the list stays full and the next frees, too, go to
 *     their pages: the counts stay right while the drain lasts.  The
 *     capacity comes back when the list runs dry or is flushed, or at the
 *     next free that finds it empty and full (cl_full_rare).
 *
 * A walk is at most the list's SF_CL_BLOCKS blocks, just freed. */

/* The page of a listed block (every one is on a small page). */
static sf_page_t *listed_page(const sf_block_t *b) {
    uintptr_t u = (uintptr_t)b;
    return sf_small_page_in(sf_small_seg(u >> SF_SEG_SHIFT), u);
}

/* The page of u if it is one of cl's pages: in a small segment of the
 * heap's, past the segment's header, a page that pushes onto cl; else
 * NULL.  (What a listed block's address must pass before anything of its
 * page is read: the walks then test the block, cl_read with its free mark,
 * sf_cl_flush_all without.) */
static sf_page_t *cl_page_at(const sf_heap_t *heap, const sf_page_or_list_t *cl, uintptr_t u) {
    uintptr_t chunk = u >> SF_SEG_SHIFT;
    if (!sf_segmap_is_small_chunk(chunk) || SF_PEEK(((const sf_segment_t *)sf_small_seg(chunk))->heap) != heap ||
        (u & (SF_SEG_SIZE - 1)) < ((uintptr_t)1 << SF_SMALL_PAGE_SHIFT))
        return NULL;
    sf_page_t *page = listed_page((const sf_block_t *)u);
    return page->cl == cl ? page : NULL;
}

/* The list's blocks, top first, into v and their pages into pg (at most
 * SF_CL_BLOCKS); *rest is what follows the last one read.  The walk stops
 * at a block that is not one of heap's small blocks (a damaged link,
 * which sefer_check reports): nothing is written through it, and what
 * follows is kept as it was. */
static uint32_t cl_read(const sf_heap_t *heap, const sf_page_or_list_t *cl, sf_block_t **v, sf_page_t **pg,
                        sf_block_t **rest) {
    uint32_t n = 0;
    sf_block_t *b = cl->free;
    sf_page_t *page = NULL; /* (the last block's: a run of blocks on one page checks it once) */
    for (; b != NULL && n < SF_CL_BLOCKS; b = b->next) {
        /* (a free block of a page of this list: in a small segment of the
         * heap's, past the segment's header, on a page that pushes onto cl,
         * at a block's start, with the page's free mark) */
        uintptr_t u = (uintptr_t)b;
        if (page == NULL || (u ^ (uintptr_t)v[n - 1]) >> SF_SMALL_PAGE_SHIFT != 0) {
            page = cl_page_at(heap, cl, u);
            if (page == NULL) break;
        }
        if (!sf_page_is_block_start(page, b) || b->cookie != sf_page_cookie(page)) break;
        pg[n] = page;
        v[n++] = b;
    }
    *rest = b;
    return n;
}

/* v[0 .. n) read from cl (cl_read, rest after them): those with take[i]
 * set come off the list, the others stay in their order, and the taken
 * go back onto their pages; the list's capacity shrinks by as many, so
 * that it stays full.  Off the list first, then pushed: a page's last
 * push empties it, and its release may look at the list. */
static void cl_give_back(sf_heap_t *heap, sf_page_or_list_t *cl, sf_block_t **v, sf_page_t **pg, const bool *take,
                         uint32_t n, sf_block_t *rest) {
    sf_block_t **link = &cl->free;
    uint32_t taken = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (take[i]) {
            taken++;
            continue;
        }
        *link = v[i];
        link = &v[i]->next;
    }
    *link = rest;
    SF_SET(cl->committed, (uint8_t)(cl->committed - taken));
    cl_run_of(cl)->mark = cl->free; /* (counted: no walk again until the list changes) */
    cl_run_of(cl)->lowered = 1;
    for (uint32_t i = 0; i < n; i++)
        if (take[i]) sf_page_local_free_slow(heap, pg[i], v[i]);
}

/* A page whose blocks out (`out`, the page not its class's current one)
 * may all be listed: counted; taken back if they are. */
static SF_NOINLINE void cl_give_back_page(sf_heap_t *heap, sf_page_t *page, sf_page_or_list_t *cl, uint32_t out) {
    sf_block_t *v[SF_CL_BLOCKS], *rest;
    sf_page_t *pg[SF_CL_BLOCKS];
    bool take[SF_CL_BLOCKS];
    uint32_t n = cl_read(heap, cl, v, pg, &rest), listed = 0;
    for (uint32_t i = 0; i < n; i++) {
        take[i] = pg[i] == page;
        listed += take[i];
    }
    uint32_t few = sf_cl_few(cl->class_idx);
    /* (a crowded page is kept: counted again only once it may not be) */
    page->cl_seen = (uint16_t)(listed < few ? listed : few);
    if (listed == out && listed <= few) cl_give_back(heap, cl, v, pg, take, n, rest);
}

/* Every page on the list counted afresh; the blocks of those the list
 * alone keeps taken back. */
static SF_NOINLINE void cl_sweep(sf_heap_t *heap, sf_page_or_list_t *cl) {
    sf_block_t *v[SF_CL_BLOCKS], *rest;
    sf_page_t *pg[SF_CL_BLOCKS];
    bool take[SF_CL_BLOCKS], any = false;
    uint32_t n = cl_read(heap, cl, v, pg, &rest);
    for (uint32_t i = 0; i < n; i++)
        pg[i]->cl_seen = 0;
    for (uint32_t i = 0; i < n; i++)
        pg[i]->cl_seen++;
    /* (a page's used carries the bias while it is its class's current one:
     * never equal to a list's count) */
    uint32_t few = sf_cl_few(cl->class_idx);
    for (uint32_t i = 0; i < n; i++) {
        take[i] = pg[i]->cl_seen <= few && pg[i]->used == pg[i]->cl_seen;
        any |= take[i];
    }
    for (uint32_t i = 0; i < n; i++) /* (crowded pages: as in cl_give_back_page) */
        if (pg[i]->cl_seen > few) pg[i]->cl_seen = (uint16_t)few;
    if (any) cl_give_back(heap, cl, v, pg, take, n, rest);
    cl_run_of(cl)->mark = cl->free;
}

/* A free past the full list left page with no more blocks out than its
 * count (`out`, 0 if it emptied).  An emptied page goes back to its
 * segment, and that is frees draining the class: unless nothing was
 * popped or pushed since the last count (the list's head as it was then),
 * every page on the list is counted afresh and those it alone keeps give
 * their blocks back (cl_sweep).  Otherwise the page is counted
 * (cl_give_back_page). */
static SF_NOINLINE void cl_page_low(sf_heap_t *heap, sf_page_t *page, sf_page_or_list_t *cl, uint32_t out) {
    if (out != 0) {
        cl_give_back_page(heap, page, cl, out);
        return;
    }
    sf_page_on_empty(heap, page); /* (gone to its segment: not read again) */
    if (cl->free != cl_run_of(cl)->mark) cl_sweep(heap, cl);
}

/* The owner's free found the class list full (its room counted below
 * zero): b goes to its page, and malloc takes the list's blocks before
 * the page's.  The common case, the list already named by direct[] (a
 * thread freeing many blocks in a row), is a leaf: the push onto the page
 * as before the lists, and one comparison for both rare cases, a page
 * left empty (out 0, which no count is below) and a page whose blocks out
 * may all be listed (out within its count); both are a tail call
 * (cl_page_low), and it saves no register. */
SF_NOINLINE void sf_cl_full(sf_heap_t *heap, sf_page_t *page, void *p) {
    sf_page_or_list_t *cl = page->cl;
    sf_block_t *b = (sf_block_t *)p;
    /* (direct[] names a list only once it has held blocks: set up, its
     * index in cl_direct; a list not set up has 0 there, where no other
     * class's list is named) */
    /* (phase.c empties direct[] from other threads: SF_PEEK) */
    if (SF_UNLIKELY(SF_PEEK(heap->direct[cl->cl_direct]) != cl)) {
        cl_full_rare(heap, page, b);
        return;
    }
    SF_COUNT(cl->used); /* (back to none) */
    /* (sf_free_onto's push, with the page's release left to cl_page_low:
     * its count is read before the page can go) */
    b->next = page->free;
    b->cookie = sf_page_cookie(page);
    page->free = b;
    uint32_t out = SF_UNCOUNT(page->used);
    if (SF_UNLIKELY(out <= page->cl_seen)) cl_page_low(heap, page, cl, out);
}

/* An empty list's full capacity and room back (pages that took their
 * blocks back lowered it: "Pages only a list keeps" above), as
 * threads.class_list_bytes says now. */
static void cl_restore(sf_page_or_list_t *cl) {
    uint32_t cap = sf_cl_cap(cl->class_idx);
    cl_set_room(cl, cap, cap);
    cl_run_of(cl)->lowered = cap == 0; /* (as cl_full_rare) */
}

/* The same for an empty list whose capacity pages took or the knob
 * changed.  A capacity of 0 that neither set stays: the tests'
 * class_list_room.h sets it so that a class's frees go to their pages
 * (97df0dc restored it, and two tests failed in CI). */
static void cl_restore_stale(sf_page_or_list_t *cl) {
    if (cl->free != NULL || !cl->in_use) return;
    if (cl_run_of(cl)->lowered || (cl->committed != 0 && cl->committed != sf_cl_cap(cl->class_idx))) cl_restore(cl);
}

/* malloc found direct[]'s list dry: the class's page again (the next frees
 * fill the list).  Returns what direct[] names now for the class. */
sf_page_t *sf_cl_dry(sf_heap_t *heap, sf_page_or_list_t *cl) {
    unsigned c = cl->class_idx;
    /* (the knob's capacity: a change of it reaches the list here; dry, so
     * no block is lost to the room's count) */
    cl_restore(cl);
    sf_page_update_direct(heap, c);
    sf_page_t *page = SF_GET(*sf_class_direct(heap, c)); /* (phase.c writes it) */
    return sf_is_cl(heap, page) ? &sf_empty_page : page; /* (a phase may have begun: the empty page) */
}

/* malloc found page, named by direct[], dry: if its class list has blocks,
 * direct[] names the list now (true). */
bool sf_cl_take_over(sf_heap_t *heap, const sf_page_t *page) {
    unsigned c = page->class_idx;
    if (page == &sf_empty_page || c > SF_SMALL_CLASS_MAX || sf_cl_of(heap, c)->free == NULL) return false;
    sf_page_update_direct(heap, c);
    return SF_GET(*sf_class_direct(heap, c)) == sf_cl_of(heap, c);
}

/* sf_cl_flush_all met b, not a free block of its list's pages: what
 * follows it stays off every list, never reused.  A block-aligned address
 * in the uncarved part of one of the list's pages is an address malloc
 * never returned, which only a damaged link can list since the free fast
 * path's test is bounded by the blocks carved (docs/design.md, "Guard
 * levels"): given to its page, it would count a block the page never
 * handed out, and the page could empty while one of its blocks is
 * live.  Anything else is a link a write after free damaged, in prev (or
 * the list's head). */
static SF_NOINLINE void cl_flush_damaged(const sf_page_t *page, const sf_block_t *prev, const sf_block_t *b) {
    bool uncarved = false;
    if (page != NULL) { /* (a block start, were the page carved to its end) */
        uint64_t off = (uint64_t)((uintptr_t)b - (uintptr_t)page->block_start), m = sf_page_divmagic(page);
        uncarved = off >= sf_page_carved_bytes(page) && off < (uint64_t)page->reserved * page->block_size &&
                   off * m < m;
    }
    if (uncarved || prev == NULL) sf_guard_report(SF_GUARD_INVALID, b);
    else sf_guard_report(SF_GUARD_USE_AFTER_FREE, prev);
}

/* Every listed block back to its page (owner or collector context: a
 * thread's exit, sefer_trim, a collection, growth): the lists empty,
 * direct[] names the classes' pages.  Each block's address is checked as
 * cl_read checks it first: a link damaged by a write after free, or an
 * address malloc never returned that the free fast path took, is reported
 * and not followed (nothing is written through it, no page counts it). */
void sf_cl_flush_all(sf_heap_t *heap) {
    for (unsigned c = 1; c <= SF_SMALL_CLASS_MAX; c++) {
        sf_page_or_list_t *cl = sf_cl_of(heap, c);
        sf_block_t *b = cl->free;
        if (b == NULL) {
            cl_restore_stale(cl);
            continue;
        }
        /* detached first: the pushes below may make a page its class's
         * current one, and direct[] must not name the list meanwhile */
        cl->free = NULL;
        cl_restore(cl);
        sf_block_t *prev = NULL;
        while (b != NULL) {
            /* (the free mark not asked: a write after free that changed
             * only it leaves the block safe to give back, and levels 0-1
             * do not look for those) */
            sf_page_t *page = cl_page_at(heap, cl, (uintptr_t)b);
            if (SF_UNLIKELY(page == NULL || !sf_page_is_block_start(page, b))) {
                cl_flush_damaged(page, prev, b);
                break;
            }
            sf_block_t *next = b->next;
            sf_page_local_free_slow(heap, page, b);
            prev = b;
            b = next;
        }
        if (SF_GET(*sf_class_direct(heap, c)) == cl) sf_page_update_direct(heap, c);
    }
}

/* The blocks on heap's class lists and their bytes (any thread: a
 * moment's figures). */
void sf_cl_count(const sf_heap_t *heap, uint64_t *blocks, uint64_t *bytes) {
    *blocks = *bytes = 0;
    for (unsigned c = 1; c <= SF_SMALL_CLASS_MAX; c++) {
        uint32_t n = sf_cl_blocks(sf_cl_of(heap, c));
        *blocks += n;
        *bytes += (uint64_t)n * sf_class_size[c];
    }
}
