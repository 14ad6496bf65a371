/* free.c - the generic free path: spans, other owners, the fallback heap,
 * pages with flags set, and everything the fast path found suspicious.
 *
 * Guard level 1 checks live here: a pointer sefer does not own (its chunk
 * is not in the segment map), a pointer inside a block or into a page not in
 * use, and a double free (the block's cookie word equals its page address
 * and the block is found on the page's free lists; a cookie match alone may
 * be user data, so it is only a reason to look). */
#include "fastpath.h"

/* Validates p for free/realloc.  Returns its page (and *seg_out), or NULL
 * after reporting the misuse (free of NULL returns NULL silently). */
sf_page_t *sf_check_block(const void *p, sf_segment_t **seg_out) {
    if (p == NULL) return NULL;
    sf_segment_t *seg = sf_segmap_header(p);
    if (seg == NULL) {
        /* a span that went to the large cache (or waits in the span
         * quarantine, guard level >= 2) was freed before */
        bool freed = sf_cache_holds(p) || (sf_guard_level >= 2 && sf_span_quarantine_holds(p));
        sf_guard_report(freed ? SF_GUARD_DOUBLE : SF_GUARD_INVALID, p);
        return NULL;
    }
    sf_page_t *page = sf_page_of(seg, p);
    if (SF_GET(page->flags) & SF_PAGE_SPAN) {
        if (p != page->block_start) {
            sf_guard_report(SF_GUARD_INTERIOR, p);
            return NULL;
        }
    } else if (!SF_GET(page->in_use) || !sf_page_is_block_start(page, p)) {
        sf_guard_report(SF_GET(page->in_use) ? SF_GUARD_INTERIOR : SF_GUARD_INVALID, p);
        return NULL;
    } else if (((const sf_block_t *)p)->cookie == sf_page_cookie(page) && seg->heap == sf_tls_heap &&
               (sf_page_collect_remote(seg->heap, page), sf_page_holds_free_block(page, p) ||
                (sf_guard_level >= 2 && sf_quarantine_holds(seg->heap, p)))) {
        sf_guard_report(SF_GUARD_DOUBLE, p);
        return NULL;
    }
    *seg_out = seg;
    return page;
}

static void free_to_fallback(sf_page_t *page, sf_block_t *b) {
    sf_lock(&sf_fallback_lock);
    if (b->cookie == sf_page_cookie(page) &&
        (sf_page_holds_free_block(page, b) ||
         (sf_guard_level >= 2 && sf_quarantine_holds(&sf_heap_fallback, b)))) {
        sf_unlock(&sf_fallback_lock);
        sf_guard_report(SF_GUARD_DOUBLE, b);
        return;
    }
    sf_heap_owner_free(&sf_heap_fallback, page, b);
    sf_unlock(&sf_fallback_lock);
}

static void count_remote(sf_heap_t *me) {
    if (me->kind == SF_HEAP_REAL) SF_COUNT(me->remote_frees);
    else sf_stat_add(&sf_gstats.shared_remote_frees, 1);
}

/* A small block of another thread's page in its class queue, freed by a
 * thread that does not own it (the free fast path's ownership test failed):
 * straight onto the page's remote-free list, without the generic checks'
 * segment lookup.  False: anything else (the generic path sorts it out). */
static bool free_remote_small(void *p) {
    uintptr_t u = (uintptr_t)p, chunk = u >> SEG_SHIFT;
    if (!sf_segmap_is_small_chunk(chunk)) return false;
    sf_page_t *page = sf_small_page_desc(chunk, u);
    sf_heap_t *owner = SF_PEEK(page->fast_heap), *me = sf_tls_heap;
    /* NULL: full or guarded (level 3); bit 0: level 2's; the fallback heap
     * takes its frees under its lock */
    uint64_t off = u & (((uintptr_t)1 << SMALL_PAGE_SHIFT) - 1); /* small pages start with a block */
    if (owner == NULL || owner == me || owner == &sf_heap_fallback || ((uintptr_t)owner & SF_L2_OWNER_TAG) ||
        off >= sf_page_carved_bytes(page) || !sf_offset_is_block_start(page, off))
        return false;
    count_remote(me);
    sf_remote_free(owner, page, p);
    return true;
}

void sf_free_generic(void *p) {
    if (unlikely(sf_tracked)) sf_tracked_free(p);
    else if (!free_remote_small(p)) sf_free_checked(p); /* (level 2's pages are never remote-small) */
}

void sf_free_checked(void *p) {
    /* level 2: its fast push first (callers other than free come here
     * through sf_free_generic) */
    if (unlikely(sf_l2_fast) && sf_l2_free_owned(p)) return;
    if (unlikely(sf_guard_level >= 3) && sf_zero_free(p)) return; /* a malloc(0) */
    sf_segment_t *seg = NULL;
    sf_page_t *page = sf_check_block(p, &seg);
    if (page == NULL) return;
    if (sf_guard_level >= 2 && !sf_guarded_free_ok(seg, page, p, seg->heap == sf_tls_heap))
        return; /* canary or cross-thread double free: reported and refused */
    if (SF_GET(page->flags) & SF_PAGE_SPAN) {
        sf_span_free(seg);
        return;
    }
    sf_block_t *b = p;
    sf_heap_t *owner = seg->heap, *me = sf_tls_heap;
    if (owner == me) {
        sf_heap_owner_free(me, page, b); /* flags set: full or guarded page */
    } else if (owner == &sf_heap_fallback) {
        free_to_fallback(page, b);
    } else {
        count_remote(me);
        sf_remote_free(owner, page, b);
    }
}
