/* alloc.c - the generic allocation paths: medium classes, aligned requests,
 * spans, calloc and realloc.  The fast path is in fastpath.h. */
#include "fastpath.h"

void *sf_alloc_refused(size_t size) {
    sf_event_enomem(atomic_fetch_add_explicit(&sf_gstats.enomem, 1, memory_order_relaxed) + 1, size);
    errno = ENOMEM;
    return NULL;
}

/* Allocates from class c for the calling thread, whatever its state. */
void *sf_alloc_class(unsigned c) {
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind != SF_HEAP_REAL) heap = sf_heap_for_thread();
    void *p;
    /* a small heap serves the class from its power of two (docs/design.md,
     * "Small heaps") */
    if (SF_UNLIKELY(heap->small)) c = sf_small_heap_class(c);
    if (SF_LIKELY(heap != &sf_heap_fallback)) {
        /* a phase ended and left this class's fast path off (phase.c): back
         * on (here, where a thread comes once its current page looks dry;
         * guarded pages first: level 3's every malloc comes here, and its
         * direct[] always names the empty page) */
        if (!sf_pages_checked() && SF_UNLIKELY(SF_GET(*sf_class_direct(heap, c)) == &sf_empty_page) &&
            heap->queues[c].first != NULL && !sf_phase_on())
            sf_page_update_direct(heap, c);
        p = sf_page_malloc_class(heap, c);
        /* refused (memory.limit_action = fail, segments.max): the class's
         * list may still hold blocks, which paths that do not go through
         * direct[] (phases) pass by (page.c, "Class lists") */
        if (SF_UNLIKELY(p == NULL) && c <= SF_SMALL_CLASS_MAX) {
            sf_page_or_list_t *cl = sf_cl_of(heap, c);
            if (cl->free != NULL) p = sf_hand_out(heap, cl, cl->free, cl->free->next);
        }
    } else {
        sf_lock(&sf_fallback_lock);
        p = sf_page_malloc_class(heap, c);
        sf_unlock(&sf_fallback_lock);
        sf_stat_add(&sf_gstats.fallback_allocs, 1);
    }
    if (SF_UNLIKELY(sf_prof_is_armed()) && p != NULL) sf_prof_after_class_alloc(p); /* (no lock held) */
    return SF_LIKELY(p != NULL) ? p : sf_alloc_class_refused(c);
}

void *sf_alloc_class_refused(unsigned c) { return sf_alloc_refused(sf_class_size[c]); }

/* Sizes beyond the address space are refused inside sf_span_alloc. */
void *sf_alloc_span(size_t n, size_t align) {
    sf_ensure_init();
    void *block = NULL;
    if (sf_span_alloc(n, align, &block) == NULL) return sf_alloc_refused(n);
    sf_stat_add(&sf_gstats.shared_allocs, 1);
    return SF_UNLIKELY(sf_prof_is_armed()) ? sf_prof_span(block) : block;
}

/* While a phase is open (phase.c) the direct tables hold only the empty
 * page, so every allocation comes to sf_malloc_generic or to
 * sf_malloc_aligned, whose sf_generic_mode question sends it to
 * malloc_special or aligned_special, which count it with the bytes of its
 * block.  (sf_malloc_slow and sf_malloc_aligned_slow count nothing.) */
static SF_NOINLINE void *counted(void *p) {
    if (p != NULL) sf_phase_count(SF_PHASE_ALLOC, (int64_t)sf_block_bytes(p));
    return p;
}

size_t sf_block_bytes(const void *p) {
    sf_segment_t *seg = sf_segmap_header(p);
    if (seg == NULL) return 0;
    sf_page_t *page = sf_page_of(seg, p);
    if (SF_GET(page->flags) & SF_PAGE_SPAN) return p == page->block_start ? SF_GET(page->span_bytes) : 0;
    return SF_GET(page->in_use) && sf_page_is_block_start(page, p) ? SF_GET(page->block_size) : 0;
}

static void *malloc_special(size_t n, sf_heap_t *heap);
static void *aligned_special(size_t align, size_t n);

void *sf_malloc_generic(size_t n, sf_heap_t *heap) {
    if (SF_LIKELY(n <= SF_DIRECT_MAX)) {
        /* the fast path's page ran dry: the blocks its owner freed since
         * become its free list (no remote drain, no page search: those wait
         * for the page to be really empty).  Guarded pages and the markers'
         * empty page never appear in direct[], so links are plain here. */
        sf_page_or_list_t *page = SF_PEEK(heap->direct[(n + 15) >> 4]); /* (phase.c writes it) */
        /* (not dry after all: a caller that read the entry bounds while
         * sf_entry_choose changed them, or a sample not due; the swaps
         * below would overwrite the list, and its blocks be lost) */
        sf_block_t *f = page->free;
        if (SF_UNLIKELY(f != NULL)) return sf_hand_out_ticked(heap, page, f, n);
        if (sf_is_cl(heap, page)) {
            /* the class list ran dry: its page again (page.c, "Class lists") */
            page = sf_cl_dry(heap, page);
            if (page->free != NULL) return sf_hand_out_ticked(heap, page, page->free, n);
        } else if (sf_cl_take_over(heap, page)) {
            /* the page ran dry and the class list has blocks: the list
             * (read again: a phase may have begun, and emptied direct[]) */
            page = SF_PEEK(heap->direct[(n + 15) >> 4]);
            if (page->free != NULL) return sf_hand_out_ticked(heap, page, page->free, n);
        }
        sf_block_t *b = page->local_free;
        if (b != NULL) {
            /* (the count first: a sample leaves the lists as they are) */
            if (sf_sample_tick(heap, n)) return sf_sample_take(n, heap);
            page->local_free = NULL;
            /* a page of few blocks carved: maybe carve ahead (page.c) */
            if (SF_UNLIKELY(page->capacity < SF_CARVE_MIN)) return sf_page_swap_short(heap, page, b);
            return sf_hand_out(heap, page, b, b->next);
        }
    } else if (SF_LIKELY(n <= SF_MEDIUM_MAX)) {
        void *b = sf_medium_pop(heap, n, true); /* (a caller whose bounds were 0, or another try) */
        if (SF_LIKELY(b != NULL)) return b;
    }
    if (SF_UNLIKELY(sf_mode())) return malloc_special(n, heap);
    return sf_malloc_slow(n, heap);
}

/* In a phase, a small or medium request of a thread with a heap, at level
 * 0-1: the class's current page as the fast path would take it (the fast
 * path is off), and the count with the class's size; NULL: the way round. */
static void *phase_pop(size_t n, sf_heap_t *heap) {
    if (n > SF_MEDIUM_MAX || heap->kind != SF_HEAP_REAL || sf_pages_checked()) return NULL;
    if (SF_UNLIKELY(sf_gsample_on)) { /* (sf_heap_pop's count is by class: entry.c) */
        void *g = sf_gsample_thread_tick(n);
        if (g != NULL) return g;
    }
    unsigned c = sf_class_of(n);
    void *p = sf_heap_pop(heap, c);
    if (p != NULL) sf_phase_count(SF_PHASE_ALLOC, (int64_t)sf_class_size[c]);
    return p;
}

/* sf_malloc_generic under valgrind's tracking or in a phase. */
static SF_NOINLINE void *malloc_special(size_t n, sf_heap_t *heap) {
    unsigned m = sf_mode();
    if (!(m & SF_MODE_PHASE)) return sf_tracked_malloc(n, 0);
    void *p = phase_pop(n, heap);
    if (p != NULL) return p;
    return counted((m & SF_MODE_TRACKED) ? sf_tracked_malloc(n, 0) : sf_malloc_slow(n, heap));
}

/* Level 2's page for a request (sf_l2_page) ran dry: the blocks its owner
 * freed since become its free list, less the one freed last
 * (sf_page_guarded_swap), as malloc_slow_guarded would do it, without the
 * three functions on the way there.  Level 2 frees onto local_free, so a
 * class swaps every time it has handed out what the last swap gave it: on
 * random sizes from 16 B to 2 KiB, one malloc in two (a page carves 4 KiB
 * at a time: two to eight blocks of 512 B-2 KiB), 90 instructions each by
 * the long way.  Anything else (nothing to swap, a bad link) takes the
 * long way, which reports what needs reporting. */
static void *l2_swap_pop(size_t n, sf_heap_t *heap, sf_page_t *page, unsigned page_shift) {
    if (page->free == NULL && sf_page_guarded_swap(page)) {
        void *b = sf_l2_pop(heap, page, n, page_shift);
        if (SF_LIKELY(b != NULL)) return b;
    }
    return sf_malloc_generic(n, heap);
}

/* The same, out of line, for sf_malloc_l2's small sizes (fastpath.h). */
SF_NOINLINE void *sf_malloc_l2_refill(size_t n, sf_heap_t *heap) {
    return l2_swap_pop(n, heap, heap->gdirect[sf_l2_index(n)], SF_SMALL_PAGE_SHIFT);
}

/* Level 2's fast path for requests above SF_GDIRECT_MAX - tail, up to a
 * small block (fastpath.h, sf_malloc_l2). */
SF_NOINLINE void *sf_malloc_l2_hi(size_t n, sf_heap_t *heap) {
    return sf_l2_pop_or(heap, heap->gdirect_hi[sf_l2_hi_index(n)], n, SF_SMALL_PAGE_SHIFT, l2_swap_pop);
}

/* The same for medium requests (above SF_SMALL_MAX - tail). */
SF_NOINLINE void *sf_malloc_l2_medium(size_t n, sf_heap_t *heap) {
    return sf_l2_pop_or(heap, heap->gmdirect[sf_l2_medium_index(n)], n, SF_MEDIUM_PAGE_SHIFT, l2_swap_pop);
}

/* Guard level >= 2 (out of line: what levels 0-1 run in sf_malloc_slow
 * does not grow with it). */
SF_NOINLINE static void *malloc_slow_guarded(size_t n, sf_heap_t *heap) {
    /* level 2: its fast pop (callers other than malloc come straight
     * here), after the same local_free swap on its own table */
    unsigned shift;
    sf_page_t *page = sf_l2_fast ? sf_l2_page(heap, n, &shift) : NULL;
    if (page != NULL) {
        if (page->free == NULL) sf_page_guarded_swap(page);
        void *b = sf_l2_pop(heap, page, n, shift);
        if (b != NULL) return b;
    }
    return sf_guarded_malloc(n, 16);
}

/* The process's first allocation, when it comes before our constructor (the
 * constructor of a library the program links, which runs before ours:
 * libselinux's fopen in sed, tar, find, ls; libjq's in jq).  Every
 * entry point took levels 0-1's way here, the knobs unread, and only
 * sf_heap_for_thread (sf_alloc_class, sf_alloc_span) would initialise:
 * the block came from a level-1 page, with no canary and size word, and
 * its free at levels 2-3 reported an overflow and aborted (level 3 even
 * crashed).  So initialise, and start again from the entry with the
 * level now known.  The request may be an aligned one that levels 0-1
 * serve as a plain malloc of its alignment (aligned_is_malloc, n <= align
 * and n a power of two): keep n's own alignment, which a level-2 malloc
 * would not give (a plain malloc served aligned costs nothing but a
 * little room, once).  An operator new comes back as a malloc, its block
 * then unmarked, which delete does not check (guarded.c). */
static SF_NOINLINE void *malloc_first(size_t n) {
    sf_init_slow();
    size_t align = n & (~n + 1); /* (n's lowest set bit; 0 for 0) */
    return align > 16 ? sf_malloc_aligned(align, n) : sf_malloc(n);
}

SF_NOINLINE void *sf_malloc_slow(size_t n, sf_heap_t *heap) {
    if (SF_UNLIKELY(!atomic_load_explicit(&sf_initialized, memory_order_acquire))) return malloc_first(n);
    /* a thread without a heap of its own (threads.heap_after, none left, at
     * exit): the sampled guard counts its bytes itself (entry.c) */
    if (SF_UNLIKELY(sf_gsample_on) && heap->kind != SF_HEAP_REAL && sf_guard_level < 3) {
        void *g = sf_gsample_thread_tick(n);
        if (g != NULL) return g;
    }
    if (SF_UNLIKELY(sf_guard_level >= 2)) return malloc_slow_guarded(n, heap);
    if (sf_request_is_span(n)) return sf_alloc_span(n, 0);
    unsigned c = sf_class_of(n);
    if (n <= SF_DIRECT_MAX) {
        /* the fast path's page has nothing of its own left: what other
         * threads freed onto it, before anything slower (sf_malloc_generic
         * took its local frees already) */
        sf_page_or_list_t *page = SF_PEEK(heap->direct[(n + 15) >> 4]);
        if (SF_UNLIKELY(sf_is_cl(heap, page))) page = sf_cl_dry(heap, page); /* (its callers' list ran dry too) */
        if (page->free == NULL && sf_page_collect_remote(heap, page) != 0) {
            if (sf_sample_tick(heap, n)) return sf_sample_take(n, heap);
            sf_block_t *b = page->local_free;
            page->local_free = NULL;
            return sf_hand_out(heap, page, b, b->next);
        }
    } else { /* medium sizes have no direct entry */
        void *p = sf_heap_pop(heap, c);
        if (p != NULL) return p;
    }
    return sf_alloc_class(c);
}

/* An aligned request that is a plain malloc of `align` bytes: a power of
 * two's class is exactly that size and its blocks are aligned to it.  Not
 * above SF_EAGER_MEDIUM_MAX: under eager decommit such a malloc is a span,
 * aligned to 4 KiB only (sf_malloc_aligned_slow takes the class itself). */
SF_INLINE bool aligned_is_malloc(size_t align, size_t n) {
    return n <= align && align <= SF_EAGER_MEDIUM_MAX && sf_guard_level < 2;
}

void *sf_malloc_aligned(size_t align, size_t n) {
    if (align <= 16) return sf_malloc(n);
    if (SF_UNLIKELY(sf_mode())) return aligned_special(align, n);
    /* the common aligned request (see sf_malloc_aligned_slow), without
     * entering a function that saves registers for the rare ones */
    if (SF_LIKELY(aligned_is_malloc(align, n))) return sf_malloc(align);
    return sf_malloc_aligned_slow(align, n);
}

/* sf_malloc_aligned under valgrind's tracking or in a phase.  The common
 * request is a plain sf_malloc inside sf_malloc_aligned_slow, which
 * sf_malloc_generic counts; the others are counted here. */
static SF_NOINLINE void *aligned_special(size_t align, size_t n) {
    unsigned m = sf_mode();
    void *p = (m & SF_MODE_TRACKED) ? sf_tracked_malloc(n, align) : sf_malloc_aligned_slow(align, n);
    bool counted_inside = aligned_is_malloc(align, n);
    return (m & SF_MODE_PHASE) && !counted_inside ? counted(p) : p;
}

void *sf_malloc_aligned_slow(size_t align, size_t n) {
    /* the process's first allocation, before our constructor (see
     * malloc_first): the level known, from the entry again */
    if (SF_UNLIKELY(!atomic_load_explicit(&sf_initialized, memory_order_acquire))) {
        sf_init_slow();
        return sf_malloc_aligned(align, n);
    }
    if (SF_UNLIKELY(sf_guard_level >= 2)) return sf_guarded_malloc(n, align);
    if (n > PTRDIFF_MAX) return sf_alloc_refused(n);
    /* the common aligned request is a plain malloc */
    if (aligned_is_malloc(align, n)) return sf_malloc(align);
    unsigned c = sf_class_for_aligned(n, align);
    if (c == 0) return sf_alloc_span(n, align);
    /* every block of c is aligned: the class list's first, as malloc's
     * (else the frees of a program that allocates a class only aligned
     * fill the list and all go past it from then on) */
    sf_heap_t *heap = sf_tls_heap;
    void *p = c <= SF_SMALL_CLASS_MAX ? sf_cl_pop(heap, c) : NULL;
    if (p == NULL) p = sf_heap_pop(heap, c);
    return p != NULL ? p : sf_alloc_class(c);
}

/* Size the block at p can hold, or 0 if p is not the start of a block in a
 * page in use (or a span's block).  A block already freed is not told apart
 * from a live one: that would mean walking its page's free lists and the
 * class list, or trusting the free mark, which a live block's data may
 * hold by chance; it returns its size too (glibc returns 0 for most). */
size_t sf_usable_size(const void *p) {
    if (SF_UNLIKELY(sf_tracked)) { /* reads fields memcheck must not see (track.c) */
        sf_track_quiet_begin();
        size_t n = sf_usable_size_quiet(p);
        sf_track_quiet_end();
        return n;
    }
    return sf_usable_size_quiet(p);
}

size_t sf_usable_size_quiet(const void *p) {
    sf_segment_t *seg = sf_segmap_header(p);
    if (seg == NULL) return sf_gsample_on && sf_gsample_holds(p) ? sf_gsample_usable(p) : 0;
    sf_page_t *page = sf_page_of(seg, p);
    if (SF_GET(page->flags) & SF_PAGE_SPAN) {
        if (p != page->block_start) return 0;
    } else if (!SF_GET(page->in_use) || !sf_page_is_block_start(page, p)) {
        return 0;
    }
    if (sf_guard_level >= 2) return sf_guarded_usable(seg, page, p);
    return (SF_GET(page->flags) & SF_PAGE_SPAN) ? page->span_bytes : SF_GET(page->block_size);
}

/* A large block grows and shrinks in place within its span; the profile
 * sees the new size (sf_prof_span_resized).  (Out of line: inlined into
 * sf_realloc it made every realloc of a small block 8 instructions
 * longer, bench/instructions' realloc row.) */
static SF_NOINLINE bool span_resize_in_place(sf_segment_t *seg, sf_page_t *page, size_t n, size_t usable) {
    if (n <= SF_MEDIUM_MAX && n < usable / 2) return false;
    if (!sf_span_resize(seg, page, n)) return false;
    if (SF_UNLIKELY(sf_prof_is_armed() || (SF_GET(page->flags) & SF_PAGE_SAMPLED)))
        sf_prof_span_resized(page);
    return true;
}

/* Resizes in place when the block can hold n and would not waste more than
 * half of itself, or when the calling thread's heap would hand out a block
 * of the same size (a small heap's smallest class: every request up to
 * SF_SMALL_HEAP_MIN); large spans grow and shrink in place within their
 * span. */
SF_INLINE bool resize_in_place(sf_segment_t *seg, sf_page_t *page, size_t n, size_t usable) {
    if (SF_GET(page->flags) & SF_PAGE_SPAN) return span_resize_in_place(seg, page, n, usable);
    return n <= usable && (n >= usable / 2 || (usable <= SF_SMALL_HEAP_MIN && sf_tls_heap->small));
}

/* Moves the block at p (usable bytes) to a new one of n bytes.  The old
 * block is not the next one of its size handed out: at levels 0-1 its
 * owner holds it in the heap's one-block quarantine until the next move
 * (guarded.c, sf_quarantine_swap_one; on local_free, where it went before,
 * a block alone on a page that carves a block at a time, 4 KiB and up,
 * was the next malloc's: misuse probes reuse-realloc-grow and -shrink),
 * and a block of another heap goes as a free does; at levels 2-3 (checked, a constant in each
 * caller) through the checked path: level 3's quarantine holds it back,
 * and level 2 puts it on local_free, which the refill leaves it on
 * (sf_page_guarded_swap), or, where the refill would hand it back (a
 * medium page carved to its end), in its quarantine (free.c,
 * l2_medium_free_owned).  A small block alone on such a page is the
 * exception: the next malloc of its size gets it back. */
SF_INLINE void *realloc_move(void *p, size_t n, size_t usable, bool checked) {
    void *q = sf_malloc(n);
    if (q == NULL) return NULL;
    memcpy(q, p, n < usable ? n : usable);
    if (checked) sf_free_checked(p);
    else sf_free_as(p, SF_FREE_HELD);
    return q;
}

/* sf_realloc under valgrind's tracking or in a phase.  Tracked, the block
 * always moves (memcheck sees both blocks), copying only what memcheck says
 * the program asked for.  In a phase the realloc is counted, with the change
 * a resize in place made to its block (a move's malloc and free count as
 * such).  in_place: level 0-1, where a resize in place is allowed. */
static SF_NOINLINE void *realloc_special(void *p, size_t n, sf_segment_t *seg, sf_page_t *page,
                                         size_t usable, bool in_place) {
    unsigned m = sf_mode();
    if (m & SF_MODE_TRACKED) {
        void *q = realloc_move(p, n, sf_track_usable(p, usable), false);
        if (m & SF_MODE_PHASE) sf_phase_count(SF_PHASE_REALLOC, 0);
        return q;
    }
    int64_t before = (int64_t)sf_block_bytes(p);
    if (in_place && resize_in_place(seg, page, n, usable)) {
        sf_phase_count(SF_PHASE_REALLOC, (int64_t)sf_block_bytes(p) - before);
        return p;
    }
    void *q = realloc_move(p, n, usable, sf_guard_level >= 2);
    sf_phase_count(SF_PHASE_REALLOC, 0);
    return q;
}

void *sf_realloc(void *p, size_t n) {
    if (p == NULL) return sf_malloc(n);
    if (n == 0) {
        sf_free(p);
        return NULL;
    }
    sf_segment_t *seg = NULL;
    sf_page_t *page = sf_small_owned_page(p); /* the common case, checked cheaply */
    if (page == NULL) {
        /* a malloc(0): nothing to copy */
        if (SF_UNLIKELY(sf_guard_level >= 3) && sf_zero_holds(p)) {
            void *q = sf_malloc(n);
            if (q != NULL) sf_free(p);
            return q;
        }
        if (SF_UNLIKELY(sf_gsample_on) && sf_gsample_holds(p)) return sf_gsample_realloc(p, n);
        sf_track_quiet_begin(); /* (under valgrind: reads sefer's hidden fields) */
        page = sf_free_check_block(p, &seg);
        sf_track_quiet_end();
        if (page == NULL) {
            errno = EINVAL; /* misuse, reported by sf_free_check_block */
            return NULL;
        }
    }
    size_t usable = (SF_GET(page->flags) & SF_PAGE_SPAN) ? page->span_bytes : page->block_size;
    if (sf_guard_level >= 2) {
        /* the canary would have to move: always move the block */
        sf_track_quiet_begin(); /* (reads past the request at level 3) */
        usable = sf_guarded_usable(seg != NULL ? seg : sf_segment_of(p), page, p);
        sf_track_quiet_end();
        if (SF_UNLIKELY(sf_mode())) return realloc_special(p, n, seg, page, usable, false);
        return realloc_move(p, n, usable, true);
    } else if (SF_UNLIKELY(sf_mode())) {
        return realloc_special(p, n, seg, page, usable, true);
    } else if (resize_in_place(seg, page, n, usable)) {
        return p;
    }
    return realloc_move(p, n, usable, false);
}

/* ---- the rest of the API, shared by api.c and override.c ---------------- */

void *sf_reallocarray(void *p, size_t count, size_t size) {
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) return sf_alloc_refused(SIZE_MAX);
    return sf_realloc(p, n);
}

/* POSIX: returns the error, leaves errno as it was. */
int sf_posix_memalign(void **out, size_t align, size_t n) {
    if (!sf_is_pow2(align) || align % sizeof(void *) != 0) return EINVAL;
    int saved = errno;
    void *p = sf_malloc_aligned(align, n);
    errno = saved;
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}

void *sf_aligned_alloc(size_t align, size_t n) {
    if (!sf_is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return sf_malloc_aligned(align, n);
}

/* glibc's memalign: a non-power-of-two alignment is rounded up.  Only
 * one above 2^63, with no power of two to round to, is EINVAL (as in
 * glibc); up to 2^63 the request fails as any unplaceable one, ENOMEM. */
void *sf_memalign(size_t align, size_t n) {
    if (align > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    size_t a = 1;
    while (a < align) a <<= 1;
    return sf_malloc_aligned(a, n);
}

void *sf_valloc(size_t n) { return sf_malloc_aligned(SF_OS_PAGE, n); }

void *sf_pvalloc(size_t n) {
    size_t rounded = sf_align_up(n ? n : 1, SF_OS_PAGE);
    if (rounded < n) return sf_alloc_refused(n);
    return sf_malloc_aligned(SF_OS_PAGE, rounded);
}

size_t sf_trim(void) {
    sf_ensure_init();
    sf_track_quiet_begin();
    uint64_t before = atomic_load(&sf_gstats.decommitted_total);
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind == SF_HEAP_REAL) {
        sf_page_collect_heap(heap, true);
        sf_medium_shed_all(heap); /* (counted in decommitted_total) */
    }
    sf_lock(&sf_fallback_lock);
    sf_page_collect_heap(&sf_heap_fallback, true);
    sf_unlock(&sf_fallback_lock);
    sf_heaps_collect_abandoned(true);
    if (sf_guard_level >= 2) sf_span_quarantine_flush();
    sf_cache_purge(true);
    sf_track_quiet_end();
    size_t released = (size_t)(atomic_load(&sf_gstats.decommitted_total) - before);
    sf_event_trim(released);
    return released;
}
