/* alloc.c - the generic allocation paths: medium classes, aligned requests,
 * spans, calloc and realloc.  The fast path is in fastpath.h. */
#include "fastpath.h"

static void *fail_enomem(void) {
    sf_stat_add(&sf_gstats.enomem, 1);
    errno = ENOMEM;
    return NULL;
}

/* Allocates from class c for the calling thread, whatever its state. */
void *sf_alloc_class(unsigned c) {
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind != SF_HEAP_REAL) heap = sf_heap_for_thread();
    void *p;
    if (likely(heap != &sf_heap_fallback)) {
        p = sf_heap_malloc_class(heap, c);
    } else {
        sf_lock(&sf_fallback_lock);
        p = sf_heap_malloc_class(heap, c);
        sf_unlock(&sf_fallback_lock);
        sf_stat_add(&sf_gstats.fallback_allocs, 1);
    }
    return likely(p != NULL) ? p : fail_enomem();
}

/* Sizes beyond the address space are refused inside sf_span_alloc. */
void *sf_alloc_span(size_t n, size_t align) {
    sf_ensure_init();
    void *block = NULL;
    if (sf_span_alloc(n, align, &block) == NULL) return fail_enomem();
    sf_stat_add(&sf_gstats.shared_allocs, 1);
    return block;
}

void *sf_malloc_generic(size_t n, sf_heap_t *heap) {
    if (likely(n <= DIRECT_MAX)) {
        /* the fast path's page ran dry: the blocks its owner freed since
         * become its free list (no remote drain, no page search: those wait
         * for the page to be really empty).  Guarded pages and the markers'
         * empty page never appear in direct[], so links are plain here. */
        sf_page_t *page = heap->direct[(n + 15) >> 4];
        sf_block_t *b = page->local_free;
        if (b != NULL) {
            page->local_free = NULL;
            return sf_hand_out(heap, page, b, b->next);
        }
    }
    if (unlikely(sf_tracked)) return sf_tracked_malloc(n, 0);
    return sf_malloc_slow(n, heap);
}

/* Guard level >= 2 (out of line: what levels 0-1 run in sf_malloc_slow
 * does not grow with it). */
SF_NOINLINE static void *malloc_slow_guarded(size_t n, sf_heap_t *heap) {
    /* level 2: its fast pop (callers other than malloc come straight
     * here), after the same local_free swap on its own table */
    if (sf_l2_fast && n <= DIRECT_MAX - SF_GUARD_TAIL) {
        sf_page_t *page = heap->gdirect[sf_l2_index(n)];
        if (page->free == NULL && page->local_free != NULL) {
            page->free = page->local_free;
            page->local_free = NULL;
        }
        void *b = sf_l2_pop(heap, page, n);
        if (b != NULL) return b;
    }
    return sf_guarded_malloc(n, 16);
}

SF_NOINLINE void *sf_malloc_slow(size_t n, sf_heap_t *heap) {
    if (unlikely(sf_guard_level >= 2)) return malloc_slow_guarded(n, heap);
    if (n > MEDIUM_MAX) return sf_alloc_span(n, 0);
    unsigned c = sf_class_of(n);
    if (n <= DIRECT_MAX) {
        /* the fast path's page has nothing of its own left: what other
         * threads freed onto it, before anything slower (sf_malloc_generic
         * took its local frees already) */
        sf_page_t *page = heap->direct[(n + 15) >> 4];
        if (sf_page_collect_remote(heap, page) != 0) {
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

void *sf_malloc_aligned(size_t align, size_t n) {
    if (align <= 16) return sf_malloc(n);
    if (unlikely(sf_tracked)) return sf_tracked_malloc(n, align);
    return sf_malloc_aligned_slow(align, n);
}

void *sf_malloc_aligned_slow(size_t align, size_t n) {
    if (unlikely(sf_guard_level >= 2)) return sf_guarded_malloc(n, align);
    if (n > PTRDIFF_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    /* the class of a power of two is exactly that size, and its blocks are
     * aligned to it: the common aligned request is a plain malloc */
    if (n <= align && align <= MAX_ALIGN_FROM_CLASS) return sf_malloc(align);
    unsigned c = sf_class_for_aligned(n, align);
    if (c == 0) return sf_alloc_span(n, align);
    void *p = sf_heap_pop(sf_tls_heap, c);
    return p != NULL ? p : sf_alloc_class(c);
}

/* Size the block at p can hold, or 0 if p is not the start of a live block. */
size_t sf_usable_size(const void *p) {
    if (unlikely(sf_tracked)) { /* reads fields memcheck must not see (track.c) */
        sf_track_quiet_begin();
        size_t n = sf_usable_size_quiet(p);
        sf_track_quiet_end();
        return n;
    }
    return sf_usable_size_quiet(p);
}

size_t sf_usable_size_quiet(const void *p) {
    sf_segment_t *seg = sf_segmap_header(p);
    if (seg == NULL) return 0;
    sf_page_t *page = sf_page_of(seg, p);
    if (SF_GET(page->flags) & SF_PAGE_SPAN) {
        if (p != page->block_start) return 0;
    } else if (!SF_GET(page->in_use) || !sf_page_is_block_start(page, p)) {
        return 0;
    }
    if (sf_guard_level >= 2) return sf_guarded_usable(seg, page, p);
    return (SF_GET(page->flags) & SF_PAGE_SPAN) ? page->span_bytes : SF_GET(page->block_size);
}

/* Resizes in place when the block can hold n and would not waste more than
 * half of itself; large spans grow and shrink in place within their span. */
static bool resize_in_place(sf_segment_t *seg, sf_page_t *page, size_t n, size_t usable) {
    if (SF_GET(page->flags) & SF_PAGE_SPAN) {
        if (n <= MEDIUM_MAX && n < usable / 2) return false;
        return sf_span_resize(seg, page, n);
    }
    return n <= usable && n >= usable / 2;
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
        if (unlikely(sf_guard_level >= 3) && sf_zero_holds(p)) { /* a malloc(0): nothing to copy */
            void *q = sf_malloc(n);
            if (q != NULL) sf_free(p);
            return q;
        }
        sf_track_quiet_begin(); /* (under valgrind: reads sefer's hidden fields) */
        page = sf_check_block(p, &seg);
        sf_track_quiet_end();
        if (page == NULL) {
            errno = EINVAL; /* misuse, reported by sf_check_block */
            return NULL;
        }
    }
    size_t usable = (SF_GET(page->flags) & SF_PAGE_SPAN) ? page->span_bytes : page->block_size;
    if (sf_guard_level >= 2) {
        /* the canary would have to move: always move the block */
        sf_track_quiet_begin(); /* (reads past the request at level 3) */
        usable = sf_guarded_usable(seg != NULL ? seg : sf_segment_of(p), page, p);
        sf_track_quiet_end();
    } else if (likely(!sf_tracked) && resize_in_place(seg, page, n, usable)) {
        return p;
    }
    /* under valgrind: always move (memcheck sees both blocks), copying only
     * what memcheck says the program asked for */
    if (unlikely(sf_tracked)) usable = sf_track_usable(p, usable);
    void *q = sf_malloc(n);
    if (q == NULL) return NULL;
    memcpy(q, p, n < usable ? n : usable);
    sf_free(p);
    return q;
}

/* ---- the rest of the API, shared by api.c and override.c ---------------- */

void *sf_reallocarray(void *p, size_t count, size_t size) {
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
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

/* glibc's memalign: a non-power-of-two alignment is rounded up. */
void *sf_memalign(size_t align, size_t n) {
    if (align > ((size_t)1 << 62)) {
        errno = EINVAL;
        return NULL;
    }
    size_t a = 1;
    while (a < align) a <<= 1;
    return sf_malloc_aligned(a, n);
}

void *sf_valloc(size_t n) { return sf_malloc_aligned(OS_PAGE, n); }

void *sf_pvalloc(size_t n) {
    size_t rounded = sf_align_up(n ? n : 1, OS_PAGE);
    if (rounded < n) {
        errno = ENOMEM;
        return NULL;
    }
    return sf_malloc_aligned(OS_PAGE, rounded);
}

size_t sf_trim(void) {
    sf_ensure_init();
    sf_track_quiet_begin();
    uint64_t before = atomic_load(&sf_gstats.decommitted_total);
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind == SF_HEAP_REAL) sf_heap_collect(heap, true);
    sf_lock(&sf_fallback_lock);
    sf_heap_collect(&sf_heap_fallback, true);
    sf_unlock(&sf_fallback_lock);
    sf_heaps_collect_abandoned(true);
    if (sf_guard_level >= 2) sf_span_quarantine_flush();
    sf_cache_purge(true);
    sf_track_quiet_end();
    return (size_t)(atomic_load(&sf_gstats.decommitted_total) - before);
}
